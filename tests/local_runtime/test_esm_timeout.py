"""A handler that outlives its timeout fails its whole batch, as Lambda's kill would."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import boto3
import pytest
from moto import mock_aws

from outbox.local import aws_fixes
from outbox.local.clock import VirtualClock
from outbox.local.esm import SqsEventSourceMapping


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


# Visibility, as Lambda leaves it to SQS: it runs from the receive, and the mapping never changes it with
# the receipt handle of an older receive (AWS: "you must provide the most recently received receipt handle";
# moto accepts an old one, which made a newer receive visible early).


def failing_after(clock: VirtualClock, seconds: int) -> Any:
    def handler(event: dict[str, Any], _context: Any) -> dict[str, Any]:
        clock.advance(seconds)
        return {"batchItemFailures": [{"itemIdentifier": r["messageId"]} for r in event["Records"]]}

    return handler


def test_a_failed_message_is_visible_again_a_visibility_timeout_after_its_receive(
    queue: tuple[Any, str, VirtualClock],
) -> None:
    sqs, url, clock = queue
    sqs.send_message(QueueUrl=url, MessageBody="a")
    esm = mapping(sqs, url, clock, failing_after(clock, 8))

    esm.poll()  # received at 0, failed at 8
    clock.advance(51)  # 59 s after the receive
    assert sqs.receive_message(QueueUrl=url).get("Messages", []) == []
    clock.advance(1)  # 60 s after the receive, 52 s after the handler ended

    [message] = sqs.receive_message(QueueUrl=url)["Messages"]
    assert message["Body"] == "a"


def test_the_mapping_never_makes_a_newer_receive_visible_with_an_old_receipt_handle(
    queue: tuple[Any, str, VirtualClock],
) -> None:
    sqs, url, clock = queue
    sqs.send_message(QueueUrl=url, MessageBody="a")
    esm = mapping(sqs, url, clock, failing_after(clock, 8))
    esm.poll()
    clock.advance(60)
    [again] = sqs.receive_message(QueueUrl=url, VisibilityTimeout=60)["Messages"]  # another consumer has it now

    clock.advance(8)  # the handler's end plus the timeout: when the old mapping released it with its handle
    esm.release_expired()

    assert sqs.receive_message(QueueUrl=url).get("Messages", []) == [], "the newer receive stays in flight"
    sqs.delete_message(QueueUrl=url, ReceiptHandle=again["ReceiptHandle"])
