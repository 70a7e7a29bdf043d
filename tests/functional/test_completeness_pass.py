"""The completeness pass (``outbox.ops.completeness``) on moto: it reports exactly the pairs that have no outcome
past the bound, as the pair machine (``outbox.pairs``) says what an outcome is, and names a command that moves
each; its watermark keeps a pass's reads to what is new or still open.

The three ways the last review found to lose work silently are each brought about here (their end state: what the
engine left before its fix), and the pass reports each within two passes past the bound: a replay whose message
ran nothing, deferred events a deploy took out of the order, a narrowed order that waits for ever. An ordered
backlog behind a dead event, a dead pair and a pair within the bound are never reported.
"""

from __future__ import annotations

import itertools
from dataclasses import replace
from datetime import timedelta

import pytest

from outbox import keys
from outbox.inbox import DEAD, DEFERRED, REPLAYING, ClaimRecord, unclaimed_row
from outbox.log.envelope import format_timestamp
from outbox.ops.anchoring import PassSettings, completeness_pass
from outbox.ops.completeness import (
    CompletenessLog,
    CompletenessPass,
    PairRef,
    Verdict,
    catalog_data,
    catalog_from_data,
)
from outbox.ops.context import OperatorContext
from outbox.ops.ordering import skip
from outbox.ops.reconcile import reconcile
from outbox.ops.replay import plan_replay, replay
from outbox.pairs import Act, Outcome, Route, State
from outbox.pairs.machine import RULES
from outbox.subscriptions import Lane, Subscription
from outbox.workflows import workflow
from tests.functional.conftest import create_pk_sk_table
from tests.functional.inbox_harness import INBOX_TABLE, Harness, HarnessFactory, one_subscription, operator_context
from tests.functional.test_ordered_subscriptions import LEDGER, emit
from tests.functional.test_pairs_across_deploys import dead_then_deferred, dead_unordered, deploy, ledger

AUDIT_TABLE = "audit"
BOUND = timedelta(hours=23)


def with_audit(context: OperatorContext) -> OperatorContext:
    """``context`` with an audit table for the pass's watermarks."""
    create_pk_sk_table(context.dynamodb, AUDIT_TABLE)
    topology = replace(context.topology, audit_table=AUDIT_TABLE)
    return OperatorContext(
        topology, dynamodb=context.dynamodb, sqs=context.sqs, catalog=context.catalog, clock=context.now
    )


def pass_of(context: OperatorContext, *, repairs: int = 0) -> CompletenessPass:
    log = CompletenessLog(AUDIT_TABLE, context.dynamodb)
    # Every subscription of the catalog was seen by a pass a day before anything here happened
    log.first_seen([s.name for s in context.deployed.consumed()], context.now() - timedelta(days=1))
    return CompletenessPass(context, log, bound=BOUND, repairs=repairs)


def two_passes(h: Harness, context: OperatorContext, **options: int) -> list[list[tuple[str, str, str]]]:
    """(event id, subscription, state) of the pairs each of two passes found missing, an hour apart, the first
    past the bound."""
    check = pass_of(context, **options)
    h.clock.advance(BOUND + timedelta(minutes=1))
    found = []
    for _ in range(2):
        result = check.run()
        found.append(sorted((m.event_id, m.subscription, m.state) for pairs in result.missing.values() for m in pairs))
        assert result.missing_count == len(found[-1])
        h.clock.advance(timedelta(hours=1))
    return found


# -- every (state, route) of the machine --------------------------------------------------------------------


ROUTES = {
    Route.UNORDERED: Subscription("s.one", "account.*", Lane.DURABLE, lambda _d: None),
    Route.IN_ORDER: Subscription("s.one", "account.*", Lane.DURABLE, lambda _d: None, ordered=True),
    Route.LEFT_OUT: Subscription("s.one", "shipment.*", Lane.DURABLE, lambda _d: None),
}


