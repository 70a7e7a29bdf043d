"""Reconcile: re-send the events whose durable subscriptions have no claim (or a claim long left waiting),
naming only those subscriptions: recovery for anything the stream no longer holds.

It vouches only for events younger than the inbox's retention: before that, a missing claim may be a
completion the inbox forgot. Every pair it re-sends has a claim row that vouches for the message, written
before it is sent (REPLAYING, where there was none), so however late the message arrives, the consumer
knows the pair has not completed since.

An ordered subscription (``outbox.pairs.order``) remembers what it applied at any age: its watermark, which
every completion moves in its own transaction. Reconciled alone (``subscription=``), it is sent, per tenant,
every event of its order above the watermark that has no claim, however old: the backfill of a new ordered
subscription over an existing log, or of one whose events the stream no longer holds. A subscription made
ordered after it ran (``ordered_since``) is also sent the events before its order starts that have no claim,
within the window the inbox can vouch for, as an unordered reconcile would.

A window reconcile also looks at the event's claims of subscriptions the deployed catalog no longer runs for it:
a run a deploy cut short (PENDING, its lease long over) or a repair whose message was never sent (REPLAYING)
is re-sent, and the consumer makes it dead with a letter that says why (``outbox.pairs``), so it is never left
looking under way. A pair the catalog never ran for the event is left alone.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from botocore.exceptions import ClientError

from outbox.exceptions import OperationRefusedError
from outbox.inbox import DEFERRED, PENDING, REPLAYING, VOUCH_MARGIN, ClaimRecord, reconcile_row
from outbox.log.chain import read_event_rows
from outbox.log.envelope import Envelope, format_timestamp
from outbox.ops.context import OperatorContext, ProgressCallback, no_progress, repair_dedup_id
from outbox.ops.ordering import order_book, ready_in_deployed_order, wake
from outbox.pairs import Act, Route
from outbox.pairs.deployed import CONSUMER_LANES
from outbox.subscriptions import Subscription

EPOCH = datetime.fromtimestamp(0, tz=UTC)


@dataclass
class ReconcileResult:
    scanned: int = 0
    republished: list[str] = field(default_factory=list)
    already_handled: int = 0
    subscriptions: dict[str, list[str]] = field(default_factory=dict)  # event id -> the pairs re-sent


def reconcile_horizon(context: OperatorContext) -> datetime:
    """The oldest moment reconcile can vouch for: before it, a missing claim may be a forgotten completion."""
    return context.now() - context.topology.inbox_retention + VOUCH_MARGIN


def reconcile(
    context: OperatorContext,
    since: datetime | None,
    *,
    tenant: str | None = None,
    subscription: str | None = None,
    dry_run: bool = False,
    stale_after: timedelta | None = None,
    on_progress: ProgressCallback = no_progress,
) -> ReconcileResult:
    """Re-send events (from ``since``) whose durable subscriptions (or ``subscription`` alone) have no claim
    (or a long-stale one), naming only those subscriptions. Running it again publishes nothing new. ``since``
    older than the inbox's retention is refused. An ordered ``subscription`` takes no ``since``: it is
    reconciled from each tenant's watermark, at any age."""
    selected = _durable(context, subscription) if subscription is not None else None
    order = selected if selected is not None and selected.ordered else None
    if order is not None and since is not None:
        raise OperationRefusedError(
            f"{subscription} is ordered: it is reconciled from each tenant's watermark (what it applied last), "
            "at any age; leave out --since"
        )
    # A subscription alone, unordered and without --since: only its pairs a deploy took out of an order.
    window = _check_window(context, since) if order is None and (since is not None or selected is None) else None
    # No tenant yet (a new stack, or every emit refused): nothing can be missing, and saying so is the answer. A
    # tenant asked for by name must exist (a typo would otherwise read as "all is well").
    tenants = [context.require_tenant(tenant)] if tenant else context.tenants()
    stale = stale_after or timedelta(hours=1)
    result = ReconcileResult()
    now = context.now()
    for done, tenant_name in enumerate(tenants):
        on_progress(f"scanning tenant {tenant_name} ({result.scanned} events so far)", done, len(tenants))
        for one in [selected] if selected is not None else context.deployed.durable():
            _out_of_order(context, tenant_name, one, result, dry_run)
        candidates: Iterator[Envelope] | tuple[()]
        if order is not None:
            candidates = _in_order(context, tenant_name, order, result, dry_run)
        elif window is not None:
            candidates = _events_since(context, tenant_name, window)
        else:
            candidates = ()
        for envelope in candidates:
            result.scanned += 1
            missing = _unclaimed(context, envelope, [selected.name] if selected else None, stale)
            if missing and not dry_run:
                missing = _resend(context, envelope, missing, now)
            if not missing:
                result.already_handled += 1
                continue
            result.republished.append(envelope.id)
            result.subscriptions[envelope.id] = sorted(missing)
    on_progress(f"scanned {result.scanned} events", len(tenants), len(tenants))
    return result


