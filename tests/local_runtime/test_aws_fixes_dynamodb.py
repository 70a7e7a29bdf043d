"""Rules 1 to 5 of ``outbox.local.aws_fixes``: DynamoDB and its stream behave as on AWS, through boto3."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws
from moto.dynamodb.models.table import Table

from outbox.local.aws_fixes import install
from outbox.local.clock import VirtualClock

TABLE = "events"
START = datetime(2026, 1, 1, 12, 0, 0, 750_000, tzinfo=UTC)


@pytest.fixture
def clock() -> VirtualClock:
    return VirtualClock(START)


@pytest.fixture
def dynamodb(aws_credentials: None, clock: VirtualClock) -> Iterator[Any]:
    with mock_aws():
        uninstall = install(clock)
        try:
            client = boto3.client("dynamodb", region_name="us-east-1")
            client.create_table(
                TableName=TABLE,
                KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
                AttributeDefinitions=[
                    {"AttributeName": "pk", "AttributeType": "S"},
                    {"AttributeName": "sk", "AttributeType": "S"},
                ],
                BillingMode="PAY_PER_REQUEST",
                StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"},
            )
            yield client
        finally:
            uninstall()


def key(pk: str, sk: str = "ROW") -> dict[str, Any]:
    return {"pk": {"S": pk}, "sk": {"S": sk}}


def put(pk: str, **attributes: dict[str, str]) -> dict[str, Any]:
    return {"Put": {"TableName": TABLE, "Item": {**key(pk), **attributes}}}


def create_only(pk: str) -> dict[str, Any]:
    return {"Put": {"TableName": TABLE, "Item": key(pk), "ConditionExpression": "attribute_not_exists(pk)"}}


def stream_records(dynamodb: Any) -> list[dict[str, Any]]:
    streams = boto3.client("dynamodbstreams", region_name="us-east-1")
    arn = dynamodb.describe_table(TableName=TABLE)["Table"]["LatestStreamArn"]
    shard = streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"][0]["ShardId"]
    iterator = streams.get_shard_iterator(StreamArn=arn, ShardId=shard, ShardIteratorType="TRIM_HORIZON")
    records: list[dict[str, Any]] = streams.get_records(ShardIterator=iterator["ShardIterator"])["Records"]
    return records


def events(dynamodb: Any) -> list[tuple[str, str]]:
    return [(r["eventName"], r["dynamodb"]["Keys"]["pk"]["S"]) for r in stream_records(dynamodb)]


def exists(dynamodb: Any, pk: str) -> bool:
    return "Item" in dynamodb.get_item(TableName=TABLE, Key=key(pk), ConsistentRead=True)


def counter(dynamodb: Any, pk: str = "counter") -> int:
    return int(dynamodb.get_item(TableName=TABLE, Key=key(pk), ConsistentRead=True)["Item"]["n"]["N"])


def increment(pk: str = "counter") -> dict[str, Any]:
    return {
        "Update": {
            "TableName": TABLE,
            "Key": key(pk),
            "UpdateExpression": "ADD n :one",
            "ExpressionAttributeValues": {":one": {"N": "1"}},
        }
    }


# Rule 1: atomic, fast TransactWriteItems (M1, M7-M10).


def test_a_failed_condition_cancels_the_transaction_with_per_item_reasons_and_writes_nothing(dynamodb: Any) -> None:
    # Given an existing row
    dynamodb.put_item(TableName=TABLE, Item={**key("taken"), "v": {"N": "1"}})
    before = events(dynamodb)

    # When a transaction writes a new row and re-creates the existing one under attribute_not_exists
    with pytest.raises(ClientError) as raised:
        dynamodb.transact_write_items(
            TransactItems=[
                put("fresh"),
                {"Put": {**create_only("taken")["Put"], "ReturnValuesOnConditionCheckFailure": "ALL_OLD"}},
            ]
        )

    # Then it is cancelled with one reason per item, the old item included, and nothing is written
    assert raised.value.response["Error"]["Code"] == "TransactionCanceledException"
    assert raised.value.response["CancellationReasons"] == [
        {"Code": "None"},
        {
            "Code": "ConditionalCheckFailed",
            "Message": "The conditional request failed",
            "Item": {**key("taken"), "v": {"N": "1"}},
        },
    ]
    assert not exists(dynamodb, "fresh")
    assert events(dynamodb) == before


def test_a_write_failing_while_applied_cancels_the_transaction_and_undoes_the_writes_before_it(dynamodb: Any) -> None:
    # Given a row whose attribute is a string
    dynamodb.put_item(TableName=TABLE, Item={**key("text"), "v": {"S": "words"}})
    before = events(dynamodb)

    # When a transaction puts a row, then adds a number to that string (an error only applying finds)
    with pytest.raises(ClientError) as raised:
        dynamodb.transact_write_items(
            TransactItems=[
                put("first"),
                {
                    "Update": {
                        "TableName": TABLE,
                        "Key": key("text"),
                        "UpdateExpression": "SET v = v + :one",
                        "ExpressionAttributeValues": {":one": {"N": "1"}},
                    }
                },
            ]
        )

    # Then AWS's answer: cancelled with a ValidationError reason; the first put is undone, unseen by the stream
    assert raised.value.response["Error"]["Code"] == "TransactionCanceledException"
    reasons = raised.value.response["CancellationReasons"]
    assert [reason["Code"] for reason in reasons] == ["None", "ValidationError"]
    assert not exists(dynamodb, "first")
    assert events(dynamodb) == before


def test_concurrent_conditional_increments_through_transactions_lose_nothing(dynamodb: Any) -> None:
    # Given one counter and eight threads, each with its own client and no lock of its own
    dynamodb.put_item(TableName=TABLE, Item={**key("counter"), "n": {"N": "0"}})
    threads, per_thread = 8, 15
    failures: list[BaseException] = []

    def bump(worker: int) -> None:
        client = boto3.client("dynamodb", region_name="us-east-1")
        try:
            for n in range(per_thread):
                while True:  # read, then write only if nobody wrote in between: optimistic concurrency
                    seen = counter(client)
                    try:
                        client.transact_write_items(
                            TransactItems=[
                                {
                                    "Update": {
                                        "TableName": TABLE,
                                        "Key": key("counter"),
                                        "UpdateExpression": "SET n = :next",
                                        "ConditionExpression": "n = :seen",
                                        "ExpressionAttributeValues": {
                                            ":seen": {"N": str(seen)},
                                            ":next": {"N": str(seen + 1)},
                                        },
                                    }
                                },
                                put(f"bump-{worker}-{n}"),
                            ]
                        )
                        break
                    except ClientError as error:
                        if error.response["Error"]["Code"] != "TransactionCanceledException":
                            raise
        except BaseException as error:
            failures.append(error)

    # When they all increment at once, with the interpreter switching threads as often as it can
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        workers = [threading.Thread(target=bump, args=(worker,)) for worker in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
    finally:
        sys.setswitchinterval(interval)

    # Then every committed increment counts exactly once
    assert failures == []
    assert counter(dynamodb) == threads * per_thread


def test_a_transaction_copies_the_items_it_touches_never_a_whole_table(
    dynamodb: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a table with rows in it, and a spy on copies of whole tables
    for n in range(20):
        dynamodb.put_item(TableName=TABLE, Item=key(f"row-{n}"))
    table_copies: list[Table] = []

    def spy(self: Table, memo: dict[int, Any]) -> Table:
        table_copies.append(self)
        raise AssertionError("a transaction copied a whole table")

    monkeypatch.setattr(Table, "__deepcopy__", spy, raising=False)

    # When transactions succeed, fail a condition and fail while applying
    dynamodb.transact_write_items(TransactItems=[increment("row-1"), put("row-new")])
    with pytest.raises(ClientError):
        dynamodb.transact_write_items(TransactItems=[increment("row-2"), create_only("row-3")])
    with pytest.raises(ClientError):
        dynamodb.transact_write_items(TransactItems=[increment("row-5"), put("row-6", big={"S": "x" * 500_000})])

    # Then no table was copied: each costs what its items cost, not what the table holds
    assert table_copies == []
    assert counter(dynamodb, "row-1") == 1


def test_a_transaction_over_4_mb_in_aggregate_is_rejected_and_writes_nothing(dynamodb: Any) -> None:
    # Given eleven items of 390 KB each: each one fits under 400 KB, together they exceed 4 MB
    blob = {"blob": {"S": "x" * 390_000}}

    # When they are written in one transaction
    with pytest.raises(ClientError) as raised:
        dynamodb.transact_write_items(TransactItems=[put(f"big-{n}", **blob) for n in range(11)])

    # Then it is a ValidationException and none of them is written
    assert raised.value.response["Error"]["Code"] == "ValidationException"
    assert not exists(dynamodb, "big-0")


def test_more_than_100_actions_or_two_on_one_item_are_validation_errors(dynamodb: Any) -> None:
    # Given 101 actions, and two actions on one item
    too_many = [put(f"row-{n}") for n in range(101)]
    same_item = [put("twice"), increment("twice")]

    # When each is sent, then each is a ValidationException that writes nothing
    for transaction in (too_many, same_item):
        with pytest.raises(ClientError) as raised:
            dynamodb.transact_write_items(TransactItems=transaction)
        assert raised.value.response["Error"]["Code"] == "ValidationException"
    assert not exists(dynamodb, "row-0")
    assert not exists(dynamodb, "twice")


# Rule 2: ClientRequestToken idempotency (M6, R8.2).


def test_a_replayed_client_request_token_succeeds_without_writing_again(dynamodb: Any) -> None:
    # Given a transaction that committed with a token
    dynamodb.transact_write_items(TransactItems=[increment()], ClientRequestToken="token-1")
    after_first = events(dynamodb)

    # When the same request is replayed within ten minutes
    dynamodb.transact_write_items(TransactItems=[increment()], ClientRequestToken="token-1")

    # Then it succeeds, applies nothing and emits no stream record
    assert counter(dynamodb) == 1
    assert events(dynamodb) == after_first


def test_a_client_request_token_reused_with_other_parameters_is_a_mismatch(dynamodb: Any) -> None:
    # Given a transaction that committed with a token
    dynamodb.transact_write_items(TransactItems=[increment()], ClientRequestToken="token-1")

    # When the token comes back with other parameters
    with pytest.raises(ClientError) as raised:
        dynamodb.transact_write_items(TransactItems=[increment("other")], ClientRequestToken="token-1")

    # Then it is refused and nothing is written
    assert raised.value.response["Error"]["Code"] == "IdempotentParameterMismatchException"
    assert not exists(dynamodb, "other")


def test_a_client_request_token_is_forgotten_after_ten_minutes(dynamodb: Any, clock: VirtualClock) -> None:
    # Given a transaction that committed with a token
    dynamodb.transact_write_items(TransactItems=[increment()], ClientRequestToken="token-1")

    # When the same request comes back ten minutes later
    clock.advance(timedelta(minutes=10))
    dynamodb.transact_write_items(TransactItems=[increment()], ClientRequestToken="token-1")

    # Then it is a new request, applied again
    assert counter(dynamodb) == 2


# Rule 3: no stream record for a write that changes nothing (M3, R7.2).


def test_a_put_or_update_that_changes_nothing_emits_no_stream_record(dynamodb: Any) -> None:
    # Given a row
    row = {**key("row"), "v": {"N": "1"}}
    dynamodb.put_item(TableName=TABLE, Item=row)

    # When it is put again as it is, updated to the value it has, then really changed
    dynamodb.put_item(TableName=TABLE, Item=row)
    dynamodb.update_item(
        TableName=TABLE, Key=key("row"), UpdateExpression="SET v = :v", ExpressionAttributeValues={":v": {"N": "1"}}
    )
    dynamodb.update_item(
        TableName=TABLE, Key=key("row"), UpdateExpression="SET v = :v", ExpressionAttributeValues={":v": {"N": "2"}}
    )

    # Then the stream holds the INSERT and the one real MODIFY
    assert events(dynamodb) == [("INSERT", "row"), ("MODIFY", "row")]


# Rule 4: one INSERT for an item created by UpdateItem (M4).


def test_update_item_creating_an_item_emits_one_insert_with_the_full_image(dynamodb: Any) -> None:
    # When UpdateItem creates a row, alone and inside a transaction
    dynamodb.update_item(
        TableName=TABLE, Key=key("plain"), UpdateExpression="SET v = :v", ExpressionAttributeValues={":v": {"N": "1"}}
    )
    dynamodb.transact_write_items(TransactItems=[increment("in-transaction")])

    # Then each creation is one INSERT whose new image is the whole item
    records = stream_records(dynamodb)
    assert [(r["eventName"], r["dynamodb"]["Keys"]["pk"]["S"]) for r in records] == [
        ("INSERT", "plain"),
        ("INSERT", "in-transaction"),
    ]
    assert records[0]["dynamodb"]["NewImage"] == {**key("plain"), "v": {"N": "1"}}
    assert records[1]["dynamodb"]["NewImage"] == {**key("in-transaction"), "n": {"N": "1"}}


# Rule 5: ApproximateCreationDateTime rounded down to the second, on the virtual clock (M5).


def test_approximate_creation_date_time_is_the_virtual_time_rounded_down_to_the_second(dynamodb: Any) -> None:
    # Given the virtual clock at 12:00:00.750
    # When a row is written
    dynamodb.put_item(TableName=TABLE, Item=key("row"))

    # Then its record carries 12:00:00 exactly
    created: datetime = stream_records(dynamodb)[0]["dynamodb"]["ApproximateCreationDateTime"]
    assert created.timestamp() == START.replace(microsecond=0).timestamp()