def test_every_state_and_route_is_judged_as_the_machine_says(make_harness: HarnessFactory) -> None:
    h = make_harness(one_subscription)
    for (state, route), past in itertools.product(RULES, (False, True)):
        context = operator_context(h, [ROUTES[route]])
        if not context.dynamodb.list_tables()["TableNames"].count(AUDIT_TABLE):
            create_pk_sk_table(context.dynamodb, AUDIT_TABLE)
        context = OperatorContext(
            replace(context.topology, audit_table=AUDIT_TABLE),
            dynamodb=context.dynamodb,
            sqs=context.sqs,
            catalog=context.catalog,
            clock=context.now,
        )
        event = emit(h, "account.opened")
        ref = PairRef(event.seq, event.id, event.type, format_timestamp(event.occurred_at), "s.one")
        claim = None
        if state is not State.ABSENT:
            claim = ClaimRecord.from_item(unclaimed_row(event, "s.one", state.value, h.clock()))
        now = h.clock() + (BOUND + timedelta(minutes=1) if past else BOUND - timedelta(minutes=1))

        _, verdict, missing = pass_of(context).judge("acme", ref, claim, now)

        case = (state, route, past)
        rule = RULES[(state, route)]
        if rule.outcome in (Outcome.DONE, Outcome.SKIPPED, Outcome.LEFT_OUT):
            assert verdict is Verdict.SETTLED, case
        elif rule.outcome is Outcome.DEAD:
            assert verdict is Verdict.OPEN, case  # an outcome an operator sees; judged again, never reported
        elif rule.outcome is Outcome.IN_WORKFLOW:
            assert verdict is Verdict.OPEN, case  # its execution's own bound decides (outbox status), not this one
        elif not past:
            assert verdict is Verdict.UNDER_WAY, case
        else:  # under way, stranded, or deferred with no predecessor recorded (woken, its wake-up lost)
            assert verdict is Verdict.MISSING, case
            assert missing is not None
            # The command named moves it: the machine's own, or a reconcile where the machine says it re-sends
            if missing.repair.startswith("outbox reconcile"):
                assert rule.reconcile is Act.RESEND, (case, missing.repair)
            else:
                assert missing.repair == rule.repair.format(
                    tenant="acme", subscription="s.one", event_id=event.id, seq=event.seq
                ), case
        assert (verdict is Verdict.MISSING) == (missing is not None), case


def test_the_catalog_made_into_data_places_every_pair_as_the_catalog_does() -> None:
    subscriptions = [
        Subscription("a.b", "account.*", Lane.DURABLE, lambda _d: None),
        Subscription("c.d", "account.credited", Lane.DURABLE, lambda _d: None, ordered=True),
        Subscription("e.f", "*", Lane.LOCAL, lambda _d: None),
        Subscription("i.j", "account.opened", Lane.WORKFLOW, workflow("shop.shipping:ship")),
    ]
    from datetime import UTC, datetime

    from outbox.catalog import Catalog, Module
    from outbox.pairs import DeployedCatalog

    since = datetime(2026, 12, 1, 12, 0, 0, 250_000, tzinfo=UTC)
    subscriptions.append(
        Subscription("g.h", "account.*", Lane.DURABLE, lambda _d: None, ordered=True, ordered_since=since)
    )
    catalog = Catalog([Module("m", (), subscriptions=tuple(subscriptions))])
    data = catalog_from_data(catalog_data(catalog))
    moments = [since - timedelta(microseconds=1), since, since + timedelta(days=1)]
    for name, event_type, moment in itertools.product(
        ["a.b", "c.d", "e.f", "g.h", "i.j", "x.y"], ["account.opened", "account.credited", "shipment.booked"], moments
    ):
        assert DeployedCatalog(data.registry).place(name, event_type, moment).route == (
            DeployedCatalog(catalog.registry).place(name, event_type, moment).route
        )
    assert [s.name for s in DeployedCatalog(data.registry).consumed()] == ["a.b", "c.d", "g.h", "i.j"]
    # The data of a catalog without a WORKFLOW subscription reads as it did before there were any
    assert "workflow" not in catalog_data(Catalog([Module("m", (), subscriptions=tuple(subscriptions[:3]))]))
    with pytest.raises(ValueError, match="deploy the stack again"):
        catalog_from_data('{"v": 99, "durable": []}')


