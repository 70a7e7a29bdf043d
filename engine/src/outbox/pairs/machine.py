"""A pair's life, as data: the states of an (event, subscription) pair, what moves it, and what every command
may do with it under the deployed catalog.

Two tables, and nothing else decides:

- ``TRANSITIONS``: (state, step) -> the state the step leaves. A step missing from a state's row cannot happen
  to it (the write that would make it is conditioned against it).
- ``RULES``: (state, route) -> what the consumer, replay, skip, reconcile and status do with a pair in that
  state that the deployed catalog routes that way (``outbox.pairs.deployed``). A catalog change (a subscription
  removed, renamed, narrowed, moved to another lane, made ordered or unordered, ``ordered_since`` moved) never
  rewrites a row: it changes the pair's route, and so the rule that applies to it. Rows an older release wrote
  are read into the same states (``state_of``).

The machine is total: every (state, route) has a rule, and each rule leaves the pair an outcome (``Outcome``) or
names the command that moves it on (tests/unit/test_pair_machine.py enumerates them all).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Final


class State(StrEnum):
    """Where a pair is, as its claim row says (ABSENT: it has none)."""

    ABSENT = "absent"
    PENDING = "PENDING"  # claimed, under a lease (live or lapsed)
    COMPLETED = "COMPLETED"
    DEAD = "DEAD"  # with a dead letter the operator sees
    REPLAYING = "REPLAYING"  # a replay or a reconcile's message is on its way
    DEFERRED = "DEFERRED"  # an ordered pair waiting for its predecessor
    SKIPPED = "SKIPPED"  # an operator's decision: never run
    HANDED = "HANDED"  # handed to a workflow: a durable execution runs it, its end settles it (outbox.workflows)


class Route(StrEnum):
    """What the deployed catalog does with a pair now."""

    UNORDERED = "unordered"  # runs on the lease or the DynamoDB-only path
    IN_ORDER = "in_order"  # runs in its tenant's order, through the ordered gate
    LEFT_OUT = "left_out"  # the catalog no longer runs it: removed, renamed, narrowed, or off the DURABLE lane


class Step(StrEnum):
    """What happens to a pair: deliveries and their outcomes, leases and the deadline, order, repairs."""

    CLAIM = "claim"  # a delivery takes the row (absent, lapsed, replaying, deferred)
    COMMIT = "commit"  # the completion commits (with the handler's writes)
    COMMIT_DIRECTLY = "commit_directly"  # the DynamoDB-only path: writes and a COMPLETED marker, no claim
    RELEASE = "release"  # a retryable failure gives the lease back
    LAPSE = "lapse"  # the worker died or the deadline cut it off: the lease runs out, a redelivery takes over
    DIE = "die"  # a terminal failure, the last attempt, a contract broken: dead, with a dead letter
    UNVERIFIABLE = "unverifiable"  # older than the inbox's memory, no row: dead, never guessed
    DEFER = "defer"  # an ordered pair whose predecessor is not applied
    WAKE = "wake"  # its predecessor applied (or skipped, or left the order): sent back to the queue
    REPLAY = "replay"  # an operator reruns dead work
    SKIP = "skip"  # an operator lets it go without running (in order: the watermark moves past it)
    RECONCILE = "reconcile"  # a pair the stream lost: a REPLAYING row, and its message re-sent
    LEAVE_OUT = "leave_out"  # a repair's message reached a consumer whose catalog no longer runs the pair
    CONFLICT = "conflict"  # other content under its id: recorded, never run; the pair itself is untouched
    HAND_OFF = "hand_off"  # a WORKFLOW pair's execution started: the claim records its ARN
    END_SUCCEEDED = "end_succeeded"  # its execution ended SUCCEEDED (observed by outbox.workflows.ends)
    END_FAILED = "end_failed"  # ended FAILED, TIMED_OUT or STOPPED: dead, with a letter naming the execution


TRANSITIONS: Final[dict[tuple[State, Step], State]] = {
    (State.ABSENT, Step.CLAIM): State.PENDING,
    (State.ABSENT, Step.COMMIT_DIRECTLY): State.COMPLETED,
    (State.ABSENT, Step.UNVERIFIABLE): State.DEAD,
    (State.ABSENT, Step.RECONCILE): State.REPLAYING,
    (State.ABSENT, Step.SKIP): State.SKIPPED,
    (State.ABSENT, Step.CONFLICT): State.ABSENT,
    (State.PENDING, Step.CLAIM): State.PENDING,  # a take-over, once the lease lapsed
    (State.PENDING, Step.COMMIT): State.COMPLETED,
    (State.PENDING, Step.RELEASE): State.PENDING,
    (State.PENDING, Step.LAPSE): State.PENDING,
    (State.PENDING, Step.DIE): State.DEAD,
    (State.PENDING, Step.DEFER): State.DEFERRED,
    (State.PENDING, Step.RECONCILE): State.PENDING,  # a lease long lapsed whose message was lost: re-sent
    (State.PENDING, Step.SKIP): State.SKIPPED,  # only once its lease lapsed
    (State.PENDING, Step.CONFLICT): State.PENDING,
    (State.PENDING, Step.LEAVE_OUT): State.DEAD,  # a repair's message for it, once its lease lapsed
    (State.DEAD, Step.REPLAY): State.REPLAYING,
    (State.DEAD, Step.SKIP): State.SKIPPED,
    (State.DEAD, Step.CONFLICT): State.DEAD,
    (State.REPLAYING, Step.CLAIM): State.PENDING,
    (State.REPLAYING, Step.REPLAY): State.REPLAYING,  # a replay that stopped before it re-sent: sent again
    (State.REPLAYING, Step.RECONCILE): State.REPLAYING,
    (State.REPLAYING, Step.LEAVE_OUT): State.DEAD,
    (State.REPLAYING, Step.SKIP): State.SKIPPED,
    (State.REPLAYING, Step.CONFLICT): State.REPLAYING,
    (State.DEFERRED, Step.CLAIM): State.PENDING,
    (State.DEFERRED, Step.WAKE): State.DEFERRED,  # its message is on the queue again; the claim takes it
    (State.DEFERRED, Step.RECONCILE): State.DEFERRED,
    (State.DEFERRED, Step.REPLAY): State.DEFERRED,  # out of its order: re-sent as it is (DEFERRED is claimable)
    (State.DEFERRED, Step.LEAVE_OUT): State.DEAD,
    (State.DEFERRED, Step.SKIP): State.SKIPPED,
    (State.DEFERRED, Step.CONFLICT): State.DEFERRED,
    (State.COMPLETED, Step.CLAIM): State.COMPLETED,  # a duplicate finds it done
    (State.COMPLETED, Step.REPLAY): State.REPLAYING,  # forced only: the operator asked to run it again
    (State.COMPLETED, Step.SKIP): State.SKIPPED,  # in order only: completed before the order started
    (State.COMPLETED, Step.CONFLICT): State.COMPLETED,
    (State.SKIPPED, Step.CLAIM): State.SKIPPED,
    (State.SKIPPED, Step.SKIP): State.SKIPPED,  # a rerun of the skip: only its wake-up is sent again
    (State.SKIPPED, Step.CONFLICT): State.SKIPPED,
    (State.PENDING, Step.HAND_OFF): State.HANDED,
    (State.HANDED, Step.CLAIM): State.HANDED,  # a duplicate delivery finds it handed: nothing starts again
    (State.HANDED, Step.END_SUCCEEDED): State.COMPLETED,
    (State.HANDED, Step.END_FAILED): State.DEAD,
    (State.HANDED, Step.CONFLICT): State.HANDED,
}

# States whose pair may be taken by a delivery's claim (PENDING only once its lease lapsed).
CLAIMABLE: Final = frozenset({State.ABSENT, State.PENDING, State.REPLAYING, State.DEFERRED})
FINAL: Final = frozenset({State.COMPLETED, State.SKIPPED})


class Outcome(StrEnum):
    """What a pair has come to, as the completeness of a tenant's log counts it."""

    DONE = "done"  # COMPLETED
    SKIPPED = "skipped"  # an operator's decision
    DEAD = "dead"  # an open dead letter says so
    LEFT_OUT = "left_out"  # the deployed catalog does not run it (a deploy's decision, visible in the catalog)
    UNDER_WAY = "under_way"  # a delivery, a retry, a replay or a wake-up is on its way
    WAITING = "waiting"  # deferred behind its predecessor, in its order
    STRANDED = "stranded"  # nothing will move it by itself: status names the command that does
    IN_WORKFLOW = "in_workflow"  # a durable execution runs it; its end, observed by the settle pass, ends it


