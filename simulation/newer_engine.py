"""The ``newer_emitter`` fault: some of the workload's emits come from a newer engine than the consumers run.

A deploy does not reach every function at once, and an application's own services may upgrade the engine
before the stack's consumers do: their events then carry envelope fields this engine does not know. A newer
engine hashes every field of the event (as this one does), so the consumer, the operator's tools and the
auditor must keep such a field, hash it and write it back in a repair; refusing it would turn a valid event
into a poison pill and its log into a broken chain.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from outbox import Envelope
from outbox.local.faults import FaultCount
from outbox.log.canonical import GENESIS_HASH, chain_hash
from outbox.log.chain import ChainHead
from outbox.log.sealing import seal_all
from outbox.tracing import TraceContext
from simulation.chaos import Chaos
from simulation.schedule import Fault
from simulation.world import EmitRecord


class NewerTraceContext(TraceContext):
    """The newer engine's trace context: one field more."""

    baggage: str


class NewerEnvelope(Envelope):
    """The newer engine's envelope: this engine's, with a field more and the trace context above. Declared as
    that engine declares them (not read as this engine reads unknown fields), so that a mutant of this engine's
    reading cannot change what the newer one writes."""

    placement: dict[str, str]
    trace_context: NewerTraceContext | None = None


def newer_envelope(draft: dict[str, Any], head: ChainHead, validate: bool = False) -> Envelope:
    """``draft`` sealed after ``head`` as the newer engine seals it: with its fields, all of them hashed
    (``outbox.log.sealing.seal``'s signature; a draft is valid here, as emit() validated it first)."""
    fields = {
        **draft,
        "placement": {"region": "eu-west-1", "cell": draft["tenant"]},
        "seq": head.last_seq + 1,
        "prev_hash": head.last_hash,
        "hash": GENESIS_HASH,
    }
    context = draft.get("trace_context")
    if context is not None:
        fields["trace_context"] = {**context.model_dump(exclude_none=True), "baggage": "sim=newer"}
    unsealed = NewerEnvelope.model_validate(fields)
    return unsealed.model_copy(update={"hash": chain_hash(head.last_hash, unsealed.hashed_body())})


def newer_seal_all(drafts: Sequence[dict[str, Any]], head: ChainHead) -> list[Envelope]:
    """The drafts sealed after ``head`` as the newer engine seals them (an ``EventStore``'s ``sealing``)."""
    return seal_all(drafts, head, newer_envelope)


class NewerSealing:
    """How the workload's emitters seal (their ``EventStore``'s ``sealing``): as this engine does, but an emit in
    progress (``current``) that the ``newer_emitter`` fault picks while armed seals as the newer engine. The
    consumers' follow-up events and every reader stay on this engine (they have stores of their own)."""

    def __init__(self, chaos: Chaos, current: Callable[[], EmitRecord | None]) -> None:
        self.chaos, self.current = chaos, current
        self.armed = False

    def __call__(self, drafts: Sequence[dict[str, Any]], head: ChainHead) -> list[Envelope]:
        emitting = self.current()
        # Only an event of the usual size: one sized to the relay's bound was measured by emit() as this engine
        # seals it, and a newer engine measures its own fields.
        small = self.armed and emitting is not None and emitting.size == "small"
        if small and emitting is not None and self.chaos.fires(Fault.NEWER_EMITTER, emitting.operation):
            return newer_seal_all(drafts, head)
        return seal_all(drafts, head)

    @contextmanager
    def newer_emitters(self) -> Iterator[FaultCount]:
        """Meanwhile the fault is armed."""
        self.armed = True
        try:
            yield self.chaos.count(Fault.NEWER_EMITTER)
        finally:
            self.armed = False
