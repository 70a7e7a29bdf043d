"""The deploy of a schedule (``simulation.drawing`` draws the rest): one between two emits while their work is in
flight, or one that changes a pair's route: the ordered ledger narrowed, made unordered or its ordered_since moved
while its order waits behind a dead item, or sim.tally moved to LOCAL while one of its pairs is dead; and the
engine's own upgrade from the previous release, whose rows the work in flight meets."""

from __future__ import annotations

import random

from simulation.schedule import LEDGER_ROUTE_DEPLOYS, Action, Deploy, Emit, Upgrade

# A deploy between two emits, while their work is in flight: a stream of its own too. "ordered" only in a
# schedule with the ledger.
_DEPLOY_CHANCE = 0.4
# The deploys that existed before those of a pair's route: the deploy stream chooses among these only.
_FIRST_DEPLOYS = ("ordered", "added", "removed", "narrowed", "version")
# The deploys of a pair's route (schedule.ROUTE_DEPLOYS), from a stream of their own: in most schedules whose
# ordered ledger refuses an item, one of the ledger's; in a few others, sim.tally moved to LOCAL with dead work.
_LEDGER_ROUTE_CHANCE = 0.7
_TALLY_TO_LOCAL_CHANCE = 0.12
_REPLAY_RACES_DEPLOY_CHANCE = 0.5
# Of the ledger narrowed: right after the item it refuses, before the tenant's next item, so that what waits behind
# the dead item is its own follow-up (a sim.item_noted, which the narrowed ledger still runs). A stream of its own.
_NARROWED_EARLY_CHANCE = 0.5
# The engine upgraded from the previous release mid-schedule (its claim rows' digests): a stream of its own.
_UPGRADE_CHANCE = 0.3


def with_a_route_deploy(
    rng: random.Random, actions: list[Action], deploy: str | None, refused: str | None, early: random.Random
) -> tuple[list[Action], str | None, str | None, bool]:
    """Now and then a deploy that changes a pair's route while its work is dead or deferred (a stream of its own: a
    schedule without one keeps its deploy, or none). With the ledger refusing an item: the ledger narrowed, made
    unordered, or its ordered_since moved, right after the next emit of the refused item's tenant (the driver lets
    the pipeline run until the refused item is dead and a follower deferred). Else, now and then: sim.tally moved to
    LOCAL after an item it refuses. The deploy the schedule drew before, if any, gives way. ``early``: whether the
    ledger's narrowing goes out before the tenant's next item (a stream of its own)."""
    emits = [(index, action) for index, action in enumerate(actions) if isinstance(action, Emit) and not action.reject]
    dies = next((n for n, (_, e) in enumerate(emits) if e.operation == refused), None)
    followers = (
        [index for index, e in emits[dies + 1 :] if e.tenant == emits[dies][1].tenant] if dies is not None else []
    )
    if refused is not None:
        # (An item the audit refuses commits nothing: nothing dies then, and no deploy of this kind is drawn.)
        if rng.random() >= _LEDGER_ROUTE_CHANCE or not followers:
            return actions, deploy, None, False
        kind = rng.choice(LEDGER_ROUTE_DEPLOYS)
        at = followers[0] + 1
        if kind == "ledger_narrowed" and dies is not None and early.random() < _NARROWED_EARLY_CHANCE:
            # The order then waits behind the dead item with an event the narrowed order still holds: only the
            # skip that acknowledges the dead one (or the reconcile status names) can send it on.
            at = emits[dies][0] + 1
        tally_refuses = None
    else:
        if len(emits) < 2 or rng.random() >= _TALLY_TO_LOCAL_CHANCE:
            return actions, deploy, None, False
        kind = "tally_to_local"
        first = rng.randrange(len(emits) - 1)
        tally_refuses = emits[first][1].operation
        at = emits[first + 1][0] + 1
    races = rng.random() < _REPLAY_RACES_DEPLOY_CHANCE
    kept = [action for action in actions if not isinstance(action, Deploy)]
    at -= sum(1 for action in actions[:at] if isinstance(action, Deploy))
    return [*kept[:at], Deploy(kind), *kept[at:]], kind, tally_refuses, races


def with_a_deploy(rng: random.Random, actions: list[Action], ordered: bool) -> tuple[list[Action], str | None]:
    """Now and then a deploy after the first emit and before the last, so that work is in flight across it."""
    emits = [index for index, action in enumerate(actions) if isinstance(action, Emit)]
    if rng.random() >= _DEPLOY_CHANCE or len(emits) < 2:
        return actions, None
    kinds = [kind for kind in _FIRST_DEPLOYS if ordered or kind != "ordered"]
    kind = rng.choice(kinds)
    at = rng.randint(emits[0] + 1, emits[-1])
    return [*actions[:at], Deploy(kind), *actions[at:]], kind


def with_an_upgrade(rng: random.Random, actions: list[Action]) -> list[Action]:
    """Now and then the engine is upgraded from the previous release after the first emit: the rows written up to
    there are that release's, and the work still in flight (retried, dead, deferred) meets today's engine."""
    if rng.random() >= _UPGRADE_CHANCE or len(actions) < 2:
        return actions
    at = rng.randint(1, len(actions))
    return [*actions[:at], Upgrade(), *actions[at:]]
