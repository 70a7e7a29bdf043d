"""How a seed draws its schedule (``generate``): the workload, the faults and their rates, the operator's
actions, each part drawn from a random stream of its own (``random.Random(f"schedule:{seed}:<part>")``), so that
adding a part changed no other part of any schedule, nor the seeds that catch each mutant. The schedule itself,
and what each of its parts means, is ``simulation.schedule``."""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import timedelta

from simulation.bodies import ALTERED_EVENT, MALFORMED_BODIES
from simulation.drawing_deploys import with_a_deploy, with_a_route_deploy, with_an_upgrade
from simulation.drawing_workflow import draw_workflow
from simulation.schedule import (
    FAULT_MENU,
    PARTIAL_ANSWERS,
    Action,
    Crowding,
    Emit,
    Fault,
    FaultRate,
    HeadRollback,
    LateRedelivery,
    Poison,
    ReadOnlyPass,
    Reconcile,
    Redeliver,
    Redrive,
    Replay,
    Schedule,
    Steps,
    TimeJump,
)

_BATCH = 10  # the durable event source mapping's batch size: a tenant's backlog beyond it waits in the queue
_BACKLOG_FAILURES = FaultRate(0.35, 8)
_TAMPER_CHANCE = 0.25
# Drawn from a stream of its own, like the tampering, so that adding it changed no other part of a schedule.
_FORGE_CHANCE = 0.3
_LEGACY_CHANCE = 0.3
# The same again: the tail of a tenant's log rewritten with every hash recomputed, after an anchoring pass.
_REWRITE_CHANCE = 0.3
_HEAD_ROLLBACK_CHANCE = 0.2
_REPAIR_CHANCE = 0.5  # of a rewrite: repaired and re-anchored
_REWRITE_AFTER_RESET_CHANCE = 0.5  # of a repair: a row rewritten again in the reset's second
_FORGE_BATCH_CHANCE = 0.3
_FORCED_REPLAY_CHANCE = 0.5  # of a schedule with the ordered ledger
_IMPORT_CHANCE = 0.05  # an emit that is an import: more items with it in one emit_many
# The ordered ledger (sim.ledger), its operator's skips and its race: drawn from a stream of their own too.
_ORDERED_CHANCE = 0.6
_SKIP_DEAD_CHANCE = 0.4
_WATERMARK_RACE_CHANCE = 0.5
_LEDGER_REFUSES_CHANCE = 0.6
_WATERMARK_RACE_RATE = ((0.5, 1.0), (1, 2))
# The lost answer of an ordered completion that events wait behind: a stream of its own too.
_WAKING_ANSWER_LOST_CHANCE = 0.5
_WAKING_ANSWER_LOST_RATE = ((0.5, 1.0), (1, 2))
_REORDER_BEHIND = FaultRate(0.9, 4)
# Faults drawn from streams of their own too: the stream's name, how often a schedule has the fault, its rate. The
# operator's reconcile during a direct run (which it makes slow: what leaves a second start short of time), emits
# by a newer engine (fields this one does not know), and handlers that take time.
_OWN_STREAMS: dict[Fault, tuple[str, float, tuple[tuple[float, float], tuple[int, int]]]] = {
    Fault.RECONCILE_DURING_RUN: ("reconcile-during-run", 0.35, ((0.4, 0.9), (1, 2))),
    Fault.NEWER_EMITTER: ("newer-emitter", 0.3, ((0.3, 0.8), (1, 4))),
    Fault.SLOW_HANDLER: ("slow", 0.45, ((0.2, 0.6), (2, 8))),
}
# The slow ordered ledger of a schedule whose sends may be refused: how often, and how long each run takes (the
# durable consumer's timeout is 60 s: one run fits an invocation, two do not).
_SLOW_LEDGER_CHANCE = 0.8
_DURABLE_TIMEOUT = timedelta(seconds=60)  # the template's; the simulator's world reads it from there
_SLOW_LEDGER_SECONDS = (31.0, 45.0)
# A crowded batch, in a two-tenant ordered schedule without the slow ledger: one tenant's backlog of slow ledger
# runs, and the other tenant's charge taking just more than such a run leaves of the invocation.
_CROWDED_CHANCE = 0.5
_CROWDED_BACKLOG = (5, 7)  # more items of the busy tenant, emitted first
_CROWDED_PAST_THE_LEDGER = (3.0, 9.0)  # seconds the neighbour's charge takes beyond what a ledger run leaves
# Read-only passes while the pipeline runs, and emits landing inside them: a stream of their own.
_CHECKS_CHANCE = 0.5
_CHECKS_RATE = ((0.4, 0.9), (2, 5))
# A tenant so hot that an emit loses the race for its chain head more often than emit() retries.
_HOT_TENANT_CHANCE = 0.03
_HOT_TENANT_RATE = FaultRate(1.0, 6)