# -- what is lost, and what is not ---------------------------------------------------------------------------


class _Metrics:
    def __init__(self) -> None:
        self.published: list[tuple[str, float]] = []

    def add_metric(self, *, name: str, unit: str, value: float) -> None:
        self.published.append((name, value))


def test_a_workflow_pair_handed_off_is_present_and_one_never_handed_is_missing(make_harness: HarnessFactory) -> None:
    from outbox.audit.auditor import Metric
    from outbox.catalog import Catalog, Module
    from outbox.inbox.rows import HANDED

    # Given the deployed catalog (as the anchoring function is given it) with a WORKFLOW subscription, an event
    # whose pair was handed to its execution, and one whose pair never reached the consumer
    h = make_harness(one_subscription)
    flow = Subscription("ship.flow", "account.*", Lane.WORKFLOW, workflow("shop.shipping:ship"))
    deployed = catalog_from_data(catalog_data(Catalog([Module("m", (), subscriptions=(flow,))])))
    context = with_audit(operator_context(h, deployed.registry.subscriptions))
    handed, lost = emit(h, "account.opened"), emit(h, "account.opened")
    h.dynamodb.put_item(TableName=INBOX_TABLE, Item=unclaimed_row(handed, "ship.flow", HANDED, h.clock()))

    # Then the lost one is missing in both passes, the handed one is not, and MissingPairs counts it
    assert two_passes(h, context) == [[(lost.id, "ship.flow", "absent")]] * 2
    metrics = _Metrics()
    check = pass_of(context)
    check.metrics = metrics
    result = check.run()
    assert metrics.published == [(Metric.MISSING_PAIRS.value, 1)]
    [pair] = result.missing["acme"]
    assert pair.repair.startswith("outbox reconcile --tenant acme --subscription ship.flow --since ")
    assert result.open_pairs == 2, "the handed pair is judged again each pass, as the missing one is"


def test_a_replay_whose_message_ran_nothing_is_reported(make_harness: HarnessFactory) -> None:
    # Given a dead pair replayed (its letter resolved), and its message acknowledged by a consumer that ran nothing
    h, event = dead_unordered(make_harness)
    context = with_audit(operator_context(h))
    replay(context, plan_replay(context, tenant="acme"))
    h.sqs.purge_queue(QueueUrl=h.queue_url)
    assert h.claim_status("audit.copy", event) == REPLAYING

    # Then it is reported in both passes, with reconcile as its repair, which runs it
    found = two_passes(h, context)
    assert found == [[(event.id, "audit.copy", REPLAYING)]] * 2
    reconcile(context, h.clock() - timedelta(days=2), subscription="audit.copy")
    h.esm.drain()
    assert h.claim_status("audit.copy", event) == "COMPLETED"
    assert pass_of(context).run().missing_count == 0


def test_deferred_events_a_deploy_took_out_of_the_order_are_reported(make_harness: HarnessFactory) -> None:
    h, _applied, first, second = dead_then_deferred(make_harness)
    context = with_audit(deploy(h, [ledger(h), *[s for s in h.consumer.registry.subscriptions if s.name != LEDGER]]))

    found = two_passes(h, context)

    assert found == [[(second.id, LEDGER, DEFERRED)]] * 2  # the dead first pair has its letter: an outcome
    assert h.claim_status(LEDGER, first) == DEAD


def test_a_narrowed_order_that_waits_for_ever_is_reported(make_harness: HarnessFactory) -> None:
    h, _applied, _first, second = dead_then_deferred(make_harness)
    others = [s for s in h.consumer.registry.subscriptions if s.name != LEDGER]
    context = with_audit(deploy(h, [ledger(h, "account.credited", ordered=True), *others]))

    found = two_passes(h, context)

    assert found == [[(second.id, LEDGER, DEFERRED)]] * 2
    result = pass_of(context).run()
    [pair] = result.missing["acme"]
    assert "no longer in the order" in pair.why