class Act(StrEnum):
    """What one command does with a pair."""

    RUN = "run"  # the consumer runs it (claims it)
    NOTHING = "nothing"  # done, or in someone else's hands
    RESEND = "resend"  # replay or reconcile re-sends its event
    MARK_DEAD = "mark_dead"  # the consumer records it dead: a repair message for a pair the catalog no longer runs
    SKIP_IN_ORDER = "skip_in_order"  # the watermark moves past it (outbox.ops.ordering.skip)
    ACKNOWLEDGE = "acknowledge"  # SKIPPED and its dead letter resolved, no order involved
    REFUSE = "refuse"


@dataclass(frozen=True)
class Rule:
    """What each command does with a pair of one (state, route), and what status says of it."""

    consumer: Act  # when a delivery (or a repair's message naming it) arrives
    replay: Act
    skip: Act
    reconcile: Act  # a reconcile that selects it
    outcome: Outcome
    why: str  # what status and a refusal say of it
    # For STRANDED: the command status names. Placeholders: {tenant} {subscription} {event_id} {seq}.
    repair: str = ""


_LEFT_OUT_WHY = "the deployed catalog no longer runs it ({why})"
_ACK = 'outbox skip --tenant {tenant} --subscription {subscription} --seq {seq} --reason "..."'
_REPLAY = "outbox replay --tenant {tenant} --event-id {event_id} --subscription {subscription}"
_RECONCILE_OUT_OF_ORDER = "outbox reconcile --tenant {tenant} --subscription {subscription}"

