"""The consumer comparison's request counts on the happy path (counts only: no timing is asserted)."""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks import aws
from benchmarks.consumer_overhead import Consumers, Scenario, count, make_batches
from benchmarks.metering import AwsMeter
from outbox import Effects


@pytest.mark.parametrize(
    ("scenario", "direct"),
    [
        # DynamoDB-only subscriptions: one request per pair (a Put of the marker, or a Txn of the marker and
        # the write) and 2 x (1 + writes) write units; the log check is one GetItem per event beside it
        (Scenario(1, False), {"GetItem": 1.0, "PutItem": 1.0}),
        (Scenario(1, True), {"GetItem": 1.0, "TransactWriteItems": 1.0}),
        (Scenario(4, True), {"GetItem": 0.25, "TransactWriteItems": 1.0}),
    ],
)
def test_a_dynamodb_only_subscription_costs_one_request_per_event_and_subscription(
    aws_credentials: None, scenario: Scenario, direct: dict[str, float]
) -> None:
    with aws.moto(fixes=True) as clock:
        admin, metered = aws.client("dynamodb"), aws.client("dynamodb")
        meter = AwsMeter.on_moto()
        meter.attach(metered.meta.events)
        warmup, *batches = make_batches(admin, aws.client("sqs"), 20, 10)
        consumers = Consumers(metered, admin)
        counted = count(
            consumers.ours(scenario, effects=Effects.DYNAMODB), warmup, batches, scenario.subscriptions, meter, clock
        )
    assert {name: n / counted.deliveries for name, n in counted.by_operation.items()} == direct
    assert counted.dynamodb.write_units / counted.deliveries == (4.0 if scenario.effect_write else 1.0)


@pytest.mark.parametrize(
    ("scenario", "ours", "baseline"),
    [
        # (requests, write units) per (event, subscription): ours, a claim and a completion per pair and one
        # consistent GetItem per event, its check against the log (half a request per pair with two of them)
        (Scenario(2, False), (2.5, 2.0), (2.0, 2.0)),
        (Scenario(1, True), (3.0, 5.0), (3.0, 3.0)),
    ],
)
def test_one_claim_and_one_completion_per_event_and_subscription(
    aws_credentials: None, scenario: Scenario, ours: tuple[float, float], baseline: tuple[float, float]
) -> None:
    with aws.moto(fixes=True) as clock:
        admin, metered = aws.client("dynamodb"), aws.client("dynamodb")
        meter = AwsMeter.on_moto()
        meter.attach(metered.meta.events)
        # Given the same two batches of events, as the relay pipe sends them
        warmup, *batches = make_batches(admin, aws.client("sqs"), 20, 10)
        consumers = Consumers(metered, admin)
        # When each consumer processes them
        measured: dict[str, Any] = {
            "ours": count(consumers.ours(scenario), warmup, batches, scenario.subscriptions, meter, clock),
            "baseline": count(consumers.baseline(scenario), warmup, batches, scenario.subscriptions, meter, clock),
        }
    # Then each (event, subscription) costs what the comparison reports
    for name, expected in (("ours", ours), ("baseline", baseline)):
        counted = measured[name]
        assert (counted.dynamodb.requests / counted.deliveries, counted.dynamodb.write_units / counted.deliveries) == (
            expected
        ), name
