"""Invariants 7, 8 and 9: what the operator sees and repairs. Status shows every dead letter and every break;
forced replays and repairs do what they say; the best-effort lane carries every row change; and a malformed
body is a recorded poison pill."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Collection

from outbox.ops import Topology
from simulation.invariants.base import Violation, name_of
from simulation.state import State
from simulation.world import World


def check_status(
    state: State,
    topology: Topology,
    tampered: Collection[str] = (),
    rewritten: Collection[str] = (),
    undeliverable: Collection[str] = (),
) -> list[Violation]:
    """What status shows: every queue's depth, every tenant's open dead letters, and its log altered exactly
    when it was: a row rewritten (``tampered``) shows as a broken chain, or (below the tenant's anchor, where
    status does not read) as a finding, or as the tamper pipe's dead letter when the row's two images were too
    large for a queue message (``undeliverable``: the documented gap, whose runbook is verify-chain --all); a
    tail rewritten with every hash recomputed after an anchoring pass (``rewritten``) as a chain broken at its
    anchor."""
    status = state.status
    if status is None:
        return [Violation(7, "Operations.status() failed")]
    found: list[Violation] = []
    for name, url in topology.queues().items():
        depth = status.queues.get(name)
        shown = depth.visible + depth.in_flight if depth else None
        if shown != state.queue_depths.get(url, 0):
            found.append(
                Violation(7, f"{name} holds {state.queue_depths.get(url, 0)} message(s); status shows {shown}")
            )
    listed = {tenant.tenant: tenant for tenant in status.tenants}
    letters = Counter(row.tenant for row in state.dead_letters if not row.resolved)
    for tenant in sorted(set(letters) | {t for t, log in state.logs.items() if log}):
        shown_tenant = listed.get(tenant)
        if shown_tenant is None:
            found.append(Violation(7, f"tenant {tenant} has events or dead letters but status does not list it"))
        elif shown_tenant.dead_letters != letters[tenant]:
            found.append(
                Violation(
                    7,
                    f"tenant {tenant} has {letters[tenant]} open dead letter(s); "
                    f"status shows {shown_tenant.dead_letters}",
                )
            )
        elif tenant not in tampered and tenant not in rewritten and not shown_tenant.chain_intact:
            found.append(Violation(7, f"status reports tenant {tenant}'s chain broken, and nobody altered it"))
        elif tenant in rewritten and shown_tenant.chain_intact:
            found.append(Violation(7, f"tenant {tenant}'s log was rewritten after its anchor; status shows it intact"))
        elif (
            tenant in tampered
            and tenant not in undeliverable
            and shown_tenant.chain_intact
            and not shown_tenant.tamper_findings
        ):
            # Status verifies from the anchor on: a rewrite below it shows as the stream's finding instead.
            found.append(Violation(7, f"tenant {tenant}'s log was rewritten; status shows it intact, with no finding"))
    return found


def check_one_incident_one_group(world: World, state: State) -> list[Violation]:
    """The engine's own conflict dead letters of one incident (the forged batch: copies at places the log holds,
    or events at places it never held) are one failure group per subscription and kind, across events and
    tenants: what varies from one to the next (ids, hashes, seqs, the tenant) is not the failure."""
    groups: dict[tuple[str, str], set[str]] = defaultdict(set)
    for row in state.dead_letters:
        kind = world.forged_batch.get(row.event_id)
        if kind is not None and row.reason == "conflict":
            groups[(row.subscription, kind)].add(row.group)
    return [
        Violation(
            7,
            f"the forged batch's conflicts at places the log {'holds' if kind == 'held' else 'never held'} "
            f"for {subscription} are {len(ids)} failure groups, not one",
        )
        for (subscription, kind), ids in sorted(groups.items())
        if len(ids) > 1
    ]


def check_forced_replays_run(world: World) -> list[Violation]:
    """A forced replay the tools accepted (and reported republished) runs its pair again: a replay never
    reports done what nothing will ever run."""
    found: list[Violation] = []
    for key, before in world.forced:
        if not any(run_key == key for run_key, _ in world.handler_runs[before:]):
            found.append(Violation(2, f"{name_of(world, key)}: a forced replay reported it republished; it never ran"))
    return found


def check_repaired(world: World, state: State) -> list[Violation]:
    """A log repaired as the runbook says (the rows restored, the anchor reset) is healthy again in the status:
    intact, with no open finding, and not among its problems; its findings stay in the audit table. (A log
    rewritten again in the reset's second is ``tampered``: check_status wants it shown.)"""
    status = state.status
    if status is None:
        return []
    found: list[Violation] = []
    listed = {tenant.tenant: tenant for tenant in status.tenants}
    for tenant in sorted(world.repaired):
        shown = listed.get(tenant)
        if tenant in world.tampered:
            pass
        elif shown is None or not shown.chain_intact or shown.tamper_findings:
            found.append(
                Violation(7, f"{tenant} was repaired and re-anchored, but status shows {shown or 'nothing'} for it")
            )
        if not state.findings.get(tenant):
            found.append(Violation(12, f"{tenant} was repaired and re-anchored, and its findings are gone"))
    return found


def check_best_effort_lane(world: World, state: State) -> list[Violation]:
    found: list[Violation] = []
    for pk, _ in sorted(state.data):
        if pk.startswith("SIMITEM#") and world.row_changes[pk] < 1:
            found.append(Violation(8, f"the row {pk} never reached its BEST_EFFORT subscriber"))
    return found


def check_poison(world: World, state: State) -> list[Violation]:
    recorded = state.poison_pills
    if recorded < world.poison_sent:
        return [Violation(9, f"{world.poison_sent} malformed bodies were sent but {recorded} recorded as poison pills")]
    return []
