"""Invariant 18, completeness: the completeness pass (``outbox.ops.completeness``) reports exactly the pairs the
simulator knows have no outcome past the bound: no miss, no false alarm.

Checked once the run has settled, with the pass's clock a bound and an hour past the world's (every pair is past
the bound) and every subscription seen from the start. What the simulator knows, from the tables it read back
(``State``) and the catalog deployed at the end, by the outcomes the issue names: a pair is done or skipped
(``COMPLETED``, ``SKIPPED``), dead (``DEAD``, its letter open), waiting in its order behind a predecessor that is
dead or itself waiting, or left out (the catalog no longer runs it and it was never under way, or it is dead).
Every other pair the deployed catalog runs, or has a claim of, has none: no claim (unless the inbox may have
forgotten its completion), a claim left ``PENDING`` or ``REPLAYING`` with nothing on its way, a deferred event
no wake-up will reach. (A pair waiting behind a predecessor still in its order is not reported: its predecessor
is, if it has no outcome.)

A settled run has few such pairs (invariant 2 says why), so the check also probes the pass with one completed
pair of the run read as if its claim were lost, which it must report, and one dead pair, which it must not.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

from outbox.inbox import VOUCH_MARGIN, ClaimRecord
from outbox.log.envelope import Envelope, format_timestamp
from outbox.ops import Topology
from outbox.ops.completeness import (
    CompletenessLog,
    CompletenessPass,
    PairRef,
    Verdict,
    catalog_data,
    catalog_from_data,
)
from outbox.ops.context import OperatorContext
from outbox.pairs import Route
from outbox.subscriptions import Lane, Subscription
from simulation.invariants.base import Violation
from simulation.state import State
from simulation.world import World

COMPLETENESS = 18
# Any bound: the pass runs a bound and an hour after everything settled.
BOUND = timedelta(hours=23)


def check_completeness(world: World, state: State, topology: Topology) -> list[Violation]:
    if world.catalog is None or world.reader is None or topology.audit_table is None:
        return []
    settled = world.trace_clock()
    now = settled + BOUND + timedelta(hours=1)
    context = OperatorContext(
        replace(topology),
        dynamodb=world.reader,
        sqs=None,
        catalog=catalog_from_data(catalog_data(world.catalog)),
        clock=lambda: now,
    )
    log = CompletenessLog(topology.audit_table, world.reader)
    log.first_seen([s.name for s in context.deployed.durable()], settled - timedelta(days=3650))
    check = CompletenessPass(context, log, bound=BOUND)
    found = {
        (m.event_id, m.subscription) for missing in check.run(sorted(state.logs)).missing.values() for m in missing
    }
    known = expected_missing(world, state, now - topology.inbox_retention + VOUCH_MARGIN)
    violations = [
        Violation(
            COMPLETENESS, f"the completeness pass did not report {world.trace.key(f'{e}:{s}')}, which has no outcome"
        )
        for e, s in sorted(known - found)
    ]
    violations += [
        Violation(COMPLETENESS, f"the completeness pass reported {world.trace.key(f'{e}:{s}')}, which has an outcome")
        for e, s in sorted(found - known)
    ]
    return violations + _probes(check, state, now)


def expected_missing(world: World, state: State, horizon: Any) -> set[tuple[str, str]]:
    """The pairs with no outcome, as the simulator reads the tables back."""
    assert world.catalog is not None
    # A WORKFLOW pair's outcome is its execution's end, settled (COMPLETED or DEAD): HANDED is under way.
    durable = [s for s in world.catalog.registry.subscriptions if s.lane in (Lane.DURABLE, Lane.WORKFLOW)]
    claimed: dict[str, set[str]] = {}
    for key in state.claims:
        event_id, _, name = key.partition(":")
        claimed.setdefault(event_id, set()).add(name)
    vouched_from = format_timestamp(horizon)
    missing = set()
    for tenant, log in state.logs.items():
        by_seq = {envelope.seq: envelope for envelope in log}
        for envelope in log:
            running = {s.name: s for s in durable if s.matches(envelope.type)}
            for name in sorted(set(running) | claimed.get(envelope.id, set())):
                row = state.claims.get(f"{envelope.id}:{name}")
                status = row["status"]["S"] if row else None
                if not _has_outcome(state, tenant, by_seq, envelope, running.get(name), row, status, vouched_from):
                    missing.add((envelope.id, name))
    return missing


def _has_outcome(
    state: State,
    tenant: str,
    by_seq: dict[int, Envelope],
    envelope: Envelope,
    subscription: Subscription | None,
    row: dict[str, Any] | None,
    status: str | None,
    vouched_from: str,
) -> bool:
    if status in ("COMPLETED", "SKIPPED", "DEAD"):
        return True
    if subscription is None:  # left out by the deployed catalog: an outcome, unless it was under way
        return status is None
    if status is None:  # never claimed: lost, unless the inbox may have forgotten its completion
        return format_timestamp(envelope.occurred_at) < vouched_from
    if status != "DEFERRED" or not subscription.orders(envelope.occurred_at) or row is None:
        return False  # PENDING or REPLAYING with nothing on its way; deferred out of its order
    # Waiting in its order: behind a predecessor not applied, in the order, that is dead or waits itself
    waits_for = int(row["waits_for"]["N"]) if "waits_for" in row else None
    watermark = state.watermarks.get((tenant, subscription.name), {})
    applied = int(watermark.get("applied_seq", {}).get("N", "0"))
    if waits_for is None or waits_for <= applied or waits_for not in by_seq:
        return False
    predecessor = by_seq[waits_for]  # still in the order: its own outcome (or its absence) is judged on its own
    return subscription.matches(predecessor.type) and subscription.orders(predecessor.occurred_at)


def _probes(check: CompletenessPass, state: State, now: Any) -> list[Violation]:
    """One completed pair read as if its claim were lost must be missing; one dead pair must not be."""
    violations = []
    lost = _a_pair(check, state, "COMPLETED")
    if lost is not None and check.judge(lost[0].tenant, lost[1], None, now)[1] is not Verdict.MISSING:
        violations.append(Violation(COMPLETENESS, f"a pair whose claim is lost ({lost[1].event_id}) is not missing"))
    dead = _a_pair(check, state, "DEAD")
    if dead is not None and check.judge(dead[0].tenant, dead[1], dead[2], now)[1] is Verdict.MISSING:
        violations.append(Violation(COMPLETENESS, f"a dead pair ({dead[1].event_id}) is reported missing"))
    return violations


def _a_pair(check: CompletenessPass, state: State, status: str) -> tuple[Envelope, PairRef, ClaimRecord] | None:
    """The first pair of the run whose claim is ``status`` and that the deployed catalog still runs."""
    events = state.events
    for key, row in sorted(state.claims.items()):
        event_id, _, name = key.partition(":")
        if row["status"]["S"] != status or event_id not in events:
            continue
        envelope = events[event_id]
        ref = PairRef(envelope.seq, envelope.id, envelope.type, format_timestamp(envelope.occurred_at), name)
        if check.context.deployed.place(name, ref.event_type, ref.occurred_at).route is not Route.LEFT_OUT:
            return envelope, ref, ClaimRecord.from_item(row)
    return None
