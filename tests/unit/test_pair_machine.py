"""The pair's machine is total and loses, doubles and blocks nothing: every (state, route) and every catalog change
is enumerated here, not sampled (outbox.pairs.machine, outbox.pairs.deployed)."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import pytest

from outbox.pairs import Act, DeployedCatalog, Outcome, Route, State, Step, rule
from outbox.pairs.machine import FINAL, RULES, TRANSITIONS, after, state_of
from outbox.subscriptions import Lane, Subscription, SubscriptionRegistry
from outbox.workflows import workflow

EVERY_PAIR = list(itertools.product(State, Route))
# What each act of a command does to the pair, as a step of the machine: an act with no such transition from the
# pair's state would be a command the machine does not allow (or a write its condition refuses).
STEP_OF: dict[Act, Step] = {
    Act.RUN: Step.CLAIM,
    Act.RESEND: Step.REPLAY,
    Act.MARK_DEAD: Step.LEAVE_OUT,
    Act.SKIP_IN_ORDER: Step.SKIP,
    Act.ACKNOWLEDGE: Step.SKIP,
}
# A message for the pair is on its way in these states: whatever the route, its arrival must leave an outcome.
ON_ITS_WAY = {State.REPLAYING, State.DEFERRED}


def test_every_state_and_route_has_one_rule() -> None:
    assert set(RULES) == set(EVERY_PAIR)


@pytest.mark.parametrize(("state", "route"), EVERY_PAIR)
def test_every_act_is_a_transition_the_machine_has(state: State, route: Route) -> None:
    found = rule(state, route)
    for command, act in (("consumer", found.consumer), ("replay", found.replay), ("skip", found.skip)):
        if act in STEP_OF:
            assert after(state, STEP_OF[act]) is not None, f"{command} does {act} to a {state} pair: no such transition"
    if found.reconcile is Act.RESEND:
        assert after(state, Step.RECONCILE) is not None


@pytest.mark.parametrize(("state", "route"), EVERY_PAIR)
def test_nothing_is_doubled(state: State, route: Route) -> None:
    found = rule(state, route)
    if state in FINAL or state in (State.DEAD, State.HANDED):
        assert found.consumer is not Act.RUN, "a delivery runs done, skipped, dead or handed work again"
    if state is State.HANDED:
        # A running execution is the pair's one run: nothing sends it again while it runs.
        assert found.replay is not Act.RESEND
        assert found.reconcile is not Act.RESEND
    if state in FINAL:
        assert found.replay is not Act.RESEND
        assert found.reconcile is not Act.RESEND
    if route is Route.LEFT_OUT:
        assert found.consumer is not Act.RUN
        assert found.replay is not Act.RESEND
        # A reconcile's message for a pair the catalog no longer runs may only make it dead (with its letter)
        assert found.reconcile is not Act.RESEND or found.consumer is Act.MARK_DEAD


@pytest.mark.parametrize(("state", "route"), EVERY_PAIR)
def test_nothing_is_lost_or_blocked(state: State, route: Route) -> None:
    """Each pair has an outcome, or is under way, or names the command that moves it, and that command does."""
    found = rule(state, route)
    if found.outcome in (Outcome.DEAD, Outcome.STRANDED):
        assert found.repair, f"{state} {route}: nothing says what moves it"
        command = found.repair.split()[1]
        act = {"replay": found.replay, "skip": found.skip, "reconcile": found.reconcile}[command]
        assert act not in (Act.REFUSE, Act.NOTHING), f"{state} {route}: status names {command}, which refuses it"
    if found.outcome is Outcome.DEAD:
        # Dead work has two ways on: run again (where the catalog runs it), or an operator's acknowledgement.
        assert found.skip in (Act.ACKNOWLEDGE, Act.SKIP_IN_ORDER)
    if state in ON_ITS_WAY:
        assert found.consumer in (Act.RUN, Act.MARK_DEAD), (
            f"a {state} pair's message arrives and nothing happens: acknowledged with no outcome"
        )
    if state in (State.PENDING, State.REPLAYING) and found.consumer is Act.MARK_DEAD:
        # Its own message (a redelivery, or a repair cut short before it sent one) may never name it again: a
        # reconcile must send the message that makes it dead, or it would look under way for ever.
        assert found.reconcile is Act.RESEND, f"{state} {route}: nothing sends the message its rule waits for"
    if found.outcome is Outcome.UNDER_WAY:
        assert found.consumer is Act.RUN, "under way, but no delivery would take it"
    if found.outcome is Outcome.IN_WORKFLOW:
        # Its execution's end is what moves it, whichever way it ends: each way is a transition to an outcome.
        assert after(state, Step.END_SUCCEEDED) is State.COMPLETED
        assert after(state, Step.END_FAILED) is State.DEAD, "a failed execution must leave an open dead letter"


def test_only_an_operator_moves_a_pair_out_of_a_final_state() -> None:
    for (state, step), target in TRANSITIONS.items():
        if state in FINAL and target is not state:
            assert step in (Step.REPLAY, Step.SKIP), f"{state} --{step}--> {target}"


def test_every_claim_status_reads_as_a_state_and_an_unknown_one_is_refused() -> None:
    for state in State:
        if state is not State.ABSENT:
            assert state_of(state.value) is state
    assert state_of(None) is State.ABSENT
    with pytest.raises(ValueError, match="newer engine"):
        state_of("HANDED_TO_A_ROBOT")


# -- every catalog change, from every state -------------------------------------------------------------------

SINCE = datetime(2026, 12, 1, tzinfo=UTC)
EARLY, LATE = SINCE - timedelta(days=1), SINCE + timedelta(days=1)
NAME = "ledger.fold"


def _handler(_delivery: object) -> None:
    return None


def catalog(**options: object) -> DeployedCatalog:
    base: dict[str, object] = {"pattern": "account.*", "lane": Lane.DURABLE, "handler": _handler}
    base.update(options)
    if base.pop("removed", False):
        return DeployedCatalog(SubscriptionRegistry.of([]))
    if base.pop("renamed", False):
        return DeployedCatalog(SubscriptionRegistry.of([Subscription("ledger.fold2", **base)]))  # type: ignore[arg-type]
    return DeployedCatalog(SubscriptionRegistry.of([Subscription(NAME, **base)]))  # type: ignore[arg-type]


CHANGES = {
    "unchanged": catalog(),
    "made ordered": catalog(ordered=True),
    "made ordered since": catalog(ordered=True, ordered_since=SINCE),
    "narrowed": catalog(pattern="account.credited"),
    "narrowed, ordered": catalog(pattern="account.credited", ordered=True),
    "moved to LOCAL": catalog(lane=Lane.LOCAL),
    "moved to BEST_EFFORT": catalog(lane=Lane.BEST_EFFORT),
    "moved to WORKFLOW": catalog(lane=Lane.WORKFLOW, handler=workflow("shop.shipping:handler")),
    "removed": catalog(removed=True),
    "renamed": catalog(renamed=True),
}
EXPECTED = {
    "unchanged": Route.UNORDERED,
    "made ordered": Route.IN_ORDER,
    "narrowed": Route.LEFT_OUT,
    "narrowed, ordered": Route.LEFT_OUT,
    "moved to LOCAL": Route.LEFT_OUT,
    "moved to BEST_EFFORT": Route.LEFT_OUT,
    "moved to WORKFLOW": Route.UNORDERED,  # the consumer still runs it: it hands it to a durable execution
    "removed": Route.LEFT_OUT,
    "renamed": Route.LEFT_OUT,
}


@pytest.mark.parametrize("change", sorted(CHANGES))
@pytest.mark.parametrize("occurred_at", [EARLY, LATE], ids=["before-since", "after-since"])
def test_every_catalog_change_routes_a_pair_and_says_why_when_it_leaves_it_out(
    change: str, occurred_at: datetime
) -> None:
    placement = CHANGES[change].place(NAME, "account.opened", occurred_at)
    expected = EXPECTED.get(change) or (Route.IN_ORDER if occurred_at >= SINCE else Route.UNORDERED)
    assert placement.route is expected
    assert (placement.subscription is None) == (expected is Route.LEFT_OUT)
    if expected is Route.LEFT_OUT:
        assert NAME in placement.left_out_because
    for state in State:  # and whatever the pair's state, the change leaves it a rule: the machine is total
        assert placement.rule(None if state is State.ABSENT else state.value) is rule(state, expected)


def test_the_time_is_read_only_when_ordered_since_decides() -> None:
    def unreadable() -> str:
        raise AssertionError("read the event's time for a subscription whose order has no start")

    assert CHANGES["made ordered"].place(NAME, "account.opened", unreadable).route is Route.IN_ORDER
    assert CHANGES["made ordered since"].place(NAME, "account.opened", lambda: "2026-12-02T00:00:00.000Z").route is (
        Route.IN_ORDER
    )