def _check_window(context: OperatorContext, since: datetime | None) -> datetime:
    """``since``, once it is a window reconcile can vouch for."""
    if since is None:
        raise OperationRefusedError(
            "reconcile needs --since (a time or a duration back, like 7d); only a --subscription is reconciled "
            "without one (an ordered one from its watermarks; any other for its pairs a deploy took out of an order)"
        )
    horizon = reconcile_horizon(context)
    if since < horizon:
        raise OperationRefusedError(
            f"the inbox remembers completions for {context.topology.inbox_retention_days} days, so reconcile can "
            f"vouch only for events since {format_timestamp(horizon)}: an older event without a claim may "
            f"have completed and been forgotten. Reconcile what it can vouch for: outbox reconcile --since "
            f"{_widest_window(context)}. An older event you know did not run: outbox replay --event-id ID "
            "--subscription NAME --force reruns that one pair."
        )
    return since


def _widest_window(context: OperatorContext) -> str:
    """The longest --since, as a duration back from now, that reconcile accepts (whole days, else hours)."""
    usable = context.topology.inbox_retention - VOUCH_MARGIN
    return f"{usable.days}d" if usable.days else f"{max(1, int(usable.total_seconds() // 3600))}h"


def _durable(context: OperatorContext, name: str) -> Subscription:
    subscription = context.require_subscription(name)
    if subscription.lane not in CONSUMER_LANES:
        raise OperationRefusedError(
            f"{name} is on the {subscription.lane.value} lane: only the durable consumer's work (DURABLE, WORKFLOW) "
            "is reconciled"
        )
    return subscription


def _out_of_order(
    context: OperatorContext, tenant: str, subscription: Subscription, result: ReconcileResult, dry_run: bool
) -> None:
    """Re-send every pair of ``subscription`` still deferred in an order a deploy took it out of (the
    subscription made unordered, or ``ordered_since`` moved past it: ``outbox.pairs``, DEFERRED and
    UNORDERED): no wake-up will come for it. Its DEFERRED claim vouches for the message at any age; the consumer
    that claims it takes its deferred row out of the order and runs it the unordered way (the row stays until
    then, so an interrupted reconcile leaves it for status to name again). In a dry run, only named."""
    for deferred in order_book(context).deferred(tenant, subscription.name):
        placement = context.placement(tenant, deferred.seq, deferred.event_type, subscription.name)
        if placement.route is Route.IN_ORDER or placement.rule(DEFERRED).reconcile is not Act.RESEND:
            continue  # still in its order (its wake-up follows its predecessor), or left out of the catalog
        if not dry_run:
            image = context.event_image(tenant, deferred.seq)
            dedup = repair_dedup_id("reconcile", deferred.event_id)
            context.publish(image, tenant, dedup, targets=[subscription.name], repair="reconcile")
        result.republished.append(deferred.event_id)
        result.subscriptions.setdefault(deferred.event_id, []).append(subscription.name)


def _in_order(
    context: OperatorContext, tenant: str, subscription: Subscription, result: ReconcileResult, dry_run: bool
) -> Iterator[Envelope]:
    """The events of ``subscription``'s order for ``tenant`` that it has not applied: above its watermark.
    Every completion of an ordered subscription moves the watermark in its own transaction, so a missing
    claim up there is work never done, not a completion the inbox forgot, however old the event. First, the
    deferred events the watermark already lets run are sent again (its wake-up may sit in a DLQ), or, in a dry
    run, only named; then the events before the order's start (``_before_the_order``)."""
    book = order_book(context)
    watermark = book.watermark(tenant, subscription.name)
    for ready in ready_in_deployed_order(context, book, watermark) if dry_run else wake(context, book, watermark):
        result.republished.append(ready.event_id)
        result.subscriptions[ready.event_id] = [subscription.name]
    yield from _before_the_order(context, tenant, subscription)
    rows = read_event_rows(context.dynamodb, context.topology.events_table, tenant, from_seq=watermark.applied_seq + 1)
    yield from (
        Envelope.from_item(item)
        for item in rows
        if subscription.matches(item["type"]["S"]) and subscription.in_order(item["occurred_at"]["S"])
    )


