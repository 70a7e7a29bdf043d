"""The operator's side of ordered subscriptions: which (tenant, subscription) waits and for what, and skipping
the event it waits for (``outbox status``, ``outbox skip``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from outbox import keys
from outbox.exceptions import EnvelopeParseError, OperationRefusedError
from outbox.inbox import COMPLETED, PENDING, SKIPPED, ClaimRecord, envelope_digest
from outbox.log.envelope import Envelope, format_timestamp
from outbox.ops.context import OperatorContext, resolved_letter_update, transact_or_refuse
from outbox.pairs import Act, Placement, Route
from outbox.pairs.order import Deferred, OrderBook, WakeUps, Watermark


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


def skip(context: OperatorContext, tenant: str, subscription: str, seq: int, *, by: str, reason: str) -> SkipResult:
    """Let ``subscription`` go on for ``tenant`` without the event at ``seq``: the next in its order, not
    applied, and not running. The watermark moves past it, its claim becomes SKIPPED (final: a replay does
    not run it), its dead letter is resolved, who and why are recorded, and the deferred event that waited
    for it is sent back to the queue. Running it again for a seq already skipped only sends that wake-up."""
    if not by.strip() or not reason.strip():
        raise OperationRefusedError("a skip records who decided it and why: give --by and --reason")
    context.require_tenant(tenant)
    try:
        envelope = Envelope.from_item(context.event_image(tenant, seq))
    except EnvelopeParseError as exc:
        raise OperationRefusedError(
            f"seq {seq} of {tenant} does not read as an event ({exc}): run outbox verify-chain --tenant {tenant}"
        ) from exc
    placement = context.deployed.place(subscription, envelope.type, envelope.occurred_at)
    claim = context.inbox.read_claim(envelope.id, subscription)
    status = None if claim is None else claim.status
    act = placement.rule(status).skip
    if act is Act.ACKNOWLEDGE:
        return acknowledge(context, envelope, subscription, claim, by=by, reason=reason)
    if act is Act.NOTHING:  # skipped before: a rerun sends the wake-up again, if there is an order to wake
        woke = _wake_after(context, tenant, subscription)
        return SkipResult(tenant, subscription, seq, envelope.id, True, woke)
    if act is not Act.SKIP_IN_ORDER:
        raise OperationRefusedError(_skip_refusal(placement, envelope, subscription, status))
    assert placement.subscription is not None  # in order: the catalog runs it
    definition = placement.subscription
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


def _skip_refusal(placement: Placement, envelope: Envelope, subscription: str, status: str | None) -> str:
    """Why a skip is refused, in the words of the pair's rule (``outbox.pairs.machine``)."""
    what = f"seq {envelope.seq} of {envelope.tenant} ({envelope.type})"
    if placement.route is Route.LEFT_OUT:
        return f"{what} is not an event {subscription} runs ({placement.left_out_because}): nothing of it to skip"
    if status == COMPLETED:
        return f"{what} completed for {subscription}: nothing to skip"
    return (
        f"{subscription} is not an ordered subscription for {what}, which is {placement.why(status)}: there is no "
        "order to skip in, and a skip acknowledges dead work, not work under way"
    )


def acknowledge(
    context: OperatorContext,
    envelope: Envelope,
    subscription: str,
    claim: ClaimRecord | None,
    *,
    by: str,
    reason: str,
) -> SkipResult:
    """Let a pair go without running it, outside any order: its claim becomes SKIPPED (final), its dead letter is
    resolved with who and why, and its deferred row (if a deploy took it out of an order it waited in) goes, in
    one transaction conditioned on the claim as read. The pairs the machine says a skip acknowledges: dead work,
    and pairs the deployed catalog no longer runs or no longer orders."""
    assert claim is not None  # every rule that acknowledges is of a state with a row
    tenant = envelope.tenant
    decision = f"skipped by {by} at {format_timestamp(context.now())}: {reason}"
    claim_update: dict[str, Any] = {
        "TableName": context.topology.inbox_table,
        "Key": keys.claim_key(envelope.id, subscription),
        "UpdateExpression": (
            "SET #status = :skipped, skipped = :decision, updated_at = :now_iso "
            "REMOVE lease_expires_at, open_dead_letter, waits_for, deferred_at"
        ),
        "ConditionExpression": "#status = :read",
        "ExpressionAttributeNames": {"#status": "status"},
        "ExpressionAttributeValues": {
            ":skipped": {"S": SKIPPED},
            ":read": {"S": claim.status},
            ":decision": {"S": decision[:2000]},
            ":now_iso": {"S": format_timestamp(context.now())},
        },
    }
    if claim.status == PENDING:  # a stranded run: only once its lease is over
        claim_update["ConditionExpression"] += " AND lease_expires_at < :now"
        claim_update["ExpressionAttributeValues"][":now"] = {"N": str(int(context.now().timestamp() * 1000))}
    items: list[dict[str, Any]] = [{"Update": claim_update}]
    letter = context.inbox.dead_letter(tenant, envelope.id, subscription)
    if letter is not None and letter.resolved is None:
        items.append({"Update": resolved_letter_update(context, letter.key, decision)})
    if claim.waits_for is not None:
        items += order_release_items(context, tenant, subscription, envelope.seq)
    transact_or_refuse(
        context,
        items,
        f"{envelope.id}:{subscription} changed while skipping it (a run, a replay or a deploy's wake-up got there "
        "first): run outbox status and try again",
    )
    woke = _wake_after(context, tenant, subscription)
    return SkipResult(tenant, subscription, envelope.seq, envelope.id, False, woke)


