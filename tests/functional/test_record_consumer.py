"""The record-change consumer: what its handlers return is not silently dropped, and neither is a row
change that no subscription matches."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from outbox import HandlerResult, Lane, Subscription, SubscriptionRegistry, writes
from outbox.record_consumer import RecordChangeConsumer

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

    with caplog.at_level(logging.ERROR, logger="outbox.record_consumer"):
        response = RecordChangeConsumer(registry).handle(batch("ORDER"), Context())

    assert response == {"batchItemFailures": []}
    assert any("p.orders" in r.getMessage() and "return None" in r.getMessage() for r in caplog.records)


def test_an_unmatched_row_change_is_a_warning_the_first_time_its_type_is_seen(caplog: pytest.LogCaptureFixture) -> None:
    registry = SubscriptionRegistry.of([Subscription("p.orders", "record.ORDER.*", Lane.BEST_EFFORT, lambda _c: None)])
    consumer = RecordChangeConsumer(registry)

    with caplog.at_level(logging.DEBUG, logger="outbox.record_consumer"):
        consumer.handle(batch("ORDRE", "ORDRE", "ORDER"), Context())

    unmatched = [r for r in caplog.records if "matched no BEST_EFFORT subscription" in r.getMessage()]
    assert [r.levelno for r in unmatched] == [logging.WARNING, logging.DEBUG]
    assert "record.ORDRE.INSERT" in unmatched[0].getMessage()