def generate(seed: int) -> Schedule:
    """The schedule of ``seed``: the same seed always gives the same schedule."""
    rng = random.Random(f"schedule:{seed}")
    aged = _aged(random.Random(f"schedule:{seed}:aged"))
    tenants = tuple(f"t{index}" for index in range(rng.randint(1, 2)))
    emitters = {tenant: rng.randint(1, 2) for tenant in tenants}
    actions = _actions(rng, tenants, emitters)
    faults = _faults(rng)
    if sum(isinstance(action, Emit) for action in actions) > _BATCH:
        # A backlog behind a failing head: failures for the head and for the followers alike.
        faults[Fault.RETRYABLE_ERROR] = _BACKLOG_FAILURES
    ordering = random.Random(f"schedule:{seed}:ordered")
    ordered, skip_dead, race = _ordered(ordering)
    if race is not None:
        faults[Fault.WATERMARK_RACE] = race
    # The lost answer of an ordered completion that events wait behind: only with the ledger.
    waking_answer = random.Random(f"schedule:{seed}:waking-answer")
    waking = _drawn_rate(waking_answer, _WAKING_ANSWER_LOST_CHANCE, _WAKING_ANSWER_LOST_RATE) if ordered else None
    if waking is not None:
        faults[Fault.WAKING_ANSWER_LOST] = waking
        # What puts an event behind one still to come on its first receive: records reordered in a batch.
        faults.setdefault(Fault.STREAM_REORDER, _REORDER_BEHIND)
    for kind, (stream, chance, rate) in _OWN_STREAMS.items():
        drawn = _drawn_rate(random.Random(f"schedule:{seed}:{stream}"), chance, rate)
        if drawn is not None:
            faults[kind] = drawn
    refused = _ledger_refuses(ordering, actions) if ordered else None
    forced = ordered and random.Random(f"schedule:{seed}:forced").random() < _FORCED_REPLAY_CHANCE
    actions, deploy = with_a_deploy(random.Random(f"schedule:{seed}:deploy"), actions, ordered)
    route = random.Random(f"schedule:{seed}:deploy-route")
    early = random.Random(f"schedule:{seed}:narrowed-early")
    actions, deploy, tally_refuses, races = with_a_route_deploy(route, actions, deploy, refused, early)
    partial = random.Random(f"schedule:{seed}:partial")
    for kind, (chance, (low, high), (fewest, most)) in PARTIAL_ANSWERS.items():
        if partial.random() < chance:
            faults[kind] = FaultRate(round(partial.uniform(low, high), 2), partial.randint(fewest, most))
    checks = random.Random(f"schedule:{seed}:checks")
    actions, racing = _with_read_only_passes(checks, actions)
    if racing is not None:
        faults[Fault.EMIT_DURING_CHECK] = racing
    slow_ledger = _slow_ledger(random.Random(f"schedule:{seed}:slow-ledger"), ordered, faults)
    crowding = random.Random(f"schedule:{seed}:crowded")
    actions, crowded = _crowded(crowding, actions, tenants, ordered, slow_ledger)
    workflow = draw_workflow(random.Random(f"schedule:{seed}:workflow"), faults)
    return Schedule(
        seed=seed,
        tenants=tenants,
        emitters=emitters,
        actions=tuple(
            with_an_upgrade(
                random.Random(f"schedule:{seed}:upgrade"),
                _with_imports(
                    random.Random(f"schedule:{seed}:imports"),
                    _with_a_head_rollback(random.Random(f"schedule:{seed}:rollback"), actions),
                ),
            )
        ),
        faults=faults,
        during_drain=_during_drain(rng, tenants),
        # Dead work left for the aged phase when there is one: replayed weeks later, beside forgotten siblings.
        replay_at_the_end=not aged and rng.random() < 0.5,
        aged=aged,
        tamper=random.Random(f"schedule:{seed}:tamper").random() < _TAMPER_CHANCE,
        forge=random.Random(f"schedule:{seed}:forge").random() < _FORGE_CHANCE,
        rewrite=random.Random(f"schedule:{seed}:rewrite").random() < _REWRITE_CHANCE,
        repair=random.Random(f"schedule:{seed}:repair").random() < _REPAIR_CHANCE,
        rewrite_after_reset=random.Random(f"schedule:{seed}:reset-second").random() < _REWRITE_AFTER_RESET_CHANCE,
        forge_batch=random.Random(f"schedule:{seed}:forge-batch").random() < _FORGE_BATCH_CHANCE,
        legacy=_legacy(random.Random(f"schedule:{seed}:legacy"), tenants),
        ordered=ordered,
        skip_dead=skip_dead,
        ledger_refuses=refused,
        force_replay=forced,
        deploy=deploy,
        slow_ledger=slow_ledger,
        crowded=crowded,
        tally_refuses=tally_refuses,
        replay_races_deploy=races,
        workflow=workflow,
    )


