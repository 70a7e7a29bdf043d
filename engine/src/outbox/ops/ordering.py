"""The operator's side of ordered subscriptions: which (tenant, subscription) waits and for what, and skipping
the event it waits for (``outbox status``, ``outbox skip``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from outbox import keys
from outbox.envelope import Envelope, format_timestamp
from outbox.exceptions import EnvelopeParseError, OperationRefusedError
from outbox.inbox import COMPLETED, DEAD, DEFERRED, PENDING, REPLAYING, SKIPPED, ClaimRecord, envelope_digest
from outbox.ops.context import OperatorContext, resolved_letter_update, transact_or_refuse
from outbox.ordering import Deferred, OrderBook, WakeUps, Watermark
from outbox.subscriptions import Subscription

UNREADABLE = "unreadable"  # the event row the order waits for is gone, or says no event id


@dataclass(frozen=True)
class Blocked:
    """An ordered subscription that has events waiting for one tenant, and what holds them up."""

    tenant: str
    subscription: str
    applied_seq: int  # the watermark
    waiting: int  # events deferred behind it
    waits_for_seq: int  # the first event of the order not applied: what the lowest deferred one waits for, or
    # that one itself once what it waits for is applied
    waits_for_state: str  # its claim row's status, "absent", or UNREADABLE
    hint: str  # what the operator can do

    @property
    def what(self) -> str:
        return (
            f"tenant {self.tenant}: ordered subscription {self.subscription} waits for seq {self.waits_for_seq} "
            f"({self.waits_for_state}); {self.waiting} events deferred behind it."
        )

    @property
    def line(self) -> str:
        return f"{self.what} {self.hint}"


@dataclass(frozen=True)
class SkipResult:
    tenant: str
    subscription: str
    seq: int
    event_id: str
    already: bool  # the seq had been skipped before (a rerun: only the wake-up was sent again)
    woke_seq: int | None  # the deferred event sent back to the queue, if one was waiting

    def as_dict(self) -> dict[str, Any]:
        return {
            "tenant": self.tenant,
            "subscription": self.subscription,
            "seq": self.seq,
            "event_id": self.event_id,
            "already_skipped": self.already,
            "woke_seq": self.woke_seq,
        }


def order_book(context: OperatorContext) -> OrderBook:
    topology = context.topology
    return OrderBook(topology.inbox_table, topology.events_table, client=context.dynamodb, clock=context.now)


def ordered_subscriptions(context: OperatorContext) -> list[Subscription]:
    return sorted((s for s in context.catalog.registry.subscriptions if s.ordered), key=lambda s: s.name)


def blocked(context: OperatorContext, tenants: list[str] | None = None) -> list[Blocked]:
    """Every (tenant, ordered subscription) with deferred events: one query per pair (its lowest deferred
    event), and where one waits, its watermark and the claim of the event the order waits for. Queries of the
    inbox only, and reads of the log: what the operator endpoint may do."""
    subscriptions = ordered_subscriptions(context)
    if not subscriptions:
        return []
    book = order_book(context)
    found: list[Blocked] = []
    for tenant in tenants if tenants is not None else context.tenants():
        for subscription in subscriptions:
            lowest = book.deferred(tenant, subscription.name, limit=1)
            if lowest:
                found.append(_blocked(context, book.watermark(tenant, subscription.name), lowest[0]))
    return found


def _blocked(context: OperatorContext, watermark: Watermark, lowest: Deferred) -> Blocked:
    """What holds the order up: the event the lowest deferred one waits for, or, once that is applied, the
    lowest deferred event itself (dead, running, or waiting for its wake-up)."""
    tenant, name = watermark.tenant, watermark.subscription
    event_id: str | None
    if lowest.waits_for > watermark.applied_seq:
        seq = lowest.waits_for
        event_id = _event_id_at(context, tenant, seq)
    else:
        seq, event_id = lowest.seq, lowest.event_id
    # A query: the endpoint reads the inbox by queries.
    claim = None if event_id is None else context.inbox.claims_of(event_id).get(name)
    state = UNREADABLE if event_id is None else "absent" if claim is None else claim.status
    skip = f'outbox skip --tenant {tenant} --subscription {name} --seq {seq} --reason "..."'
    reconcile = f"outbox reconcile --tenant {tenant} --subscription {name}"
    hints = {
        DEAD: (
            f"It is dead: fix the cause and run outbox replay --tenant {tenant} --event-id {event_id} "
            f"--subscription {name}, or {skip}."
        ),
        "absent": f"It never reached {name} (older than the subscription, or the stream): run {reconcile}, or {skip}.",
        REPLAYING: "A replay of it is on its way.",
        PENDING: "It is running or being retried.",
        DEFERRED: f"It may run, and its wake-up is on its way (or in the durable DLQ); if it stays, run {reconcile}.",
        COMPLETED: f"It completed before {name} was ordered: {skip}.",
        UNREADABLE: f"No event row at seq {seq} says its id: run outbox verify-chain --tenant {tenant}.",
    }
    hint = hints.get(state, f"Look at its dead letters: outbox dead-letters list --tenant {tenant}.")
    return Blocked(tenant, name, watermark.applied_seq, watermark.deferred, seq, state, hint)


def _event_id_at(context: OperatorContext, tenant: str, seq: int) -> str | None:
    """The id of the event at ``seq``, from its row's ``event_id`` alone: status reports a blocked order whatever
    became of that row (gone, or rewritten into something that no longer reads as an event: verify-chain says
    what), instead of failing as a whole."""
    try:
        event_id: str | None = context.event_image(tenant, seq).get("event_id", {}).get("S")
    except OperationRefusedError:  # no row at that seq
        return None
    return event_id


def skip(context: OperatorContext, tenant: str, subscription: str, seq: int, *, by: str, reason: str) -> SkipResult:
    """Let ``subscription`` go on for ``tenant`` without the event at ``seq``: the next in its order, not
    applied, and not running. The watermark moves past it, its claim becomes SKIPPED (final: a replay does
    not run it), its dead letter is resolved, who and why are recorded, and the deferred event that waited
    for it is sent back to the queue. Running it again for a seq already skipped only sends that wake-up."""
    if not by.strip() or not reason.strip():
        raise OperationRefusedError("a skip records who decided it and why: give --by and --reason")
    definition = _ordered(context, subscription)
    context.require_tenant(tenant)
    try:
        envelope = Envelope.from_item(context.event_image(tenant, seq))
    except EnvelopeParseError as exc:
        raise OperationRefusedError(
            f"seq {seq} of {tenant} does not read as an event ({exc}): run outbox verify-chain --tenant {tenant}"
        ) from exc
    if not (definition.matches(envelope.type) and definition.in_order(format_timestamp(envelope.occurred_at))):
        raise OperationRefusedError(f"seq {seq} of {tenant} ({envelope.type}) is not an event {subscription} runs")
    book = order_book(context)
    watermark = book.watermark(tenant, subscription)
    if seq <= watermark.applied_seq:
        if not any(s.seq == seq for s in book.skips(tenant, subscription)):
            raise OperationRefusedError(
                f"seq {seq} is already applied by {subscription} (watermark {watermark.applied_seq})"
            )
        return SkipResult(tenant, subscription, seq, envelope.id, True, _woken_seq(wake(context, book, watermark)))
    first = book.predecessor(envelope, definition, watermark.applied_seq)
    if first is not None:
        raise OperationRefusedError(
            f"seq {seq} is not next for {subscription}: seq {first} comes first (watermark {watermark.applied_seq}); "
            "skip that one first"
        )
    claim = context.inbox.read_claim(envelope.id, subscription)
    now = context.now()
    if claim is not None and claim.status == PENDING and claim.lease_expires_at and claim.lease_expires_at > now:
        raise OperationRefusedError(f"seq {seq} is running for {subscription} now: wait for it to finish or fail")
    decision = f"skipped by {by} at {format_timestamp(now)}: {reason}"
    items = [
        {"Update": _skipped_claim(context, envelope, subscription, decision)},
        *book.advance_items(watermark, envelope, was_deferred=_was_deferred(claim), skipped=True),
        book.skip_record(envelope, subscription, by, reason),
    ]
    letter = context.inbox.dead_letter(tenant, envelope.id, subscription)
    if letter is not None and letter.resolved is None:
        items.append({"Update": resolved_letter_update(context, letter.key, decision)})
    transact_or_refuse(
        context,
        items,
        f"seq {seq} changed while skipping it (it started running, or the watermark moved): run outbox status "
        "and try again",
    )
    after = book.watermark(tenant, subscription)
    return SkipResult(tenant, subscription, seq, envelope.id, False, _woken_seq(wake(context, book, after)))


def _ordered(context: OperatorContext, name: str) -> Subscription:
    subscription = context.require_subscription(name)
    if not subscription.ordered:
        raise OperationRefusedError(f"{name} is not an ordered subscription: there is no order to skip in")
    return subscription


def _was_deferred(claim: ClaimRecord | None) -> bool:
    return claim is not None and claim.waits_for is not None


def _skipped_claim(context: OperatorContext, envelope: Envelope, subscription: str, decision: str) -> dict[str, Any]:
    """The pair's claim row as SKIPPED, keeping what it recorded; created where there was none. Refused by
    DynamoDB if a worker holds a live lease on it by the time the transaction runs."""
    now = context.now()
    return {
        "TableName": context.topology.inbox_table,
        "Key": keys.claim_key(envelope.id, subscription),
        "UpdateExpression": (
            "SET #status = :skipped, skipped = :decision, tenant = :tenant, event_type = :type, event_seq = :seq, "
            "digest = if_not_exists(digest, :digest), attempts = if_not_exists(attempts, :zero), "
            "created_at = if_not_exists(created_at, :now_iso), updated_at = :now_iso "
            "REMOVE lease_expires_at, waits_for, deferred_at"
        ),
        "ConditionExpression": "attribute_not_exists(pk) OR NOT (#status = :pending AND lease_expires_at > :now)",
        "ExpressionAttributeNames": {"#status": "status"},
        "ExpressionAttributeValues": {
            ":skipped": {"S": SKIPPED},
            ":pending": {"S": PENDING},
            ":decision": {"S": decision[:2000]},
            ":tenant": {"S": envelope.tenant},
            ":type": {"S": envelope.type},
            ":seq": {"N": str(envelope.seq)},
            ":digest": {"S": envelope_digest(envelope)},
            ":zero": {"N": "0"},
            ":now_iso": {"S": format_timestamp(now)},
            ":now": {"N": str(int(now.timestamp() * 1000))},
        },
    }


def wake(context: OperatorContext, book: OrderBook, watermark: Watermark) -> Deferred | None:
    """Send the deferred event ``watermark`` lets run (if any) back to the durable queue, as the consumer
    does when it cannot run it itself; that event."""
    ready = book.ready_deferred(watermark)
    if ready is None:
        return None
    topology = context.topology
    wake_ups = WakeUps(
        topology.durable_queue_url, sqs=context.sqs, dynamodb=context.dynamodb, events_table=topology.events_table
    )
    wake_ups.send(ready, watermark.applied_seq)
    return ready


def _woken_seq(woken: Deferred | None) -> int | None:
    return None if woken is None else woken.seq
