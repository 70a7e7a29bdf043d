"""The benchmarks count what AWS bills: these pin the rules, so a cost figure can be trusted (no timings)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from benchmarks import aws
from benchmarks.metering import (
    AwsMeter,
    MotoMeter,
    ResponseRecorder,
    ResponseReplayer,
    read_units,
    sqs_chunks,
    write_units,
)
from outbox.log.limits import item_size


@pytest.fixture
def metered(aws_credentials: None) -> Iterator[tuple[Any, AwsMeter]]:
    with aws.moto(fixes=True):
        client = aws.client("dynamodb")
        aws.create_table(client, "table")
        meter = AwsMeter.on_moto()
        meter.attach(client.meta.events)
        yield client, meter


def _item(pk: str, payload_bytes: int) -> dict[str, Any]:
    return {"pk": {"S": pk}, "sk": {"S": "x"}, "body": {"S": "a" * payload_bytes}}


def test_units_follow_the_published_rounding() -> None:
    # Given sizes on both sides of each boundary / Then units round up per started KB (writes), 4 KB (reads)
    assert [write_units(size) for size in (0, 1, 1024, 1025, 2048)] == [1, 1, 1, 2, 2]
    assert read_units(4096, consistent=True) == 1.0
    assert read_units(4097, consistent=True) == 2.0
    assert read_units(100, consistent=False) == 0.5
    assert [sqs_chunks(size) for size in (1, 65536, 65537)] == [1, 1, 2]


def test_item_size_counts_names_and_values() -> None:
    # Given an item of a string, a number, a boolean and a map / Then its size is DynamoDB's
    item = {"pk": {"S": "abc"}, "n": {"N": "12345"}, "ok": {"BOOL": True}, "m": {"M": {"k": {"S": "v"}}}}
    assert item_size(item) == (2 + 3) + (1 + 4) + (2 + 1) + (1 + 3 + 1 + 1 + 1)


def test_item_size_counts_sets_lists_binary_and_rounded_numbers() -> None:
    # Given the types the meter meets in moto's images besides strings (the meter sizes them by the engine's rules)
    item = {"ss": {"SS": ["ab", "c"]}, "l": {"L": [{"N": "-1.50"}, {"NULL": True}]}, "b": {"B": b"xyz"}}
    # Then a set is its members, a list 3 bytes plus 1 per element, and -1.50 is two significant digits: 2 bytes
    assert item_size(item) == (2 + 3) + (1 + 3 + (1 + 2) + (1 + 1)) + (1 + 3)


def test_a_write_is_charged_by_the_larger_of_the_old_and_new_image(metered: tuple[Any, AwsMeter]) -> None:
    client, meter = metered
    # Given a 1.5 KB item
    client.put_item(TableName="table", Item=_item("a", 1500))
    assert meter.total().write_units == 2
    # When an update shrinks it to a few bytes
    meter.reset()
    client.update_item(
        TableName="table",
        Key={"pk": {"S": "a"}, "sk": {"S": "x"}},
        UpdateExpression="SET body = :small",
        ExpressionAttributeValues={":small": {"S": "b"}},
    )
    # Then it still costs what the old image weighed
    assert meter.total().write_units == 2


def test_a_transaction_counts_every_item_twice_and_a_cancelled_one_is_marked_failed(
    metered: tuple[Any, AwsMeter],
) -> None:
    client, meter = metered
    # When two small items commit in one transaction
    client.transact_write_items(
        TransactItems=[{"Put": {"TableName": "table", "Item": _item(pk, 10)}} for pk in ("a", "b")]
    )
    # Then they cost 2 x 2 write units
    assert (meter.total().write_units, meter.total().transactional_write_units) == (4, 4)
    # When a transaction is cancelled by its condition
    meter.reset()
    with pytest.raises(client.exceptions.TransactionCanceledException):
        client.transact_write_items(
            TransactItems=[
                {
                    "Put": {
                        "TableName": "table",
                        "Item": _item("a", 10),
                        "ConditionExpression": "attribute_not_exists(pk)",
                    }
                }
            ]
        )
    # Then it is counted, and counted as failed
    usage = meter.total()
    assert (usage.requests, usage.errors, usage.failed_write_units) == (1, 1, usage.write_units)


def test_reads_are_charged_by_consistency(metered: tuple[Any, AwsMeter]) -> None:
    client, meter = metered
    client.put_item(TableName="table", Item=_item("a", 10))
    meter.reset()
    key = {"pk": {"S": "a"}, "sk": {"S": "x"}}
    client.get_item(TableName="table", Key=key, ConsistentRead=True)
    client.get_item(TableName="table", Key=key)
    assert meter.total().read_units == 1.5


def test_sqs_requests_are_split_by_queue_kind_and_batches_count_their_messages(aws_credentials: None) -> None:
    with aws.moto(fixes=True):
        sqs = aws.client("sqs")
        meter = AwsMeter()
        meter.attach(sqs.meta.events)
        fifo = aws.create_fifo_queue(sqs, "q")
        standard = sqs.create_queue(QueueName="standard")["QueueUrl"]
        meter.reset()
        # When one batch of three goes to each queue, and one empty receive happens
        for url in (fifo, standard):
            entries = [{"Id": str(i), "MessageBody": "x"} for i in range(3)]
            if url == fifo:
                entries = [{**e, "MessageGroupId": "g", "MessageDeduplicationId": e["Id"]} for e in entries]
            sqs.send_message_batch(QueueUrl=url, Entries=entries)
        sqs.receive_message(QueueUrl=sqs.create_queue(QueueName="empty")["QueueUrl"])
        # Then each batch is one request carrying three messages
        usage = meter.total(lambda _a, _s, operation: operation != "CreateQueue")
        assert (usage.sqs_requests_fifo, usage.sqs_requests_standard) == (1, 2)
        assert (usage.messages, usage.message_chunks, usage.empty) == (6, 6, 1)


def test_a_replayed_client_never_reaches_moto_and_gets_the_recorded_answers(metered: tuple[Any, AwsMeter]) -> None:
    client, _ = metered
    recording, replaying = aws.client("dynamodb"), aws.client("dynamodb")
    recorder, replayer = ResponseRecorder(), ResponseReplayer()
    recorder.attach(recording.meta.events)
    replayer.attach(replaying.meta.events)
    client.put_item(TableName="table", Item=_item("a", 10))
    key = {"pk": {"S": "a"}, "sk": {"S": "x"}}
    # Given a recorded read
    recorder.start()
    recorded = recording.get_item(TableName="table", Key=key)["Item"]
    replayer.load(recorder.stop())
    # When the other client makes the same request
    with MotoMeter() as moto:
        replayed = replaying.get_item(TableName="table", Key=key)["Item"]
    # Then moto served nothing, and the answer is the same
    assert moto.total.requests == 0
    assert replayed == recorded
    assert replayer.exhausted
