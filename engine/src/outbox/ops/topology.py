"""Where everything is: the stack's tables, queues and pipes, from its outputs (CLI) or the function's
environment (endpoint)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from outbox.exceptions import OperationRefusedError
from outbox.outputs import StackOutput, application_environment


@dataclass(frozen=True)
class Topology:
    """Where everything is. Built from the stack's outputs (CLI) or the function's environment (endpoint)."""

    events_table: str
    inbox_table: str
    durable_queue_url: str
    durable_dlq_url: str
    relay_dlq_url: str
    # The audit table (anchors, tamper findings) and the auditor's queues; None for a stack deployed before
    # tamper evidence existed (status then verifies in full and reports no findings).
    audit_table: str | None = None
    tamper_pipe_name: str | None = None
    tamper_queue_url: str | None = None
    tamper_dlq_url: str | None = None
    tamper_pipe_dlq_url: str | None = None
    anchoring_dlq_url: str | None = None
    workflow_settle_dlq_url: str | None = None  # with WORKFLOW subscriptions
    record_change_queue_url: str | None = None
    record_change_dlq_url: str | None = None
    record_change_pipe_dlq_url: str | None = None
    relay_pipe_name: str | None = None
    record_change_pipe_name: str | None = None
    # How long the inbox remembers a completion; the stack's output (an older stack without it: the
    # shortest retention the inbox ever had, which only makes reconcile refuse sooner).
    inbox_retention_days: int = 7
    # The application's own function variables (ApplicationEnvironment): which table, which services.
    application: dict[str, str] = field(default_factory=dict)

    OUTPUTS = {
        "events_table": StackOutput.EVENTS_TABLE,
        "inbox_table": StackOutput.INBOX_TABLE,
        "durable_queue_url": StackOutput.DURABLE_QUEUE,
        "durable_dlq_url": StackOutput.DURABLE_DEAD_LETTER_QUEUE,
        "relay_dlq_url": StackOutput.RELAY_DEAD_LETTER_QUEUE,
        "audit_table": StackOutput.AUDIT_TABLE,
        "tamper_pipe_name": StackOutput.TAMPER_PIPE,
        "tamper_queue_url": StackOutput.TAMPER_QUEUE,
        "tamper_dlq_url": StackOutput.TAMPER_DEAD_LETTER_QUEUE,
        "tamper_pipe_dlq_url": StackOutput.TAMPER_PIPE_DEAD_LETTER_QUEUE,
        "anchoring_dlq_url": StackOutput.ANCHORING_DEAD_LETTER_QUEUE,
        "workflow_settle_dlq_url": StackOutput.WORKFLOW_SETTLE_DEAD_LETTER_QUEUE,
        "record_change_queue_url": StackOutput.RECORD_CHANGE_QUEUE,
        "record_change_dlq_url": StackOutput.RECORD_CHANGE_DEAD_LETTER_QUEUE,
        "record_change_pipe_dlq_url": StackOutput.RECORD_CHANGE_PIPE_DEAD_LETTER_QUEUE,
        "relay_pipe_name": StackOutput.RELAY_PIPE,
        "record_change_pipe_name": StackOutput.RECORD_CHANGE_PIPE,
        "inbox_retention_days": StackOutput.INBOX_RETENTION_DAYS,
    }

    @classmethod
    def from_outputs(cls, outputs: dict[str, str]) -> Topology:
        missing = [
            str(name) for attribute, name in cls.OUTPUTS.items() if name not in outputs and attribute in _REQUIRED
        ]
        if missing:
            raise OperationRefusedError(
                f"the stack has no outputs {', '.join(missing)}: is it a stack with an OutboxPipeline?"
            )
        found: dict[str, Any] = {field_name: outputs.get(name) for field_name, name in cls.OUTPUTS.items()}
        if found["inbox_retention_days"] is None:
            del found["inbox_retention_days"]
        else:
            found["inbox_retention_days"] = int(found["inbox_retention_days"])
        return cls(**found, application=application_environment(outputs))

    @property
    def inbox_retention(self) -> timedelta:
        return timedelta(days=self.inbox_retention_days)

    def queues(self) -> dict[str, str]:
        named = {
            "durable": self.durable_queue_url,
            "durable-dlq": self.durable_dlq_url,
            "relay-pipe-dlq": self.relay_dlq_url,
            "record-change": self.record_change_queue_url,
            "record-change-dlq": self.record_change_dlq_url,
            "record-change-pipe-dlq": self.record_change_pipe_dlq_url,
            "tamper": self.tamper_queue_url,
            "tamper-dlq": self.tamper_dlq_url,
            "tamper-pipe-dlq": self.tamper_pipe_dlq_url,
            "anchoring-dlq": self.anchoring_dlq_url,
            "workflow-settle-dlq": self.workflow_settle_dlq_url,
        }
        return {name: url for name, url in named.items() if url}


_REQUIRED = {"events_table", "inbox_table", "durable_queue_url", "durable_dlq_url", "relay_dlq_url"}