def _legacy(rng: random.Random, tenants: tuple[str, ...]) -> str | None:
    """Drawn from a stream of its own: adding it changed no other part of a schedule."""
    return rng.choice(tenants) if rng.random() < _LEGACY_CHANCE else None


def _ordered(rng: random.Random) -> tuple[bool, bool, FaultRate | None]:
    """Whether the application has the ordered ledger, whether the operator skips its dead events, and the
    rate of the watermark race. Drawn from a stream of their own: adding them changed no other part of a
    schedule (a schedule without the ledger runs as it did before it existed)."""
    if rng.random() >= _ORDERED_CHANCE:
        return False, False, None
    skip_dead = rng.random() < _SKIP_DEAD_CHANCE
    if rng.random() >= _WATERMARK_RACE_CHANCE:
        return True, skip_dead, None
    (low, high), (fewest, most) = _WATERMARK_RACE_RATE
    return True, skip_dead, FaultRate(round(rng.uniform(low, high), 2), rng.randint(fewest, most))


def _drawn_rate(
    rng: random.Random, chance: float, rate: tuple[tuple[float, float], tuple[int, int]]
) -> FaultRate | None:
    """A fault's rate in ``chance`` of schedules, from ``rng`` (a stream of its own: drawing it changes no other
    part of a schedule)."""
    if rng.random() >= chance:
        return None
    (low, high), (fewest, most) = rate
    return FaultRate(round(rng.uniform(low, high), 2), rng.randint(fewest, most))


def _with_read_only_passes(rng: random.Random, actions: list[Action]) -> tuple[list[Action], FaultRate | None]:
    """Now and then one to three read-only passes between the workload's actions, and the rate at which an emit
    lands inside one."""
    if rng.random() >= _CHECKS_CHANCE:
        return actions, None
    placed = list(actions)
    for _ in range(rng.randint(1, 3)):
        placed.insert(rng.randint(1, len(placed)), ReadOnlyPass())
    (low, high), (fewest, most) = _CHECKS_RATE
    return placed, FaultRate(round(rng.uniform(low, high), 2), rng.randint(fewest, most))


def _slow_ledger(rng: random.Random, ordered: bool, faults: dict[Fault, FaultRate]) -> timedelta | None:
    """In most ordered schedules whose sends SQS may refuse, a ledger run takes more than half the function's
    timeout: one fits an invocation, the tenant's next comes back for lack of time and the one after it is
    deferred behind it; the consumer sends every wake-up (its run in place needs twice the slowest run left),
    and the refused ones must come back to it. A stream of its own."""
    if not ordered or Fault.SEND_REFUSED not in faults or rng.random() >= _SLOW_LEDGER_CHANCE:
        return None
    return timedelta(seconds=round(rng.uniform(*_SLOW_LEDGER_SECONDS), 1))


