"""Rules 6 to 9 of ``outbox.local.aws_fixes`` and ReceiveRequestAttemptId: SQS as on AWS, through boto3."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from outbox.local.aws_fixes import install
from outbox.local.clock import VirtualClock

VISIBILITY_TIMEOUT = 30
MAX_RECEIVE_COUNT = 2


@dataclass
class Queues:
    sqs: Any
    url: str
    arn: str
    dlq_url: str
    dlq_arn: str


@pytest.fixture
def clock() -> VirtualClock:
    return VirtualClock()


@pytest.fixture
def sqs(aws_credentials: None, clock: VirtualClock) -> Iterator[Any]:
    with mock_aws():
        uninstall = install(clock)
        try:
            yield boto3.client("sqs", region_name="us-east-1")
        finally:
            uninstall()


def create_queue(sqs: Any, name: str, **attributes: str) -> tuple[str, str]:
    fifo = {"FifoQueue": "true"} if name.endswith(".fifo") else {}
    url: str = sqs.create_queue(QueueName=name, Attributes={**fifo, **attributes})["QueueUrl"]
    arn: str = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    return url, arn


@pytest.fixture
def fifo(sqs: Any) -> Queues:
    """A FIFO queue with a FIFO dead-letter queue, as the durable consumer has."""
    dlq_url, dlq_arn = create_queue(sqs, "durable-dlq.fifo")
    url, arn = create_queue(
        sqs,
        "durable.fifo",
        VisibilityTimeout=str(VISIBILITY_TIMEOUT),
        RedrivePolicy=json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": str(MAX_RECEIVE_COUNT)}),
    )
    return Queues(sqs, url, arn, dlq_url, dlq_arn)


def send(queues: Queues, body: str, group: str = "tenant-a", dedup_id: str | None = None) -> str:
    message_id: str = queues.sqs.send_message(
        QueueUrl=queues.url, MessageBody=body, MessageGroupId=group, MessageDeduplicationId=dedup_id or body
    )["MessageId"]
    return message_id


def receive(sqs: Any, url: str, count: int = 10, **options: Any) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = sqs.receive_message(
        QueueUrl=url, MaxNumberOfMessages=count, MessageSystemAttributeNames=["All"], **options
    ).get("Messages", [])
    return messages


def bodies(messages: list[dict[str, Any]]) -> list[str]:
    return [message["Body"] for message in messages]


def depth(sqs: Any, url: str) -> int:
    attributes = sqs.get_queue_attributes(
        QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
    )["Attributes"]
    return int(attributes["ApproximateNumberOfMessages"]) + int(attributes["ApproximateNumberOfMessagesNotVisible"])


def consume(sqs: Any, url: str) -> list[dict[str, Any]]:
    messages = receive(sqs, url)
    for message in messages:
        sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
    return messages


def dead_letter(queues: Queues, clock: VirtualClock) -> None:
    """Receive without deleting until the redrive policy moves everything to the DLQ."""
    for _ in range(MAX_RECEIVE_COUNT + 1):
        receive(queues.sqs, queues.url)
        clock.advance(VISIBILITY_TIMEOUT)


# Rule 6: the FIFO deduplication window survives deletion (M14, R5.1).


def test_a_resend_within_five_minutes_of_a_deleted_message_is_accepted_but_not_delivered(
    fifo: Queues, clock: VirtualClock
) -> None:
    # Given a message that was delivered and deleted
    send(fifo, "order-1")
    assert bodies(consume(fifo.sqs, fifo.url)) == ["order-1"]

    # When the producer sends it again with the same deduplication id, 4:59 later, alone and in a batch
    clock.advance(timedelta(minutes=4, seconds=59))
    send(fifo, "order-1")
    batch = fifo.sqs.send_message_batch(
        QueueUrl=fifo.url,
        Entries=[
            {"Id": "again", "MessageBody": "order-1", "MessageGroupId": "tenant-a", "MessageDeduplicationId": "order-1"}
        ],
    )

    # Then both calls succeed and nothing is enqueued
    assert [entry["Id"] for entry in batch["Successful"]] == ["again"]
    assert depth(fifo.sqs, fifo.url) == 0


def test_a_resend_after_five_minutes_is_delivered_again(fifo: Queues, clock: VirtualClock) -> None:
    # Given a message that was delivered and deleted
    send(fifo, "order-1")
    consume(fifo.sqs, fifo.url)

    # When it is sent again five minutes after the first send
    clock.advance(timedelta(minutes=5))
    send(fifo, "order-1")

    # Then it is a new message
    assert bodies(consume(fifo.sqs, fifo.url)) == ["order-1"]


def test_content_based_deduplication_keeps_its_window_after_deletion(sqs: Any, clock: VirtualClock) -> None:
    # Given a content-deduplicated FIFO queue whose message was delivered and deleted
    url, _ = create_queue(sqs, "content.fifo", ContentBasedDeduplication="true")
    sqs.send_message(QueueUrl=url, MessageBody="same body", MessageGroupId="g")
    consume(sqs, url)

    # When the same body is sent again within five minutes
    clock.advance(timedelta(minutes=1))
    sqs.send_message(QueueUrl=url, MessageBody="same body", MessageGroupId="g")

    # Then it is not delivered
    assert depth(sqs, url) == 0


# Rule 7: the move to the dead-letter queue (M17, R5.4).


def test_a_dead_lettered_fifo_message_keeps_its_group_and_takes_its_id_as_dedup_id(
    fifo: Queues, clock: VirtualClock
) -> None:
    # Given a message its consumer never deletes
    message_id = send(fifo, "poison", group="tenant-b", dedup_id="event-7")

    # When the redrive policy moves it after maxReceiveCount receives
    dead_letter(fifo, clock)

    # Then the DLQ holds it under the same message id and group, deduplicated by its id, with its source
    [parked] = receive(fifo.sqs, fifo.dlq_url)
    assert parked["MessageId"] == message_id
    assert parked["Attributes"]["MessageGroupId"] == "tenant-b"
    assert parked["Attributes"]["MessageDeduplicationId"] == message_id
    assert parked["Attributes"]["DeadLetterQueueSourceArn"] == fifo.arn


def test_a_dead_lettered_message_is_never_swallowed_by_the_dlq_deduplication(fifo: Queues, clock: VirtualClock) -> None:
    # Given a DLQ already holding a message whose deduplication id is "event-7"
    fifo.sqs.send_message(
        QueueUrl=fifo.dlq_url, MessageBody="parked by hand", MessageGroupId="ops", MessageDeduplicationId="event-7"
    )

    # When a message with that same deduplication id is dead-lettered within five minutes
    send(fifo, "poison", dedup_id="event-7")
    dead_letter(fifo, clock)

    # Then it reaches the DLQ (moto compared the old dedup id and silently dropped it: M17's vanish)
    assert sorted(bodies(receive(fifo.sqs, fifo.dlq_url))) == ["parked by hand", "poison"]


def test_concurrent_producers_and_consumers_lose_no_message(sqs: Any) -> None:
    # Given a standard queue, two producers and two consumers that delete what they receive
    url, _ = create_queue(sqs, "busy")
    per_producer = 150
    received: set[str] = set()
    done = threading.Event()

    def produce(producer: int) -> None:
        client = boto3.client("sqs", region_name="us-east-1")
        for n in range(per_producer):
            client.send_message(QueueUrl=url, MessageBody=f"{producer}-{n}")

    def consume_all() -> None:
        client = boto3.client("sqs", region_name="us-east-1")
        while not done.is_set() or depth(client, url):
            for message in receive(client, url, VisibilityTimeout=600):
                received.add(message["Body"])
                client.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])

    # When they run at once
    producers = [threading.Thread(target=produce, args=(p,)) for p in range(2)]
    consumers = [threading.Thread(target=consume_all) for _ in range(2)]
    for thread in producers + consumers:
        thread.start()
    for thread in producers:
        thread.join()
    done.set()
    for thread in consumers:
        thread.join(timeout=60)

    # Then every message was received
    assert len(received) == 2 * per_producer


# Rule 8: visibility on the virtual clock (M19), with group blocking (M15) and receive counts.


def test_an_unacknowledged_message_comes_back_when_the_virtual_clock_passes_its_visibility_timeout(
    fifo: Queues, clock: VirtualClock
) -> None:
    # Given a received message that is not deleted
    send(fifo, "order-1")
    receive(fifo.sqs, fifo.url)

    # When the virtual clock is one second short of, then at, the visibility timeout
    clock.advance(VISIBILITY_TIMEOUT - 1)
    early = receive(fifo.sqs, fifo.url)
    clock.advance(1)
    due = receive(fifo.sqs, fifo.url)

    # Then it is invisible, then visible again with its receive count raised
    assert early == []
    assert bodies(due) == ["order-1"]
    assert due[0]["Attributes"]["ApproximateReceiveCount"] == "2"


def test_an_in_flight_message_blocks_its_group_until_its_visibility_timeout_passes(
    fifo: Queues, clock: VirtualClock
) -> None:
    # Given A1, A2 in group A and B1 in group B, with A1 received and in flight
    send(fifo, "A1", group="A")
    send(fifo, "A2", group="A")
    send(fifo, "B1", group="B")
    assert bodies(receive(fifo.sqs, fifo.url, count=1)) == ["A1"]

    # When the consumer receives again, then again once A1's visibility timeout has passed
    clock.advance(10)
    while_blocked = receive(fifo.sqs, fifo.url)
    clock.advance(VISIBILITY_TIMEOUT - 10)
    after = receive(fifo.sqs, fifo.url)

    # Then group A waits for A1, and A1 comes back first, followed by A2 (B1 is still in flight)
    assert bodies(while_blocked) == ["B1"]
    assert bodies(after) == ["A1", "A2"]
    assert [m["Attributes"]["ApproximateReceiveCount"] for m in after] == ["2", "1"]


def test_a_visibility_timeout_of_zero_releases_a_message_without_the_clock_moving(fifo: Queues) -> None:
    # Given a received message
    send(fifo, "order-1")
    [message] = receive(fifo.sqs, fifo.url)

    # When its visibility is set to zero while the virtual clock stands still
    fifo.sqs.change_message_visibility(QueueUrl=fifo.url, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=0)

    # Then it can be received at once
    assert bodies(receive(fifo.sqs, fifo.url)) == ["order-1"]


# Rule 9: StartMessageMoveTask, ListMessageMoveTasks, CancelMessageMoveTask (M18, R5.6).


def test_a_move_task_redrives_the_dlq_to_the_source_queue_as_new_messages(fifo: Queues, clock: VirtualClock) -> None:
    # Given two messages of one group that were dead-lettered
    first = send(fifo, "e-1", group="tenant-b")
    send(fifo, "e-2", group="tenant-b")
    dead_letter(fifo, clock)
    assert depth(fifo.sqs, fifo.dlq_url) == 2

    # When a move task is started on the DLQ without a destination, within the five-minute window
    handle = fifo.sqs.start_message_move_task(SourceArn=fifo.dlq_arn)["TaskHandle"]

    # Then both are back in the source queue, in order, in their group, as new messages with fresh dedup ids
    redriven = receive(fifo.sqs, fifo.url)
    assert handle
    assert bodies(redriven) == ["e-1", "e-2"]
    assert all(m["Attributes"]["MessageGroupId"] == "tenant-b" for m in redriven)
    assert redriven[0]["MessageId"] != first
    assert [m["Attributes"]["MessageDeduplicationId"] for m in redriven] == [m["MessageId"] for m in redriven]
    assert depth(fifo.sqs, fifo.dlq_url) == 0
    [task] = fifo.sqs.list_message_move_tasks(SourceArn=fifo.dlq_arn)["Results"]
    assert task["Status"] == "COMPLETED"
    assert task["ApproximateNumberOfMessagesMoved"] == 2
    assert task["ApproximateNumberOfMessagesToMove"] == 2


def test_a_move_task_honours_an_explicit_destination(fifo: Queues, clock: VirtualClock) -> None:
    # Given a dead-lettered message and a second FIFO queue
    send(fifo, "e-1")
    dead_letter(fifo, clock)
    other_url, other_arn = create_queue(fifo.sqs, "replay.fifo")

    # When the move task names that queue
    fifo.sqs.start_message_move_task(SourceArn=fifo.dlq_arn, DestinationArn=other_arn, MaxNumberOfMessagesPerSecond=5)

    # Then the message lands there, not in its source queue
    assert bodies(receive(fifo.sqs, other_url)) == ["e-1"]
    assert depth(fifo.sqs, fifo.url) == 0


def test_a_completed_move_task_cannot_be_cancelled(fifo: Queues) -> None:
    # Given a move task that completed at once
    handle = fifo.sqs.start_message_move_task(SourceArn=fifo.dlq_arn)["TaskHandle"]

    # When it is cancelled
    with pytest.raises(ClientError) as raised:
        fifo.sqs.cancel_message_move_task(TaskHandle=handle)

    # Then there is no running task to cancel
    assert raised.value.response["Error"]["Code"] == "ResourceNotFoundException"


def test_a_move_task_needs_a_dead_letter_queue_as_its_source(fifo: Queues) -> None:
    # When a move task is started on a queue that is no queue's DLQ
    with pytest.raises(ClientError) as raised:
        fifo.sqs.start_message_move_task(SourceArn=fifo.arn)

    # Then it is refused
    assert raised.value.response["Error"]["Code"] == "InvalidParameterValue"


# ReceiveRequestAttemptId (M16, R5.3).


def test_a_retried_receive_with_the_same_attempt_id_returns_the_same_messages_and_receipt_handles(
    fifo: Queues,
) -> None:
    # Given two groups with a message each, and a receive of one message whose response was lost
    send(fifo, "A1", group="A")
    send(fifo, "B1", group="B")
    [lost] = receive(fifo.sqs, fifo.url, count=1, ReceiveRequestAttemptId="attempt-1")

    # When the consumer retries with the same attempt id
    [retried] = receive(fifo.sqs, fifo.url, count=1, ReceiveRequestAttemptId="attempt-1")

    # Then it gets the same message and receipt handle, not the next group's message
    assert (retried["MessageId"], retried["ReceiptHandle"]) == (lost["MessageId"], lost["ReceiptHandle"])


# -- rule 10: visibility changes count 12 hours from the receive ----------------------------------------------


def test_a_message_that_waited_a_day_can_still_be_released_and_extended_from_its_receive(
    fifo: Queues, clock: VirtualClock
) -> None:
    # Given a message that sat in its queue for a day before it was received (moto counted from the send)
    send(fifo, "late")
    clock.advance(timedelta(days=1))
    [message] = receive(fifo.sqs, fifo.url)

    # When it is released, received again, and its visibility extended up to 12 hours from that receive
    fifo.sqs.change_message_visibility(QueueUrl=fifo.url, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=0)
    [again] = receive(fifo.sqs, fifo.url)
    fifo.sqs.change_message_visibility(
        QueueUrl=fifo.url, ReceiptHandle=again["ReceiptHandle"], VisibilityTimeout=12 * 3600 - 1
    )

    # Then both changes are accepted, and only an extension past 12 hours from the receive is refused
    clock.advance(timedelta(hours=1))
    with pytest.raises(ClientError, match="beyond the limit"):
        fifo.sqs.change_message_visibility(
            QueueUrl=fifo.url, ReceiptHandle=again["ReceiptHandle"], VisibilityTimeout=12 * 3600 - 1800
        )


# Rule 12: SQS measures a message in bytes, body and attributes together (SendMessage: "the message
# attributes count toward the message size").


def test_a_message_is_measured_in_utf8_bytes_with_its_attributes(sqs: Any) -> None:
    url, _ = create_queue(sqs, "small", MaximumMessageSize="1024")
    three_byte = "€" * 342  # 342 characters, 1026 bytes

    with pytest.raises(ClientError, match="shorter than 1024 bytes"):
        sqs.send_message(QueueUrl=url, MessageBody=three_byte)
    attribute = {"outbox-subscriptions": {"DataType": "String", "StringValue": "x" * 30}}
    with pytest.raises(ClientError, match="shorter than 1024 bytes"):
        sqs.send_message(QueueUrl=url, MessageBody="a" * 1000, MessageAttributes=attribute)
    sqs.send_message(QueueUrl=url, MessageBody="a" * 1024)
    sqs.send_message(QueueUrl=url, MessageBody="a" * 960, MessageAttributes=attribute)  # 960 + 20 + 6 + 30

    assert len(sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]) == 2


def test_a_batch_with_one_oversized_entry_sends_none_of_them(sqs: Any) -> None:
    url, _ = create_queue(sqs, "small-batch", MaximumMessageSize="1024")
    entries = [{"Id": "ok", "MessageBody": "fine"}, {"Id": "big", "MessageBody": "€" * 342}]

    with pytest.raises(ClientError, match="shorter than 1024 bytes"):
        sqs.send_message_batch(QueueUrl=url, Entries=entries)

    assert sqs.receive_message(QueueUrl=url).get("Messages", []) == []