RULES: Final[dict[tuple[State, Route], Rule]] = {
    # -- nothing recorded yet: a delivery creates the claim; a reconcile re-sends a lost one ------------------
    (State.ABSENT, Route.UNORDERED): Rule(
        Act.RUN, Act.REFUSE, Act.REFUSE, Act.RESEND, Outcome.UNDER_WAY, "not delivered yet"
    ),
    (State.ABSENT, Route.IN_ORDER): Rule(
        Act.RUN, Act.REFUSE, Act.SKIP_IN_ORDER, Act.RESEND, Outcome.UNDER_WAY, "not delivered yet"
    ),
    (State.ABSENT, Route.LEFT_OUT): Rule(
        Act.NOTHING, Act.REFUSE, Act.REFUSE, Act.NOTHING, Outcome.LEFT_OUT, _LEFT_OUT_WHY
    ),
    # -- claimed: its lease decides; a lapsed one is taken over by the redelivery --------------------------
    (State.PENDING, Route.UNORDERED): Rule(
        Act.RUN, Act.REFUSE, Act.REFUSE, Act.RESEND, Outcome.UNDER_WAY, "running or being retried"
    ),
    (State.PENDING, Route.IN_ORDER): Rule(
        Act.RUN, Act.REFUSE, Act.SKIP_IN_ORDER, Act.RESEND, Outcome.UNDER_WAY, "running or being retried"
    ),
    # A run under way when a deploy left it out: its own message finishes it (the running code still has it).
    # A repair's message naming it (its wake-up, a reconcile's re-send) that finds its lease lapsed makes it dead
    # with a letter that says why, as for a replay: never acknowledged with the pair still claimed by no one.
    # Its own message, redelivered, no longer names it: a window reconcile re-sends to it once its lease is long
    # lapsed (a run cut short by the deploy), and that message makes it dead.
    (State.PENDING, Route.LEFT_OUT): Rule(
        Act.MARK_DEAD, Act.REFUSE, Act.ACKNOWLEDGE, Act.RESEND, Outcome.STRANDED, _LEFT_OUT_WHY, _ACK
    ),
    # -- final ----------------------------------------------------------------------------------------------
    (State.COMPLETED, Route.UNORDERED): Rule(
        Act.NOTHING, Act.REFUSE, Act.REFUSE, Act.NOTHING, Outcome.DONE, "completed"
    ),
    # Completed before its subscription was ordered (no watermark knows it): a skip moves the order past it.
    (State.COMPLETED, Route.IN_ORDER): Rule(
        Act.NOTHING, Act.REFUSE, Act.SKIP_IN_ORDER, Act.NOTHING, Outcome.DONE, "completed"
    ),
    (State.COMPLETED, Route.LEFT_OUT): Rule(
        Act.NOTHING, Act.REFUSE, Act.REFUSE, Act.NOTHING, Outcome.DONE, "completed"
    ),
    **{
        (State.SKIPPED, route): Rule(
            Act.NOTHING, Act.NOTHING, Act.NOTHING, Act.NOTHING, Outcome.SKIPPED, "skipped by an operator"
        )
        for route in (Route.UNORDERED, Route.LEFT_OUT)
    },
    # Skipped in its order (the watermark is past it: a rerun only wakes what follows), or acknowledged outside
    # any order (while its subscription was unordered, or left it out) and in an order again since a deploy: no
    # watermark heard of that, so the skip moves the order past it, as for a pair completed before the order.
    (State.SKIPPED, Route.IN_ORDER): Rule(
        Act.NOTHING, Act.NOTHING, Act.SKIP_IN_ORDER, Act.NOTHING, Outcome.SKIPPED, "skipped by an operator"
    ),
    # -- dead: only an operator moves it, by replay where the catalog runs it, else by acknowledging it --------
    (State.DEAD, Route.UNORDERED): Rule(
        Act.NOTHING, Act.RESEND, Act.ACKNOWLEDGE, Act.NOTHING, Outcome.DEAD, "dead", _REPLAY
    ),
    (State.DEAD, Route.IN_ORDER): Rule(
        Act.NOTHING, Act.RESEND, Act.SKIP_IN_ORDER, Act.NOTHING, Outcome.DEAD, "dead", _REPLAY
    ),
    (State.DEAD, Route.LEFT_OUT): Rule(
        Act.NOTHING, Act.REFUSE, Act.ACKNOWLEDGE, Act.NOTHING, Outcome.DEAD, _LEFT_OUT_WHY, _ACK
    ),
    # -- a replay's (or reconcile's) message on its way -------------------------------------------------------
    (State.REPLAYING, Route.UNORDERED): Rule(
        Act.RUN, Act.RESEND, Act.REFUSE, Act.RESEND, Outcome.UNDER_WAY, "a replay of it is on its way"
    ),
    (State.REPLAYING, Route.IN_ORDER): Rule(
        Act.RUN, Act.RESEND, Act.SKIP_IN_ORDER, Act.RESEND, Outcome.UNDER_WAY, "a replay of it is on its way"
    ),
    # Its message runs nothing now: the consumer makes it dead again with an open dead letter that says why,
    # so a replay that raced a deploy is never reported done while nothing runs. A repair cut short before it sent
    # that message: a reconcile sends it.
    (State.REPLAYING, Route.LEFT_OUT): Rule(
        Act.MARK_DEAD, Act.REFUSE, Act.ACKNOWLEDGE, Act.RESEND, Outcome.STRANDED, _LEFT_OUT_WHY, _ACK
    ),
    # -- deferred behind its predecessor ------------------------------------------------------------------------
    (State.DEFERRED, Route.IN_ORDER): Rule(
        Act.RUN, Act.REFUSE, Act.SKIP_IN_ORDER, Act.RESEND, Outcome.WAITING, "waiting for its predecessor"
    ),
    # Taken out of the order by a deploy (made unordered, or ordered_since moved past it): no wake-up will
    # come, so reconcile (or a replay of it) re-sends it, and it runs the unordered way.
    (State.DEFERRED, Route.UNORDERED): Rule(
        Act.RUN,
        Act.RESEND,
        Act.ACKNOWLEDGE,
        Act.RESEND,
        Outcome.STRANDED,
        "deferred, and no longer part of its subscription's order: no wake-up will come",
        _RECONCILE_OUT_OF_ORDER,
    ),
    (State.DEFERRED, Route.LEFT_OUT): Rule(
        Act.MARK_DEAD, Act.REFUSE, Act.ACKNOWLEDGE, Act.NOTHING, Outcome.STRANDED, _LEFT_OUT_WHY, _ACK
    ),
    # -- handed to a workflow: its execution runs whatever the catalog says now; only its end moves it ----------
    # A deploy that removes the subscription, or moves it off WORKFLOW, stops no execution: its end still settles
    # the pair (by the ARN on the claim). Replay and skip refuse a running execution: stop it first (its end,
    # STOPPED, makes the pair dead, and dead work is replayed or skipped).
    **{
        (State.HANDED, route): Rule(
            Act.NOTHING,
            Act.REFUSE,
            Act.REFUSE,
            Act.NOTHING,
            Outcome.IN_WORKFLOW,
            "handed to a workflow: its durable execution is running",
        )
        for route in Route
    },
}


def rule(state: State, route: Route) -> Rule:
    """What every command does with a pair in ``state`` that the deployed catalog routes ``route``."""
    return RULES[(state, route)]


def after(state: State, step: Step) -> State | None:
    """The state ``step`` leaves a pair in ``state`` in; None when it cannot happen to it."""
    return TRANSITIONS.get((state, step))


def state_of(status: str | None) -> State:
    """A claim row's status (None: no row) as a state. Every release so far wrote these same names."""
    if status is None:
        return State.ABSENT
    try:
        return State(status)
    except ValueError:
        raise ValueError(f"unknown claim status {status!r}: a newer engine's row? Upgrade the operator tools") from None
