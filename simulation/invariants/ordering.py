"""Invariants 6 and 14: order. The durable queue hands each tenant's messages over in the order SQS took
them, and an ordered subscription applies each tenant's events once, in seq order, waiting behind the first
that cannot run."""

from __future__ import annotations

from collections import Counter, defaultdict
from datetime import datetime

from outbox import Envelope
from simulation.catalog import (
    LEDGER,
    applied_order_key,
)
from simulation.invariants.base import Violation, key_of, name_of
from simulation.observations import Observations, Send
from simulation.schedule import ROUTE_DEPLOYS
from simulation.state import State
from simulation.world import World

DEDUPLICATION_SECONDS = 300


def check_fifo_order(world: World, observations: Observations) -> list[Violation]:
    """Per tenant, the pipe's messages as SQS enqueued them (a resend within the deduplication window is
    dropped) must be what the consumer first received, in that order. Retries, redrives and replays
    deliver again, under another message or receive count: only first receipts of pipe messages count."""
    found: list[Violation] = []
    enqueued = _enqueued(observations.sends)
    first: dict[str, list[str]] = defaultdict(list)
    seen: set[str] = set()
    for receipt in observations.receipts:
        from_pipe = receipt.event_id is not None and receipt.deduplication_id == receipt.event_id
        if from_pipe and receipt.message_id not in seen:
            seen.add(receipt.message_id)
            first[receipt.tenant].append(receipt.deduplication_id)
    names = world.trace.event
    for tenant in sorted(set(enqueued) | set(first)):
        sent, received = enqueued.get(tenant, []), first.get(tenant, [])
        if sent != received:
            found.append(
                Violation(
                    6,
                    f"tenant {tenant}: the pipe's messages were enqueued as {' '.join(map(names, sent))} "
                    f"but first received as {' '.join(map(names, received))}",
                )
            )
    return found


def _enqueued(sends: list[Send]) -> dict[str, list[str]]:
    admitted: dict[str, datetime] = {}
    order: dict[str, list[str]] = defaultdict(list)
    for send in sends:
        last = admitted.get(send.event_id)
        if last is not None and (send.at - last).total_seconds() < DEDUPLICATION_SECONDS:
            continue
        admitted[send.event_id] = send.at
        order[send.tenant].append(send.event_id)
    return order


def check_ordered_subscriptions(world: World, observations: Observations, state: State) -> list[Violation]:
    """Per tenant, what the ordered ledger applied (its ledger row, appended in each completion's transaction)
    against the tenant's items in the log, the watermark, and what waits behind the first item not applied."""
    if not world.schedule.ordered:
        return []
    found: list[Violation] = []
    for tenant, log in sorted(state.logs.items()):
        found.extend(_applied_in_order(world, state, tenant, log))
    found.extend(_waiting_spends_nothing(world, observations, state))
    found.extend(Violation(14, what) for what in observations.unwoken_at_ack)
    found.extend(Violation(14, what) for what in world.wake_loops)
    found.extend(Violation(14, what) for what in world.skips_that_woke_nothing)
    # An ordered pair may complete on the direct path (the ledger is DynamoDB-only): that it did so only when
    # next in order, and moved the watermark as it did, is what the checks above hold every completion to.
    return found


def _applied_in_order(world: World, state: State, tenant: str, log: list[Envelope]) -> list[Violation]:
    """(Only the events of the order as deployed: a ledger made ordered by a deploy ran the earlier ones unordered,
    and one whose route a deploy changed runs what it took out of the order the unordered way or not at all, each
    at most once by invariant 2.)"""
    items = [envelope for envelope in log if world.in_order(envelope)]
    row = state.data.get(key_of(applied_order_key(tenant)))
    in_order = {envelope.seq for envelope in items}
    every = [int(value["N"]) for value in row["seqs"]["L"]] if row else []
    applied = [seq for seq in every if seq in in_order]
    skipped = state.skipped.get((tenant, LEDGER), {})
    decided = {seq for who, seq in world.skips if who == tenant}
    found = [
        Violation(14, f"tenant {tenant}: seq {seq} is skipped for {LEDGER}, and no operator skipped it")
        for seq in sorted(set(skipped) - decided)
    ]
    found.extend(
        Violation(14, f"tenant {tenant}: {LEDGER} applied seq {seq} {count} times")
        for seq, count in sorted(Counter(applied).items())
        if count > 1
    )
    if applied != sorted(applied):
        found.append(Violation(14, f"tenant {tenant}: {LEDGER} applied seqs {applied}, not in seq order"))
    found.extend(
        Violation(14, f"tenant {tenant}: seq {seq} was applied by {LEDGER} and skipped")
        for seq in sorted(set(applied) & set(skipped))
    )
    done = sorted(set(applied) | (set(skipped) & in_order))
    first = [envelope.seq for envelope in items[: len(done)]]
    if done != first:
        found.append(
            Violation(
                14,
                f"tenant {tenant}: {LEDGER} applied or skipped seqs {done}, but the tenant's first items are "
                f"{first}: a gap in the order",
            )
        )
        return found
    last = done[-1] if done else 0
    # After a deploy of the ledger's route, the watermark may rest on an event it applied, or the operator skipped,
    # in the order before the deploy took that event out of it.
    left = (
        {seq for seq in set(every) | set(skipped) if seq not in in_order and seq > last}
        if world.schedule.deploy in ROUTE_DEPLOYS
        else set()
    )
    found.extend(_watermark_follows(world, state, tenant, last, left))
    found.extend(_waiting_behind_the_first(world, state, tenant, items[len(done) :]))
    return found


