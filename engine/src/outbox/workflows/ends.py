"""A workflow's end, brought back to the inbox: the settle pass.

How the end is observed: by asking Lambda (``GetDurableExecution``) about every pair the running index lists, on a
schedule, and about one pair whenever anything says its execution may have ended. Nothing else is trusted to
bring it: an execution's own last step never runs when it fails, times out or is stopped by hand; a notice (an
event rule, a callback) can be lost or come twice. Reading the execution's status is idempotent, and settling is a
write conditioned on the claim being HANDED to that very execution, so a notice that comes twice, late, or for an
execution a replay has replaced changes nothing, and a notice that never comes costs one pass's delay. The index
row is written with the hand-off, in its transaction, so no handed pair is missing from it.

SUCCEEDED completes the pair. FAILED, TIMED_OUT and STOPPED make it dead with a dead letter that names the
execution and its error (its type; its message too with ``ErrorDetail.FULL``: a workflow's error text may repeat
the personal data it worked on). An execution Lambda no longer knows (deleted, or its history past retention)
is dead too, with a letter that says so: a pair is never left open because its execution can no longer be read.
"""

from __future__ import annotations

import logging
from collections import Counter
from enum import StrEnum
from typing import Any, Final

from botocore.exceptions import ClientError

from outbox.inbox.table import InboxTable
from outbox.redaction import ErrorDetail
from outbox.workflows.handoffs import Handoff, Handoffs, handed_since
from outbox.workflows.starter import WorkflowStarter

logger = logging.getLogger(__name__)

RUNNING_STATUSES = frozenset({"RUNNING", "PAUSING", "PAUSED"})
FAILED_STATUSES = frozenset({"FAILED", "TIMED_OUT", "STOPPED"})


class Settled(StrEnum):
    RUNNING = "running"  # its execution has not ended
    COMPLETED = "completed"
    DEAD = "dead"
    NOT_HANDED = "not_handed"  # no claim HANDED to that execution (settled already, or never handed)


# What each pass publishes (``outbox.handlers.workflow_ends``; the construct alarms on the dead and the dashboard
# graphs them): how many pairs it found in each outcome, and how long the oldest still running has run (seconds).
SETTLED_METRICS: Final = {
    Settled.RUNNING: "WorkflowsRunning",
    Settled.COMPLETED: "WorkflowsCompleted",
    Settled.DEAD: "WorkflowsDead",
    Settled.NOT_HANDED: "WorkflowsSettledElsewhere",
}
OLDEST_METRIC: Final = "OldestWorkflowAge"


class WorkflowEnds:
    """Settles handed pairs whose executions ended."""

    def __init__(
        self, inbox: InboxTable, starter: WorkflowStarter, *, error_detail: ErrorDetail = ErrorDetail.REDACTED
    ):
        self.handoffs = Handoffs(inbox)
        self.starter = starter
        self.error_detail = error_detail
        self.oldest_running_seconds = 0.0  # the last pass's (settle_all)

    def settle(self, event_id: str, subscription: str) -> Settled:
        """Look at the pair's execution and, if it ended, settle the pair."""
        handoff = self.handoffs.handoff(event_id, subscription)
        if handoff is None:
            return Settled.NOT_HANDED
        return self.settle_handoff(handoff)

    def settle_handoff(self, handoff: Handoff) -> Settled:
        try:
            execution = self.starter.describe(handoff.execution_arn)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ResourceNotFoundException":
                raise
            execution = {"Status": "UNKNOWN", "Error": {"ErrorType": "ExecutionNotFound"}}
        status = str(execution.get("Status", ""))
        if status in RUNNING_STATUSES:
            return Settled.RUNNING
        if status == "SUCCEEDED":
            settled = self.handoffs.settle_succeeded(handoff)
            outcome = Settled.COMPLETED
        else:
            error, error_type = self._error(status, execution.get("Error") or {})
            settled = self.handoffs.settle_failed(handoff, status or "UNKNOWN", error, error_type)
            outcome = Settled.DEAD
        if not settled:
            return Settled.NOT_HANDED
        logger.info(
            "the workflow execution %s ended %s: the pair is %s",
            handoff.execution_name,
            status,
            outcome.value,
            extra={"event_id": handoff.event_id, "subscription": handoff.subscription, "tenant": handoff.tenant},
        )
        return outcome

    def settle_all(self) -> Counter[Settled]:
        """One pass over every handed pair: how many are still running, completed, dead (or settled meanwhile).
        ``oldest_running_seconds`` says then how long the oldest of those still running has run (0: none)."""
        counts: Counter[Settled] = Counter()
        now = self.handoffs.inbox.clock()
        self.oldest_running_seconds = 0.0
        for running in list(self.handoffs.running()):
            settled = self.settle(running.event_id, running.subscription)
            counts[settled] += 1
            if settled is Settled.RUNNING:
                self.oldest_running_seconds = max(self.oldest_running_seconds, handed_since(running, now))
        return counts

    def _error(self, status: str, error: dict[str, Any]) -> tuple[str, str]:
        error_type = str(error.get("ErrorType") or f"Workflow{status.title().replace('_', '')}")
        if status == "UNKNOWN":
            return "Lambda no longer knows the execution (deleted, or its history is past retention)", error_type
        message = str(error.get("ErrorMessage") or "")
        if self.error_detail is ErrorDetail.FULL and message:
            return f"{error_type}: {message}", error_type
        return error_type, error_type
