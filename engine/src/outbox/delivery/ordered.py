"""The ordered gate: an ordered subscription's pairs run in their tenant's order, under a lease.

Per (tenant, subscription) a watermark holds the last applied seq (``outbox.pairs.order``). A pair at or below it
is skipped; one whose predecessor is not applied is deferred (acknowledged, its claim DEFERRED); the next in
order is claimed and run under a lease (``outbox.delivery.run``), and its commit advances the watermark in the
same transaction. A DynamoDB-only subscription's next pair, on its first receive, runs with no claim, as the
direct path runs an unordered one: its writes, its completion marker and the watermark commit in one transaction.
Then the events deferred behind it may run: woken once the batch's own records are done (``wake_owed``), here
in place while the invocation has time to spare, else sent back to the queue (``WakeUps``).

Within one batch the watermarks are read once and carried from write to write (``outbox.delivery.carried``): each
pair brings its batch (``Pair.batch``), and whatever the gate hands on (a woken pair, a placing) is given it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from outbox import keys
from outbox.delivery.batch import Batch, OwedWake
from outbox.delivery.carried import CarriedWatermarks
from outbox.delivery.observers import Told
from outbox.delivery.path import DeliveryOutcome, Pair, RemainingMs, RetryableDeliveryError
from outbox.delivery.run import ORDER_RACE_LOOKS, Run
from outbox.delivery.runs import Runs
from outbox.exceptions import EnvelopeParseError, LeaseLostError, OutboxError, WatermarkMovedError
from outbox.inbox import Claim, envelope_digest
from outbox.log.envelope import Envelope
from outbox.observing import AROUND, observed
from outbox.pairs import DeployedCatalog, Route
from outbox.pairs.order import Deferred, WakeUps, Watermark
from outbox.subscriptions import HandlerResult, Subscription


class OrderedGate:
    """Skip, defer, or run in order (under a lease, or with no claim), then wake what waited."""

    def __init__(self, runs: Runs, wake_ups: WakeUps | None) -> None:
        self.runs = runs
        self.inbox = runs.inbox
        self.wake_ups = wake_ups
        self.order = runs.order

    def carrying(
        self, places: Iterable[tuple[str, str]], read: Mapping[tuple[str, str, str], dict[str, Any] | None]
    ) -> CarriedWatermarks:
        """The watermarks a batch carries from its first read (``CarriedWatermarks.read_ahead``)."""
        return CarriedWatermarks.read_ahead(self.order, self.inbox.table_name, places, read)

    def carried(self, batch: Batch | None) -> CarriedWatermarks:
        """What ``batch`` carries; outside a batch (or in one with no ordered place), nothing: each read fresh."""
        if batch is not None and batch.watermarks is not None:
            return batch.watermarks
        return CarriedWatermarks(self.order)

    def _behind_the_watermark(self, run: Run, watermark: Watermark) -> tuple[DeliveryOutcome, Watermark | None]:
        """A pair at or below its watermark: applied or skipped by the order, or passed by it while the deployed
        order did not hold it (its pattern was narrower then, say), which nothing applied and no completion of the
        order ever will. Every pair the order applies or an operator skips keeps a row saying so for the inbox's
        retention, so within it (``may_create``) the claim tells the two apart: a run under a lease finds a completed
        or skipped pair done without running it, and runs, once, one that never ran. Past the
        retention nothing tells: the watermark's word stands (it is never forgotten), and the pair is skipped.
        With the outcome, the watermark, to wake what a wake-up lost with an earlier answer left waiting."""
        pair, envelope, subscription = run.pair, run.envelope, run.subscription
        if pair.repair and self.inbox.restore_applied(envelope.id, subscription.name):
            # A repair of a pair the order has applied (a forced replay of a completed pair, say) runs nothing:
            # its claim goes back to COMPLETED instead of waiting, REPLAYING, for ever.
            return DeliveryOutcome.SKIPPED, watermark
        if pair.may_create:
            outcome = run.under_lease()
            return outcome, watermark if outcome in (DeliveryOutcome.SKIPPED, DeliveryOutcome.COMPLETED) else None
        run.tell(Told.BELOW_WATERMARK, subscription=subscription.name, seq=envelope.seq)
        return DeliveryOutcome.SKIPPED, watermark

    def deliver(self, run: Run) -> DeliveryOutcome:
        """Run the pair only in its tenant's order (``apply_in_order``); the events deferred behind it that may
        run now are owed to the batch (``Batch.owe``: woken once its records are done), or woken here."""
        pair = run.pair
        outcome, watermark = self.apply_in_order(run)
        if watermark is None:
            return outcome
        if pair.batch is not None:
            pair.batch.owe(pair.subscription, watermark)
            return outcome
        return self._wake(pair.subscription, watermark, outcome, run.remaining_ms, pair.batch)

    def apply_in_order(
        self, run: Run, *, in_place: bool = False, directly: bool = True
    ) -> tuple[DeliveryOutcome, Watermark | None]:
        """Skip the pair once applied, defer it while its predecessor is not, else run it under a lease and
        advance the watermark with its completion. With the outcome, the watermark to wake deferred events
        from: after a completion, or when the pair was found applied already (a wake-up may have been lost
        with the answer to its first message); None otherwise.

        ``in_place``: woken after its predecessor in this invocation (``run_woken``). A claim that shows an
        attempt since it was deferred is one an earlier in-place run did not finish (the deadline, a crash): it
        is given back with that attempt and RETRY sends it to the queue, to run from its own message with a
        whole invocation ahead of it, never again in place.

        A DynamoDB-only subscription's pair that is next in order and can have no history yet runs with no claim
        (``_apply_directly``), unless ``directly`` is False."""
        pair, envelope, subscription = run.pair, run.envelope, run.subscription
        carried = self.carried(pair.batch)
        watermark = carried.watermark(envelope.tenant, subscription.name)
        if envelope.seq <= watermark.applied_seq:
            return self._behind_the_watermark(run, watermark)
        waits_for: int | None = None
        if directly and not in_place and pair.runs_directly:
            waits_for = self.order.predecessor(envelope, subscription, watermark.applied_seq)
            if waits_for is None:
                applied = self._apply_directly(run, watermark)
                if applied is not None:
                    return applied
                # The pair has a row, the watermark moved, or the commit's answer is unknown: nothing is known
                # written. Look again, under a lease, if a second run still fits (else the message comes back).
                carried.forget(envelope.tenant, subscription.name)
                if run.lacks_time():
                    return DeliveryOutcome.RETRY, None
                return self.apply_in_order(run, directly=False)
        claimed = run.claim()
        if not isinstance(claimed, Claim):
            # Done, skipped or held elsewhere although the watermark the batch carries says otherwise: that
            # copy may be behind (an operator's skip), so the next pair of the place reads it again.
            carried.forget(envelope.tenant, subscription.name)
            return claimed, None
        claim = claimed
        if in_place and claim.attempts > 1:
            return self._not_here(claim), None
        placed = self.place(claim, envelope, subscription, watermark, waits_for, pair.batch)
        if isinstance(placed, DeliveryOutcome):
            return placed, None
        advanced = run.run_and_commit(claim, lambda result: self._commit_in_order(run, claim, result, placed, carried))
        if isinstance(advanced, DeliveryOutcome):
            # The run or its completion failed: the watermark is most likely where it was, but a completion
            # whose answer was lost may have moved it. Read it again rather than guess.
            carried.forget(envelope.tenant, subscription.name)
            return advanced, None
        carried.carry(advanced)
        return DeliveryOutcome.COMPLETED, advanced

    @observed(AROUND["apply_directly"])
    def _apply_directly(self, run: Run, watermark: Watermark) -> tuple[DeliveryOutcome, Watermark | None] | None:
        """Run a DynamoDB-only pair that is next in order with no claim, then commit its writes with a
        completion marker (the pair must have no row) and the watermark moved to it (the version read must
        still hold), one transaction: the lease path's claim and completion in one request. Its only effects are
        the writes it returned, so a run whose commit does not land left nothing. None when the pair has a row,
        the watermark moved or the commit failed (the caller looks again, under a lease, from a fresh read of the
        watermark); a failed run is claimed after the fact and counted as under a lease."""
        pair, envelope, subscription = run.pair, run.envelope, run.subscription
        carried = self.carried(pair.batch)
        try:
            result = run.run_handler(pair.key, 1)
        except Exception as exc:  # a handler may raise anything: classify it, never lose it
            carried.forget(envelope.tenant, subscription.name)
            return run.fail_unclaimed(exc, terminal=None), None
        order = self.order.advance_items(watermark, envelope, was_deferred=False)
        try:
            existing = run.commit_directly(result, order)
        except WatermarkMovedError:
            return None
        except Exception as exc:  # whatever it was, the lease path looks again
            # The commit may have landed with its answer lost: only a fresh read of the watermark can tell, and
            # then the events deferred behind this one must be woken (a claim would only find the pair done).
            run.tell(Told.DIRECT_COMPLETION_FAILED, key=pair.key, error=exc)
            return None
        if existing is not None:
            return None
        advanced = self.order.advanced(watermark, envelope, was_deferred=False)
        carried.carry(advanced)
        run.tell(Told.COMPLETED)
        return DeliveryOutcome.COMPLETED, advanced

    @observed(AROUND["place"])
    def place(
        self,
        claim: Claim,
        envelope: Envelope,
        subscription: Subscription,
        watermark: Watermark,
        waits_for: int | None = None,
        batch: Batch | None = None,
    ) -> Watermark | DeliveryOutcome:
        """The watermark to advance when the pair is next in order; DEFERRED once it is put aside behind its
        predecessor (the deferral is conditioned on the watermark read: if it moved, look again). ``waits_for``:
        the predecessor already found against ``watermark``, if any; ``batch``: the pair's."""
        carried = self.carried(batch)
        for look in range(ORDER_RACE_LOOKS):
            if look > 0 or waits_for is None:
                waits_for = self.order.predecessor(envelope, subscription, watermark.applied_seq)
            if waits_for is None:
                return watermark
            was_deferred = claim.waits_for is not None
            items = self.order.defer_items(watermark, envelope, waits_for, was_deferred=was_deferred)
            log = {"event_id": envelope.id, "subscription": subscription.name, "tenant": envelope.tenant}
            try:
                self.inbox.defer(claim, waits_for, items)
            except WatermarkMovedError:
                watermark = carried.read(envelope.tenant, subscription.name)
                continue
            except LeaseLostError:
                self.runs.tell(Told.LEASE_LOST, log)
                return DeliveryOutcome.RETRY
            carried.carry(self.order.after_deferral(watermark, was_deferred=was_deferred))
            self.runs.tell(Told.DEFERRED, log, key=claim.idempotency_key, seq=envelope.seq, waits_for=waits_for)
            return DeliveryOutcome.DEFERRED
        carried.forget(envelope.tenant, subscription.name)
        self.inbox.release(claim, "the ordered subscription's watermark kept moving; placed again on the next receive")
        return DeliveryOutcome.RETRY

    def _commit_in_order(
        self, run: Run, claim: Claim, result: HandlerResult, watermark: Watermark, carried: CarriedWatermarks
    ) -> Watermark:
        """Commit with the watermark moved to this event; the watermark after it. A deferral of a later event
        may have changed the row's version (not its seq) meanwhile: then commit against the fresh row."""
        envelope, subscription = run.envelope, run.subscription
        was_deferred = claim.waits_for is not None
        for _ in range(ORDER_RACE_LOOKS):
            order = self.order.advance_items(watermark, envelope, was_deferred=was_deferred)
            try:
                run.commit(claim, result, order)
            except WatermarkMovedError:
                fresh = carried.read(envelope.tenant, subscription.name)
                if fresh.applied_seq != watermark.applied_seq:
                    raise
                watermark = fresh
                continue
            return self.order.advanced(watermark, envelope, was_deferred=was_deferred)
        raise WatermarkMovedError(f"the watermark of {subscription.name} for {envelope.tenant} kept moving")

    # -- waking what waited ---------------------------------------------------------------------------

    def wake_owed(self, batch: Batch, remaining_ms: RemainingMs) -> list[str]:
        """Wake what the batch's ordered completions owe (``batch.owed``), once per (tenant, subscription) from
        the latest watermark the batch wrote; the ids of the messages whose wake-up could neither run nor be sent
        (they come back, find their pairs applied, and wake again)."""
        latest: dict[tuple[str, str], OwedWake] = {}
        messages: dict[tuple[str, str], list[str]] = {}
        for one in batch.owed:
            place = (one.watermark.tenant, one.subscription.name)
            messages.setdefault(place, []).append(one.message_id)
            if place not in latest or one.watermark.version > latest[place].watermark.version:
                latest[place] = one
        unwoken: list[str] = []
        for place, one in latest.items():
            woke = self._wake(one.subscription, one.watermark, DeliveryOutcome.COMPLETED, remaining_ms, batch)
            if woke is DeliveryOutcome.RETRY:
                unwoken += messages[place]
        return unwoken

    def _wake(
        self,
        subscription: Subscription,
        watermark: Watermark,
        outcome: DeliveryOutcome,
        remaining_ms: RemainingMs | None,
        batch: Batch | None,
        *,
        whatever_it_waits_for: bool = False,
    ) -> DeliveryOutcome:
        """Run the deferred events ``watermark`` now lets run, here and in order, while the invocation has time
        for another (``RunTimes.has_time_for``; never with no ``remaining_ms``); send the one it cannot run here
        back to the queue. All of it before the message that owes it is acknowledged: a crash on the way leaves
        the message to come back and do it again. ``outcome`` is this message's, or RETRY when the next event
        could neither run nor be sent. ``batch``: the one whose records owe it (woken pairs run in it), if any.
        ``whatever_it_waits_for``: wake the lowest whatever it waits for."""
        assert self.wake_ups is not None  # checked at construction for every ordered subscription
        passed = 0  # the last row passed as out of the order
        try:
            while (
                ready := self.order.ready_deferred(watermark, above=passed, whatever_it_waits_for=whatever_it_waits_for)
            ) is not None:
                envelope = self._logged(ready)
                if envelope is not None and not _in_the_order(subscription, envelope):
                    # A deploy took it out of the order since it was deferred: it runs the unordered way (or is left
                    # out) from its wake-up, which wakes nothing after it. The order goes on past it here, and the
                    # next row may wait for it: woken whatever it waits for, its run places it again.
                    self.wake_ups.send(ready, watermark.applied_seq)
                    self.runs.tell(Told.WAKE_UP_SENT, _log_of(ready))
                    passed, whatever_it_waits_for = ready.seq, True
                    continue
                if (
                    envelope is not None
                    and remaining_ms is not None
                    and self.runs.times.has_time_for(subscription, remaining_ms, in_place=True)
                ):
                    woken, advanced = self.run_woken(subscription, ready, remaining_ms, envelope, batch)
                    if advanced is not None:
                        watermark, whatever_it_waits_for = advanced, False
                        continue
                    if woken is not DeliveryOutcome.RETRY:
                        break  # dead (it blocks until an operator repairs it) or deferred again (woken in turn)
                self.wake_ups.send(ready, watermark.applied_seq)  # it runs from its own message, retried by SQS
                self.runs.tell(Told.WAKE_UP_SENT, _log_of(ready))
                break
        except (ClientError, BotoCoreError, OutboxError) as exc:
            log = {"subscription": watermark.subscription, "tenant": watermark.tenant}
            self.runs.tell(Told.WAKE_FAILED, log, subscription=watermark.subscription, error=exc)
            return DeliveryOutcome.RETRY
        return outcome

    def send_next(self, subscription: Subscription, tenant: str, batch: Batch | None) -> None:
        """After a pair left the order with no completion (a deploy left it out), which wakes nothing by itself:
        send the lowest deferred event back to the queue whatever it waits for (it may have waited for the pair
        that left; its wake-up places it again under the deployed catalog: it runs, waits for its new
        predecessor, or is left out too). Raises when it could not: the message comes back and sends it."""
        watermark = self.carried(batch).read(tenant, subscription.name)
        woke = self._wake(subscription, watermark, DeliveryOutcome.COMPLETED, None, batch, whatever_it_waits_for=True)
        if woke is DeliveryOutcome.RETRY:
            raise RetryableDeliveryError(f"could not wake the next deferred event of {subscription.name}")

    @observed(AROUND["run_woken"])
    def run_woken(
        self,
        subscription: Subscription,
        ready: Deferred,
        remaining_ms: RemainingMs,
        envelope: Envelope,
        batch: Batch | None = None,
    ) -> tuple[DeliveryOutcome, Watermark | None]:
        """Apply, here, a deferred event whose predecessor was just applied (``envelope``: its row in the log, in
        the order as deployed), in the predecessor's ``batch``: as ``apply_in_order`` answers."""
        self.runs.tell(Told.RUN_AFTER_PREDECESSOR, _log_of(ready))
        may_create = self.inbox.can_vouch_for(envelope.occurred_at)
        pair = Pair(envelope, subscription, 1, envelope_digest(envelope), may_create, batch=batch)
        return self.apply_in_order(Run(pair, remaining_ms, self.runs), in_place=True)

    def _logged(self, ready: Deferred) -> Envelope | None:
        """The deferred event as the log holds it; None when it no longer does (a row rewritten, another event at
        its seq): its message path, which checks every event against the log, decides then."""
        store = self.runs.store
        item = store.client.get_item(
            TableName=store.table_name, Key=keys.event_key(ready.tenant, ready.seq), ConsistentRead=True
        ).get("Item")
        try:
            envelope = None if item is None else Envelope.from_item(item)
        except EnvelopeParseError:  # a row rewritten into something else: its message path records what it is
            return None
        return envelope if envelope is not None and envelope.id == ready.event_id else None

    def _not_here(self, claim: Claim) -> DeliveryOutcome:
        """Give back a claim taken in place whose earlier in-place attempt did not finish, with the attempt this
        claim counted: RETRY, so that its wake-up message runs it."""
        try:
            self.inbox.release(claim, "an earlier run in place did not finish: it runs from its own message", 1)
        except LeaseLostError:
            self.runs.tell(Told.LEASE_LOST, _log_of(claim))
        return DeliveryOutcome.RETRY


def _in_the_order(subscription: Subscription, envelope: Envelope) -> bool:
    """Whether the deployed catalog runs the event in the subscription's order: a deploy may have taken it out
    (moved ordered_since past it, made the subscription unordered, narrowed it), and the watermark then says
    nothing of it."""
    return DeployedCatalog.route_of(subscription, envelope.type, envelope.occurred_at) is Route.IN_ORDER


def _log_of(waiting: Deferred | Claim) -> dict[str, str]:
    """The log keys of a pair known by its row (a deferred one, a claim)."""
    return {"event_id": waiting.event_id, "subscription": waiting.subscription, "tenant": waiting.tenant}
