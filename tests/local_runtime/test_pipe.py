"""The pipe emulator on moto: the relay's real filter, template and dynamic ids, driven by real rows.

Each test pins one behaviour of EventBridge Pipes that moto does not have (docs/aws-behaviour.md M22).
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from outbox import EventStore
from outbox.local import aws_fixes
from outbox.local.clock import VirtualClock
from outbox.local.pipe import (
    PipeConfig,
    PipeEmulator,
    PipeFaults,
    PipeHappening,
    PipeInternalError,
    PipeRecord,
    PipeWatcher,
    reverse_items,
)
from outbox_cdk.relay_pipe import (
    FILTER_PATTERN,
    INPUT_TEMPLATE,
    MESSAGE_DEDUPLICATION_ID_PATH,
    MESSAGE_GROUP_ID_PATH,
)
from tests.functional.conftest import EVENTS_TABLE, create_pk_sk_table

REGION = "us-east-1"


@dataclass
class World:
    dynamodb: Any
    streams: Any
    sqs: Any
    clock: VirtualClock
    stream_arn: str
    queue_url: str
    pipe_dlq_url: str
    sent: Counter[str] = field(default_factory=Counter)  # the streams client's requests, by operation

    def __post_init__(self) -> None:
        self.streams.meta.events.register("before-call.dynamodbstreams", self._count)

    def _count(self, model: Any, **_kwargs: Any) -> None:
        self.sent[model.name] += 1

    def config(self, **overrides: Any) -> PipeConfig:
        """The relay pipe as the stack defines it (with short retries unless a test says otherwise)."""
        relay = PipeConfig(
            name="relay",
            stream_arn=self.stream_arn,
            target_queue_url=self.queue_url,
            filter_patterns=[json.dumps(FILTER_PATTERN)],
            input_template=INPUT_TEMPLATE,
            message_group_id=MESSAGE_GROUP_ID_PATH,
            message_deduplication_id=MESSAGE_DEDUPLICATION_ID_PATH,
            batch_size=10,
            maximum_retry_attempts=2,
            maximum_record_age_seconds=12 * 3600,
            starting_position="TRIM_HORIZON",
            dead_letter_queue_url=self.pipe_dlq_url,
        )
        return replace(relay, **overrides)

    def pipe(self, faults: PipeFaults | None = None, **overrides: Any) -> PipeEmulator:
        return PipeEmulator(self.config(**overrides), self.streams, self.sqs, self.clock, faults=faults)

    def streams_calls(self, operation: str) -> int:
        """How many ``operation`` requests the streams client has sent so far."""
        return self.sent.get(operation, 0)

    def put(self, item: Mapping[str, Any]) -> dict[str, Any]:
        typed = {name: {"S": value} for name, value in item.items()}
        self.dynamodb.put_item(TableName=EVENTS_TABLE, Item=typed)
        return typed

    def received(self, url: str | None = None) -> list[dict[str, Any]]:
        """Everything in a queue, in receive order, deleted as it is read."""
        messages: list[dict[str, Any]] = []
        while batch := self.sqs.receive_message(
            QueueUrl=url or self.queue_url, MaxNumberOfMessages=10, MessageSystemAttributeNames=["All"]
        ).get("Messages", []):
            for message in batch:
                self.sqs.delete_message(QueueUrl=url or self.queue_url, ReceiptHandle=message["ReceiptHandle"])
            messages.extend(batch)
        return messages

    def dead_letters(self) -> list[dict[str, Any]]:
        return [json.loads(message["Body"]) for message in self.received(self.pipe_dlq_url)]

    def sequence_numbers(self) -> list[str]:
        shard = self.streams.describe_stream(StreamArn=self.stream_arn)["StreamDescription"]["Shards"][0]
        iterator = self.streams.get_shard_iterator(
            StreamArn=self.stream_arn, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        return [
            record["dynamodb"]["SequenceNumber"]
            for record in self.streams.get_records(ShardIterator=iterator)["Records"]
        ]


def event_row(tenant: str = "acme", seq: int = 1, event_id: str | None = None) -> dict[str, str]:
    return {
        "pk": f"TENANT#{tenant}#EVENT",
        "sk": str(seq).zfill(20),
        "kind": "EVENT",
        "tenant": tenant,
        "event_id": event_id or f"{tenant}-{seq}",
    }


@contextmanager
def aws_fixes_on(clock: VirtualClock) -> Iterator[None]:
    """Stream records stamped on the virtual clock (M5), as in the local runtime: their age counts from it."""
    uninstall = aws_fixes.install(clock)
    try:
        yield
    finally:
        uninstall()


@pytest.fixture
def world(aws_credentials: None) -> Iterator[World]:
    clock = VirtualClock()
    with mock_aws(), aws_fixes_on(clock):
        dynamodb = boto3.client("dynamodb", region_name=REGION)
        create_pk_sk_table(dynamodb, EVENTS_TABLE, stream=True)
        stream_arn = dynamodb.describe_table(TableName=EVENTS_TABLE)["Table"]["LatestStreamArn"]
        sqs = boto3.client("sqs", region_name=REGION)
        fifo_dlq = sqs.create_queue(QueueName="durable-dlq.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
        fifo_dlq_arn = sqs.get_queue_attributes(QueueUrl=fifo_dlq, AttributeNames=["QueueArn"])["Attributes"][
            "QueueArn"
        ]
        queue_url = sqs.create_queue(
            QueueName="durable.fifo",
            Attributes={
                "FifoQueue": "true",
                "RedrivePolicy": json.dumps({"deadLetterTargetArn": fifo_dlq_arn, "maxReceiveCount": "5"}),
            },
        )["QueueUrl"]
        pipe_dlq_url = sqs.create_queue(QueueName="relay-dlq")["QueueUrl"]
        yield World(
            dynamodb,
            boto3.client("dynamodbstreams", region_name=REGION),
            sqs,
            clock,
            stream_arn,
            queue_url,
            pipe_dlq_url,
        )


def fail_sends(times: int) -> Callable[[Sequence[Mapping[str, Any]]], None]:
    """A ``before_send`` hook: SQS refuses the first ``times`` calls, then accepts."""
    calls = {"count": 0}

    def before_send(_entries: Sequence[Mapping[str, Any]]) -> None:
        calls["count"] += 1
        if calls["count"] <= times:
            raise ClientError({"Error": {"Code": "InternalError", "Message": "injected"}}, "SendMessageBatch")

    return before_send


# -- the happy path ---------------------------------------------------------------------------------------


def test_only_event_row_inserts_arrive_as_the_raw_image_grouped_by_tenant(world: World) -> None:
    # Given an engine that emits three events for two tenants (each emit also writes its chain head)
    store = EventStore(
        EVENTS_TABLE, client=world.dynamodb, clock=world.clock.now_ms, sleep=world.clock.sleep, unchecked=True
    )
    pipe = world.pipe()
    envelopes = [
        store.emit("order.created", {"n": 1}, tenant="acme", actor="test"),
        store.emit("order.paid", {"n": 2}, tenant="acme", actor="test"),
        store.emit("order.created", {"n": 3}, tenant="globex", actor="test"),
    ]

    # When the pipe drains the stream
    pipe.drain()

    # Then each event arrives once: body = the NewImage, group = tenant, dedup id = event id
    messages = world.received()
    assert [json.loads(m["Body"]) for m in messages] == [envelope.to_item() for envelope in envelopes]
    assert [m["Attributes"]["MessageGroupId"] for m in messages] == ["acme", "acme", "globex"]
    assert [m["Attributes"]["MessageDeduplicationId"] for m in messages] == [e.id for e in envelopes]
    # and the two head inserts, one head update and two tenant-index inserts were dropped, the
    # checkpoint past all of them
    assert (pipe.counters.received, pipe.counters.filtered_out, pipe.counters.delivered) == (8, 5, 3)
    assert list(pipe.checkpoints.values()) == [world.sequence_numbers()[-1]]
    assert world.dead_letters() == []


def test_a_head_row_is_dropped_and_the_checkpoint_moves_past_it(world: World) -> None:
    pipe = world.pipe()
    world.put({"pk": "TENANT#acme#HEAD", "sk": "HEAD", "kind": "HEAD", "tenant": "acme"})

    result = pipe.poll()

    assert result is not None
    assert (result.outcome, result.filtered_out) == ("filtered", 1)
    assert world.received() == []
    assert list(pipe.checkpoints.values()) == world.sequence_numbers()


def test_a_modify_of_an_event_row_is_dropped(world: World) -> None:
    pipe = world.pipe()
    world.put(event_row())
    world.dynamodb.update_item(
        TableName=EVENTS_TABLE,
        Key={"pk": {"S": "TENANT#acme#EVENT"}, "sk": {"S": "1".zfill(20)}},
        UpdateExpression="SET note = :n",
        ExpressionAttributeValues={":n": {"S": "changed"}},
    )

    pipe.drain()

    assert [json.loads(m["Body"]).get("note") for m in world.received()] == [None]
    assert (pipe.counters.delivered, pipe.counters.filtered_out) == (1, 1)


def test_a_pipe_starting_at_latest_skips_what_is_already_in_the_stream(world: World) -> None:
    world.put(event_row(seq=1))
    pipe = world.pipe(starting_position="LATEST")
    world.put(event_row(seq=2))

    pipe.drain()

    assert [m["Attributes"]["MessageDeduplicationId"] for m in world.received()] == ["acme-2"]


def test_a_shard_read_to_its_end_is_read_again_only_after_a_stream_record_is_published(world: World) -> None:
    pipe = world.pipe()
    world.put(event_row(seq=1))
    pipe.drain()
    reads = world.streams_calls("GetRecords")

    for _ in range(3):
        assert pipe.poll() is None
    assert world.streams_calls("GetRecords") == reads  # nothing was published: nothing to ask for

    world.put(event_row(seq=2))  # any write that publishes a record: the next poll reads again, and finds it
    pipe.drain()

    assert [m["Attributes"]["MessageDeduplicationId"] for m in world.received()] == ["acme-1", "acme-2"]


# -- failures: logged, retried, dead-lettered as batch metadata ------------------------------------------


def test_a_template_path_that_does_not_resolve_ends_in_the_dlq_as_batch_metadata(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    # Given the seed's mistake: a template path that names nothing (AWS would stay silent)
    pipe = world.pipe(input_template="<$.dynamodb.NewImag>", maximum_retry_attempts=2)
    world.put(event_row())
    [sequence_number] = world.sequence_numbers()

    # When the pipe drains
    with caplog.at_level(logging.ERROR, logger="outbox.local.pipe"):
        pipe.drain()

    # Then nothing is delivered, every attempt is an ERROR for that record, 1 try + 2 retries
    assert world.received() == []
    record_errors = [entry for entry in pipe.log if entry.event_id is not None]
    assert len(record_errors) == 3
    assert all(entry.level == "ERROR" and "NewImag" in entry.message for entry in record_errors)
    assert any("NewImag" in record.getMessage() for record in caplog.records if record.levelno == logging.ERROR)
    assert (pipe.counters.failed_attempts, pipe.counters.dead_lettered) == (3, 1)
    # and the DLQ holds the batch's metadata, not the record; the checkpoint moved past it
    [dead_letter] = world.dead_letters()
    info = dead_letter["DDBStreamBatchInfo"]
    assert info["shardId"] == next(iter(pipe.checkpoints))
    assert (info["startSequenceNumber"], info["endSequenceNumber"], info["batchSize"]) == (
        sequence_number,
        sequence_number,
        1,
    )
    assert info["streamArn"] == world.stream_arn
    assert dead_letter["requestContext"]["condition"] == "RetryAttemptsExhausted"
    assert "NewImag" in dead_letter["errorMessage"]
    assert "NewImage" not in json.dumps(dead_letter)
    assert list(pipe.checkpoints.values()) == [sequence_number]


def test_a_dedup_path_that_does_not_resolve_fails_the_same_way(world: World) -> None:
    pipe = world.pipe(maximum_retry_attempts=1)
    row = event_row()
    del row["event_id"]
    world.put(row)

    pipe.drain()

    assert world.received() == []
    assert any("event_id" in entry.message for entry in pipe.log if entry.level == "ERROR")
    assert (pipe.counters.failed_attempts, pipe.counters.dead_lettered) == (2, 1)
    [dead_letter] = world.dead_letters()
    assert dead_letter["DDBStreamBatchInfo"]["startSequenceNumber"] == world.sequence_numbers()[0]
    assert list(pipe.checkpoints.values()) == world.sequence_numbers()


def test_one_bad_record_goes_to_the_dlq_alone_and_the_rest_are_delivered(world: World) -> None:
    pipe = world.pipe(maximum_retry_attempts=0)
    world.put(event_row(seq=1))
    bad = event_row(seq=2)
    del bad["tenant"]
    world.put(bad)
    world.put(event_row(seq=3))
    sequence_numbers = world.sequence_numbers()

    pipe.drain()

    assert [m["Attributes"]["MessageDeduplicationId"] for m in world.received()] == ["acme-1", "acme-3"]
    [dead_letter] = world.dead_letters()
    info = dead_letter["DDBStreamBatchInfo"]
    assert (info["startSequenceNumber"], info["endSequenceNumber"], info["batchSize"]) == (
        sequence_numbers[1],
        sequence_numbers[1],
        1,
    )
    assert list(pipe.checkpoints.values()) == [sequence_numbers[-1]]


def test_the_checkpoint_holds_while_a_batch_fails_and_the_shard_waits_behind_it(world: World) -> None:
    # Given SQS that fails twice, then recovers, and a batch of two with a third record behind it
    pipe = world.pipe(faults=PipeFaults(before_send=fail_sends(2)), batch_size=2)
    for seq in (1, 2, 3):
        world.put(event_row(seq=seq))
    sequence_numbers = world.sequence_numbers()

    # When the first batch fails twice
    for _ in range(2):
        result = pipe.poll()
        assert result is not None
        assert result.outcome == "retrying"
        assert list(pipe.checkpoints.values()) == [None]
        assert pipe.poll() is None  # backing off: the third record waits too
        assert pipe.next_retry_at is not None
        world.clock.advance(pipe.next_retry_at - world.clock())
    assert world.received() == []

    # Then the retry succeeds, the checkpoint moves to the batch's end, and the rest follows
    result = pipe.poll()
    assert result is not None
    assert result.outcome == "delivered"
    assert list(pipe.checkpoints.values()) == [sequence_numbers[1]]
    pipe.drain()
    assert [m["Attributes"]["MessageDeduplicationId"] for m in world.received()] == ["acme-1", "acme-2", "acme-3"]
    assert (pipe.counters.failed_attempts, pipe.counters.delivered, pipe.counters.dead_lettered) == (2, 3, 0)


def test_pipe_internal_errors_are_retried_without_counting_against_retries(world: World) -> None:
    calls = {"count": 0}

    def flaky_service(_entries: Sequence[Mapping[str, Any]]) -> None:
        calls["count"] += 1
        if calls["count"] <= 3:
            raise PipeInternalError("connection reset")

    pipe = world.pipe(faults=PipeFaults(before_send=flaky_service), maximum_retry_attempts=0)
    world.put(event_row())

    pipe.drain()

    assert len(world.received()) == 1
    assert (pipe.counters.internal_errors, pipe.counters.failed_attempts, pipe.counters.dead_lettered) == (3, 0, 0)


def test_the_batch_size_is_honoured(world: World) -> None:
    sent_batches: list[int] = []
    pipe = world.pipe(faults=PipeFaults(before_send=lambda entries: sent_batches.append(len(entries))), batch_size=3)
    for seq in range(1, 8):
        world.put(event_row(seq=seq))

    results = pipe.drain()

    assert sent_batches == [3, 3, 1]
    assert [len(result.delivered) for result in results] == [3, 3, 1]
    assert len(world.received()) == 7


def test_a_record_expires_by_its_age_on_the_virtual_clock(world: World) -> None:
    # Given a record the target keeps refusing, unlimited retries and a one-minute maximum age
    pipe = world.pipe(input_template="<$.nowhere>", maximum_retry_attempts=-1, maximum_record_age_seconds=60)
    world.put(event_row())

    # When 30 s pass between two failed attempts, the record is still retried
    assert pipe.poll() is not None
    world.clock.advance(30)
    second = pipe.poll()
    assert second is not None
    assert second.outcome == "retrying"
    assert world.dead_letters() == []

    # Then past 60 s of virtual time (moto's wall-clock creation time plays no part) it is dead-lettered
    world.clock.advance(31)
    expired = pipe.poll()
    assert expired is not None
    assert expired.outcome == "dead_lettered"
    [dead_letter] = world.dead_letters()
    assert dead_letter["requestContext"]["condition"] == "RecordAgeExceeded"
    assert pipe.counters.failed_attempts == 2
    assert list(pipe.checkpoints.values()) == world.sequence_numbers()


# -- fault hooks ----------------------------------------------------------------------------------------


def test_a_duplicated_delivery_is_collapsed_by_fifo_deduplication(world: World) -> None:
    pipe = world.pipe(faults=PipeFaults(duplicate_delivery=lambda _records: True))
    world.put(event_row(seq=1))
    world.put(event_row(seq=2))

    pipe.drain()

    assert pipe.counters.duplicate_sends == 1
    assert [m["Attributes"]["MessageDeduplicationId"] for m in world.received()] == ["acme-1", "acme-2"]


def test_records_of_different_items_can_be_reordered_within_a_batch(world: World) -> None:
    pipe = world.pipe(faults=PipeFaults(reorder=reverse_items))
    for seq in (1, 2, 3):
        world.put(event_row(seq=seq))

    pipe.drain()

    assert [m["Attributes"]["MessageDeduplicationId"] for m in world.received()] == ["acme-3", "acme-2", "acme-1"]


def test_a_reorder_hook_may_not_reorder_one_items_records(world: World) -> None:
    def reverse_all(records: list[PipeRecord]) -> list[PipeRecord]:
        return records[::-1]

    pipe = world.pipe(faults=PipeFaults(reorder=reverse_all), filter_patterns=[], message_deduplication_id="$.eventID")
    world.put(event_row())
    world.put({**event_row(), "note": "second version"})

    with pytest.raises(ValueError, match="one item's records"):
        pipe.poll()


def test_a_batch_larger_than_sqs_takes_is_refused(world: World) -> None:
    with pytest.raises(ValueError, match="batch_size 11"):
        world.config(batch_size=11)


def test_a_record_s_age_counts_from_its_creation_not_from_when_the_pipe_first_reads_it(world: World) -> None:
    # Given a record written 13 hours before the pipe reads it, with a 12-hour maximum age
    world.put(event_row())
    world.clock.advance(13 * 3600)
    pipe = world.pipe()

    # Then AWS would discard it: it goes to the pipe's DLQ, not to the queue
    pipe.drain()

    assert world.received() == []
    [dead_letter] = world.dead_letters()
    assert dead_letter["requestContext"]["condition"] == "RecordAgeExceeded"


def test_a_record_younger_than_the_maximum_age_is_delivered_however_late_it_is_read(world: World) -> None:
    world.put(event_row())
    world.clock.advance(11 * 3600)
    pipe = world.pipe()

    pipe.drain()

    assert len(world.received()) == 1
    assert world.dead_letters() == []


# AUTOMATIC_BISECT (R4.1): "halves each batch and retry each half until all the records are processed or
# there is one failed message left in the batch".


def big_event_row(seq: int) -> dict[str, str]:
    return {**event_row(seq=seq), "blob": "x" * 120_000}  # ten of them are over SendMessageBatch's 1 MiB


def test_a_batch_too_large_to_send_whole_is_halved_and_every_record_delivered_in_order(world: World) -> None:
    pipe = world.pipe(automatic_bisect=True)
    for seq in range(1, 11):
        world.put(big_event_row(seq))

    pipe.drain()

    assert [json.loads(m["Body"])["event_id"]["S"] for m in world.received()] == [f"acme-{n}" for n in range(1, 11)]
    assert world.dead_letters() == []
    assert pipe.counters.bisections >= 1


def test_without_bisect_a_batch_too_large_to_send_is_dead_lettered_whole(world: World) -> None:
    pipe = world.pipe(automatic_bisect=False)
    for seq in range(1, 11):
        world.put(big_event_row(seq))

    pipe.drain()

    assert world.received() == []
    [dead_letter] = world.dead_letters()
    assert dead_letter["DDBStreamBatchInfo"]["batchSize"] == 10


def test_bisect_isolates_the_one_record_the_queue_refuses(world: World) -> None:
    small = world.sqs.create_queue(
        QueueName="small.fifo", Attributes={"FifoQueue": "true", "MaximumMessageSize": "4096"}
    )
    pipe = world.pipe(automatic_bisect=True, target_queue_url=small["QueueUrl"])
    for seq in range(1, 5):
        world.put({**event_row(seq=seq), "blob": "x" * (8_000 if seq == 3 else 10)})

    pipe.drain()

    delivered = [json.loads(m["Body"])["event_id"]["S"] for m in world.received(small["QueueUrl"])]
    assert "acme-3" not in delivered
    assert {"acme-1", "acme-2", "acme-4"} <= set(delivered)
    [dead_letter] = world.dead_letters()
    assert dead_letter["DDBStreamBatchInfo"]["batchSize"] == 1


def test_with_bisect_two_records_the_queue_refuses_alone_are_two_dead_letters_of_one_record_each(
    world: World,
) -> None:
    small = world.sqs.create_queue(
        QueueName="small.fifo", Attributes={"FifoQueue": "true", "MaximumMessageSize": "4096"}
    )
    pipe = world.pipe(automatic_bisect=True, target_queue_url=small["QueueUrl"])
    for seq in range(1, 5):
        world.put({**event_row(seq=seq), "blob": "x" * (8_000 if seq in (2, 3) else 10)})

    pipe.drain()

    delivered = [json.loads(m["Body"])["event_id"]["S"] for m in world.received(small["QueueUrl"])]
    assert {"acme-1", "acme-4"} <= set(delivered)
    assert sorted(d["DDBStreamBatchInfo"]["batchSize"] for d in world.dead_letters()) == [1, 1]


# -- watchers ------------------------------------------------------------------------------------------------


def test_a_watcher_is_told_of_each_attempt_and_dead_letter_before_the_pipe_acts_and_not_after_its_block(
    world: World,
) -> None:
    # Given SQS refusing the first send, and a pipe that dead-letters after one retry
    pipe = world.pipe(faults=PipeFaults(before_send=fail_sends(10)), maximum_retry_attempts=1)
    told: list[tuple[str, tuple[str, ...], str, int]] = []

    def attempting(happening: PipeHappening) -> None:
        told.append(("attempt", tuple(r.event_id for r in happening.records), "", len(world.dead_letters())))

    def dead_lettering(happening: PipeHappening) -> None:
        told.append(
            ("dead", tuple(r.event_id for r in happening.records), happening.condition, len(world.dead_letters()))
        )

    world.put(event_row(seq=1))
    world.put(event_row(seq=2))
    with pipe.watched(PipeWatcher(attempting=attempting, dead_lettering=dead_lettering)):
        pipe.drain()
    world.put(event_row(seq=3))
    pipe.drain()

    ids = told[0][1]
    assert len(ids) == 2, "the batch of both records"
    assert told == [("attempt", ids, "", 0), ("attempt", ids, "", 0), ("dead", ids, "RetryAttemptsExhausted", 0)]
    assert len(world.dead_letters()) == 2, "the third record's too, after the block: not told"
    assert pipe.watchers == []
