"""The durable consumer: Powertools SQS FIFO batch processing over the lease-claim inbox."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from enum import StrEnum
from typing import Any, TypeVar

from aws_lambda_powertools.utilities.batch import SqsFifoPartialProcessor, process_partial_response
from aws_lambda_powertools.utilities.batch.exceptions import BatchProcessingError
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from botocore.exceptions import BotoCoreError, ClientError, ParamValidationError
from pydantic import ValidationError

from outbox import keys
from outbox.envelope import Envelope, format_timestamp
from outbox.exceptions import (
    CallerWriteConditionFailedError,
    ChainHeadContentionError,
    ContractViolationError,
    EnvelopeParseError,
    EventStoreUnavailableError,
    InlineWriteConditionFailedError,
    LeaseLostError,
    OutboxError,
    OutboxValidationError,
    TerminalError,
    WatermarkMovedError,
)
from outbox.inbox import COMPLETED, DEAD, Claim, ClaimOutcome, DeadReason, Inbox, envelope_digest, storable_text
from outbox.messages import Message, parse_body, read_message
from outbox.ordering import Deferred, OrderBook, WakeUps, Watermark
from outbox.redaction import ErrorDetail, describe_failure
from outbox.store import EventStore
from outbox.subscriptions import Delivery, Effects, HandlerResult, Lane, Subscription, SubscriptionRegistry

logger = logging.getLogger(__name__)

__all__ = ["ContractViolationError", "DeliveryOutcome", "DurableConsumer", "LeasePolicy", "Metric", "parse_body"]


T = TypeVar("T")
# DynamoDB's limit of keys per BatchGetItem.
BATCH_GET_KEYS = 100
# How often an ordered delivery reads the watermark again when another writer moved it under its write.
ORDER_RACE_LOOKS = 3
# An event deferred behind one that just completed runs in the same invocation, once the batch's own records are
# done, while at least this much of it is left, and at least twice the slowest run of its subscription this
# container has seen (else it goes back to the queue): sending it back puts it behind the tenant's other
# messages, which would then be deferred behind it in turn, one queue round trip each.
WAKE_HERE_MIN_REMAINING_MS = 10_000
# A pair starts only while its subscription's slowest run seen in this container, and this much more, is left of
# the invocation: one that cannot finish would be stopped at the deadline, spending an attempt (and bringing
# back the whole batch) for what the records before it took. It comes back instead, its attempt unspent.
RUN_MARGIN_MS = 1_000


class RetryableDeliveryError(OutboxError):
    """At least one subscription must run again: the message goes back to the queue (a batch item failure)."""


class DeliveryOutcome(StrEnum):
    COMPLETED = "completed"
    SKIPPED = "skipped"
    RETRY = "retry"
    DEAD = "dead"
    DEFERRED = "deferred"  # an ordered subscription's event behind its predecessor: acknowledged, woken later


class Metric(StrEnum):
    CLAIMS = "Claims"
    SKIPS = "ClaimSkips"
    COMPLETIONS = "Completions"
    RETRIES = "Retries"
    DEAD_LETTERS = "DeadLetters"
    CONFLICTS = "Conflicts"
    POISON_PILLS = "PoisonPills"
    UNMATCHED = "UnmatchedEvents"
    LEASES_LOST = "LeasesLost"
    DEFERRALS = "Deferrals"
    RUN_AFTER_PREDECESSOR = "RunAfterPredecessor"  # a deferred event applied right after the one it waited for
    WAKE_UPS = "WakeUps"  # a deferred event sent back to the queue instead
    NO_TIME_LEFT = "NoTimeLeft"  # a pair not started for lack of time: its message comes back, no attempt spent


@dataclass(frozen=True)
class LeasePolicy:
    """A lease lasts as long as the invocation can (so a live handler is never taken over), plus a margin
    for clock skew; the floor covers a remaining time that reads 0 right at the deadline."""

    floor: timedelta = timedelta(seconds=5)
    margin: timedelta = timedelta(seconds=5)

    def lease_for(self, remaining_ms: int) -> timedelta:
        return max(timedelta(milliseconds=remaining_ms), self.floor) + self.margin


class DurableConsumer:
    """Runs every matching DURABLE subscription of each message exactly once per (event, subscription).

    Parameters
    ----------
    registry, inbox, store:
        The subscriptions, the claim table, and the event store used for handlers' follow-up events.
        ``inbox.max_attempts`` decides when a pair is dead: the claim counts its own attempts, so a message
        that waited behind a failing neighbour (and collected receives meanwhile) loses nothing.
    metrics:
        Optional Powertools ``Metrics``; the handler flushes it.
    error_detail:
        What a failure says in logs and dead letters (``outbox.redaction``): its type and place by default.
    wake_ups:
        How a deferred event goes back to the durable queue (``outbox.ordering.WakeUps``); required when a
        subscription is ordered.
    """

    def __init__(
        self,
        registry: SubscriptionRegistry,
        inbox: Inbox,
        store: EventStore,
        *,
        lease_policy: LeasePolicy | None = None,
        metrics: Any | None = None,
        error_detail: ErrorDetail = ErrorDetail.REDACTED,
        wake_ups: WakeUps | None = None,
    ) -> None:
        self.registry = registry
        self.inbox = inbox
        self.store = store
        self.lease_policy = lease_policy or LeasePolicy()
        self.metrics = metrics
        self.error_detail = error_detail
        ordered = sorted(s.name for s in registry.subscriptions if s.ordered)
        if ordered and wake_ups is None:
            raise OutboxValidationError(
                f"ordered subscriptions ({', '.join(ordered)}) need wake_ups=outbox.ordering.WakeUps(...): a "
                "deferred event goes back to the durable queue when its predecessor is applied"
            )
        self.wake_ups = wake_ups
        self.order = OrderBook(inbox.table_name, store.table_name, client=inbox.client, clock=inbox.clock)
        # The longest a handler run of each subscription took in this container (ms): what a run in place must
        # leave room for (``_has_time_for``).
        self._slowest_run_ms: dict[str, int] = {}
        # What the invocation under way had when it started (None outside ``handle``): a pair that needs more than
        # a whole invocation is started anyway (holding it back would hold it for ever).
        self._invocation_ms: int | None = None

    # -- the Lambda entry -----------------------------------------------------------------------------

    def handle(self, event: Mapping[str, Any], context: Any) -> dict[str, Any]:
        """Process one SQS FIFO batch; failures stop only their own message group."""
        processor = SqsFifoPartialProcessor(skip_group_on_error=True)
        remaining: Callable[[], int] = context.get_remaining_time_in_millis
        outer_budget, self._invocation_ms = self._invocation_ms, remaining()
        try:
            return self._handle(event, context, processor, remaining)
        finally:
            self._invocation_ms = outer_budget  # a second worker's invocation nested in a handler ends

    def _handle(
        self,
        event: Mapping[str, Any],
        context: Any,
        processor: SqsFifoPartialProcessor,
        remaining: Callable[[], int],
    ) -> dict[str, Any]:
        ahead = self._read_ahead(event.get("Records") or [])

        def record_handler(record: SQSRecord) -> None:
            self.process_record(record, remaining, ahead)

        try:
            response = process_partial_response(
                event=dict(event), record_handler=record_handler, processor=processor, context=context
            )
            failures = [dict(failure) for failure in response.get("batchItemFailures", [])]
        except BatchProcessingError:
            # Powertools raises when every record failed or was skipped (no raise_on_entire_batch_failure
            # for FIFO yet). Reporting them all is the same for SQS without counting a function error.
            failures = [{"itemIdentifier": r["messageId"]} for r in event["Records"]]
        # Only now, with every record of the batch done: the time in-place work spends is time no other record
        # (another tenant's group, most likely) needs.
        reported = {failure["itemIdentifier"] for failure in failures}
        failures += [{"itemIdentifier": i} for i in self._wake_owed(ahead, remaining) if i not in reported]
        return {"batchItemFailures": failures}

    # -- one message ----------------------------------------------------------------------------------

    def process_record(
        self, record: SQSRecord, remaining_ms: Callable[[], int], ahead: ReadAhead | None = None
    ) -> None:
        try:
            message = ahead.message(record) if ahead is not None else None
            if message is None:
                message = _read(record.raw_event)
        except Exception as exc:  # whatever reading raised, the record is a poison pill
            self._poison(record, str(exc) if isinstance(exc, EnvelopeParseError) else f"{type(exc).__name__}")
            return
        envelope = message.envelope
        log = {"event_id": envelope.id, "correlation_id": envelope.correlation_id, "tenant": envelope.tenant}
        subscriptions = self._subscriptions(message)
        if not subscriptions:
            logger.warning("event %s of type %s matched no durable subscription", envelope.id, envelope.type, extra=log)
            self._count(Metric.UNMATCHED)
            return
        doubt = self._not_in_log(envelope, ahead)
        if doubt is not None:
            self._refuse(envelope, subscriptions, doubt, message.receive_count)
            return
        digest = envelope_digest(envelope)  # once per message, not per subscription
        # Absence of a claim row proves "never completed" only while the inbox still remembers completions
        # (a repair message is vouched for by the REPLAYING row its repair wrote, at any age).
        may_create = self.inbox.can_vouch_for(envelope.occurred_at)
        repair = message.targets is not None  # a replay or reconcile: its pairs have rows already
        # Ordered completions of this message whose deferred followers are woken after the batch's records (with
        # no batch around it, right after each completion).
        owed: list[tuple[Subscription, Watermark]] | None = [] if ahead is not None else None
        retry = [
            s.name
            for s in subscriptions
            if self.deliver(
                envelope,
                s,
                message.receive_count,
                remaining_ms,
                digest,
                may_create=may_create,
                repair=repair,
                owed=owed,
            )
            is DeliveryOutcome.RETRY
        ]
        if ahead is not None and owed:
            ahead.owed += [OwedWake(str(record.message_id), subscription, mark) for subscription, mark in owed]
        if retry:
            raise RetryableDeliveryError(f"event {envelope.id}: {', '.join(retry)} will run again")

    def _subscriptions(self, message: Message) -> tuple[Subscription, ...]:
        """The durable subscriptions a message runs: its type's, narrowed to those a repair message names."""
        subscriptions = self.registry.matching(message.envelope.type, Lane.DURABLE)
        if message.targets is not None:
            subscriptions = tuple(s for s in subscriptions if s.name in message.targets)
        return subscriptions

    def _read_ahead(self, records: Sequence[Mapping[str, Any]]) -> ReadAhead:
        """Every record of the batch read once, and the hashes the events table holds for the events that
        will run, in one consistent BatchGetItem instead of a GetItem per message. A read that fails or
        leaves keys unprocessed costs nothing but the fallback: those messages read their row one by one."""
        ahead = ReadAhead()
        keys_wanted: dict[tuple[str, int], dict[str, Any]] = {}
        for record in records:
            try:
                message = _read(record)
            except Exception:  # read again, and recorded as a poison pill, in its turn
                continue
            ahead.messages[str(record.get("messageId"))] = message
            envelope = message.envelope
            if self._subscriptions(message):
                keys_wanted.setdefault((envelope.tenant, envelope.seq), keys.event_key(envelope.tenant, envelope.seq))
        if keys_wanted:
            ahead.logged = self._logged_hashes(keys_wanted)
        return ahead

    def _logged_hashes(self, wanted: Mapping[tuple[str, int], dict[str, Any]]) -> dict[tuple[str, int], str]:
        """(tenant, seq) -> the hash the events table holds there ("" for no row), for every key DynamoDB
        processed: consistent BatchGetItems of at most 100 keys (a FIFO batch holds at most 10 messages)."""
        places = list(wanted)
        found: dict[tuple[str, int], str] = {}
        for start in range(0, len(places), BATCH_GET_KEYS):
            chunk = {place: wanted[place] for place in places[start : start + BATCH_GET_KEYS]}
            found.update(self._logged_chunk(chunk))
        return found

    def _logged_chunk(self, wanted: Mapping[tuple[str, int], dict[str, Any]]) -> dict[tuple[str, int], str]:
        table = self.store.table_name
        by_key = {(key["pk"]["S"], key["sk"]["S"]): place for place, key in wanted.items()}
        try:
            response = self.store.client.batch_get_item(
                RequestItems={
                    table: {
                        "Keys": list(wanted.values()),
                        "ConsistentRead": True,
                        "ProjectionExpression": "pk, sk, #hash",
                        "ExpressionAttributeNames": {"#hash": "hash"},
                    }
                }
            )
        except (ClientError, BotoCoreError) as exc:
            logger.warning("reading the batch's events at once failed, reading them one by one: %s", exc)
            return {}
        found = dict.fromkeys(wanted, "")
        for item in response.get("Responses", {}).get(table, []):
            place = by_key.get((item["pk"]["S"], item["sk"]["S"]))
            if place is not None:
                found[place] = str(item.get("hash", {}).get("S", ""))
        for key in response.get("UnprocessedKeys", {}).get(table, {}).get("Keys", []):
            # Unknown: read one by one when its message comes up.
            found.pop(by_key.get((key["pk"]["S"], key["sk"]["S"]), ("", -1)), None)
        return found

    def deliver(
        self,
        envelope: Envelope,
        subscription: Subscription,
        receive_count: int,
        remaining_ms: Callable[[], int],
        digest: str | None = None,
        *,
        may_create: bool = True,
        repair: bool = False,
        owed: list[tuple[Subscription, Watermark]] | None = None,
    ) -> DeliveryOutcome:
        """Run one (event, subscription) to its outcome: in its tenant's order for an ordered subscription
        (``_deliver_ordered``), directly for a DynamoDB-only subscription on a first delivery
        (``_deliver_directly``), else under a lease (claim, run, complete).

        An event that occurred before an ordered subscription's order starts (``ordered_since``: the
        subscription became ordered after it had run) is not part of the order: it is delivered as the
        subscription delivered it before the switch, so work in flight at the deploy (relayed, retried, dead
        and replayed) runs once, and nothing waits for it."""
        digest = digest or envelope_digest(envelope)
        if not self._has_time_for(subscription, remaining_ms):
            logger.info(
                "not starting %s with %d ms left: it comes back with the rest of its group",
                subscription.name,
                remaining_ms(),
                extra={"event_id": envelope.id, "subscription": subscription.name, "tenant": envelope.tenant},
            )
            self._count(Metric.NO_TIME_LEFT)
            return DeliveryOutcome.RETRY
        if subscription.ordered and subscription.in_order(format_timestamp(envelope.occurred_at)):
            return self._deliver_ordered(
                envelope, subscription, receive_count, remaining_ms, digest, may_create, repair=repair, owed=owed
            )
        # Directly only where no history can exist yet: a first receive, not a repair (which left a row), and
        # young enough that a missing row proves the pair never completed. Anything else takes the lease path.
        if subscription.effects is Effects.DYNAMODB and receive_count == 1 and may_create and not repair:
            outcome = self._deliver_directly(envelope, subscription, remaining_ms, digest)
            if outcome is not None:
                return outcome
        return self._deliver_with_lease(envelope, subscription, receive_count, remaining_ms, digest, may_create)

    def _deliver_with_lease(
        self,
        envelope: Envelope,
        subscription: Subscription,
        receive_count: int,
        remaining_ms: Callable[[], int],
        digest: str,
        may_create: bool,
    ) -> DeliveryOutcome:
        """Claim, run, complete: the outcome of one (event, subscription)."""
        claimed = self._claim(envelope, subscription, receive_count, remaining_ms, digest, may_create)
        if not isinstance(claimed, Claim):
            return claimed
        return self._run_claimed(claimed, envelope, subscription, receive_count, remaining_ms)

    def _run_claimed(
        self,
        claim: Claim,
        envelope: Envelope,
        subscription: Subscription,
        receive_count: int,
        remaining_ms: Callable[[], int],
    ) -> DeliveryOutcome:
        """Run a claimed pair and complete it."""
        done = self._run_and_complete(
            claim,
            envelope,
            subscription,
            receive_count,
            remaining_ms,
            lambda result: self._complete(claim, envelope, subscription, result),
        )
        return DeliveryOutcome.COMPLETED if done is None else done

    def _run_and_complete(
        self,
        claim: Claim,
        envelope: Envelope,
        subscription: Subscription,
        receive_count: int,
        remaining_ms: Callable[[], int],
        complete: Callable[[HandlerResult], T],
    ) -> T | DeliveryOutcome:
        """Run a claimed pair's handler, then ``complete`` it with the handler's result: what ``complete``
        returned, or the outcome of a failure (classified and recorded here)."""
        if claim.attempts > self.inbox.max_attempts:
            # Every allowed attempt started and none ended (a crash or a timeout each time): dead, unrun.
            crashed = UnfinishedAttemptsError(f"{claim.attempts - 1} attempts ended without an answer (crash, timeout)")
            return self._failed(claim, envelope, subscription, crashed, receive_count, terminal=False)
        started_ms = remaining_ms()
        try:
            delivery = Delivery(
                self._delivered(envelope), subscription.name, claim.idempotency_key, claim.attempts, remaining_ms
            )
            handler_result = _checked_result(subscription, subscription.handler(delivery))
        except Exception as exc:  # a handler may raise anything: classify it, never lose it
            return self._failed(claim, envelope, subscription, exc, receive_count)
        finally:
            self._note_run(subscription, started_ms, remaining_ms())
        try:
            done = complete(handler_result)
        except LeaseLostError:
            # The new owner may have died since: the message comes back, and the inbox decides then (done,
            # or a take-over). Acknowledging it here would rely on SQS keeping a message deleted with a
            # receipt handle from an older receive, which FIFO queues do not promise.
            logger.warning("lost the lease on %s before completing; the new owner finishes it", claim.idempotency_key)
            self._count(Metric.LEASES_LOST)
            return DeliveryOutcome.RETRY
        except Exception as exc:  # every completion failure is classified
            terminal = _is_terminal_completion(exc)
            return self._failed(claim, envelope, subscription, exc, receive_count, terminal=terminal)
        self._count(Metric.COMPLETIONS)
        return done

    # -- ordered subscriptions (outbox.ordering) ------------------------------------------------------

    def _deliver_ordered(
        self,
        envelope: Envelope,
        subscription: Subscription,
        receive_count: int,
        remaining_ms: Callable[[], int],
        digest: str,
        may_create: bool,
        *,
        repair: bool = False,
        owed: list[tuple[Subscription, Watermark]] | None = None,
    ) -> DeliveryOutcome:
        """Run the pair only in its tenant's order (``_apply_in_order``); the events deferred behind it that may
        run now are ``owed`` to the batch (woken once its records are done), or, outside a batch, woken here."""
        outcome, watermark = self._apply_in_order(
            envelope, subscription, receive_count, remaining_ms, digest, may_create, repair=repair
        )
        if watermark is None:
            return outcome
        if owed is not None:
            owed.append((subscription, watermark))
            return outcome
        return self._wake(subscription, watermark, outcome, remaining_ms)

    def _apply_in_order(
        self,
        envelope: Envelope,
        subscription: Subscription,
        receive_count: int,
        remaining_ms: Callable[[], int],
        digest: str,
        may_create: bool,
        *,
        repair: bool = False,
        in_place: bool = False,
    ) -> tuple[DeliveryOutcome, Watermark | None]:
        """Skip the pair once applied, defer it while its predecessor is not, else run it under a lease and
        advance the watermark with its completion. With the outcome, the watermark to wake deferred events
        from: after a completion, or when the pair was found applied already (a wake-up may have been lost
        with the answer to its first message); None otherwise.

        ``in_place``: woken after its predecessor in this invocation (``_run_woken``). A claim that shows an
        attempt since it was deferred is one an earlier in-place run did not finish (the deadline, a crash): it
        is given back with that attempt and RETRY sends it to the queue, to run from its own message with a
        whole invocation ahead of it, never again in place."""
        log = {"event_id": envelope.id, "subscription": subscription.name, "tenant": envelope.tenant}
        watermark = self.order.watermark(envelope.tenant, subscription.name)
        if envelope.seq <= watermark.applied_seq:
            # Applied or skipped already, at any age (the watermark is never forgotten).
            logger.info("skipped %s: seq %d is at or below its watermark", subscription.name, envelope.seq, extra=log)
            if repair:
                # A repair of a pair the order has applied (a forced replay of a completed pair, say) runs
                # nothing: its claim goes back to COMPLETED instead of waiting, REPLAYING, for ever.
                self.inbox.restore_applied(envelope.id, subscription.name)
            self._count(Metric.SKIPS)
            return DeliveryOutcome.SKIPPED, watermark
        claimed = self._claim(envelope, subscription, receive_count, remaining_ms, digest, may_create)
        if not isinstance(claimed, Claim):
            return claimed, None
        claim = claimed
        if in_place and claim.attempts > 1:
            return self._not_here(claim), None
        placed = self._place(claim, envelope, subscription, watermark)
        if isinstance(placed, DeliveryOutcome):
            return placed, None
        advanced = self._run_and_complete(
            claim,
            envelope,
            subscription,
            receive_count,
            remaining_ms,
            lambda result: self._complete_in_order(claim, envelope, subscription, result, placed),
        )
        if isinstance(advanced, DeliveryOutcome):
            return advanced, None
        return DeliveryOutcome.COMPLETED, advanced

    def _place(
        self, claim: Claim, envelope: Envelope, subscription: Subscription, watermark: Watermark
    ) -> Watermark | DeliveryOutcome:
        """The watermark to advance when the pair is next in order; DEFERRED once it is put aside behind its
        predecessor (the deferral is conditioned on the watermark read: if it moved, look again)."""
        for _ in range(ORDER_RACE_LOOKS):
            waits_for = self.order.predecessor(envelope, subscription, watermark.applied_seq)
            if waits_for is None:
                return watermark
            items = self.order.defer_items(watermark, envelope, waits_for, was_deferred=claim.waits_for is not None)
            try:
                self.inbox.defer(claim, waits_for, items)
            except WatermarkMovedError:
                watermark = self.order.watermark(envelope.tenant, subscription.name)
                continue
            except LeaseLostError:
                self._count(Metric.LEASES_LOST)
                return DeliveryOutcome.RETRY
            logger.info(
                "deferred %s: seq %d waits for seq %d",
                claim.idempotency_key,
                envelope.seq,
                waits_for,
                extra={"event_id": envelope.id, "subscription": subscription.name, "tenant": envelope.tenant},
            )
            self._count(Metric.DEFERRALS)
            return DeliveryOutcome.DEFERRED
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
                self._complete(claim, envelope, subscription, result, order)
            except WatermarkMovedError:
                fresh = self.order.watermark(envelope.tenant, subscription.name)
                if fresh.applied_seq != watermark.applied_seq:
                    raise
                watermark = fresh
                continue
            return Watermark(
                envelope.tenant,
                subscription.name,
                applied_seq=envelope.seq,
                version=watermark.version + 1,
                deferred=max(watermark.deferred - (1 if was_deferred else 0), 0),
                applied_event_id=envelope.id,
            )
        raise WatermarkMovedError(f"the watermark of {subscription.name} for {envelope.tenant} kept moving")

    def _wake_owed(self, ahead: ReadAhead, remaining_ms: Callable[[], int]) -> list[str]:
        """Wake what the batch's ordered completions owe, once per (tenant, subscription) from the latest
        watermark the batch wrote; the ids of the messages whose wake-up could neither run nor be sent (they
        come back, find their pairs applied, and wake again)."""
        latest: dict[tuple[str, str], OwedWake] = {}
        messages: dict[tuple[str, str], list[str]] = {}
        for owed in ahead.owed:
            place = (owed.watermark.tenant, owed.subscription.name)
            messages.setdefault(place, []).append(owed.message_id)
            if place not in latest or owed.watermark.version > latest[place].watermark.version:
                latest[place] = owed
        unwoken: list[str] = []
        for place, owed in latest.items():
            woke = self._wake(owed.subscription, owed.watermark, DeliveryOutcome.COMPLETED, remaining_ms)
            if woke is DeliveryOutcome.RETRY:
                unwoken += messages[place]
        return unwoken

    def _wake(
        self,
        subscription: Subscription,
        watermark: Watermark,
        outcome: DeliveryOutcome,
        remaining_ms: Callable[[], int],
    ) -> DeliveryOutcome:
        """Run the deferred events ``watermark`` now lets run, here and in order, while the invocation has time
        for another (``_has_time_for``); send the one it cannot run here back to the queue. All of it
        before the message that owes it is acknowledged: a crash on the way leaves the message to come back and
        do it again. ``outcome`` is this message's, or RETRY when the next event could neither run nor be sent."""
        assert self.wake_ups is not None  # checked at construction for every ordered subscription
        try:
            while (ready := self.order.ready_deferred(watermark)) is not None:
                if self._has_time_for(subscription, remaining_ms, in_place=True):
                    woken, advanced = self._run_woken(subscription, ready, remaining_ms)
                    if advanced is not None:
                        watermark = advanced
                        continue
                    if woken is not DeliveryOutcome.RETRY:
                        break  # dead (it blocks until an operator repairs it) or deferred again (woken in turn)
                self.wake_ups.send(ready, watermark.applied_seq)  # it runs from its own message, retried by SQS
                self._count(Metric.WAKE_UPS)
                break
        except (ClientError, BotoCoreError, OutboxError) as exc:
            logger.warning("could not wake the next deferred event of %s: %s", watermark.subscription, exc)
            return DeliveryOutcome.RETRY
        return outcome

    def _has_time_for(
        self, subscription: Subscription, remaining_ms: Callable[[], int], *, in_place: bool = False
    ) -> bool:
        """Whether a run of ``subscription`` fits in what is left of the invocation: its slowest run seen in this
        container and ``RUN_MARGIN_MS``; ``in_place`` (optional work, done with the batch's own records done),
        with room to spare: at least ``WAKE_HERE_MIN_REMAINING_MS`` and twice its slowest run. A run cut off by
        the deadline would spend an attempt, and fail the whole batch and bring every message of it back."""
        slowest = self._slowest_run_ms.get(subscription.name, 0)
        if in_place:
            return remaining_ms() >= max(WAKE_HERE_MIN_REMAINING_MS, 2 * slowest)
        needed = slowest + RUN_MARGIN_MS
        if self._invocation_ms is None or needed > self._invocation_ms:
            return True  # no invocation would have more time for it: it is its own deadline's problem
        return remaining_ms() >= needed

    def _run_woken(
        self, subscription: Subscription, ready: Deferred, remaining_ms: Callable[[], int]
    ) -> tuple[DeliveryOutcome, Watermark | None]:
        """Apply, here, a deferred event whose predecessor was just applied, read from the log: as
        ``_apply_in_order`` answers. RETRY when the log no longer holds it as deferred (its message path, which
        checks every event against the log, decides then)."""
        item = self.store.client.get_item(
            TableName=self.store.table_name, Key=keys.event_key(ready.tenant, ready.seq), ConsistentRead=True
        ).get("Item")
        try:
            envelope = None if item is None else Envelope.from_item(item)
        except EnvelopeParseError:  # a row rewritten into something else: its message path records what it is
            return DeliveryOutcome.RETRY, None
        if envelope is None or envelope.id != ready.event_id:
            return DeliveryOutcome.RETRY, None
        self._count(Metric.RUN_AFTER_PREDECESSOR)
        may_create = self.inbox.can_vouch_for(envelope.occurred_at)
        digest = envelope_digest(envelope)
        return self._apply_in_order(envelope, subscription, 1, remaining_ms, digest, may_create, in_place=True)

    def _not_here(self, claim: Claim) -> DeliveryOutcome:
        """Give back a claim taken in place whose earlier in-place attempt did not finish, with the attempt this
        claim counted: RETRY, so that its wake-up message runs it."""
        try:
            self.inbox.release(claim, "an earlier run in place did not finish: it runs from its own message", 1)
        except LeaseLostError:
            self._count(Metric.LEASES_LOST)
        return DeliveryOutcome.RETRY

    def _note_run(self, subscription: Subscription, started_ms: int, ended_ms: int) -> None:
        """Remember how long a run took; a run that reached the deadline (nothing left when it ended) measured
        nothing but the time there was."""
        took_ms = started_ms - ended_ms
        if ended_ms > 0 and took_ms > self._slowest_run_ms.get(subscription.name, 0):
            self._slowest_run_ms[subscription.name] = took_ms

    def _delivered(self, envelope: Envelope) -> Envelope:
        """What a handler receives: a copy per handler (what one does to the payload, the next never sees),
        its payload brought to the type's current version by the catalog's upcasters. The envelope keeps the
        version it was stored as, and its hash covers the stored payload. Raised here, an upcaster's error
        (or a version newer than the catalog knows, ``SchemaVersionUnknownError``) is the handler's failure."""
        copy = envelope.handler_copy()
        catalog = self.store.catalog
        if catalog is None:
            return copy
        payload = catalog.delivered_payload(envelope.type, envelope.schema_version, copy.payload)
        return copy if payload is copy.payload else copy.model_copy(update={"payload": payload})

    def _claim(
        self,
        envelope: Envelope,
        subscription: Subscription,
        receive_count: int,
        remaining_ms: Callable[[], int],
        digest: str,
        may_create: bool,
    ) -> Claim | DeliveryOutcome:
        """The claim this worker now holds, or the outcome when it may not run the pair (recorded here)."""
        log = {"event_id": envelope.id, "subscription": subscription.name, "tenant": envelope.tenant}
        lease = self.lease_policy.lease_for(remaining_ms())
        result = self.inbox.claim(envelope, subscription.name, lease, digest, may_create=may_create)
        if result.outcome is ClaimOutcome.CONFLICT:
            return self._conflict(envelope, subscription, result.existing or {}, receive_count)
        if result.outcome is ClaimOutcome.UNVERIFIABLE:
            return self._unverifiable(envelope, subscription, digest, receive_count)
        if result.outcome is ClaimOutcome.IN_PROGRESS:
            # Another worker holds a live lease. The handler is skipped, but the message is NOT
            # acknowledged: if that worker has crashed, this message may be the only copy left, and
            # deleting it would lose the effect. It comes back after the visibility timeout, by when
            # the claim is completed (skip) or its lease has expired (take-over).
            logger.info("skipped %s for now: in progress elsewhere", subscription.name, extra=log)
            self._count(Metric.SKIPS)
            return DeliveryOutcome.RETRY
        if result.claim is None:
            logger.info("skipped %s: %s", subscription.name, result.outcome.value, extra=log)
            self._count(Metric.SKIPS)
            return DeliveryOutcome.SKIPPED
        self._count(Metric.CLAIMS)
        return result.claim

    def _conflict(
        self, envelope: Envelope, subscription: Subscription, existing: Mapping[str, Any], receive_count: int
    ) -> DeliveryOutcome:
        log = {"event_id": envelope.id, "subscription": subscription.name, "tenant": envelope.tenant}
        logger.error("event %s conflicts with the content already claimed", envelope.id, extra=log)
        self.inbox.record_conflict(envelope, subscription.name, existing, receive_count)
        self._count(Metric.CONFLICTS)
        return DeliveryOutcome.DEAD

    # -- DynamoDB-only subscriptions ------------------------------------------------------------------

    def _deliver_directly(
        self, envelope: Envelope, subscription: Subscription, remaining_ms: Callable[[], int], digest: str
    ) -> DeliveryOutcome | None:
        """Run the handler with no claim, then commit its writes with a completion marker that requires the
        pair to have no row: one request on the happy path. A crash before the commit leaves nothing (the
        handler's only effects are the writes it returned), so the redelivery runs it again, under a lease.
        A failure is claimed after the fact, so attempts are counted and dead letters earned as on the lease
        path. None: the pair has history (a failed attempt, a replay, a lease): take the lease path."""
        key = keys.idempotency_key(envelope.id, subscription.name)
        started_ms = remaining_ms()
        try:
            delivery = Delivery(self._delivered(envelope), subscription.name, key, 1, remaining_ms)
            handler_result = _checked_result(subscription, subscription.handler(delivery))
        except Exception as exc:  # a handler may raise anything: classify it, never lose it
            return self._failed_directly(envelope, subscription, exc, remaining_ms, digest, terminal=None)
        finally:
            self._note_run(subscription, started_ms, remaining_ms())
        try:
            existing = self._commit_directly(envelope, subscription, handler_result, digest)
        except Exception as exc:  # every completion failure is classified, as on the lease path
            terminal = _is_terminal_completion(exc)
            return self._failed_directly(envelope, subscription, exc, remaining_ms, digest, terminal=terminal)
        if existing is None:
            self._count(Metric.COMPLETIONS)
            return DeliveryOutcome.COMPLETED
        if existing.get("digest", {}).get("S", digest) != digest:
            return self._conflict(envelope, subscription, existing, 1)
        if existing.get("status", {}).get("S") in (COMPLETED, DEAD):
            logger.info("skipped %s: a duplicate delivery", subscription.name, extra={"event_id": envelope.id})
            self._count(Metric.SKIPS)
            return DeliveryOutcome.SKIPPED
        return None

    def _commit_directly(
        self, envelope: Envelope, subscription: Subscription, result: HandlerResult, digest: str
    ) -> dict[str, Any] | None:
        """The marker and the writes (and the follow-up, through emit) in one transaction; None once
        committed, else the row that stopped the marker."""
        marker = self.inbox.completion_marker(envelope, subscription.name, digest)
        if result.follow_up is None:
            return self.inbox.complete_directly(marker, result.writes)
        try:
            self._emit_follow_up(envelope, subscription, result, [marker, *result.writes])
        except CallerWriteConditionFailedError as exc:
            if exc.index == 0:  # the marker: the pair has a row; the lease path reads and decides
                return {}
            raise
        return None

    def _failed_directly(
        self,
        envelope: Envelope,
        subscription: Subscription,
        exc: BaseException,
        remaining_ms: Callable[[], int],
        digest: str,
        terminal: bool | None,
    ) -> DeliveryOutcome:
        """A direct run failed: claim the pair now (counting the attempt), then release it or mark it dead,
        exactly as a failure under a lease. The one write of the failure path."""
        claimed = self._claim(envelope, subscription, 1, remaining_ms, digest, may_create=True)
        if not isinstance(claimed, Claim):
            return claimed  # another worker completed it, holds it, or it conflicts: as the claim says
        return self._failed(claimed, envelope, subscription, exc, 1, terminal=terminal)

    def _complete(
        self,
        claim: Claim,
        envelope: Envelope,
        subscription: Subscription,
        result: HandlerResult,
        order: Sequence[Mapping[str, Any]] = (),
    ) -> None:
        if result.follow_up is None:
            self.inbox.mark_completed(claim, result.writes, order)
            return
        completion = [*self.inbox.completion_writes(claim), *map(dict, order)]
        try:
            self._emit_follow_up(envelope, subscription, result, [*completion, *result.writes])
        except CallerWriteConditionFailedError as exc:
            if exc.index == 0:  # the completion mark: our fencing token no longer holds
                raise LeaseLostError(claim.event_id, claim.subscription, "complete") from exc
            if order and exc.index == len(completion) - len(order):  # the watermark
                raise WatermarkMovedError(f"the watermark of {subscription.name} moved") from exc
            raise

    def _emit_follow_up(
        self, envelope: Envelope, subscription: Subscription, result: HandlerResult, completion: list[Any]
    ) -> None:
        """The follow-up event, committed with ``completion`` (the completion first, then the handler's writes)."""
        assert result.follow_up is not None
        self.store.emit(
            result.follow_up.event_type,
            result.follow_up.payload,
            tenant=envelope.tenant,
            actor=f"subscription:{subscription.name}",
            correlation_id=envelope.correlation_id,
            causation_id=envelope.id,
            extra_writes=completion,
        )

    def _failed(
        self,
        claim: Claim,
        envelope: Envelope,
        subscription: Subscription,
        exc: BaseException,
        receive_count: int,
        terminal: bool | None = None,
    ) -> DeliveryOutcome:
        """Dead at once when no retry can help; dead when the claim's attempts are used up; else released
        for the next receive."""
        error = describe_failure(exc, self.error_detail)
        if terminal is None:
            terminal = isinstance(exc, TerminalError | ContractViolationError) or (
                subscription.terminal_on_validation_error and isinstance(exc, ValidationError)
            )
        exhausted = claim.attempts >= self.inbox.max_attempts
        log = {"event_id": envelope.id, "subscription": subscription.name, "attempt": claim.attempts}
        try:
            if terminal or exhausted:
                reason = DeadReason.TERMINAL if terminal else DeadReason.EXHAUSTED
                logger.error("dead-lettering %s (%s): %s", claim.idempotency_key, reason.value, error, extra=log)
                self.inbox.mark_dead(claim, envelope, error, type(exc).__name__, reason, receive_count)
                self._count(Metric.DEAD_LETTERS)
                # The dead letter is the record of it now: the message is acknowledged, and only a replay
                # (which targets this pair alone) runs it again.
                return DeliveryOutcome.DEAD
            logger.warning("retrying %s after: %s", claim.idempotency_key, error, extra=log)
            self.inbox.release(claim, error)
        except LeaseLostError:
            logger.warning("lost the lease on %s while recording a failure", claim.idempotency_key, extra=log)
            self._count(Metric.LEASES_LOST)
            return DeliveryOutcome.RETRY  # as above: the next receive sees what the new owner did
        self._count(Metric.RETRIES)
        return DeliveryOutcome.RETRY

    def _not_in_log(self, envelope: Envelope, ahead: ReadAhead | None = None) -> tuple[str, str] | None:
        """Why the events table does not vouch for this event, and the hash it holds at the event's place
        ("" for none); None when the row at (tenant, seq) has the event's hash.

        A message's own hash proves nothing about its origin: whoever forges one computes it too. The log does:
        one strongly consistent read of the row per message that would run something (a read request unit per
        started 4 KB of the row; docs/security.md), read ahead for the whole batch (``_read_ahead``) or here.
        Strongly consistent, since an eventually consistent read may miss a row the pipe has already relayed
        (the stream carries a transaction only after it commits, R7.4); a repair sends the row as the table
        holds it. Equal hashes mean equal content: the hash covers every field, and the message was checked
        against its own hash when it was read."""
        place = (envelope.tenant, envelope.seq)
        logged = ahead.logged.get(place) if ahead is not None else None
        if logged is None:
            item = self.store.client.get_item(
                TableName=self.store.table_name,
                Key=keys.event_key(envelope.tenant, envelope.seq),
                ConsistentRead=True,
                ProjectionExpression="#hash",
                ExpressionAttributeNames={"#hash": "hash"},
            ).get("Item")
            logged = str(((item or {}).get("hash") or {}).get("S", ""))
        if logged == envelope.hash:
            return None
        where = f"seq {envelope.seq} of tenant {envelope.tenant}"
        if not logged:
            return f"the events table has no event at {where}: the message was not relayed from the log", ""
        return f"the events table holds another event at {where} (hash {logged}): the message is not the log's", logged

    def _refuse(
        self, envelope: Envelope, subscriptions: tuple[Subscription, ...], doubt: tuple[str, str], receive_count: int
    ) -> None:
        """Never run an event the log does not hold: a conflict dead letter per subscription it would have run,
        and the message is acknowledged (a forger cannot block the tenant's group with it)."""
        why, logged = doubt
        error = f"event {envelope.id} was not run: {why}"
        logger.error(
            "refused event %s: %s", envelope.id, why, extra={"event_id": envelope.id, "tenant": envelope.tenant}
        )
        for subscription in subscriptions:
            self.inbox.record_refusal(
                envelope,
                subscription.name,
                error,
                "NotInEventLog",
                receive_count,
                received_hash=envelope.hash,
                logged_hash=logged,
            )
            self._count(Metric.CONFLICTS)

    def _unverifiable(
        self, envelope: Envelope, subscription: Subscription, digest: str, receive_count: int
    ) -> DeliveryOutcome:
        log = {"event_id": envelope.id, "subscription": subscription.name, "tenant": envelope.tenant}
        if not self.inbox.mark_unverifiable(envelope, subscription.name, digest, receive_count):
            return DeliveryOutcome.RETRY  # a row appeared meanwhile: decide again on the next receive
        logger.error("not running %s: older than the inbox remembers", subscription.name, extra=log)
        self._count(Metric.DEAD_LETTERS)
        return DeliveryOutcome.DEAD

    def _poison(self, record: SQSRecord, error: str) -> None:
        attributes = record.raw_event.get("attributes") or {}
        kept = {
            name: str(attributes.get(name, ""))
            for name in ("MessageGroupId", "MessageDeduplicationId", "ApproximateReceiveCount")
        }
        # Escaped like the stored row: a lone surrogate from the body would make the log line itself fail
        # to encode (and be lost) on the way to stdout.
        logger.error("poison pill %s: %s", record.message_id, storable_text(error))
        body = record.raw_event.get("body")
        self.inbox.record_poison(str(record.message_id), body if isinstance(body, str) else repr(body), error, kept)
        self._count(Metric.POISON_PILLS)

    def _count(self, metric: Metric) -> None:
        if self.metrics is not None:
            self.metrics.add_metric(name=metric.value, unit="Count", value=1)


