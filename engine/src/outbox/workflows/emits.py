"""Events a workflow's steps emit, once per step of an execution however often the step runs.

A durable step is at-least-once: the SDK runs its function again when the invocation that ran it ended before its
result was checkpointed (a crash, a timeout), and when it raised and its retry strategy retries it. An ``emit()``
inside it would append a second event. ``WorkflowEmits.emit`` runs the emit as a step of its own whose event id is
derived from the execution and the step's name (``step_event_id``), and commits it with a row of the inbox that
names that id (``WORKFLOW#EMIT#<event id>``, put only where none is): a second run of the step finds the row,
commits nothing and answers the same id. The row is in the emit's own transaction, so there is never an event
without it, nor one without the event. The rows are kept (one per emitted event, as the events are): an execution
may run a step again as long as it runs, up to a year.

A replay of a dead workflow pair starts a new execution (``outbox.workflows.execution_name``, the next attempt):
its steps emit anew, as a replayed DURABLE pair's handler emits its follow-up anew.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any, Final

from outbox import writes
from outbox.exceptions import CallerWriteConditionFailedError, OutboxValidationError
from outbox.log.store import EventStore
from outbox.workflows import WorkflowInput

# Crockford's base 32, as a ULID spells it.
_ALPHABET: Final = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_TIME_CHARACTERS: Final = 10
_RANDOM_CHARACTERS: Final = 16
STEP_KIND: Final = "WORKFLOW_EMIT"
STEP_PARTITION_PREFIX: Final = "WORKFLOW#EMIT#"
STEP_SORT_KEY: Final = "EMIT"


def step_key(event_id: str) -> dict[str, str]:
    """The inbox row that says the event ``event_id`` of a workflow step was emitted."""
    return {"pk": f"{STEP_PARTITION_PREFIX}{event_id}", "sk": STEP_SORT_KEY}


def step_event_id(cause_id: str, execution_arn: str, step: str) -> str:
    """The id of the event the step ``step`` of the execution ``execution_arn`` emits: a ULID's text, its time the
    time of the event that started the workflow (``cause_id``), its 80 other bits sha256's of (execution, step).
    The same on every run of the step; another step, or another execution, has another."""
    digest = int.from_bytes(hashlib.sha256(f"{execution_arn}\n{step}".encode()).digest()[:10], "big")
    tail = "".join(_ALPHABET[(digest >> (5 * shift)) & 31] for shift in reversed(range(_RANDOM_CHARACTERS)))
    return cause_id[:_TIME_CHARACTERS] + tail


class WorkflowEmits:
    """Emits from a durable handler's steps, each once per (execution, step name).

    >>> emits = WorkflowEmits(store, WorkflowInput.of(event), context)           # doctest: +SKIP
    >>> emits.emit("shipment.labelled", {"order_id": "o-1"}, step="announce")   # doctest: +SKIP

    ``store`` is an ``EventStore`` of the events table and ``inbox_table`` the pipeline's inbox (a workflow's
    function is granted emit and these rows, and told both tables, by ``OutboxPipeline``: ``EVENTS_TABLE_NAME``,
    ``INBOX_TABLE_NAME``).
    Each event is emitted for the event that started the workflow: its tenant, its correlation id, caused by it,
    by the actor ``workflow:<subscription>``. A step name is the step's identity: two emits of one execution
    under one name would be one event, so a name used twice in one invocation is refused (in a ``map`` or
    ``parallel``, put the item in the name).
    """

    def __init__(self, store: EventStore, given: WorkflowInput, context: Any, *, inbox_table: str) -> None:
        self.store, self.given, self.context, self.inbox_table = store, given, context, inbox_table
        self._names: set[str] = set()

    @property
    def execution_arn(self) -> str:
        return str(self.context.execution_context.durable_execution_arn)

    def emit(
        self,
        event_type: str,
        payload: Mapping[str, Any],
        *,
        step: str,
        extra_writes: Sequence[Mapping[str, Any]] = (),
    ) -> str:
        """Emit ``event_type`` in the durable step ``step`` (with ``extra_writes``, in its transaction): the event's
        id, the same on every run of the step, whether this run committed it or an earlier one did. The type comes
        first, as ``EventStore.emit``'s, so the catalog's contract reads it from the call (``Module.code``)."""
        if step in self._names:
            raise OutboxValidationError(
                f"the workflow step {step!r} emits twice in one execution: give each emit a step name of its own"
            )
        self._names.add(step)
        return str(self.context.step(lambda _step: self.emit_once(event_type, payload, step, extra_writes), name=step))

    def emit_once(
        self, event_type: str, payload: Mapping[str, Any], step: str, extra_writes: Sequence[Mapping[str, Any]] = ()
    ) -> str:
        """The step's function: emit the event with its step row, or find the row an earlier run committed."""
        envelope = self.given.envelope
        event_id = step_event_id(envelope.id, self.execution_arn, step)
        row = {
            **step_key(event_id),
            "kind": STEP_KIND,
            "tenant": envelope.tenant,
            "execution_arn": self.execution_arn,
            "step": step,
            "event_type": event_type,
        }
        marker = writes.put(self.inbox_table, row, condition="attribute_not_exists(pk)")
        try:
            self.store.emit(
                event_type,
                payload,
                tenant=envelope.tenant,
                actor=f"workflow:{self.given.subscription}",
                correlation_id=envelope.correlation_id,
                causation_id=envelope.id,
                event_id=event_id,
                extra_writes=[marker, *extra_writes],
            )
        except CallerWriteConditionFailedError as exc:
            if exc.index != 0:  # one of the caller's own: its position in the caller's extra_writes
                raise CallerWriteConditionFailedError(
                    exc.index - 1, exc.table_name, exc.key, "see the error this one was raised from"
                ) from exc
        return event_id


__all__ = ["STEP_KIND", "STEP_PARTITION_PREFIX", "WorkflowEmits", "step_event_id", "step_key"]
