"""The faults of ordered delivery, armed at their seams in the ordered gate and the wake-ups: the operator's
skip racing a delivery's write to the watermark, SQS refusing a wake-up, and the lost answer of a completion
that others wait behind (the last two fault points of ``outbox.observing``). ``FaultSeams`` arms them with the
rest of a run's faults."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from botocore.exceptions import ClientError

from outbox import Envelope
from outbox.delivery.ordered import OrderedGate
from outbox.inbox import PENDING, Claim
from outbox.local.faults import FaultCount
from outbox.observing import Happening, Moment, observing
from outbox.pairs.order import Watermark
from outbox.subscriptions import Subscription
from simulation.catalog import LEDGER
from simulation.driver_state import DriverState
from simulation.operator_clients import refused_send
from simulation.schedule import Fault


class OrderedFaultSeams(DriverState):
    @contextmanager
    def _refusing_wake_ups(self) -> Iterator[FaultCount]:
        """SQS refuses the SendMessage of a consumer's wake-up (``send_refused``): the deferred event it was for
        must be woken again, by the redelivery of the message that owed it. (The operator's sends fail through
        ``OperatorDeath``, under the same fault.)"""

        def refused(happening: Happening) -> None:
            if happening.moment is not Moment.BEFORE_WAKE_UP:
                return
            if self.chaos.fires(Fault.SEND_REFUSED, f"the wake-up of {self.trace.event(happening.event_id)}"):
                raise refused_send()

        with observing(refused):
            yield self.chaos.count(Fault.SEND_REFUSED)

    @contextmanager
    def _racing_skips(self) -> Iterator[FaultCount]:
        """An ordered delivery has read the watermark and found the event it must wait for; before it writes
        (the deferral, or the completion), the operator skips that event (``outbox skip``, acting on a status
        read a moment ago): the delivery's write must see that the watermark moved (``watermark_race``). Or the
        next event runs on the direct path (no claim, so nothing says it runs) and the operator skips that very
        event before its commit: the commit must see the watermark moved, and apply nothing."""

        def racing_direct(watermark: Watermark, envelope: Envelope, skipped: bool) -> None:
            """The direct path's transaction items are made (``OrderBook.advance_items``): its commit is next."""
            if not skipped and watermark.subscription == LEDGER and self.chaos.can_fire(Fault.WATERMARK_RACE):
                key = f"{envelope.id}:{watermark.subscription}"
                with self.chaos.paused():
                    unclaimed = self.operations.inbox.read_claim(envelope.id, watermark.subscription) is None
                if unclaimed and self.chaos.fires(Fault.WATERMARK_RACE, key):
                    self.skip(envelope.tenant, envelope.seq, "it looks stuck (a race with its run on the direct path)")

        def racing(
            gate: OrderedGate, claim: Claim, envelope: Envelope, sub: Subscription, watermark: Watermark
        ) -> None:
            """A claimed pair is about to be placed (``OrderedGate.place``), from the watermark read before."""
            if self.chaos.can_fire(Fault.WATERMARK_RACE):
                with self.chaos.paused():
                    waits_for = self._skippable(gate, envelope, sub, watermark)
                if waits_for is not None and self.chaos.fires(Fault.WATERMARK_RACE, claim.idempotency_key):
                    self.skip(envelope.tenant, waits_for, "it blocks the ledger (a race with a delivery)")

        def race(happening: Happening) -> None:
            given = happening.detail.arguments
            if happening.moment is Moment.BEFORE_PLACING:
                gate = happening.detail.by
                racing(gate, given["claim"], given["envelope"], given["subscription"], given["watermark"])
            elif happening.moment is Moment.ADVANCED:
                racing_direct(given["watermark"], given["envelope"], given["skipped"])

        with observing(race):
            yield self.chaos.count(Fault.WATERMARK_RACE)

    @contextmanager
    def _losing_waking_answers(self) -> Iterator[FaultCount]:
        """The direct completion of an ordered event that others wait behind (its watermark counts deferred
        events) commits, and its answer is lost (HTTP 500, not re-sent): ``waking_answer_lost``. Whoever handles
        the error must find the event applied and wake what waits, not take it for a failed run."""
        losing: set[str] = set()  # the pairs whose direct completion loses its answer, while it runs

        def answer_lost(happening: Happening) -> None:
            # Registered after the recorder, so outside it: the recorder sees the commit as committed.
            moment, detail = happening.moment, happening.detail
            if moment is Moment.BEFORE_DIRECT_APPLY:
                if detail.arguments["watermark"].deferred > 0 and self.chaos.fires(
                    Fault.WAKING_ANSWER_LOST, happening.key
                ):
                    losing.add(happening.key)
            elif moment in (Moment.DIRECT_APPLIED, Moment.DIRECT_APPLY_RAISED):
                losing.discard(happening.key)
            elif moment is Moment.DIRECT_COMMIT_DONE and detail.result is None and happening.key in losing:
                raise ClientError(  # committed; nothing is lost when nothing committed
                    {"Error": {"Code": "InternalServerError", "Message": "injected: the answer was lost"}},
                    "TransactWriteItems",
                )

        with observing(answer_lost):
            yield self.chaos.count(Fault.WAKING_ANSWER_LOST)

    def _skippable(self, gate: OrderedGate, envelope: Envelope, sub: Subscription, watermark: Watermark) -> int | None:
        """The seq ``envelope`` waits for, if the operator may skip it now: the next in order after the
        watermark, and not running (dead, deferred, or its message not arrived yet)."""
        book = gate.order
        waits_for = book.predecessor(envelope, sub, watermark.applied_seq)
        if waits_for is None:
            return None
        before = Envelope.from_item(self.operations.event_image(envelope.tenant, waits_for))
        if book.predecessor(before, sub, watermark.applied_seq) is not None:
            return None
        claim = self.operations.inbox.read_claim(before.id, sub.name)
        lease = claim.lease_expires_at if claim is not None and claim.status == PENDING else None
        return None if lease is not None and lease > self.runtime.clock() else waits_for