@dataclass(frozen=True)
class OwedWake:
    """An ordered completion of a batch's message whose deferred followers are woken after the batch's records."""

    message_id: str
    subscription: Subscription
    watermark: Watermark


@dataclass
class ReadAhead:
    """What one invocation read before processing its records: each readable record's message (by message
    id), and the hash the events table holds at each (tenant, seq) it will run ("" for no row); and, as its
    records are processed, the wake-ups their ordered completions owe (``DurableConsumer._wake_owed``)."""

    messages: dict[str, Message] = field(default_factory=dict)
    logged: dict[tuple[str, int], str] = field(default_factory=dict)
    owed: list[OwedWake] = field(default_factory=list)

    def message(self, record: SQSRecord) -> Message | None:
        return self.messages.get(str(record.message_id))


def _read(raw: Mapping[str, Any]) -> Message:
    return read_message(
        raw.get("body"),
        raw.get("messageAttributes") or {},
        int((raw.get("attributes") or {}).get("ApproximateReceiveCount", "1")),
    )


class UnfinishedAttemptsError(OutboxError):
    """Every attempt the claim allows started and none ended (a crash or a timeout each time)."""


def _checked_result(subscription: Subscription, result: object) -> HandlerResult:
    if result is None:
        return HandlerResult()
    if not isinstance(result, HandlerResult):
        raise ContractViolationError(
            f"{subscription.name} returned a {type(result).__name__}; a DURABLE handler returns a HandlerResult or None"
        )
    return result


# Completion failures that a later attempt can get past; anything else (invalid writes, a follow-up that
# fails validation, a completion too large, a number DynamoDB cannot store, ...) fails again every time.
_RETRYABLE_COMPLETION_ERRORS = (
    WatermarkMovedError,  # placed again on the next receive
    CallerWriteConditionFailedError,  # the handler's own condition may hold later
    InlineWriteConditionFailedError,  # so may an INLINE subscriber's of the follow-up
    ChainHeadContentionError,
    EventStoreUnavailableError,
    BotoCoreError,
)
_TERMINAL_CLIENT_ERRORS = frozenset({"ValidationException", "SerializationException"})


def _is_terminal_completion(exc: BaseException) -> bool:
    if isinstance(exc, ParamValidationError):  # the SDK refused the request's shape: it always will
        return True
    if isinstance(exc, _RETRYABLE_COMPLETION_ERRORS):
        return False
    if isinstance(exc, ClientError):
        code = exc.response.get("Error", {}).get("Code", "")
        reasons = {reason.get("Code") for reason in exc.response.get("CancellationReasons") or []}
        return code in _TERMINAL_CLIENT_ERRORS or "ValidationError" in reasons
    return True
