"""The ordered gate: an ordered subscription's pairs run in their tenant's order, through the lease path.

Per (tenant, subscription) a watermark holds the last applied seq (``outbox.ordering``). A pair at or below it
is skipped; one whose predecessor is not applied is deferred (acknowledged, its claim DEFERRED); the next in
order is claimed and run by the lease path, and its completion advances the watermark in the same transaction.
A DynamoDB-only subscription's next pair, on its first receive, runs with no claim, as the direct path runs an
unordered one: its writes, its completion marker and the watermark commit in one transaction.
Then the events deferred behind it may run: woken once the batch's own records are done (``wake_owed``), here
in place while the invocation has time to spare, else sent back to the queue (``WakeUps``).

Within one batch (``carrying``) each (tenant, subscription)'s watermark is read once, all of them before the
first record, in the BatchGetItem that checks the batch's events against the log, and then carried from write
to write: a batch of FIFO messages holds
several consecutive events of a tenant, and nobody else delivers them while it is in flight. A copy that went
stale anyway (an operator's skip, say) fails safe, since every write to the watermark is conditioned on its
version: the write fails, and the gate reads it again. What did not end in a write the gate knows the outcome
of (a failed run or completion) is forgotten and read again.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from outbox import keys
from outbox.delivery.attempts import Attempts
from outbox.delivery.direct import DirectPath
from outbox.delivery.lease import ORDER_RACE_LOOKS, LeasePath
from outbox.delivery.path import DeliveryOutcome, Metric, Pair, RemainingMs
from outbox.envelope import Envelope
from outbox.exceptions import EnvelopeParseError, LeaseLostError, OutboxError, WatermarkMovedError
from outbox.inbox import Claim, envelope_digest
from outbox.ordering import Deferred, WakeUps, Watermark
from outbox.pairs import DeployedCatalog, Route
from outbox.subscriptions import HandlerResult, Subscription

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class OwedWake:
    """An ordered completion of a batch's message whose deferred followers are woken after the batch's records."""

    message_id: str
    subscription: Subscription
    watermark: Watermark


class OrderedGate:
    """Skip, defer, or run in order (by the lease path), then wake what waited."""

    def __init__(self, attempts: Attempts, lease: LeasePath, direct: DirectPath, wake_ups: WakeUps | None) -> None:
        self.attempts = attempts
        self.inbox = attempts.inbox
        self.lease = lease
        self.direct = direct
        self.wake_ups = wake_ups
        self.order = lease.order
        # Per thread (a handler called from several threads at once carries each batch's own):
        # ``carried``, (tenant, subscription) -> its watermark as this batch last read or wrote it.
        self._batch = threading.local()

    # -- the watermarks a batch carries ---------------------------------------------------------------

    @contextmanager
    def carrying(
        self, places: Iterable[tuple[str, str]], read: Mapping[tuple[str, str, str], dict[str, Any] | None]
    ) -> Iterator[None]:
        """Carry watermarks through one batch, starting with those of ``places`` (its ordered (tenant,
        subscription) pairs) that the batch's first read holds (``read``: rows by (table, pk, sk), None for no
        row); one it does not hold (that read failed, or left it unprocessed) is read when it is needed."""
        carried: dict[tuple[str, str], Watermark] = {}
        for tenant, subscription in places:
            key = keys.watermark_key(tenant, subscription)
            place = (self.inbox.table_name, key["pk"]["S"], key["sk"]["S"])
            if place in read:
                carried[(tenant, subscription)] = Watermark.from_item(tenant, subscription, read[place])
        self._batch.carried = carried
        try:
            yield
        finally:
            self._batch.carried = None

    @property
    def _carried(self) -> dict[tuple[str, str], Watermark] | None:
        """What this thread's batch carries; None outside a batch (a record processed alone reads each time)."""
        carried: dict[tuple[str, str], Watermark] | None = getattr(self._batch, "carried", None)
        return carried

    def _watermark(self, tenant: str, subscription: str) -> Watermark:
        """The watermark as this batch knows it, else read (and carried from here)."""
        if self._carried is not None and (known := self._carried.get((tenant, subscription))) is not None:
            return known
        return self._read(tenant, subscription)

    def _read(self, tenant: str, subscription: str) -> Watermark:
        """The watermark read again, past what the batch carries (a conditioned write found it moved)."""
        fresh = self.order.watermark(tenant, subscription)
        self._carry(fresh)
        return fresh

    def _carry(self, watermark: Watermark) -> None:
        if self._carried is not None:
            self._carried[(watermark.tenant, watermark.subscription)] = watermark

    def _forget(self, tenant: str, subscription: str) -> None:
        if self._carried is not None:
            self._carried.pop((tenant, subscription), None)

    def _behind_the_watermark(
        self, pair: Pair, watermark: Watermark, remaining_ms: RemainingMs
    ) -> tuple[DeliveryOutcome, Watermark | None]:
        """A pair at or below its watermark: applied or skipped by the order, or passed by it while the deployed
        order did not hold it (its pattern was narrower then, say), which nothing applied and no completion of the
        order ever will. Every pair the order applies or an operator skips keeps a row saying so for the inbox's
        retention, so within it (``may_create``) the claim tells the two apart: the lease path finds a completed or
        skipped pair done without running it, and runs, once, one that never ran. Past the
        retention nothing tells: the watermark's word stands (it is never forgotten), and the pair is skipped.
        With the outcome, the watermark, to wake what a wake-up lost with an earlier answer left waiting."""
        envelope, subscription = pair.envelope, pair.subscription
        if pair.repair and self.inbox.restore_applied(envelope.id, subscription.name):
            # A repair of a pair the order has applied (a forced replay of a completed pair, say) runs nothing:
            # its claim goes back to COMPLETED instead of waiting, REPLAYING, for ever.
            return DeliveryOutcome.SKIPPED, watermark
        if pair.may_create:
            outcome = self.lease.deliver(pair, remaining_ms)
            return outcome, watermark if outcome in (DeliveryOutcome.SKIPPED, DeliveryOutcome.COMPLETED) else None
        logger.info("skipped %s: seq %d is at or below its watermark", subscription.name, envelope.seq, extra=pair.log)
        self.attempts.count(Metric.SKIPS)
        return DeliveryOutcome.SKIPPED, watermark

    def deliver(self, pair: Pair, remaining_ms: RemainingMs) -> DeliveryOutcome:
        """Run the pair only in its tenant's order (``apply_in_order``); the events deferred behind it that may
        run now are owed to the batch (``pair.owed``: woken once its records are done), or woken here."""
        outcome, watermark = self.apply_in_order(pair, remaining_ms)
        if watermark is None:
            return outcome
        if pair.owed is not None:
            pair.owed.append((pair.subscription, watermark))
            return outcome
        return self._wake(pair.subscription, watermark, outcome, remaining_ms)

    def apply_in_order(
        self, pair: Pair, remaining_ms: RemainingMs, *, in_place: bool = False, directly: bool = True
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
        envelope, subscription = pair.envelope, pair.subscription
        watermark = self._watermark(envelope.tenant, subscription.name)
        if envelope.seq <= watermark.applied_seq:
            return self._behind_the_watermark(pair, watermark, remaining_ms)
        waits_for: int | None = None
        if directly and not in_place and DirectPath.takes(pair):
            waits_for = self.order.predecessor(envelope, subscription, watermark.applied_seq)
            if waits_for is None:
                applied = self._apply_directly(pair, watermark, remaining_ms)
                if applied is not None:
                    return applied
                # The pair has a row, the watermark moved, or the commit's answer is unknown: nothing is known
                # written. Look again, under a lease, if a second run still fits (else the message comes back).
                self._forget(envelope.tenant, subscription.name)
                if self.attempts.lacks_time(subscription, remaining_ms, pair.log):
                    return DeliveryOutcome.RETRY, None
                return self.apply_in_order(pair, remaining_ms, directly=False)
        claimed = self.attempts.claim(pair, remaining_ms)
        if not isinstance(claimed, Claim):
            # Done, skipped or held elsewhere although the watermark the batch carries says otherwise: that
            # copy may be behind (an operator's skip), so the next pair of the place reads it again.
            self._forget(envelope.tenant, subscription.name)
            return claimed, None
        claim = claimed
        if in_place and claim.attempts > 1:
            return self._not_here(claim), None
        placed = self.place(claim, envelope, subscription, watermark, waits_for)
        if isinstance(placed, DeliveryOutcome):
            return placed, None
        advanced = self.lease.run_and_complete(
            claim,
            pair,
            remaining_ms,
            lambda result: self._complete_in_order(claim, envelope, subscription, result, placed),
        )
        if isinstance(advanced, DeliveryOutcome):
            # The run or its completion failed: the watermark is most likely where it was, but a completion
            # whose answer was lost may have moved it. Read it again rather than guess.
            self._forget(envelope.tenant, subscription.name)
            return advanced, None
        self._carry(advanced)
        return DeliveryOutcome.COMPLETED, advanced

    def _apply_directly(
        self, pair: Pair, watermark: Watermark, remaining_ms: RemainingMs
    ) -> tuple[DeliveryOutcome, Watermark | None] | None:
        """Run a DynamoDB-only pair that is next in order with no claim, then commit its writes with a
        completion marker (the pair must have no row) and the watermark moved to it (the version read must
        still hold), one transaction: the lease path's claim and completion in one request. Its only effects are
        the writes it returned, so a run whose commit does not land left nothing. None when the pair has a row,
        the watermark moved or the commit failed (the caller looks again, under a lease, from a fresh read of the
        watermark); a failed run is claimed after the fact and counted as on the lease path."""
        envelope, subscription = pair.envelope, pair.subscription
        try:
            result = self.attempts.run_handler(pair, pair.key, 1, remaining_ms)
        except Exception as exc:  # a handler may raise anything: classify it, never lose it
            self._forget(envelope.tenant, subscription.name)
            return self.direct.failed(envelope, subscription, exc, remaining_ms, pair.digest, terminal=None), None
        order = self.order.advance_items(watermark, envelope, was_deferred=False)
        try:
            existing = self.direct.commit(envelope, subscription, result, pair.digest, order)
        except WatermarkMovedError:
            return None
        except Exception as exc:  # whatever it was, the lease path looks again
            # The commit may have landed with its answer lost: only a fresh read of the watermark can tell, and
            # then the events deferred behind this one must be woken (a claim would only find the pair done).
            logger.warning("the direct completion of %s failed, placed again under a lease: %s", pair.key, exc)
            return None
        if existing is not None:
            return None
        advanced = self.order.advanced(watermark, envelope, was_deferred=False)
        self._carry(advanced)
        self.attempts.count(Metric.COMPLETIONS)
        return DeliveryOutcome.COMPLETED, advanced

    def place(
        self,
        claim: Claim,
        envelope: Envelope,
        subscription: Subscription,
        watermark: Watermark,
        waits_for: int | None = None,
    ) -> Watermark | DeliveryOutcome:
        """The watermark to advance when the pair is next in order; DEFERRED once it is put aside behind its
        predecessor (the deferral is conditioned on the watermark read: if it moved, look again). ``waits_for``:
        the predecessor already found against ``watermark``, if any."""
        for look in range(ORDER_RACE_LOOKS):
            if look > 0 or waits_for is None:
                waits_for = self.order.predecessor(envelope, subscription, watermark.applied_seq)
            if waits_for is None:
                return watermark
            was_deferred = claim.waits_for is not None
            items = self.order.defer_items(watermark, envelope, waits_for, was_deferred=was_deferred)
            try:
                self.inbox.defer(claim, waits_for, items)
            except WatermarkMovedError:
                watermark = self._read(envelope.tenant, subscription.name)
                continue
            except LeaseLostError:
                self.attempts.count(Metric.LEASES_LOST)
                return DeliveryOutcome.RETRY
            self._carry(self.order.after_deferral(watermark, was_deferred=was_deferred))
            logger.info(
                "deferred %s: seq %d waits for seq %d",
                claim.idempotency_key,
                envelope.seq,
                waits_for,
                extra={"event_id": envelope.id, "subscription": subscription.name, "tenant": envelope.tenant},
            )
            self.attempts.count(Metric.DEFERRALS)
            return DeliveryOutcome.DEFERRED
        self._forget(envelope.tenant, subscription.name)
        self.inbox.release(claim, "the ordered subscription's watermark kept moving; placed again on the next receive")
        return DeliveryOutcome.RETRY

    def _complete_in_order(
        self, claim: Claim, envelope: Envelope, subscription: Subscription, result: HandlerResult, watermark: Watermark
    ) -> Watermark:
        """Complete with the watermark moved to this event; the watermark after it. A deferral of a later event
        may have changed the row's version (not its seq) meanwhile: then complete against the fresh row."""
        was_deferred = claim.waits_for is not None
        for _ in range(ORDER_RACE_LOOKS):
            order = self.order.advance_items(watermark, envelope, was_deferred=was_deferred)
            try:
                self.lease.complete(claim, envelope, subscription, result, order)
            except WatermarkMovedError:
                fresh = self._read(envelope.tenant, subscription.name)
                if fresh.applied_seq != watermark.applied_seq:
                    raise
                watermark = fresh
                continue
            return self.order.advanced(watermark, envelope, was_deferred=was_deferred)
        raise WatermarkMovedError(f"the watermark of {subscription.name} for {envelope.tenant} kept moving")

    # -- waking what waited ---------------------------------------------------------------------------

    @staticmethod
    def owed(message_id: str, completions: Iterable[tuple[Subscription, Watermark]]) -> list[OwedWake]:
        """The wake-ups a batch's message owes for its ordered ``completions`` (subscription, watermark written)."""
        return [OwedWake(message_id, subscription, mark) for subscription, mark in completions]

    def wake_owed(self, owed: Sequence[OwedWake], remaining_ms: RemainingMs) -> list[str]:
        """Wake what the batch's ordered completions owe, once per (tenant, subscription) from the latest
        watermark the batch wrote; the ids of the messages whose wake-up could neither run nor be sent (they
        come back, find their pairs applied, and wake again)."""
        latest: dict[tuple[str, str], OwedWake] = {}
        messages: dict[tuple[str, str], list[str]] = {}
        for one in owed:
            place = (one.watermark.tenant, one.subscription.name)
            messages.setdefault(place, []).append(one.message_id)
            if place not in latest or one.watermark.version > latest[place].watermark.version:
                latest[place] = one
        unwoken: list[str] = []
        for place, one in latest.items():
            woke = self._wake(one.subscription, one.watermark, DeliveryOutcome.COMPLETED, remaining_ms)
            if woke is DeliveryOutcome.RETRY:
                unwoken += messages[place]
        return unwoken

    def _wake(
        self, subscription: Subscription, watermark: Watermark, outcome: DeliveryOutcome, remaining_ms: RemainingMs
    ) -> DeliveryOutcome:
        """Run the deferred events ``watermark`` now lets run, here and in order, while the invocation has time
        for another (``RunTimes.has_time_for``); send the one it cannot run here back to the queue. All of it
        before the message that owes it is acknowledged: a crash on the way leaves the message to come back and
        do it again. ``outcome`` is this message's, or RETRY when the next event could neither run nor be sent."""
        assert self.wake_ups is not None  # checked at construction for every ordered subscription
        try:
            while (ready := self.order.ready_deferred(watermark)) is not None:
                if self.attempts.times.has_time_for(subscription, remaining_ms, in_place=True):
                    woken, advanced = self.run_woken(subscription, ready, remaining_ms)
                    if advanced is not None:
                        watermark = advanced
                        continue
                    if woken is not DeliveryOutcome.RETRY:
                        break  # dead (it blocks until an operator repairs it) or deferred again (woken in turn)
                self.wake_ups.send(ready, watermark.applied_seq)  # it runs from its own message, retried by SQS
                self.attempts.count(Metric.WAKE_UPS)
                break
        except (ClientError, BotoCoreError, OutboxError) as exc:
            logger.warning("could not wake the next deferred event of %s: %s", watermark.subscription, exc)
            return DeliveryOutcome.RETRY
        return outcome

    def send_next(self, tenant: str, subscription: str, left_seq: int) -> None:
        """After the pair at ``left_seq`` left the order with no completion (a deploy left it out), which wakes
        nothing by itself: send the lowest deferred event back to the queue if the watermark lets it run, or if it
        waited for the pair that left (its wake-up places it again under the deployed catalog: it runs, waits for
        its new predecessor, or is left out too)."""
        assert self.wake_ups is not None  # checked at construction for every ordered subscription
        watermark = self._read(tenant, subscription)
        lowest = self.order.deferred(tenant, subscription, limit=1)
        if lowest and (lowest[0].waits_for <= watermark.applied_seq or lowest[0].waits_for == left_seq):
            self.wake_ups.send(lowest[0], watermark.applied_seq)
            self.attempts.count(Metric.WAKE_UPS)

    def run_woken(
        self, subscription: Subscription, ready: Deferred, remaining_ms: RemainingMs
    ) -> tuple[DeliveryOutcome, Watermark | None]:
        """Apply, here, a deferred event whose predecessor was just applied, read from the log: as
        ``apply_in_order`` answers. RETRY when the log no longer holds it as deferred (its message path, which
        checks every event against the log, decides then)."""
        store = self.attempts.store
        item = store.client.get_item(
            TableName=store.table_name, Key=keys.event_key(ready.tenant, ready.seq), ConsistentRead=True
        ).get("Item")
        try:
            envelope = None if item is None else Envelope.from_item(item)
        except EnvelopeParseError:  # a row rewritten into something else: its message path records what it is
            return DeliveryOutcome.RETRY, None
        if envelope is None or envelope.id != ready.event_id:
            return DeliveryOutcome.RETRY, None
        if DeployedCatalog.route_of(subscription, envelope.type, envelope.occurred_at) is not Route.IN_ORDER:
            # Deferred before a deploy took it out of the order (ordered_since moved past it, made unordered, or
            # narrowed so that it no longer matches): the watermark says nothing of it, so its wake-up message
            # decides, the unordered way or left out, never here.
            return DeliveryOutcome.RETRY, None
        self.attempts.count(Metric.RUN_AFTER_PREDECESSOR)
        pair = Pair(
            envelope, subscription, 1, envelope_digest(envelope), self.inbox.can_vouch_for(envelope.occurred_at)
        )
        return self.apply_in_order(pair, remaining_ms, in_place=True)

    def _not_here(self, claim: Claim) -> DeliveryOutcome:
        """Give back a claim taken in place whose earlier in-place attempt did not finish, with the attempt this
        claim counted: RETRY, so that its wake-up message runs it."""
        try:
            self.inbox.release(claim, "an earlier run in place did not finish: it runs from its own message", 1)
        except LeaseLostError:
            self.attempts.count(Metric.LEASES_LOST)
        return DeliveryOutcome.RETRY