def _wake_after(context: OperatorContext, tenant: str, subscription: str) -> int | None:
    """After a skip, the deferred event the deployed order now lets run (if ``subscription`` orders anything)."""
    definition = context.deployed.find(subscription)
    if definition is None or not definition.ordered:
        return None
    book = order_book(context)
    return _woken_seq(wake(context, book, book.watermark(tenant, subscription)))


def order_release_items(context: OperatorContext, tenant: str, subscription: str, seq: int) -> list[dict[str, Any]]:
    """The items that take the deferred row at ``seq`` out of ``subscription``'s order (``OrderBook.release_items``)."""
    return order_book(context).release_items(tenant, subscription, seq)


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


def wake(context: OperatorContext, book: OrderBook, watermark: Watermark) -> list[Deferred]:
    """Send the deferred events ``watermark`` lets run (``ready_in_deployed_order``) back to the durable queue, as
    the consumer does when it cannot run them itself; those events."""
    ready = ready_in_deployed_order(context, book, watermark)
    if ready:
        topology = context.topology
        wake_ups = WakeUps(
            topology.durable_queue_url, sqs=context.sqs, dynamodb=context.dynamodb, events_table=topology.events_table
        )
        for one in ready:
            wake_ups.send(one, watermark.applied_seq)
    return ready


def ready_in_deployed_order(context: OperatorContext, book: OrderBook, watermark: Watermark) -> list[Deferred]:
    """The deferred events something may move now, lowest first. The lowest one may move when the watermark
    reached what it waits for; or what it waits for is no longer part of the deployed order (narrowed away,
    removed, before ``ordered_since``), so that no completion will ever wake it; or it is itself no longer part of
    it. Past one that is itself no longer part of the order, which runs the unordered way and wakes nothing after
    it, the next one may move too, whatever it waits for. Each wake-up is placed again by the consumer under the
    deployed catalog (``outbox.pairs``): run, deferred behind its new predecessor, or run the unordered way."""
    ready: list[Deferred] = []
    while (first := _lowest_movable(context, book, watermark, ready[-1].seq if ready else 0)) is not None:
        ready.append(first)
        if context.placement(first.tenant, first.seq, first.event_type, first.subscription).route is Route.IN_ORDER:
            break
    return ready


def _lowest_movable(context: OperatorContext, book: OrderBook, watermark: Watermark, above: int) -> Deferred | None:
    """The lowest deferred event above seq ``above`` if it may move now (``ready_in_deployed_order``); any one
    above a row that left the order (``above`` > 0)."""
    lowest = book.deferred(watermark.tenant, watermark.subscription, limit=1, above=above)
    if not lowest:
        return None
    first = lowest[0]
    if above or first.waits_for <= watermark.applied_seq:
        return first
    itself = context.placement(first.tenant, first.seq, first.event_type, first.subscription)
    if itself.route is not Route.IN_ORDER:
        return first
    try:
        waited = context.placement(first.tenant, first.waits_for, None, first.subscription)
    except OperationRefusedError:  # no row at that seq: verify-chain says what became of it
        return None
    return first if waited.route is not Route.IN_ORDER else None


def _woken_seq(woken: list[Deferred]) -> int | None:
    return woken[0].seq if woken else None