def test_an_ordered_backlog_behind_a_dead_event_and_the_dead_event_are_not_missing(
    make_harness: HarnessFactory,
) -> None:
    h, _applied, first, second = dead_then_deferred(make_harness)
    context = with_audit(operator_context(h))

    assert two_passes(h, context) == [[], []]
    assert (h.claim_status(LEDGER, first), h.claim_status(LEDGER, second)) == (DEAD, DEFERRED)


def test_the_watermark_keeps_a_pass_to_what_is_new_or_open(make_harness: HarnessFactory) -> None:
    h = make_harness(one_subscription)
    context = with_audit(operator_context(h))
    check = pass_of(context)
    events = [emit(h, "account.opened") for _ in range(30)]
    for event in events:
        h.publish(event)
    h.esm.drain()
    h.clock.advance(BOUND + timedelta(minutes=1))

    first = check.run()
    assert (first.events_read, first.open_pairs, first.missing_count) == (30, 0, 0)
    # Nothing new: the next pass reads nothing, however long the log
    h.clock.advance(timedelta(hours=1))
    assert check.run().events_read == 0
    # Only what was appended since is read
    emit(h, "account.opened")
    h.clock.advance(BOUND + timedelta(minutes=1))
    assert check.run().events_read == 1


def test_a_deferred_event_whose_wake_up_was_lost_is_reported(make_harness: HarnessFactory) -> None:
    # Given seq 2 deferred behind a dead seq 1, then seq 1 skipped, and the wake-up the skip sent lost
    h, _applied, _first, second = dead_then_deferred(make_harness)
    context = with_audit(operator_context(h))
    assert skip(context, "acme", LEDGER, 1, by="oncall", reason="test").woke_seq == 2
    h.sqs.purge_queue(QueueUrl=h.queue_url)

    found = two_passes(h, context)

    assert found == [[(second.id, LEDGER, DEFERRED)]] * 2
    [pair] = pass_of(context).run().missing["acme"]
    assert pair.repair == f"outbox reconcile --tenant acme --subscription {LEDGER}"
    # The repair named runs it
    reconcile(context, None, subscription=LEDGER)
    h.esm.drain()
    assert h.claim_status(LEDGER, second) == "COMPLETED"
    assert pass_of(context).run().missing_count == 0


# -- self-repair ----------------------------------------------------------------------------------------------


def queued(h: Harness) -> int:
    attributes = h.sqs.get_queue_attributes(QueueUrl=h.queue_url, AttributeNames=["ApproximateNumberOfMessages"])
    return int(attributes["Attributes"]["ApproximateNumberOfMessages"])


@pytest.mark.parametrize("repairs", [0, 2])
def test_self_repair_resends_at_most_its_cap_a_pass_and_each_runs_once(
    make_harness: HarnessFactory, repairs: int
) -> None:
    # Given three events whose messages never reached the queue
    h = make_harness(one_subscription)
    context = with_audit(operator_context(h))
    events = [emit(h, "account.opened") for _ in range(3)]
    check = pass_of(context, repairs=repairs)
    h.clock.advance(BOUND + timedelta(minutes=1))

    passes = []
    for _ in range(3):
        result = check.run()
        passes.append((result.missing_count, result.resent, queued(h)))
        assert sum(m.resent for m in result.missing.get("acme", [])) == result.resent
        h.esm.drain()
        h.clock.advance(timedelta(hours=1))

    if repairs:
        # Each pass counts what it found missing (the alarm fires once), re-sends at most two, and they run
        assert passes == [(3, 2, 2), (1, 1, 1), (0, 0, 0)]
        assert [h.runs("shipping.book", event) for event in events] == [1, 1, 1]
    else:  # off: it only reports
        assert passes == [(3, 0, 0)] * 3
        assert [h.claim_status("shipping.book", event) for event in events] == [None] * 3