def _watermark_follows(world: World, state: State, tenant: str, last: int, left: set[int]) -> list[Violation]:
    row = state.watermarks.get((tenant, LEDGER))
    at = int(row["applied_seq"]["N"]) if row else 0
    counted = int(row.get("deferred_count", {}).get("N", "0")) if row else 0
    rows = len(state.deferred.get((tenant, LEDGER), {}))
    found = []
    what = f"tenant {tenant}: the watermark of {LEDGER}"
    if at != last and at not in left:
        found.append(Violation(14, f"{what} is at seq {at}; the last applied or skipped is {last}"))
    if counted != rows:
        found.append(Violation(14, f"{what} counts {counted} deferred events; {rows} wait"))
    return found


def _waiting_behind_the_first(world: World, state: State, tenant: str, waiting: list[Envelope]) -> list[Violation]:
    """The first item not applied is dead (its dead letter open, or a replay of it on its way); every later one
    waits for the item before it, DEFERRED (claimable by its wake-up), with no dead letter."""
    letters = state.open_dead_letters()
    deferred = state.deferred.get((tenant, LEDGER), {})
    found: list[Violation] = []
    for index, envelope in enumerate(waiting):
        key = f"{envelope.id}:{LEDGER}"
        claim = state.claims.get(key)
        status = claim["status"]["S"] if claim else "no claim"
        if index == 0:
            if status not in ("DEAD", "REPLAYING") or key not in letters:
                stranded = status == "DEFERRED"
                left = " (left deferred: its predecessor is applied and no wake-up came)" if stranded else ""
                found.append(
                    Violation(14, f"{name_of(world, key)}: seq {envelope.seq} is next for {LEDGER}, and {status}{left}")
                )
            continue
        row = deferred.get(envelope.seq)
        waits_for = int(row["waits_for"]["N"]) if row else None
        if status != "DEFERRED" or key in letters or waits_for != waiting[index - 1].seq:
            found.append(
                Violation(
                    14,
                    f"{name_of(world, key)}: seq {envelope.seq} waits behind seq {waiting[0].seq}, which is not "
                    f"applied; it is {status}, {'with' if key in letters else 'without'} a dead letter, its deferred "
                    f"row waits for {waits_for} (expected DEFERRED behind seq {waiting[index - 1].seq})",
                )
            )
    waiting_seqs = {envelope.seq for envelope in waiting[1:]}
    first = state.claims.get(f"{waiting[0].id}:{LEDGER}") if waiting else None
    if first is not None and "waits_for" in first:
        waiting_seqs.add(waiting[0].seq)  # deferred, then woken and dead: its row stays until applied or skipped
    found.extend(
        Violation(14, f"tenant {tenant}: a deferred row of {LEDGER} at seq {seq}, which does not wait")
        for seq in sorted(set(deferred) - waiting_seqs)
    )
    return found


def _waiting_spends_nothing(world: World, observations: Observations, state: State) -> list[Violation]:
    """A deferral gives its claim's attempt back: an ordered pair's claim counts at most the claims seen less
    the deferrals that committed (a replay resets the count, which only makes it smaller)."""
    found: list[Violation] = []
    for key, claim in sorted(state.claims.items()):
        deferrals = observations.deferrals[key]
        if not key.endswith(f":{LEDGER}") or not deferrals:
            continue
        counted = int(claim.get("attempts", {}).get("N", "0"))
        seen = observations.claims[key] + observations.uncertain_claims[key]
        if counted > seen - deferrals:
            found.append(
                Violation(
                    14,
                    f"{name_of(world, key)}: its claim counts {counted} attempt(s) after {seen} claim(s) and "
                    f"{deferrals} deferral(s): waiting spent an attempt",
                )
            )
    return found
