"""Nothing goes missing silently, on the local runtime: the hourly completeness pass (``outbox.ops.completeness``,
run by the anchoring function from the catalog made into data at synth) counts every durable pair with no outcome
past the bound as ``MissingPairs`` (alarmed above zero), and ``outbox status`` names each with the command that
repairs it. Each way of losing a message below raises it within two passes past the bound; the busy, slow and
ordered cases that are no loss never do."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from outbox.auditor import Metric
from outbox.local import faults
from outbox.local.pipe import PipeFaults, reverse_items
from outbox.subscriptions import Lane
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


@pytest.mark.parametrize("lose", [purge, delete_by_hand], ids=["purged queue", "deleted by hand"])
def test_a_message_lost_on_its_queue_raises_the_alarm_and_status_names_the_repair(
    local: LocalBackend, lose: Callable[[LocalBackend], None], tmp_path: Path
) -> None:
    # Given a pass that has seen the catalog, then an order paid whose messages vanish from the durable queue
    run_anchoring(local)
    local.runtime.clock.advance(timedelta(seconds=1))
    tenant = unique("tenant")
    payment = order_and_pay(local, tenant)
    local.runtime.pipe("RelayPipeName").drain()
    lose(local)
    local.settle()
    assert claim_statuses(local, payment) == {}

    # When two passes run past the bound, the first counts every pair of both events: the alarm's datapoint
    expected = durable_pairs(local, "order.created") + durable_pairs(local, "payment.completed")
    assert missing_after_two_passes(local) == [expected, expected]

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


def test_a_consumer_that_acknowledges_without_running_raises_the_alarm(local: LocalBackend) -> None:
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
    assert missing_after_two_passes(local) == [expected, expected]
    assert {(pair.event_id, pair.state) for pair in operations(local).status().missing if pair.tenant == tenant} >= {
        (payment, "absent")
    }


def test_no_alarm_for_a_busy_tenant_a_slow_handler_or_work_done(local: LocalBackend) -> None:
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


def test_no_alarm_for_an_ordered_backlog_or_a_deploy_between_passes(local: LocalBackend) -> None:
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
    assert missing_after_two_passes(local) == [0, 0]

    # But a deploy that never reached the consumer leaves the added subscription's new pairs missing: reported
    payment = order_and_pay(local, tenant)
    local.settle()
    assert set(claim_statuses(local, payment).values()) == {"COMPLETED"}
    assert missing_after_two_passes(local) == [1, 1]
    [pair] = [pair for pair in operations(local).status().missing if pair.tenant == tenant]
    assert (pair.subscription, pair.state) == ("audit.every_order", "absent")