def test_self_repair_never_resends_a_pair_the_machine_leaves_to_an_operator(make_harness: HarnessFactory) -> None:
    # seq 2 deferred behind a dead seq 1, then a deploy narrows the ledger so seq 2 is no longer its: the machine
    # leaves the pair to an operator (acknowledge it), and reconcile would send it nothing
    h, _applied, _first, second = dead_then_deferred(make_harness)
    others = [s for s in h.consumer.registry.subscriptions if s.name != LEDGER]
    context = with_audit(deploy(h, [ledger(h, "account.opened", ordered=True), *others]))
    check = pass_of(context, repairs=5)
    h.clock.advance(BOUND + timedelta(minutes=1))

    result = check.run()

    [pair] = result.missing["acme"]
    assert (pair.event_id, pair.state, pair.resent, result.resent) == (second.id, DEFERRED, False, 0)
    assert pair.repair.startswith(f"outbox skip --tenant acme --subscription {LEDGER} --seq {second.seq}")
    assert queued(h) == 0


def test_a_pass_out_of_time_keeps_what_it_judged_and_the_next_goes_on_from_there(
    make_harness: HarnessFactory,
) -> None:
    h = make_harness(one_subscription)
    context = with_audit(operator_context(h))
    check = pass_of(context)
    lost = [emit(h, "account.opened") for _ in range(12)]  # never delivered: every one missing
    h.clock.advance(BOUND + timedelta(minutes=1))
    calls = iter(range(1000))

    first = check.run(time_left=lambda: 100.0 if next(calls) < 6 else 0.0)  # time for five events

    assert first.events_read == 5
    assert first.missing_count == 5
    second = check.run()
    assert second.events_read == 7
    assert sorted(m.event_id for m in second.missing["acme"]) == sorted(event.id for event in lost)


def test_a_pair_without_a_claim_older_than_the_inbox_s_memory_is_not_judged(make_harness: HarnessFactory) -> None:
    # A first pass over an old log: a completion may have been swept with its claim, so nothing can say it is lost
    h = make_harness(one_subscription)
    context = with_audit(operator_context(h))
    check = pass_of(context)
    old = emit(h, "account.opened")
    h.clock.advance(context.topology.inbox_retention)
    recent = emit(h, "account.opened")
    h.clock.advance(BOUND + timedelta(minutes=1))

    result = check.run()

    assert result.events_read == 2
    assert [m.event_id for m in result.missing["acme"]] == [recent.id]
    assert old.id != recent.id


def test_a_row_of_the_log_that_is_no_event_stops_nothing(make_harness: HarnessFactory) -> None:
    # A row rewritten into something that is no event (the chain's checks and the tamper alarm report it)
    h = make_harness(one_subscription)
    context = with_audit(operator_context(h))
    check = pass_of(context)
    first = emit(h, "account.opened")
    emit(h, "account.opened")
    last = emit(h, "account.opened")
    h.dynamodb.put_item(TableName="events", Item=keys.event_key("acme", 2))
    h.clock.advance(BOUND + timedelta(minutes=1))

    result = check.run()

    assert sorted(m.event_id for m in result.missing["acme"]) == sorted([first.id, last.id])


def test_the_settings_the_scheduled_pass_runs_with_are_remembered_for_outbox_anchor(
    make_harness: HarnessFactory,
) -> None:
    h = make_harness(one_subscription)
    context = with_audit(operator_context(h))
    log = CompletenessLog(AUDIT_TABLE, context.dynamodb)
    assert log.remembered() is None  # before the first scheduled pass
    deployed = PassSettings(catalog_data(context.catalog), bound_seconds=82_860, repairs=3)
    log.remember(deployed)
    assert log.remembered() == deployed
    redeployed = replace(deployed, bound_seconds=90_000, repairs=0)
    log.remember(redeployed)
    assert log.remembered() == redeployed
    # And the pass they make judges with the catalog they carry, whatever the operator's own catalog is
    check = completeness_pass(context.topology, redeployed, dynamodb=context.dynamodb, sqs=None, clock=h.clock)
    assert (check.bound, check.repairs) == (timedelta(seconds=90_000), 0)
    names = [s.name for s in context.deployed.durable()]
    assert names
    assert [s.name for s in check.context.deployed.durable()] == names
