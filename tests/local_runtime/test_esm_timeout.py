"""A handler that outlives its timeout fails its whole batch, as Lambda's kill would."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import boto3
import pytest
from moto import mock_aws

from outbox.local.clock import VirtualClock
from outbox.local.deadline import InvocationTimedOut
from outbox.local.esm import SqsEventSourceMapping
from outbox.local.functions import LocalFunction
from outbox.testing.services import FakeService


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
    assert isinstance(result.crashed, InvocationTimedOut)
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


# The deadline, as Lambda applies it: the invocation is stopped there, mid-way, and nothing it does afterwards
# takes effect (a request is never sent), whichever client makes it and whatever the code catches.


def test_a_write_after_the_deadline_never_lands_and_one_before_it_does(queue: tuple[Any, str, VirtualClock]) -> None:
    sqs, url, clock = queue
    sqs.send_message(QueueUrl=url, MessageBody="a")
    dynamodb = boto3.client("dynamodb", region_name="us-east-1")
    dynamodb.create_table(
        TableName="effects",
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    late_client: list[Any] = []

    def slow(_event: dict[str, Any], _context: Any) -> dict[str, Any]:
        dynamodb.put_item(TableName="effects", Item={"pk": {"S": "before"}})
        clock.advance(11)  # the handler is still computing when Lambda's deadline passes
        try:
            late_client.append(boto3.client("dynamodb", region_name="us-east-1"))  # a client made after it too
            late_client[0].put_item(TableName="effects", Item={"pk": {"S": "after"}})
        except Exception:  # a handler that swallows everything still cannot write
            pass
        sqs.send_message(QueueUrl=url, MessageBody="a follow-up sent too late")
        return {"batchItemFailures": []}

    result = mapping(sqs, url, clock, slow).poll()

    assert result is not None
    assert isinstance(result.crashed, InvocationTimedOut)
    assert result.failed == result.received, "the whole batch failed: its message comes back"
    items = dynamodb.scan(TableName="effects")["Items"]
    assert items == [{"pk": {"S": "before"}}], "what it wrote in time stays; nothing after the deadline landed"
    visible = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"])["Attributes"]
    assert visible["ApproximateNumberOfMessages"] == "0", "the late send never reached the queue"


def test_an_external_call_after_the_deadline_is_never_made(queue: tuple[Any, str, VirtualClock]) -> None:
    sqs, url, clock = queue
    sqs.send_message(QueueUrl=url, MessageBody="a")
    payments = FakeService("payments")

    def slow(_event: dict[str, Any], _context: Any) -> dict[str, Any]:
        clock.advance(10)  # exactly at the deadline
        payments.call("charge", "evt:charge", {"amount": 1})
        return {"batchItemFailures": []}

    result = mapping(sqs, url, clock, slow).poll()

    assert result is not None
    assert isinstance(result.crashed, InvocationTimedOut)
    assert (payments.effects, dict(payments.calls)) == ({}, {})


def test_a_function_invoked_directly_is_stopped_at_its_deadline_too(tmp_path: Any) -> None:
    clock = VirtualClock()
    (tmp_path / "slow.py").write_text(
        "import boto3\n"
        "def handler(event, context):\n"
        "    event['clock'].advance(31)\n"
        "    boto3.client('sqs', region_name='us-east-1').list_queues()\n"
        "    return 'done'\n"
    )
    function = LocalFunction("slow", "slow.handler", tmp_path, timedelta(seconds=30), {}, clock)

    with mock_aws(), pytest.raises(InvocationTimedOut, match="slow timed out"):
        function.invoke({"clock": clock})


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


def test_after_a_timeout_the_next_invocation_is_a_cold_start(tmp_path: Any) -> None:
    clock = VirtualClock()
    (tmp_path / "counting.py").write_text(
        "COLD_STARTS = []\n"
        "COLD_STARTS.append(1)\n"
        "def handler(event, context):\n"
        "    event['clock'].advance(event['takes'])\n"
        "    return len(COLD_STARTS)\n"
    )
    function = LocalFunction("counting", "counting.handler", tmp_path, timedelta(seconds=30), {}, clock)
    assert function.invoke({"clock": clock, "takes": 1}) == 1
    first = function._handler

    with pytest.raises(InvocationTimedOut):
        function.invoke({"clock": clock, "takes": 31})

    assert function.invoke({"clock": clock, "takes": 1}) == 1, "the module ran its import again"
    assert function._handler is not first


def test_a_processed_message_that_moved_to_the_dlq_meanwhile_fails_nothing(
    queue: tuple[Any, str, VirtualClock],
) -> None:
    sqs, url, clock = queue
    dlq = sqs.create_queue(QueueName="q-dlq")["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    redrive = json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": "1"})
    sqs.set_queue_attributes(QueueUrl=url, Attributes={"RedrivePolicy": redrive})
    sqs.send_message(QueueUrl=url, MessageBody="a")

    def handler(event: dict[str, Any], _context: Any) -> dict[str, Any]:
        # Its visibility runs out while it works, and its next receive moves it to the DLQ: the receipt handle
        # this invocation holds names no message any more when the mapping deletes what succeeded.
        receipt = event["Records"][0]["receiptHandle"]
        sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=receipt, VisibilityTimeout=0)
        assert sqs.receive_message(QueueUrl=url).get("Messages", []) == []
        return {"batchItemFailures": []}

    result = mapping(sqs, url, clock, handler).poll()

    assert result is not None
    assert (result.crashed, result.failed) == (None, [])


def test_a_second_worker_inside_the_first_finishes_its_batch_after_the_first_ones_deadline(
    queue: tuple[Any, str, VirtualClock],
) -> None:
    """The runtime runs a second worker (a message visible again while the first one runs) inside the first
    one's handler. The second is its own invocation: the poller deletes what it processed even though the
    first one's deadline has passed meanwhile; only the first invocation is stopped."""
    sqs, url, clock = queue
    sqs.send_message(QueueUrl=url, MessageBody="a")
    calls: list[str] = []

    def handler(event: dict[str, Any], _context: Any) -> dict[str, Any]:
        calls.append("first" if not calls else "second")
        if len(calls) == 1:
            clock.advance(9)
            receipt = event["Records"][0]["receiptHandle"]
            sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=receipt, VisibilityTimeout=0)
            second.poll()  # the second worker receives the message and runs until after the first one's deadline
            return {"batchItemFailures": []}
        clock.advance(3)
        return {"batchItemFailures": []}

    second = mapping(sqs, url, clock, handler)
    first = mapping(sqs, url, clock, handler).poll()

    assert calls == ["first", "second"]
    assert first is not None
    assert isinstance(first.crashed, InvocationTimedOut)
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert attributes["ApproximateNumberOfMessages"] == "0"
    assert attributes["ApproximateNumberOfMessagesNotVisible"] == "0"  # deleted by the second worker's poller


