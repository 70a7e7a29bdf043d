"""What one seed means: a small workload and a fault schedule, both drawn from ``random.Random(seed)``.

The schedule is data, generated before anything runs, so it can be printed in a trace and read. Faults
that happen *inside* the pipeline (a crash, a throttle) cannot be placed in advance, because where the
pipeline is at any moment is an outcome, not an input; for those the schedule fixes a rate and a budget,
and ``simulation.chaos`` decides at each opportunity from a random stream of its own (the approach of
FoundationDB's BUGGIFY). Everything else (emits, pipeline steps, operator actions) is an ordered list.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from datetime import timedelta
from enum import StrEnum

from simulation.bodies import ALTERED_EVENT, MALFORMED_BODIES


class Fault(StrEnum):
    """Faults decided per opportunity while the pipeline runs."""

    CRASH_BEFORE_CLAIM = "crash_before_claim"
    CRASH_AFTER_CLAIM = "crash_after_claim"
    CRASH_AFTER_EFFECT = "crash_after_effect"  # the remote side applied the effect; the answer is lost
    CRASH_BEFORE_COMPLETION = "crash_before_completion"
    CRASH_AFTER_COMPLETION = "crash_after_completion"
    RETRYABLE_ERROR = "retryable_error"
    TERMINAL_ERROR = "terminal_error"
    DEPENDENCY_DOWN = "dependency_down"  # one handler fails on every attempt until the fault is healed
    THROTTLE = "throttle"  # any DynamoDB call
    RIVAL_EMIT = "rival_emit"  # another emitter commits between our head read and our transaction
    PIPE_SEND_FAILURE = "pipe_send_failure"  # the pipe retries the batch
    PIPE_DUPLICATE_BATCH = "pipe_duplicate_batch"  # the pipe sends an accepted batch again at once
    STREAM_REORDER = "stream_reorder"  # records of different items change places in a batch
    LEASE_EXPIRY = "lease_expiry"  # the lease runs out while its owner still runs
    VISIBILITY_TIMEOUT = "visibility_timeout"  # the message's visibility runs out while the handler runs
    LOCAL_HANDLER_ERROR = "local_handler_error"
    LOST_ANSWER = "lost_answer"  # a DynamoDB write applied, its answer lost (HTTP 500); a rival may act first
    CONTRACT_BREACH = "contract_breach"  # a durable handler returns something that is not a HandlerResult
    MESSAGE_LOST = "message_lost"  # a message of a failed invocation is gone (only reconcile recovers it)
    OPERATOR_INTERRUPTED = "operator_interrupted"  # the operator's process dies in the middle of an action
    EARLY_REDELIVERY = "early_redelivery"  # after a crashed invocation its messages are visible at once
    BROKEN_DEPLOY = "broken_deploy"  # the consumer fails at start until its messages reach the DLQ
    # After a crash left a claim waiting, a copy of its event with other content (and a hash that matches
    # it) arrives in another message group: a producer reusing an event id, or a forger.
    CONFLICTING_COPY = "conflicting_copy"
    # The operator skips the event an ordered delivery waits for (dead, or not arrived yet) between the
    # delivery's read of the watermark and its write: only the write's version condition can tell.
    WATERMARK_RACE = "watermark_race"
    # A durable handler takes time (a slow remote API): most fit the function's timeout, some only just what
    # is left of the invocation, some never fit it. Lambda stops the invocation at its deadline, mid-way.
    SLOW_HANDLER = "slow_handler"
    # Another writer of the tenant commits an event while a read-only pass (the anchoring pass, status,
    # verify-chain) reads its log: between its read of the rows and its read of the chain head.
    EMIT_DURING_CHECK = "emit_during_check"
    # DynamoDB answers a BatchGetItem (the consumer's read of its batch's events, the anchors' read) with some
    # of its keys unprocessed.
    UNPROCESSED_KEYS = "unprocessed_keys"
    # SQS refuses a SendMessage (throttled, or a 5xx): a consumer's wake-up, or an operator's repair mid-way.
    SEND_REFUSED = "send_refused"


@dataclass(frozen=True)
class Crowding:
    """One tenant's backlog of slow ordered work (its ledger is a slow remote one) shares batches with another
    tenant's healthy charge: each batch runs a ledger run of the busy tenant first, and what it leaves of the
    invocation is a few seconds short of the neighbour's charge. A timeout replaces the container (as Lambda
    does), so no consumer remembers how long the charge takes: only the inbox can tell that its attempts were
    cut off for another tenant's work, until the backlog is through."""

    busy: str
    neighbour: str
    ledger_takes: timedelta  # each of the busy tenant's ledger runs
    charge_takes: timedelta  # each of the neighbour's charges


