"""Invariant 2 across the deploys that change a pair's route (``simulation.schedule.ROUTE_DEPLOYS``): once the
operator has done what outbox status named, nothing the deploy changed hangs with nothing to move it."""

from __future__ import annotations

from simulation.catalog import LEDGER, TALLY
from simulation.invariants.base import Violation, name_of
from simulation.schedule import ROUTE_DEPLOYS
from simulation.state import State
from simulation.world import World


def nothing_left_hanging(world: World, state: State, letters: set[str]) -> list[Violation]:
    """After a deploy that changed the route of a subscription's pairs, and the operator's turns at what outbox
    status and the dead letters named: none of its pairs is left PENDING, REPLAYING with no dead letter (a
    replay's message that ran nothing and recorded nothing), or DEFERRED outside the deployed order (no wake-up
    will come). A pair deferred in the order is invariant 14's; a left-out pair ends done before the switch,
    SKIPPED by the operator, or dead with an open letter."""
    deploy = world.schedule.deploy
    if deploy not in ROUTE_DEPLOYS or world.deployed_at is None:
        return []
    changed = TALLY if deploy == "tally_to_local" else LEDGER
    found: list[Violation] = []
    for key, claim in sorted(state.claims.items()):
        event_id, _, subscription = key.partition(":")
        status, envelope = claim["status"]["S"], state.events.get(event_id)
        if subscription != changed or envelope is None:
            continue
        if status == "DEFERRED" and subscription == LEDGER and world.in_order(envelope):
            continue  # waiting in the deployed order: invariant 14 judges it
        if status in ("PENDING", "DEFERRED") or (status == "REPLAYING" and key not in letters):
            found.append(
                Violation(
                    2,
                    f"{name_of(world, key)}: left {status} after the deploy ({deploy}) and the operator's turns at "
                    "what outbox status names: nothing will move it",
                )
            )
    return found