def test_an_early_redelivery_inside_an_invocation_past_its_deadline_still_makes_the_messages_visible(
    queue: tuple[Any, str, VirtualClock],
) -> None:
    """A second worker inside the first one crashes, and SQS hands its messages out again early (the early
    redelivery fault): that is SQS's doing, not the first invocation's, so its deadline (long past) stops none of
    it. Were the visibility changes stopped after the runtime stopped tracking the messages, they would stay in
    flight for ever, and their FIFO group with them (soak seed 5945310)."""
    from outbox.local.faults import redeliver

    sqs, url, clock = queue
    sqs.send_message(QueueUrl=url, MessageBody="a")
    redelivered: list[int] = []

    def crash(_event: dict[str, Any], _context: Any) -> dict[str, Any]:
        raise RuntimeError("the second worker dies")

    def first_handler(_event: dict[str, Any], _context: Any) -> dict[str, Any]:
        clock.advance(400)  # a stall past the visibility timeout: the message is visible again, and past the deadline
        second.poll()  # the second worker receives it and crashes: its message is in flight, tracked by its mapping
        redelivered.append(redeliver(second))  # SQS makes it visible again at once
        return {"batchItemFailures": []}

    second = mapping(sqs, url, clock, crash)
    first = mapping(sqs, url, clock, first_handler).poll()

    assert first is not None
    assert isinstance(first.crashed, InvocationTimedOut)
    assert redelivered == [1]
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert (attributes["ApproximateNumberOfMessages"], attributes["ApproximateNumberOfMessagesNotVisible"]) == (
        "1",
        "0",
    )


def test_a_deadline_a_fault_moved_is_the_one_the_mapping_judges_the_invocation_by(
    queue: tuple[Any, str, VirtualClock], tmp_path: Any
) -> None:
    """A fault that lets time jump while the worker lives (skew, a short visibility timeout) moves the
    invocation's deadline. The function and the mapping that invoked it must judge by that one deadline: the
    mapping once judged by its own, unmoved copy, failed the batch the function had finished in time, and kept
    the container warm as if nothing had timed out."""
    sqs, url, clock = queue
    sqs.send_message(QueueUrl=url, MessageBody="a")
    (tmp_path / "jumping.py").write_text(
        "from datetime import timedelta\n"
        "from outbox.local import deadline\n"
        "def handler(event, context):\n"
        "    CLOCK.advance(30)\n"
        "    deadline.extend(timedelta(seconds=30))  # the fault keeps this worker alive through the jump\n"
        "    return {'batchItemFailures': []}\n"
    )
    function = LocalFunction("jumping", "jumping.handler", tmp_path, timedelta(seconds=10), {}, clock)
    function._resolve().__globals__["CLOCK"] = clock
    slow = mapping(sqs, url, clock, function.invoke)

    result = slow.poll()

    assert result is not None
    assert result.crashed is None, result.crashed
    assert result.failed == []


def test_a_timeout_the_mapping_sees_starts_the_next_invocation_cold(
    queue: tuple[Any, str, VirtualClock], tmp_path: Any
) -> None:
    sqs, url, clock = queue
    sqs.send_message(QueueUrl=url, MessageBody="a")
    (tmp_path / "late.py").write_text(
        "def handler(event, context):\n    CLOCK.advance(11)\n    return {'batchItemFailures': []}\n"
    )
    function = LocalFunction("late", "late.handler", tmp_path, timedelta(seconds=10), {}, clock)
    warm = function._resolve()
    warm.__globals__["CLOCK"] = clock

    result = mapping(sqs, url, clock, function.invoke).poll()

    assert result is not None
    assert isinstance(result.crashed, InvocationTimedOut)
    assert function._handler is None, "Lambda resets the execution environment after a timeout"


def test_an_interrupt_of_the_host_stops_the_mapping_instead_of_failing_the_batch(
    queue: tuple[Any, str, VirtualClock],
) -> None:
    # Ctrl-C (or a runner's time limit) during an invocation is the developer stopping the local process, not the
    # function crashing: the mapping must not swallow it, count a crash and carry on.
    sqs, url, clock = queue
    sqs.send_message(QueueUrl=url, MessageBody="a")

    def interrupted(_event: dict[str, Any], _context: Any) -> dict[str, Any]:
        raise KeyboardInterrupt

    esm = mapping(sqs, url, clock, interrupted)
    with pytest.raises(KeyboardInterrupt):
        esm.poll()
    assert esm.crashes == []
