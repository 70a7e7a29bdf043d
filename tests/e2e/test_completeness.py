"""Nothing goes missing silently, on the local runtime: the hourly completeness pass (``outbox.ops.completeness``,
run by the anchoring function from the catalog made into data at synth) counts every durable pair with no outcome
past the bound as ``MissingPairs``, and ``MissingPairsAlarm`` as synthesized (evaluated here on what each pass
published) fires on it; ``outbox status`` names each with the command that repairs it. Each way of losing a
message below (the queue purged, a message deleted by hand, a consumer deployed that acknowledges without running)
raises it within two passes past the bound; the busy, slow and ordered cases that are no loss never do. With
self-repair on, the pass re-sends at most its cap a pass until every pair completed; ``outbox anchor`` runs the
same pass by hand."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from outbox.audit.auditor import Metric
from outbox.local import faults
from outbox.local.pipe import PipeFaults, reverse_items
from outbox.subscriptions import Lane
from outbox_cdk import audit
from stacks.app_factory import STACK_NAME
from tests.conftest import Synthesized
from tests.e2e.backends import LocalBackend, claim_statuses
from tests.e2e.test_liveness import last_pass_metrics
from tests.e2e.test_pipeline import order_and_pay, unique
from tests.e2e.test_runbook import operations, outbox
from tests.e2e.test_tamper_evidence import run_anchoring


def bound(local: LocalBackend) -> timedelta:
    return timedelta(seconds=int(local.runtime.function("AnchoringFunctionName").env["COMPLETENESS_BOUND_SECONDS"]))


def missing_after_two_passes(local: LocalBackend) -> list[int]:
    """The MissingPairs of two passes an hour apart, the first one past the bound."""
    local.runtime.clock.advance(bound(local) + timedelta(minutes=1))
    counts = []
    for _ in range(2):
        run_anchoring(local)
        counts.append(last_pass_metrics(local)[Metric.MISSING_PAIRS.value][0])
        local.runtime.clock.advance(timedelta(hours=1))
    return counts


AlarmStates = Callable[[list[int]], list[str]]


@pytest.fixture
def alarm(synthesized: Synthesized) -> AlarmStates:
    return missing_pairs_alarm(synthesized)


def missing_pairs_alarm(synthesized: Synthesized) -> AlarmStates:
    """``MissingPairsAlarm`` as synthesized, evaluated on each pass's ``MissingPairs`` (the local runtime has no
    CloudWatch): its state after each pass, one datapoint an hour, one period each."""
    [properties] = [
        resource["Properties"]
        for logical_id, resource in synthesized.template(STACK_NAME)["Resources"].items()
        if resource["Type"] == "AWS::CloudWatch::Alarm" and "MissingPairsAlarm" in logical_id
    ]
    assert properties["MetricName"] == Metric.MISSING_PAIRS.value
    assert (properties["Statistic"], properties["Period"]) == ("Maximum", audit.ANCHOR_SCHEDULE.to_seconds())
    assert (properties["EvaluationPeriods"], properties["DatapointsToAlarm"]) == (1, 1)
    assert properties["ComparisonOperator"] == "GreaterThanThreshold"

    def states(counts: list[int]) -> list[str]:
        return ["ALARM" if count > properties["Threshold"] else "OK" for count in counts]

    return states


def durable_pairs(local: LocalBackend, event_type: str) -> int:
    registry = operations(local).catalog.registry
    return len(registry.matching(event_type, Lane.DURABLE))


def purge(local: LocalBackend) -> None:
    local.client("sqs").purge_queue(QueueUrl=local.output("DurableQueueUrl"))


def delete_by_hand(local: LocalBackend) -> None:
    sqs, url = local.client("sqs"), local.output("DurableQueueUrl")
    while messages := sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", []):
        for message in messages:
            sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])


def paid_then_lost(local: LocalBackend, lose: Callable[[LocalBackend], None]) -> tuple[str, str, int]:
    """After a pass that has seen the catalog, a new tenant's order paid whose messages ``lose`` takes off the
    durable queue: (the tenant, its payment's event id, the durable pairs of both events, none with a claim)."""
    run_anchoring(local)
    local.runtime.clock.advance(timedelta(seconds=1))
    tenant = unique("tenant")
    payment = order_and_pay(local, tenant)
    local.runtime.pipe("RelayPipeName").drain()
    lose(local)
    local.settle()
    assert claim_statuses(local, payment) == {}
    return tenant, payment, durable_pairs(local, "order.created") + durable_pairs(local, "payment.completed")


@pytest.mark.parametrize("lose", [purge, delete_by_hand], ids=["purged queue", "deleted by hand"])
def test_a_message_lost_on_its_queue_raises_the_alarm_and_status_names_the_repair(
    local: LocalBackend, lose: Callable[[LocalBackend], None], tmp_path: Path, alarm: AlarmStates
) -> None:
    # Given a pass that has seen the catalog, then an order paid whose messages vanish from the durable queue
    tenant, payment, expected = paid_then_lost(local, lose)

    # When two passes run past the bound, the first counts every pair of both events: the alarm fires
    counts = missing_after_two_passes(local)
    assert counts == [expected, expected]
    assert alarm(counts) == ["ALARM", "ALARM"]

    # Then status names each with a command, and the commands named repair them all
    status = operations(local).status()
    missing = [pair for pair in status.missing if pair.tenant == tenant]
    assert len(missing) == expected
    assert {pair.event_id for pair in missing} >= {payment}
    problems = [line for line in status.problems() if tenant in line]
    assert len(problems) == expected
    assert all("no outcome" in line and "outbox reconcile" in line for line in problems)
    # A group of its own kind per subscription in dead-letters groups, whose repair is the pairs' command
    listed = outbox(local, "dead-letters", "groups", "--tenant", tenant, "--json")
    assert listed.exit_code == 1, listed.output  # there are groups
    groups = json.loads(listed.stdout)
    assert {group["kind"] for group in groups} == {"missing"}
    assert sum(group["count"] for group in groups) == expected
    assert {group["repair"] for group in groups} == {pair.repair for pair in missing}
    refused = outbox(local, "replay", "--group", groups[0]["id"], "--yes", "--json")
    assert refused.exit_code != 0
    assert "group of missing pairs" in refused.output
    # The dashboard's widget lists them with the commands
    page = tmp_path / "status.html"
    outbox(local, "status", "--html", str(page))
    assert all(pair.repair in page.read_text() for pair in missing)
    for command in sorted({pair.repair for pair in missing}):
        assert command.startswith("outbox reconcile"), command
        result = outbox(local, *command.split()[1:], "--yes", "--json")
        assert result.exit_code == 0, result.output
    local.settle()
    assert set(claim_statuses(local, payment).values()) == {"COMPLETED"}
    run_anchoring(local)
    assert last_pass_metrics(local)[Metric.MISSING_PAIRS.value] == [0]
    assert not [pair for pair in operations(local).status().missing if pair.tenant == tenant]


def acknowledge_without_running(_event: dict[str, Any], _context: Any) -> dict[str, Any]:
    """A durable consumer broken so that it acknowledges every message of its batch and runs nothing."""
    return {"batchItemFailures": []}


def test_a_consumer_that_acknowledges_without_running_raises_the_alarm(local: LocalBackend, alarm: AlarmStates) -> None:
    # Given a consumer deployed broken (the local runtime's handler override: the function's code replaced)
    run_anchoring(local)
    local.runtime.clock.advance(timedelta(seconds=1))
    tenant = unique("tenant")
    consumer = local.runtime.function("DurableConsumerFunctionName")
    consumer.override = acknowledge_without_running
    try:
        payment = order_and_pay(local, tenant)
        local.settle()
    finally:
        consumer.override = None
    assert claim_statuses(local, payment) == {}

    # Then: no dead letter, no DLQ message, and the pass raises the alarm
    expected = durable_pairs(local, "order.created") + durable_pairs(local, "payment.completed")
    counts = missing_after_two_passes(local)
    assert counts == [expected, expected]
    assert alarm(counts) == ["ALARM", "ALARM"]
    assert {(pair.event_id, pair.state) for pair in operations(local).status().missing if pair.tenant == tenant} >= {
        (payment, "absent")
    }


def deploy_self_repair(local: LocalBackend, repairs: int) -> None:
    """A deploy of ``OutboxPipeline(completeness_repairs=repairs)`` reaching the anchoring function: the two
    variables such a synth gives it (tests/infrastructure/test_completeness.py pins them in the template: the cap,
    and the durable queue it sends to), then a cold start."""
    anchoring = local.runtime.function("AnchoringFunctionName")
    anchoring.env |= {"COMPLETENESS_REPAIRS": str(repairs), "DURABLE_QUEUE_URL": local.output("DurableQueueUrl")}
    anchoring.new_container()


def test_self_repair_re_sends_at_most_its_cap_a_pass_until_every_pair_completed(
    local: LocalBackend, alarm: AlarmStates
) -> None:
    # Given a pass that has seen the catalog, then an order paid whose messages were purged from the durable queue
    tenant, payment, expected = paid_then_lost(local, purge)
    cap = expected - 1  # two passes to re-send them all
    deploy_self_repair(local, cap)
    local.runtime.clock.advance(bound(local) + timedelta(minutes=1))

    # When the first pass past the bound runs: every pair counted (the alarm fires once), the cap re-sent
    first = run_anchoring(local)["completeness"]
    metrics = last_pass_metrics(local)
    assert (metrics[Metric.MISSING_PAIRS.value], metrics[Metric.PAIRS_RESENT.value]) == ([expected], [cap])
    assert (first["missing_pairs"], first["resent"]) == (expected, cap)
    resent = [pair for pair in first["missing"][tenant] if pair["resent"]]
    assert len(resent) == cap
    local.settle()
    # Then each re-sent pair ran, and the one left is counted again, and re-sent, at the next pass
    claims = {event: claim_statuses(local, event) for event in {pair["event_id"] for pair in first["missing"][tenant]}}
    assert all(claims[pair["event_id"]].get(pair["subscription"]) == "COMPLETED" for pair in resent)
    local.runtime.clock.advance(timedelta(hours=1))
    second = run_anchoring(local)["completeness"]
    assert (second["missing_pairs"], second["resent"]) == (expected - cap, expected - cap)
    [left] = second["missing"][tenant]
    assert left["resent"]
    assert (left["event_id"], left["subscription"]) not in {(pair["event_id"], pair["subscription"]) for pair in resent}
    local.settle()

    # Every pair completed: the next pass finds nothing and re-sends nothing, and the alarm clears
    local.runtime.clock.advance(timedelta(hours=1))
    third = run_anchoring(local)["completeness"]
    assert (third["missing_pairs"], third["resent"]) == (0, 0)
    assert last_pass_metrics(local)[Metric.MISSING_PAIRS.value] == [0]
    assert alarm([found["missing_pairs"] for found in (first, second, third)]) == ["ALARM", "ALARM", "OK"]
    for event in claims:
        assert set(claim_statuses(local, event).values()) == {"COMPLETED"}, event
    assert payment in claims
    assert not [pair for pair in operations(local).status().missing if pair.tenant == tenant]


def test_no_alarm_for_a_busy_tenant_a_slow_handler_or_work_done(local: LocalBackend, alarm: AlarmStates) -> None:
    run_anchoring(local)
    local.runtime.clock.advance(timedelta(seconds=1))
    tenant = unique("tenant")
    # A handler that fails within its attempts, then succeeds
    with faults.fail_handler("notify.buyer", times=2):
        order_and_pay(local, tenant)
        local.settle()
    local.runtime.clock.advance(bound(local) + timedelta(minutes=1))
    # The tenant keeps emitting while the passes run: younger than the bound, still on their way
    order_and_pay(local, tenant)
    local.runtime.pipe("RelayPipeName").drain()
    counts = []
    for _ in range(2):
        run_anchoring(local)
        counts.append(last_pass_metrics(local)[Metric.MISSING_PAIRS.value][0])
        order_and_pay(local, tenant)
    assert counts == [0, 0]
    assert alarm(counts) == ["OK", "OK"]
    local.settle()
    local.runtime.clock.advance(bound(local) + timedelta(minutes=1))
    run_anchoring(local)
    assert last_pass_metrics(local)[Metric.MISSING_PAIRS.value] == [0]


def test_status_lists_nothing_missing_before_any_pass(local: LocalBackend) -> None:
    status: Any = operations(local).status()
    assert status.missing == []


def deploy_anchoring(local: LocalBackend, change: Callable[[list[list[Any]]], None]) -> None:
    """A deploy that reaches the anchoring function before the consumer: its catalog data changed, a cold start."""
    anchoring = local.runtime.function("AnchoringFunctionName")
    data = json.loads(anchoring.env["COMPLETENESS_CATALOG"])
    change(data["durable"])
    anchoring.env["COMPLETENESS_CATALOG"] = json.dumps(data)
    anchoring.new_container()


def test_no_alarm_for_an_ordered_backlog_or_a_deploy_between_passes(local: LocalBackend, alarm: AlarmStates) -> None:
    run_anchoring(local)
    local.runtime.clock.advance(timedelta(seconds=1))
    tenant = unique("tenant")
    # An ordered backlog: the relay hands the ordered journal one tenant's orders last first, so each waits
    # (DEFERRED) behind the one before it, and the journal's first run fails twice within its attempts
    local.runtime.pipe("RelayPipeName").faults = PipeFaults(reorder=reverse_items)
    commerce, store = local.commerce(), local.store()
    items = [{"sku": "tag", "quantity": 1, "unit_price_cents": 100}]
    with faults.fail_handler("sales.journal_order", times=2):
        for _ in range(6):
            commerce.place_order(
                store, tenant=tenant, actor="e2e", order_id=unique("order"), buyer_email="b@x.io", items=items
            )
        run_anchoring(local)  # a pass while the backlog is worked off: nothing is past the bound
        assert last_pass_metrics(local)[Metric.MISSING_PAIRS.value] == [0]
        local.settle()
    local.runtime.pipe("RelayPipeName").faults = PipeFaults()
    deferrals = operations(local).blocked()
    assert deferrals == []

    # A deploy between the passes: a subscription added (its events before the pass that first sees it are not
    # its to judge) and one narrowed away (its pairs are left out), while the tenant keeps emitting
    def change(durable: list[list[Any]]) -> None:
        durable.append(["audit.every_order", "order.created", 0, ""])
        for row in durable:
            if row[0] == "sales.project_order":
                row[1] = "order.cancelled"

    deploy_anchoring(local, change)
    assert alarm(missing_after_two_passes(local)) == ["OK", "OK"]

    # But a deploy that never reached the consumer leaves the added subscription's new pairs missing: reported
    payment = order_and_pay(local, tenant)
    local.settle()
    assert set(claim_statuses(local, payment).values()) == {"COMPLETED"}
    counts = missing_after_two_passes(local)
    assert counts == [1, 1]
    assert alarm(counts) == ["ALARM", "ALARM"]
    [pair] = [pair for pair in operations(local).status().missing if pair.tenant == tenant]
    assert (pair.subscription, pair.state) == ("audit.every_order", "absent")


def test_outbox_anchor_runs_the_completeness_pass_the_schedule_runs_and_says_what_it_found(
    local: LocalBackend,
) -> None:
    assert "then the completeness" in " ".join(outbox(local, "anchor", "--help").output.split())
    # Before any scheduled pass, the command anchors and says the completeness pass has nothing to run with yet
    first = outbox(local, "anchor")
    assert first.exit_code == 0, first.output
    assert "completeness: not checked" in first.output
    assert "completeness" not in json.loads(outbox(local, "anchor", "--json").stdout)

    # Given a scheduled pass (which records what it runs with), then an order paid whose messages were purged
    tenant, payment, expected = paid_then_lost(local, purge)
    local.runtime.clock.advance(bound(local) + timedelta(minutes=1))

    # When the operator runs the pass by hand: exit 1, every missing pair in --json with its repair
    found = outbox(local, "anchor", "--json")
    assert found.exit_code == 1, found.output
    document = json.loads(found.stdout)
    assert document["completeness"]["missing_pairs"] == expected
    by_hand = document["completeness"]["missing"][tenant]
    assert len(by_hand) == expected
    assert payment in {pair["event_id"] for pair in by_hand}
    assert all(pair["repair"].startswith("outbox reconcile") and not pair["resent"] for pair in by_hand)
    # Recorded as the scheduled pass records it: status lists them
    assert len([pair for pair in operations(local).status().missing if pair.tenant == tenant]) == expected
    # In text: the count, each pair and the command that repairs it
    text = outbox(local, "anchor", "--tenant", tenant)
    assert text.exit_code == 1, text.output
    assert f"completeness: {expected} pairs with no outcome past the bound" in text.output
    assert all(pair["repair"] in text.output and pair["event_id"] in text.output for pair in by_hand)

    # The scheduled pass judges exactly as the command did (one code path), and publishes what it found
    scheduled = run_anchoring(local)["completeness"]["missing"][tenant]
    assert sorted(json.dumps(pair, sort_keys=True) for pair in scheduled) == sorted(
        json.dumps(pair, sort_keys=True) for pair in by_hand
    )
    assert last_pass_metrics(local)[Metric.MISSING_PAIRS.value] == [expected]

    # Once repaired, the command finds nothing and exits 0
    for command in sorted({pair["repair"] for pair in by_hand}):
        assert outbox(local, *command.split()[1:], "--yes", "--json").exit_code == 0
    local.settle()
    repaired = outbox(local, "anchor", "--tenant", tenant, "--json")
    assert repaired.exit_code == 0, repaired.output
    assert json.loads(repaired.stdout)["completeness"]["missing_pairs"] == 0
