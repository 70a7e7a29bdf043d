"""The record-change consumer: what its handlers return is not silently dropped, and neither is a row
change that no subscription matches; every record that fails is counted."""

from __future__ import annotations

import json
import logging
from collections import Counter
from typing import Any

import pytest

from outbox import HandlerResult, Lane, Subscription, SubscriptionRegistry, writes
from outbox.best_effort.consumer import Metric, RecordChangeConsumer

ARN = "arn:aws:dynamodb:us-east-1:123456789012:table/data/stream/2026-12-01T00:00:00.000"


class Context:
    function_name = "record-change"
    memory_limit_in_mb = 128
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:record-change"
    aws_request_id = "r-1"

    def get_remaining_time_in_millis(self) -> int:
        return 30_000


def batch(*entities: str) -> dict[str, Any]:
    records = []
    for index, entity in enumerate(entities):
        body = {
            "eventID": f"e-{index}",
            "eventName": "INSERT",
            "eventSourceARN": ARN,
            "dynamodb": {
                "Keys": {"pk": {"S": f"{entity}#1"}, "sk": {"S": "A"}},
                "NewImage": {"pk": {"S": f"{entity}#1"}},
            },
        }
        records.append({"messageId": f"m-{index}", "receiptHandle": "h", "body": json.dumps(body), "attributes": {}})
    return {"Records": records}


def test_a_best_effort_handler_that_returns_something_is_reported_as_an_error(caplog: pytest.LogCaptureFixture) -> None:
    registry = SubscriptionRegistry.of(
        [
            Subscription(
                "p.orders",
                "record.ORDER.*",
                Lane.BEST_EFFORT,
                lambda _c: HandlerResult(writes=[writes.put("t", {"pk": "x"})]),
            )
        ]
    )

    with caplog.at_level(logging.ERROR, logger="outbox.best_effort.consumer"):
        response = RecordChangeConsumer(registry).handle(batch("ORDER"), Context())

    assert response == {"batchItemFailures": []}
    assert any("p.orders" in r.getMessage() and "return None" in r.getMessage() for r in caplog.records)


def test_an_unmatched_row_change_is_a_warning_the_first_time_its_type_is_seen(caplog: pytest.LogCaptureFixture) -> None:
    registry = SubscriptionRegistry.of([Subscription("p.orders", "record.ORDER.*", Lane.BEST_EFFORT, lambda _c: None)])
    consumer = RecordChangeConsumer(registry)

    with caplog.at_level(logging.DEBUG, logger="outbox.best_effort.consumer"):
        consumer.handle(batch("ORDRE", "ORDRE", "ORDER"), Context())

    unmatched = [r for r in caplog.records if "matched no BEST_EFFORT subscription" in r.getMessage()]
    assert [r.levelno for r in unmatched] == [logging.WARNING, logging.DEBUG]
    assert "record.ORDRE.INSERT" in unmatched[0].getMessage()


class CountingMetrics:
    """What the consumer uses of Powertools' ``Metrics``: ``add_metric``, counted by name."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    def add_metric(self, name: str, unit: str, value: float) -> None:
        assert unit == "Count"
        self.counts[name] += int(value)


def failing(_change: object) -> None:
    raise RuntimeError("projection store unavailable")


def test_a_record_whose_handler_raises_is_counted_and_still_fails_alone() -> None:
    # The count is what the record-change lane's persistent-failure alarm reads: SQS's age metric stops
    # seeing a message once it has been received three times (docs/aws-behaviour.md R9.1).
    registry = SubscriptionRegistry.of(
        [
            Subscription("p.orders", "record.ORDER.*", Lane.BEST_EFFORT, lambda _c: None),
            Subscription("p.broken", "record.BROKEN.*", Lane.BEST_EFFORT, failing),
        ]
    )
    metrics = CountingMetrics()

    response = RecordChangeConsumer(registry, metrics=metrics).handle(batch("ORDER", "BROKEN", "ORDER"), Context())

    assert response == {"batchItemFailures": [{"itemIdentifier": "m-1"}]}
    assert metrics.counts == {Metric.HANDLED: 2, Metric.FAILURES: 1}


def test_a_record_that_is_not_a_row_change_is_counted_as_a_failure() -> None:
    registry = SubscriptionRegistry.of([Subscription("p.orders", "record.ORDER.*", Lane.BEST_EFFORT, lambda _c: None)])
    event = batch("ORDER")
    event["Records"].append({"messageId": "m-junk", "receiptHandle": "h", "body": "not json", "attributes": {}})
    metrics = CountingMetrics()

    response = RecordChangeConsumer(registry, metrics=metrics).handle(event, Context())

    assert response == {"batchItemFailures": [{"itemIdentifier": "m-junk"}]}
    assert metrics.counts == {Metric.HANDLED: 1, Metric.FAILURES: 1}


def test_an_unmatched_row_change_is_counted_not_failed() -> None:
    metrics = CountingMetrics()

    response = RecordChangeConsumer(SubscriptionRegistry.of([]), metrics=metrics).handle(batch("ORDRE"), Context())

    assert response == {"batchItemFailures": []}
    assert metrics.counts == {Metric.UNMATCHED: 1}


def test_each_row_change_and_subscription_is_a_span_with_its_outcome() -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from outbox import tracing

    def failing(_change: Any) -> None:
        raise ConnectionError("projection store down")

    registry = SubscriptionRegistry.of(
        [
            Subscription("p.orders", "record.ORDER.*", Lane.BEST_EFFORT, lambda _c: None),
            Subscription("p.audit", "record.AUDIT.*", Lane.BEST_EFFORT, failing),
        ]
    )
    exporter, provider = InMemorySpanExporter(), TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.use_tracer_provider(provider)
    try:
        response = RecordChangeConsumer(registry).handle(batch("ORDER", "AUDIT"), Context())
    finally:
        tracing.use_tracer_provider(None)

    assert response == {"batchItemFailures": [{"itemIdentifier": "m-1"}]}
    spans = {span.name: span for span in exporter.get_finished_spans()}
    assert set(spans) == {"process p.orders", "process p.audit"}
    completed, failed = spans["process p.orders"].attributes, spans["process p.audit"].attributes
    assert completed is not None
    assert failed is not None
    assert (completed["outbox.outcome"], completed["outbox.lane"]) == ("completed", "BEST_EFFORT")
    assert completed["outbox.row_change.type"] == "record.ORDER.INSERT"
    assert failed["outbox.outcome"] == "retry", "the record comes back"
    assert [event.name for event in spans["process p.audit"].events] == ["exception"]
