"""What holds an ordered subscription up, per tenant, as ``outbox status`` reports it: the event its order waits
for and the commands that move it, and the events a deploy took out of an order, which no wake-up will reach."""

from __future__ import annotations

from dataclasses import dataclass

from outbox.exceptions import OperationRefusedError
from outbox.inbox import COMPLETED, DEAD, DEFERRED, PENDING, REPLAYING, SKIPPED
from outbox.ops.context import OperatorContext
from outbox.ops.ordering import order_book
from outbox.pairs import Placement, Route
from outbox.pairs.order import Deferred, Watermark

UNREADABLE = "unreadable"  # the event row the order waits for is gone, or says no event id
# What the order waits for is no longer part of it (outbox.pairs: narrowed away, removed, before ordered_since).
NOT_IN_ORDER = "no longer in the order"
# Deferred events of a subscription that no longer orders them (made unordered, or ordered_since moved past them).
OUT_OF_ORDER = "out of the order"


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
        if self.waits_for_state == OUT_OF_ORDER:
            return (
                f"tenant {self.tenant}: {self.subscription} no longer orders seq {self.waits_for_seq}, deferred "
                "when it did: no wake-up will come for it."
            )
        return (
            f"tenant {self.tenant}: ordered subscription {self.subscription} waits for seq {self.waits_for_seq} "
            f"({self.waits_for_state}); {self.waiting} events deferred behind it."
        )

    @property
    def line(self) -> str:
        return f"{self.what} {self.hint}"


def blocked(context: OperatorContext, tenants: list[str] | None = None) -> list[Blocked]:
    """Every (tenant, durable subscription) with deferred events: one query per pair (its lowest deferred
    event), and where one waits, its watermark and the claim of the event the order waits for. A subscription
    that no longer orders (a deploy made it unordered) is asked too: what it deferred when it did waits for a
    wake-up that will never come (``outbox.pairs``: DEFERRED, UNORDERED). Queries of the inbox only, and reads
    of the log: what the operator endpoint may do."""
    subscriptions = context.deployed.durable()
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
    reconcile = f"outbox reconcile --tenant {tenant} --subscription {name}"
    itself = context.placement(tenant, lowest.seq, lowest.event_type, name)
    if itself.route is Route.UNORDERED:
        hint = f"Run {reconcile}: it sends it (and any other like it) to run the unordered way."
        return Blocked(tenant, name, watermark.applied_seq, watermark.deferred, lowest.seq, OUT_OF_ORDER, hint)
    event_id: str | None
    if lowest.waits_for > watermark.applied_seq:
        seq = lowest.waits_for
        event_id = _event_id_at(context, tenant, seq)
        left = None if event_id is None else _left_order(context, tenant, seq, name)
        if left is not None:
            return _waits_outside(context, watermark, lowest, event_id or "", left)
    else:
        seq, event_id = lowest.seq, lowest.event_id
    # A query: the endpoint reads the inbox by queries.
    claim = None if event_id is None else context.inbox.claims_of(event_id).get(name)
    state = UNREADABLE if event_id is None else "absent" if claim is None else claim.status
    skip = f'outbox skip --tenant {tenant} --subscription {name} --seq {seq} --reason "..."'
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
        SKIPPED: f"It was skipped outside the order (before a deploy put it back in): {skip} moves the order past it.",
        UNREADABLE: f"No event row at seq {seq} says its id: run outbox verify-chain --tenant {tenant}.",
    }
    hint = hints.get(state, f"Look at its dead letters: outbox dead-letters list --tenant {tenant}.")
    return Blocked(tenant, name, watermark.applied_seq, watermark.deferred, seq, state, hint)


def _left_order(context: OperatorContext, tenant: str, seq: int, subscription: str) -> Placement | None:
    """The placement of the pair at ``seq`` when the deployed catalog no longer has it in ``subscription``'s
    order (None while it does, or when its row does not read: the UNREADABLE hint says what then)."""
    try:
        placement = context.placement(tenant, seq, None, subscription)
    except (OperationRefusedError, KeyError):
        return None
    return None if placement.route is Route.IN_ORDER else placement


def _waits_outside(
    context: OperatorContext, watermark: Watermark, lowest: Deferred, event_id: str, left: Placement
) -> Blocked:
    """The lowest deferred event waits for one a deploy took out of the order: nothing will apply that one in it,
    so reconcile sends the waiting one on (placed again, it waits for what the order holds now); and the one it
    waited for, if dead, keeps a dead letter only a skip acknowledges."""
    tenant, name, seq = watermark.tenant, watermark.subscription, lowest.waits_for
    why = left.left_out_because or "it occurred before the order's start"
    hint = f"Run outbox reconcile --tenant {tenant} --subscription {name}: it sends seq {lowest.seq} on."
    claim = context.inbox.claims_of(event_id).get(name)
    if claim is not None and claim.status == DEAD:
        hint += (
            f" seq {seq} is dead and nothing will run it: acknowledge it with outbox skip --tenant {tenant} "
            f'--subscription {name} --seq {seq} --reason "...".'
        )
    state = f"{NOT_IN_ORDER}: {why}"
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