def _before_the_order(context: OperatorContext, tenant: str, subscription: Subscription) -> Iterator[Envelope]:
    """The events of a subscription made ordered after it ran (``ordered_since``) that occurred before its
    order starts, as far back as the inbox can vouch for them: they run the unordered way, so work in flight
    at the switch is reconciled like any unordered pair."""
    if subscription.ordered_since is None:
        return
    start = format_timestamp(subscription.ordered_since)
    for envelope in _events_since(context, tenant, reconcile_horizon(context)):
        if format_timestamp(envelope.occurred_at) >= start:
            return
        if subscription.matches(envelope.type):
            yield envelope


def _unclaimed(
    context: OperatorContext, envelope: Envelope, selected: list[str] | None, stale: timedelta
) -> dict[str, str | None]:
    """The pairs of ``envelope`` that need a re-send, each with its claim's status: no claim (None), a lease
    long expired and never taken over (PENDING: the message itself was lost, or a deploy left the pair out while
    it ran, and its redelivered message no longer names it), or a repair whose message may never have been sent
    (REPLAYING). Only the ``selected`` subscriptions' pairs; without them, every pair the deployed catalog runs
    and every other pair the inbox holds a claim of. What is re-sent is what the pair's rule says
    (``outbox.pairs``): a pair the catalog runs is run; one it left out is made dead with a letter that says why."""
    claims = context.inbox.claims_of(envelope.id)
    if selected is None:
        names = {s.name for s in context.deployed.running(envelope.type)} | set(claims)
    else:
        names = set(selected)
    now = context.now()
    missing: dict[str, str | None] = {}
    for name in sorted(names):
        claim = claims.get(name)
        if claim is not None and not _waits_for_a_message(claim, now, stale):
            continue
        status = claim.status if claim is not None else None
        placement = context.deployed.place(name, envelope.type, envelope.occurred_at)
        if placement.rule(status).reconcile is Act.RESEND:
            missing[name] = status
    return missing


def _waits_for_a_message(claim: ClaimRecord, now: datetime, stale: timedelta) -> bool:
    """A REPLAYING pair waits for a repair's message, which may never have been sent (a repair cut short): it is
    re-sent at any age (a copy too many is absorbed by the inbox). A PENDING one, once its lease is long over."""
    lease_end = _lease_end(claim)
    return claim.status == REPLAYING or (lease_end is not None and now - lease_end > stale)


def _resend(
    context: OperatorContext, envelope: Envelope, missing: dict[str, str | None], now: datetime
) -> dict[str, str | None]:
    """Re-send ``envelope`` to the pairs of ``missing`` still open for repair; those pairs."""
    # A stale claim is claimable as it is; a missing one first gets the row that vouches.
    missing = {s: status for s, status in missing.items() if status or _open_for_repair(context, envelope, s, now)}
    if missing:
        image = context.event_image(envelope.tenant, envelope.seq)
        context.publish(
            image, envelope.tenant, repair_dedup_id("reconcile", envelope.id), targets=missing, repair="reconcile"
        )
    return missing


def _open_for_repair(context: OperatorContext, envelope: Envelope, subscription: str, now: datetime) -> bool:
    """Give a pair without a claim the REPLAYING row that vouches for its re-sent message at any age (the
    row proves the pair has not completed since). False when a claim appeared since it was read: the pair
    is in hand, and nothing is re-sent for it."""
    try:
        context.dynamodb.put_item(
            TableName=context.topology.inbox_table,
            Item=reconcile_row(envelope, subscription, now),
            ConditionExpression="attribute_not_exists(pk)",
        )
    except ClientError as exc:
        if exc.response["Error"]["Code"] != "ConditionalCheckFailedException":
            raise
        return False
    return True


def _events_since(context: OperatorContext, tenant: str, since: datetime) -> Iterator[Envelope]:
    threshold = format_timestamp(since)
    for item in read_event_rows(context.dynamodb, context.topology.events_table, tenant):
        if item["occurred_at"]["S"] >= threshold:
            yield Envelope.from_item(item)


def _lease_end(claim: ClaimRecord) -> datetime | None:
    """When a PENDING claim's lease ends (None for a claim in another state)."""
    if claim.status != PENDING:
        return None
    return claim.lease_expires_at or EPOCH  # a PENDING row without a lease: ended long ago