@dataclass(frozen=True)
class FaultRate:
    """Fire with ``probability`` at each opportunity, at most ``budget`` times in the schedule."""

    probability: float
    budget: int


# How often each fault is part of a schedule, and the range of its rate and budget. Budgets stay small so
# that every schedule settles (a crash costs a visibility timeout of virtual time, and real time to redo).
_FAULT_MENU: dict[Fault, tuple[float, tuple[float, float], tuple[int, int]]] = {
    Fault.CRASH_BEFORE_CLAIM: (0.25, (0.05, 0.3), (1, 2)),
    Fault.CRASH_AFTER_CLAIM: (0.3, (0.05, 0.3), (1, 2)),
    Fault.CRASH_AFTER_EFFECT: (0.3, (0.1, 0.5), (1, 2)),
    Fault.CRASH_BEFORE_COMPLETION: (0.3, (0.05, 0.3), (1, 2)),
    Fault.CRASH_AFTER_COMPLETION: (0.25, (0.05, 0.3), (1, 2)),
    Fault.RETRYABLE_ERROR: (0.6, (0.1, 0.4), (1, 5)),
    Fault.TERMINAL_ERROR: (0.3, (0.05, 0.2), (1, 1)),
    Fault.DEPENDENCY_DOWN: (0.2, (0.1, 0.3), (1, 1)),
    Fault.THROTTLE: (0.35, (0.02, 0.1), (1, 6)),
    Fault.RIVAL_EMIT: (0.3, (0.2, 0.6), (1, 3)),
    Fault.PIPE_SEND_FAILURE: (0.2, (0.1, 0.4), (1, 3)),
    Fault.PIPE_DUPLICATE_BATCH: (0.25, (0.2, 0.6), (1, 2)),
    Fault.STREAM_REORDER: (0.3, (0.3, 1.0), (1, 5)),
    Fault.LEASE_EXPIRY: (0.2, (0.1, 0.4), (1, 2)),
    Fault.VISIBILITY_TIMEOUT: (0.4, (0.15, 0.4), (1, 3)),
    Fault.LOCAL_HANDLER_ERROR: (0.15, (0.2, 0.5), (1, 2)),
    Fault.LOST_ANSWER: (0.35, (0.05, 0.3), (1, 3)),
    Fault.CONTRACT_BREACH: (0.2, (0.05, 0.2), (1, 1)),
    Fault.EARLY_REDELIVERY: (0.25, (0.3, 0.8), (1, 2)),
    Fault.BROKEN_DEPLOY: (0.2, (0.2, 0.5), (1, 1)),
    Fault.MESSAGE_LOST: (0.45, (0.3, 0.7), (1, 2)),
    Fault.OPERATOR_INTERRUPTED: (0.55, (0.3, 0.7), (2, 4)),
    Fault.CONFLICTING_COPY: (0.35, (0.4, 0.9), (1, 2)),
}
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
_FORCED_REPLAY_CHANCE = 0.5  # of a schedule with the ordered ledger
# A deploy between two emits, while their work is in flight: a stream of its own too. "ordered" only in a
# schedule with the ledger.
_DEPLOY_CHANCE = 0.4
_IMPORT_CHANCE = 0.05  # an emit that is an import: more items with it in one emit_many
DEPLOY_KINDS: dict[str, str] = {
    "ordered": "sim.ledger becomes ordered, its order starting at the switch",
    "added": "sim.tally is added, and the operator backfills it (reconcile --subscription sim.tally --since ...)",
    "removed": "sim.tally is removed",
    "narrowed": "sim.tally's glob narrows from sim.item_* to sim.item_created",
    "version": "sim.item_created goes to version 3 (a channel field), with its upcaster from version 2",
}
# The ordered ledger (sim.ledger), its operator's skips and its race: drawn from a stream of their own too.
_ORDERED_CHANCE = 0.6
_SKIP_DEAD_CHANCE = 0.4
_WATERMARK_RACE_CHANCE = 0.5
_LEDGER_REFUSES_CHANCE = 0.6
_WATERMARK_RACE_RATE = ((0.5, 1.0), (1, 2))
# Handlers that take time, drawn from a stream of their own too: how often a schedule has them, and their rate.
_SLOW_CHANCE = 0.45
_SLOW_RATE = ((0.2, 0.6), (2, 8))
# Partial answers and refused sends: a stream of their own.
_PARTIAL_ANSWERS: dict[Fault, tuple[float, tuple[float, float], tuple[int, int]]] = {
    Fault.UNPROCESSED_KEYS: (0.3, (0.2, 0.6), (1, 4)),
    Fault.SEND_REFUSED: (0.35, (0.3, 0.8), (1, 3)),
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


# -- the ordered part: what the workload and the operator do ----------------------------------------------


@dataclass(frozen=True)
class Emit:
    """One emitter (an EventStore of its own, as a separate process would have) creates one item."""

    operation: str  # "op3": names this emit in the trace and in the rows it writes
    tenant: str
    emitter: int
    item_id: str
    amount: int
    reject: bool  # the INLINE subscriber refuses it: emit fails, nothing commits
    size: str = "small"  # "near_bound": a relay body just under the bound; "over_bound": one emit must refuse
    # An import (``imported_with``): more items of the same tenant, emitted with this one in one ``emit_many``.
    imported_with: tuple[Emit, ...] = ()


@dataclass(frozen=True)
class Steps:
    """The pipeline runs this many rounds (every pipe and event source mapping polls once per round)."""

    count: int


@dataclass(frozen=True)
class Redeliver:
    """SQS makes every message waiting out a visibility timeout visible now (``faults.redeliver``)."""


@dataclass(frozen=True)
class LateRedelivery:
    """The pipe sends an already delivered batch again; ``after_window`` waits out FIFO deduplication."""

    after_window: bool


@dataclass(frozen=True)
class Redrive:
    """An operator runs the inbox-aware DLQ redrive."""

    method: str  # "move-task" or "receive-send-delete"


@dataclass(frozen=True)
class Replay:
    """An operator replays every open dead letter of every tenant."""


@dataclass(frozen=True)
class Reconcile:
    """An operator re-sends, from the events table, what has no claim since ``days`` ago."""

    days: int


@dataclass(frozen=True)
class Poison:
    """A malformed body lands in ``tenant``'s message group (a broken producer, a hostile sender)."""

    tenant: str
    kind: str  # a name of ``simulation.bodies.MALFORMED_BODIES``


@dataclass(frozen=True)
class TimeJump:
    """``days`` pass (the inbox's TTL sweep runs); then an old message arrives again and the operator repairs."""

    days: int


@dataclass(frozen=True)
class Deploy:
    """A new version of the application goes out while work is in flight; ``kind`` says what it changes
    (``DEPLOY_KINDS``): the ledger made ordered (``ordered_since`` = the switch), a subscription added (with its
    backfill), removed or narrowed, or ``sim.item_created`` at a new version with its upcaster. Every deploy
    also takes ``sim.item_noted`` to version 2 (its consumer takes the DynamoDB-only path)."""

    kind: str


@dataclass(frozen=True)
class ReadOnlyPass:
    """The hourly anchoring pass runs, and the on-call looks: ``outbox status`` and ``outbox verify-chain``."""


@dataclass(frozen=True)
class HeadRollback:
    """The tenant's chain head is set back one event (restored from an older backup, or rewritten by a script
    with write access); the operator puts it right after the next emit of the tenant."""

    tenant: str


Action = (
    Emit
    | Steps
    | Redeliver
    | LateRedelivery
    | Redrive
    | Replay
    | Reconcile
    | Poison
    | TimeJump
    | HeadRollback
    | ReadOnlyPass
    | Deploy
)


@dataclass(frozen=True)
class Schedule:
    seed: int
    tenants: tuple[str, ...]
    emitters: dict[str, int]
    actions: tuple[Action, ...]
    faults: dict[Fault, FaultRate] = field(default_factory=dict)
    # Operator actions while the pipeline drains: (drain step, action); dead work shows up there.
    during_drain: tuple[tuple[int, Action], ...] = ()
    replay_at_the_end: bool = False  # after healing: replay terminal dead letters too (else they stay)
    # After everything settled: time passes and the old work is repaired (nothing completed may run again).
    aged: tuple[Action, ...] = ()
    # At the very end, someone with write access rewrites an event in the middle of a tenant's log and
    # recomputes its hash; verify_chain must say so.
    tamper: bool = False
    # Then someone who may send to the durable queue sends it the next event of a tenant's chain, hash and link
    # valid, that the log never held; the consumer must refuse it and record it, never run it.
    forge: bool = False
    # Or a role that may emit rewrites a tenant's log from some seq on, every hash recomputed and the head moved
    # along (plain verification then finds nothing), after the hourly anchoring pass: the stream's findings and
    # the anchor must both see it.
    rewrite: bool = False
    # After the rewrite is found, the operator repairs it as the runbook says: the rows restored from a
    # backup, then the anchor reset (recorded); status must be healthy again, the findings kept as history.
    repair: bool = False
    # After everything settled, the operator forces a replay of a pair the ordered ledger applied (replay
    # --event-id ... --subscription sim.ledger --force): refused, or run; never reported done and left undone.
    force_replay: bool = False
    # A deploy mid-schedule (a key of DEPLOY_KINDS; the Deploy action says when).
    deploy: str | None = None
    # This tenant's first emitter runs last year's code: it stores sim.item_created at version 1, which
    # today's durable handlers read only through the upcaster.
    legacy: str | None = None
    # The application has the ordered ledger (sim.ledger): each tenant's items applied in seq order.
    ordered: bool = False
    # After healing, the operator skips (outbox skip) each dead event an ordered subscription waits for,
    # before any replay.
    skip_dead: bool = False
    # The ordered ledger refuses this workload emit's item once (a TerminalError): a dead predecessor, its
    # followers deferred behind it until the operator replays it (it succeeds then) or skips it.
    ledger_refuses: str | None = None
    # The ordered ledger is a slow remote ledger (every run takes this long while faults are live), in a schedule
    # whose SQS may refuse a send: too slow to run deferred events in place after a batch, so each wake-up is a
    # message the consumer sends, and the refusals meet them.
    slow_ledger: timedelta | None = None
    # Batches crowded by one tenant's slow ordered work (with the slow ledger and two tenants): see Crowding.
    crowded: Crowding | None = None

    def describe(self) -> list[str]:
        """The schedule as readable lines (the head of a trace)."""
        lines = [
            f"seed {self.seed}: tenants {', '.join(self.tenants)}; emitters per tenant "
            + ", ".join(f"{t}={n}" for t, n in self.emitters.items()),
            "faults: "
            + (
                ", ".join(
                    f"{kind.value} p={rate.probability:.2f} max={rate.budget}" for kind, rate in self.faults.items()
                )
                or "none"
            ),
            f"at the end: heal, redrive what is in the DLQ{', replay dead letters' if self.replay_at_the_end else ''}",
            "actions:",
        ]
        lines.extend(f"  {_describe(action)}" for action in self.actions)
        lines.extend(f"  at drain step {step}: {_describe(action)}" for step, action in self.during_drain)
        lines.extend(f"  afterwards: {_describe(action)}" for action in self.aged)
        if self.tamper:
            lines.append("  at the end: an event in the middle of a tenant's log is rewritten, its hash recomputed")
        if self.forge:
            lines.append("  at the end: the durable queue is sent a tenant's next event, which the log never held")
        if self.rewrite:
            lines.append("  at the end: after an anchoring pass, a tenant's log is rewritten, every hash recomputed")
        if self.rewrite and self.repair:
            lines.append("  then the operator restores the rewritten rows and resets the tenant's anchor")
        if self.legacy:
            lines.append(f"  {self.legacy}/emitter0 runs last year's code: it stores sim.item_created version 1")
        if self.ordered:
            lines.append("  the application has the ordered ledger (sim.ledger)")
        if self.skip_dead:
            lines.append("  after healing: the operator skips each dead event the ordered ledger waits for")
        if self.force_replay:
            lines.append("  at the end: the operator forces a replay of an event the ordered ledger applied")
        if self.ledger_refuses:
            lines.append(f"  the ordered ledger refuses {self.ledger_refuses}'s item once (terminal)")
        if self.slow_ledger:
            lines.append(f"  the ordered ledger is slow: each run takes {self.slow_ledger.total_seconds():.1f} s")
        if self.crowded:
            busy, ledger = self.crowded.busy, self.crowded.ledger_takes.total_seconds()
            neighbour, charge = self.crowded.neighbour, self.crowded.charge_takes.total_seconds()
            lines.append(f"  {busy} has a backlog first, each of its ledger runs {ledger:.1f} s; {neighbour}'s charges")
            lines.append(f"    take {charge:.1f} s each")
        return lines


def _describe(action: Action) -> str:
    if isinstance(action, Emit):
        refused = " (refused inline)" if action.reject else ""
        size = "" if action.size == "small" else f" ({action.size.replace('_', ' ')})"
        also = "".join(f", {e.item_id}{' (refused inline)' if e.reject else ''}" for e in action.imported_with)
        verb = "imports" if also else "creates"
        who = f"{action.tenant}/emitter{action.emitter}"
        return f"{action.operation}: {who} {verb} {action.item_id}{refused}{size}{also}"
    if isinstance(action, Steps):
        return f"{action.count} pipeline step(s)"
    if isinstance(action, LateRedelivery):
        return "pipe redelivers a batch" + (" after the deduplication window" if action.after_window else "")
    if isinstance(action, Redrive):
        return f"operator: redrive ({action.method})"
    if isinstance(action, Replay):
        return "operator: replay dead letters"
    if isinstance(action, Reconcile):
        return f"operator: reconcile the last {action.days} day(s)"
    if isinstance(action, Poison):
        return f"a malformed body ({action.kind}) in {action.tenant}'s group"
    if isinstance(action, TimeJump):
        return f"{action.days} days pass; the TTL sweep runs"
    if isinstance(action, HeadRollback):
        return f"{action.tenant}'s chain head is set back one event"
    if isinstance(action, ReadOnlyPass):
        return "the anchoring pass runs; the on-call runs status and verify-chain"
    if isinstance(action, Deploy):
        return f"deploy: {DEPLOY_KINDS[action.kind]}"
    return "SQS: redeliver what is in flight"


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
    refused = _ledger_refuses(ordering, actions) if ordered else None
    forced = ordered and random.Random(f"schedule:{seed}:forced").random() < _FORCED_REPLAY_CHANCE
    actions, deploy = _with_a_deploy(random.Random(f"schedule:{seed}:deploy"), actions, ordered)
    slow = _slow_handlers(random.Random(f"schedule:{seed}:slow"))
    if slow is not None:
        faults[Fault.SLOW_HANDLER] = slow
    partial = random.Random(f"schedule:{seed}:partial")
    for kind, (chance, (low, high), (fewest, most)) in _PARTIAL_ANSWERS.items():
        if partial.random() < chance:
            faults[kind] = FaultRate(round(partial.uniform(low, high), 2), partial.randint(fewest, most))
    checks = random.Random(f"schedule:{seed}:checks")
    actions, racing = _with_read_only_passes(checks, actions)
    if racing is not None:
        faults[Fault.EMIT_DURING_CHECK] = racing
    slow_ledger = _slow_ledger(random.Random(f"schedule:{seed}:slow-ledger"), ordered, faults)
    crowding = random.Random(f"schedule:{seed}:crowded")
    actions, crowded = _crowded(crowding, actions, tenants, ordered, slow_ledger)
    return Schedule(
        seed=seed,
        tenants=tenants,
        emitters=emitters,
        actions=tuple(
            _with_imports(
                random.Random(f"schedule:{seed}:imports"),
                _with_a_head_rollback(random.Random(f"schedule:{seed}:rollback"), actions),
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
        legacy=_legacy(random.Random(f"schedule:{seed}:legacy"), tenants),
        ordered=ordered,
        skip_dead=skip_dead,
        ledger_refuses=refused,
        force_replay=forced,
        deploy=deploy,
        slow_ledger=slow_ledger,
        crowded=crowded,
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


def _with_a_deploy(rng: random.Random, actions: list[Action], ordered: bool) -> tuple[list[Action], str | None]:
    """Now and then a deploy after the first emit and before the last, so that work is in flight across it."""
    emits = [index for index, action in enumerate(actions) if isinstance(action, Emit)]
    if rng.random() >= _DEPLOY_CHANCE or len(emits) < 2:
        return actions, None
    kinds = [kind for kind in DEPLOY_KINDS if ordered or kind != "ordered"]
    kind = rng.choice(kinds)
    at = rng.randint(emits[0] + 1, emits[-1])
    return [*actions[:at], Deploy(kind), *actions[at:]], kind


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


def _slow_handlers(rng: random.Random) -> FaultRate | None:
    """Whether durable handlers take time in this schedule, and how often; a stream of its own."""
    if rng.random() >= _SLOW_CHANCE:
        return None
    (low, high), (fewest, most) = _SLOW_RATE
    return FaultRate(round(rng.uniform(low, high), 2), rng.randint(fewest, most))


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
    for kind, (chance, (low, high), (fewest, most)) in _FAULT_MENU.items():
        if rng.random() < chance:
            chosen[kind] = FaultRate(round(rng.uniform(low, high), 2), rng.randint(fewest, most))
    if Fault.RIVAL_EMIT in chosen and rng.random() < _HOT_TENANT_CHANCE / _FAULT_MENU[Fault.RIVAL_EMIT][0]:
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