def _crowded(
    rng: random.Random, actions: list[Action], tenants: tuple[str, ...], ordered: bool, slow_ledger: timedelta | None
) -> tuple[list[Action], Crowding | None]:
    """In some two-tenant ordered schedules without the slow ledger (whose ledger is slow for every tenant), a
    crowded batch (``Crowding``): the busy tenant's backlog and then one item of its neighbour are emitted
    before anything else, so that the busy tenant's messages lead each batch. A stream of its own."""
    if not ordered or slow_ledger is not None or len(tenants) < 2 or rng.random() >= _CROWDED_CHANCE:
        return actions, None
    busy, neighbour = rng.sample(tenants, 2)
    ledger_takes = timedelta(seconds=round(rng.uniform(*_SLOW_LEDGER_SECONDS), 1))
    past_the_ledger = timedelta(seconds=round(rng.uniform(*_CROWDED_PAST_THE_LEDGER), 1))
    crowding = Crowding(busy, neighbour, ledger_takes, _DURABLE_TIMEOUT - ledger_takes + past_the_ledger)
    backlog = [_extra_emit(rng, busy, f"backlog{n}") for n in range(1, rng.randint(*_CROWDED_BACKLOG) + 1)]
    return [*backlog, _extra_emit(rng, neighbour, "neighbour1"), *actions], crowding


def _extra_emit(rng: random.Random, tenant: str, name: str) -> Emit:
    return Emit(operation=name, tenant=tenant, emitter=0, item_id=name, amount=rng.randint(1, 99), reject=False)


def _ledger_refuses(rng: random.Random, actions: list[Action]) -> str | None:
    """Now and then one workload item the ordered ledger refuses once: not a tenant's last (it has followers)."""
    emits = [action for action in actions if isinstance(action, Emit)]
    followed = [e.operation for i, e in enumerate(emits) if any(later.tenant == e.tenant for later in emits[i + 1 :])]
    if not followed or rng.random() >= _LEDGER_REFUSES_CHANCE:
        return None
    return rng.choice(followed)


def _faults(rng: random.Random) -> dict[Fault, FaultRate]:
    chosen: dict[Fault, FaultRate] = {}
    for kind, (chance, (low, high), (fewest, most)) in FAULT_MENU.items():
        if rng.random() < chance:
            chosen[kind] = FaultRate(round(rng.uniform(low, high), 2), rng.randint(fewest, most))
    if Fault.RIVAL_EMIT in chosen and rng.random() < _HOT_TENANT_CHANCE / FAULT_MENU[Fault.RIVAL_EMIT][0]:
        chosen[Fault.RIVAL_EMIT] = _HOT_TENANT_RATE
    if (Fault.BROKEN_DEPLOY in chosen or Fault.MESSAGE_LOST in chosen) and rng.random() < 0.7:
        # The redrive and the reconcile after an incident are the operator actions most worth interrupting.
        chosen.setdefault(Fault.OPERATOR_INTERRUPTED, FaultRate(0.5, 2))
    return chosen


def _actions(rng: random.Random, tenants: tuple[str, ...], emitters: dict[str, int]) -> list[Action]:
    actions: list[Action] = []
    items: dict[str, list[str]] = {tenant: [] for tenant in tenants}
    # Now and then one tenant's backlog outgrows a batch (FIFO hands over at most 10 of a group at once).
    burst = rng.choice(tenants) if rng.random() < 0.12 else None
    count = rng.randint(11, 13) if burst else rng.randint(2, 3)
    for number in range(1, count + 1):
        tenant = burst or rng.choice(tenants)
        # Now and then the same item again: the caller's own write fails its condition, nothing commits.
        reuse = items[tenant] and rng.random() < 0.1
        item_id = rng.choice(items[tenant]) if reuse else f"item{number}"
        items[tenant].append(item_id)
        actions.append(
            Emit(
                operation=f"op{number}",
                tenant=tenant,
                emitter=rng.randrange(emitters[tenant]),
                item_id=item_id,
                amount=rng.randint(1, 99),
                reject=rng.random() < 0.08,
                size=_size_of(rng, number),
            )
        )
        if burst is None and rng.random() < 0.5:
            actions.append(Steps(rng.randint(1, 2)))
        actions.extend(_interruption(rng, tenants))
    return actions


def _size_of(rng: random.Random, number: int) -> str:
    """Now and then an event near the relay's bound, or past it. Drawn from a peek at the schedule's random
    state, not from its stream, so that the rest of each schedule (and the seeds that catch each mutant) stay
    as they were."""
    peek = random.Random(f"{rng.getstate()[1][:8]}:{number}")
    share = peek.randrange(100)
    return "near_bound" if share < 4 else "over_bound" if share < 6 else "small"


