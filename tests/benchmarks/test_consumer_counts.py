"""The consumer comparison's request counts on the happy path (counts only: no timing is asserted)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from benchmarks import aws
from benchmarks.consumer_overhead import Consumers, Counted, Handle, Scenario, count, make_batches
from benchmarks.metering import AwsMeter
from outbox import Effects


def counted(scenario: Scenario, *builds: Callable[[Consumers], Handle]) -> list[Counted]:
    """Each consumer ``build`` makes, over the same two batches of events as the relay pipe sends them."""
    with aws.moto(fixes=True) as clock:
        admin, metered = aws.client("dynamodb"), aws.client("dynamodb")
        meter = AwsMeter.on_moto()
        meter.attach(metered.meta.events)
        warmup, *batches = make_batches(admin, aws.client("sqs"), 20, 10)
        consumers = Consumers(metered, admin)
        return [count(build(consumers), warmup, batches, scenario.subscriptions, meter, clock) for build in builds]


@pytest.mark.parametrize(
    ("scenario", "direct"),
    [
        # DynamoDB-only subscriptions: one request per pair (a Put of the marker, or a Txn of the marker and
        # the write) and 2 x (1 + writes) write units; the log check is one BatchGetItem per batch of 10 beside it
        (Scenario(1, False), {"BatchGetItem": 0.1, "PutItem": 1.0}),
        (Scenario(1, True), {"BatchGetItem": 0.1, "TransactWriteItems": 1.0}),
        (Scenario(4, True), {"BatchGetItem": 0.025, "TransactWriteItems": 1.0}),
    ],
)
def test_a_dynamodb_only_subscription_costs_one_request_per_event_and_subscription(
    aws_credentials: None, scenario: Scenario, direct: dict[str, float]
) -> None:
    [run] = counted(scenario, lambda consumers: consumers.ours(scenario, effects=Effects.DYNAMODB))

    assert {name: n / run.deliveries for name, n in run.by_operation.items()} == direct
    assert run.dynamodb.write_units / run.deliveries == (4.0 if scenario.effect_write else 1.0)


@pytest.mark.parametrize(
    ("scenario", "ours", "baseline"),
    [
        # (requests, write units) per (event, subscription): ours, a claim and a completion per pair and one
        # consistent BatchGetItem per batch of 10 events, their check against the log (0.05 per pair with two)
        (Scenario(2, False), (2.05, 2.0), (2.0, 2.0)),
        (Scenario(1, True), (2.1, 5.0), (3.0, 3.0)),
    ],
)
def test_one_claim_and_one_completion_per_event_and_subscription(
    aws_credentials: None, scenario: Scenario, ours: tuple[float, float], baseline: tuple[float, float]
) -> None:
    measured = counted(scenario, lambda c: c.ours(scenario), lambda c: c.baseline(scenario))

    for name, run, expected in zip(("ours", "baseline"), measured, (ours, baseline), strict=True):
        assert (run.dynamodb.requests / run.deliveries, run.dynamodb.write_units / run.deliveries) == expected, name
