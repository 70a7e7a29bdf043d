"""A handler that outlives its timeout fails its whole batch, as Lambda's kill would."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import boto3
import pytest
from moto import mock_aws

from local_runtime import aws_fixes
from local_runtime.clock import VirtualClock
from local_runtime.esm import SqsEventSourceMapping


@pytest.fixture
def queue(aws_credentials: None) -> Iterator[tuple[Any, str, VirtualClock]]:
    clock = VirtualClock()
    with mock_aws():
        uninstall = aws_fixes.install(clock)
        sqs = boto3.client("sqs", region_name="us-east-1")
        url = sqs.create_queue(QueueName="q", Attributes={"VisibilityTimeout": "60"})["QueueUrl"]
        yield sqs, url, clock
        uninstall()


def mapping(sqs: Any, url: str, clock: VirtualClock, handler: Any) -> SqsEventSourceMapping:
    return SqsEventSourceMapping(
        sqs=sqs,
        queue_url=url,
        queue_arn="arn:aws:sqs:us-east-1:123456789012:q",
        handler=handler,
        function_name="slow",
        function_timeout=timedelta(seconds=10),
        visibility_timeout=timedelta(seconds=60),
        clock=clock,
    )


def test_a_handler_past_its_deadline_fails_the_whole_batch(queue: tuple[Any, str, VirtualClock]) -> None:
    sqs, url, clock = queue
    sqs.send_message(QueueUrl=url, MessageBody="a")

    def slow(_event: dict[str, Any], _context: Any) -> dict[str, Any]:
        clock.advance(11)
        return {"batchItemFailures": []}

    result = mapping(sqs, url, clock, slow).poll()

    assert result is not None
    assert isinstance(result.crashed, TimeoutError)
    assert result.failed == result.received


def test_a_handler_within_its_deadline_succeeds(queue: tuple[Any, str, VirtualClock]) -> None:
    sqs, url, clock = queue
    sqs.send_message(QueueUrl=url, MessageBody="a")

    def quick(_event: dict[str, Any], _context: Any) -> dict[str, Any]:
        clock.advance(9)
        return {"batchItemFailures": []}

    result = mapping(sqs, url, clock, quick).poll()

    assert result is not None
    assert (result.crashed, result.failed) == (None, [])
