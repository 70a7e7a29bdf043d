"""The consumer comparison's request counts on the happy path (counts only: no timing is asserted)."""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks import aws
from benchmarks.consumer_overhead import Consumers, Scenario, count, make_batches
from benchmarks.metering import AwsMeter


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
