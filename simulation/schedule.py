"""What one seed means: a small workload and a fault schedule, both drawn from ``random.Random(seed)``.

The schedule is data, generated before anything runs, so it can be printed in a trace and read. Faults
that happen *inside* the pipeline (a crash, a throttle) cannot be placed in advance, because where the
pipeline is at any moment is an outcome, not an input; for those the schedule fixes a rate and a budget,
and ``simulation.chaos`` decides at each opportunity from a random stream of its own (the approach of
FoundationDB's BUGGIFY). Everything else (emits, pipeline steps, operator actions) is an ordered list.

One file: the schedule is data, and every part of it is read with its description (a trace's head prints them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from enum import StrEnum


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
    # The answer to an ordered completion that events wait behind (deferred) is lost after it committed, and
    # the SDK does not re-send it: only a fresh read of the watermark shows the event applied, and what waits
    # behind it must still be woken.
    WAKING_ANSWER_LOST = "waking_answer_lost"
    # The operator runs ``outbox reconcile`` while a DynamoDB-only pair runs with no claim (the direct path:
    # nothing in the inbox says it runs): the reconcile writes the pair's REPLAYING row and sends it again, so
    # the run's commit must apply nothing, and a second run may start only if the invocation has time for it.
    RECONCILE_DURING_RUN = "reconcile_during_run"
    # A workload emit comes from a newer engine than the consumers run (its emitters deployed first): its envelope
    # has fields this engine does not know, hashed as every field is.
    NEWER_EMITTER = "newer_emitter"
    # The WORKFLOW lane (a schedule with the shipping workflow, sim.ship): a start applies and its answer is lost (a
    # 500: the consumer sees an error, and finds the execution by its name), Lambda throttles a start before it
    # applies (the attempt fails: the next receive starts it), or the worker dies right after a start applied; the
    # carrier refuses (the execution fails), never answers (its timeout passes), or the operator stops an execution
    # by hand (StopDurableExecution); the notice of an execution's end never comes, or comes twice.
    WORKFLOW_START_LOST = "workflow_start_lost"
    WORKFLOW_START_CRASH = "workflow_start_crash"
    WORKFLOW_FAILED = "workflow_failed"
    WORKFLOW_TIMED_OUT = "workflow_timed_out"
    WORKFLOW_STOPPED = "workflow_stopped"
    WORKFLOW_NOTICE_LOST = "workflow_notice_lost"
    WORKFLOW_NOTICE_DUPLICATED = "workflow_notice_duplicated"
    WORKFLOW_START_THROTTLED = "workflow_start_throttled"


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
FAULT_MENU: dict[Fault, tuple[float, tuple[float, float], tuple[int, int]]] = {
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
# Partial answers and refused sends (drawn from a stream of their own): how often, their rate and budget.
PARTIAL_ANSWERS: dict[Fault, tuple[float, tuple[float, float], tuple[int, int]]] = {
    Fault.UNPROCESSED_KEYS: (0.3, (0.2, 0.6), (1, 4)),
    Fault.SEND_REFUSED: (0.35, (0.3, 0.8), (1, 3)),
}

DEPLOY_KINDS: dict[str, str] = {
    "ordered": "sim.ledger becomes ordered, its order starting at the switch",
    "added": "sim.tally is added, and the operator backfills it (reconcile --subscription sim.tally --since ...)",
    "removed": "sim.tally is removed",
    "narrowed": "sim.tally's glob narrows from sim.item_* to sim.item_created",
    "version": "sim.item_created goes to version 3 (a channel field), with its upcaster from version 2",
    # The deploys of a pair's route (outbox.pairs), drawn from a stream of their own (simulation.drawing): each goes
    # out while the work it changes is dead or deferred, and the operator then does what outbox status says.
    "ledger_narrowed": "sim.ledger's glob narrows from sim.item_* to sim.item_noted while its order waits behind a "
    "dead sim.item_created",
    "ledger_unordered": "sim.ledger is made unordered while events wait deferred behind a dead one",
    "ledger_since_moved": "sim.ledger's ordered_since moves to the switch, past a dead event and those deferred "
    "behind it",
    "tally_to_local": "sim.tally moves from the DURABLE lane to LOCAL while one of its pairs is dead",
}
# The deploys that change a pair's route while its work is dead or deferred (the operator follows outbox status).
ROUTE_DEPLOYS = ("ledger_narrowed", "ledger_unordered", "ledger_since_moved", "tally_to_local")
# The deploys of the ledger's route: only in a schedule with the ledger, whose order waits behind a dead item.
LEDGER_ROUTE_DEPLOYS = ("ledger_narrowed", "ledger_unordered", "ledger_since_moved")


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
class Upgrade:
    """The consumers ran the previous release (0.6.0) until now and today's engine from here on: every claim row
    written so far holds the digest that release wrote (``simulation.upgrade_actor``)."""


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
    | Upgrade
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
    # Right after the repair's anchor reset, in its second, a row below the new anchor is rewritten again (its hash
    # recomputed): the reset must not take it for one it dealt with, and status must show it.
    rewrite_after_reset: bool = False
    # After the forger, a forged batch: for each tenant, copies of up to two of its items at places the log holds
    # (other content, hashes that match it) and its next event: one incident, one failure group of each refusal.
    forge_batch: bool = False
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
    # sim.tally (in a schedule whose deploy moves it to LOCAL) refuses this workload emit's item once (terminal).
    tally_refuses: str | None = None
    # Right before a deploy of ROUTE_DEPLOYS, the operator replays the dead pair it changes: the replay's message
    # reaches the new code.
    replay_races_deploy: bool = False
    # The application has the shipping workflow (sim.ship, Lane.WORKFLOW): a durable execution per item.
    workflow: bool = False

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
        if self.rewrite and self.repair and self.rewrite_after_reset:
            lines.append("  and in the reset's second a row below the new anchor is rewritten again")
        if self.forge_batch:
            lines.append(
                "  at the end: a forged batch, each tenant's items copied with other content, and its next event"
            )
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
        if self.tally_refuses:
            lines.append(f"  sim.tally refuses {self.tally_refuses}'s item once (terminal)")
        if self.replay_races_deploy:
            lines.append("  right before the deploy, the operator replays the dead pair it changes")
        if self.workflow:
            lines.append("  the application has the shipping workflow (sim.ship, a durable execution per item)")
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
    if isinstance(action, Upgrade):
        return "the consumers are upgraded from 0.6.0: the claim rows so far hold the digest it wrote"
    return "SQS: redeliver what is in flight"