def _with_a_head_rollback(rng: random.Random, actions: list[Action]) -> list[Action]:
    """Now and then, before an emit of a tenant that has emitted before, its chain head is set back."""
    seen: set[str] = set()
    later = []
    for index, action in enumerate(actions):
        if isinstance(action, Emit):
            if action.tenant in seen:
                later.append(index)
            seen.add(action.tenant)
    if not later or rng.random() >= _HEAD_ROLLBACK_CHANCE:
        return actions
    index = rng.choice(later)
    target = actions[index]
    assert isinstance(target, Emit)
    return [*actions[:index], HeadRollback(target.tenant), *actions[index:]]


def _with_imports(rng: random.Random, actions: list[Action]) -> list[Action]:
    """Now and then an emit is an import: one or two more items of its tenant in the same ``emit_many`` (their
    rows and events all committed, or none). Drawn last, from a stream of its own: the rest of each schedule
    stays as it was."""
    imported: list[Action] = []
    for action in actions:
        if isinstance(action, Emit) and rng.random() < _IMPORT_CHANCE:
            more = tuple(
                Emit(
                    operation=f"{action.operation}.{number}",
                    tenant=action.tenant,
                    emitter=action.emitter,
                    item_id=f"{action.item_id}.{number}",
                    amount=rng.randint(1, 99),
                    reject=rng.random() < 0.05,
                )
                for number in range(1, rng.randint(1, 2) + 1)
            )
            action = replace(action, imported_with=more)
        imported.append(action)
    return imported


def _during_drain(rng: random.Random, tenants: tuple[str, ...]) -> tuple[tuple[int, Action], ...]:
    actions: list[tuple[int, Action]] = []
    if rng.random() < 0.15:
        actions.append((rng.randint(2, 40), Reconcile(days=rng.choice((1, 3)))))
    if rng.random() < 0.25:
        actions.append((rng.randint(2, 40), _poison(rng, tenants)))
    if rng.random() < 0.3:
        actions.append((rng.randint(2, 40), Redrive(rng.choice(("move-task", "receive-send-delete")))))
    if rng.random() < 0.2:
        actions.append((rng.randint(2, 40), Replay()))
    if rng.random() < 0.15:
        actions.append((rng.randint(2, 40), LateRedelivery(after_window=True)))
    if rng.random() < 0.25:
        actions.append((rng.randint(2, 40), Redeliver()))
    return tuple(sorted(actions, key=lambda pair: pair[0]))


def _poison(rng: random.Random, tenants: tuple[str, ...]) -> Poison:
    kinds = sorted(MALFORMED_BODIES)
    # A genuine event altered in transit is the one body only the hash check can tell: drawn more often.
    weights = [3 if kind == ALTERED_EVENT else 1 for kind in kinds]
    return Poison(rng.choice(tenants), rng.choices(kinds, weights=weights)[0])


def _aged(rng: random.Random) -> tuple[Action, ...]:
    """Sometimes, after the run settled: days pass (past the inbox's retention, or not), an old message
    arrives again, and the operator repairs."""
    if rng.random() >= 0.4:
        return ()
    # The retention itself (30 days) more often: a message just past it is the edge the vouching rule guards.
    days = rng.choice((8, 15, 30, 30, 31, 45))
    repairs: list[Action] = [Replay()]
    if rng.random() < 0.6:
        # Often "everything since the incident": a window that reaches back before the jump.
        repairs.append(Reconcile(days=days + 1 if rng.random() < 0.6 else 1))
    if rng.random() < 0.3:
        repairs.append(Redrive(rng.choice(("move-task", "receive-send-delete"))))
    rng.shuffle(repairs)
    if rng.random() < 0.6:
        # An old message arrives first (it raises the alarm), then the operator repairs.
        return (TimeJump(days), LateRedelivery(after_window=True), *repairs)
    return (TimeJump(days), *repairs)  # the operator repairs what they remember, with nothing new in the queue


def _interruption(rng: random.Random, tenants: tuple[str, ...]) -> list[Action]:
    """Now and then, something happens between two emits besides the pipeline running."""
    roll = rng.random()
    if roll < 0.05:
        return [_poison(rng, tenants)]
    roll = rng.random()
    if roll < 0.08:
        return [Redeliver()]
    if roll < 0.14:
        return [LateRedelivery(after_window=rng.random() < 0.7)]
    if roll < 0.19:
        return [Redrive(rng.choice(("move-task", "receive-send-delete")))]
    if roll < 0.23:
        return [Replay()]
    return []
