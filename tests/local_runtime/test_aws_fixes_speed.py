"""``outbox.local.aws_fixes.speed``: moto with the speed patches answers every call as moto without them.

Each test plays one script of calls twice, on a fresh ``mock_aws``: once on moto as shipped, once with only
the speed patches applied, and compares every answer and every error. The scripts repeat each text, since a
kept parse or a kept list of names is used from the second call on, and they reuse a text where its verdict
changes with the attribute names or the table's keys.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, ClassVar

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws
from moto.core.model import Shape, StructureShape
from moto.core.serialize import AttributePickerContext, NoAlias, XFormedAttributePicker

from outbox.local.aws_fixes import speed
from outbox.local.aws_fixes._patching import PatchSet

Answer = tuple[str, Any]
Script = Callable[[], list[Answer]]


@contextmanager
def speed_patches(fixes: speed.SpeedFixes) -> Iterator[None]:
    patches = PatchSet(fixes.patches())
    patches.apply()
    try:
        yield
    finally:
        patches.undo()


def answer(call: Callable[..., Any], **parameters: Any) -> Answer:
    try:
        response = call(**parameters)
    except ClientError as error:
        return "error", (error.response["Error"]["Code"], error.response["Error"].get("Message"))
    response.pop("ResponseMetadata", None)
    return "ok", response


def both_ways(script: Script) -> tuple[list[Answer], list[Answer], speed.SpeedFixes]:
    with mock_aws():
        shipped = script()
    fixes = speed.SpeedFixes()
    with mock_aws(), speed_patches(fixes):
        patched = script()
    return shipped, patched, fixes


def table(client: Any, name: str, *keys: str) -> None:
    client.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": k, "KeyType": kind} for k, kind in zip(keys, ("HASH", "RANGE"), strict=False)],
        AttributeDefinitions=[{"AttributeName": k, "AttributeType": "S"} for k in keys],
        BillingMode="PAY_PER_REQUEST",
    )


CLAIM = (
    "SET #status = :pending, attempts = if_not_exists(attempts, :zero) + :one, tags = list_append("
    "if_not_exists(tags, :empty), :tag), created_at = if_not_exists(created_at, :now), updated_at = :now"
)
CLAIM_VALUES = {
    ":pending": {"S": "PENDING"},
    ":zero": {"N": "0"},
    ":one": {"N": "1"},
    ":empty": {"L": []},
    ":tag": {"L": [{"S": "t"}]},
    ":now": {"S": "2026-12-05T00:00:00Z"},
}


def dynamodb_script() -> list[Answer]:
    client = boto3.client("dynamodb", region_name="us-east-1")
    table(client, "pair", "pk", "sk")
    table(client, "single", "pk")
    both = {"pk": {"S": "a"}, "sk": {"S": "b"}}
    answers: list[Answer] = []

    def update(name: str, key: dict[str, Any], expression: str, **more: Any) -> None:
        more.setdefault("ReturnValues", "ALL_NEW")
        answers.append(answer(client.update_item, TableName=name, Key=key, UpdateExpression=expression, **more))

    for _ in range(3):  # the same claim, new then existing: if_not_exists, arithmetic, list_append
        update(
            "pair", both, CLAIM, ExpressionAttributeNames={"#status": "status"}, ExpressionAttributeValues=CLAIM_VALUES
        )
    for name in ("other", "sk", "pk", "other"):  # one text: its verdict depends on what #k names
        update(
            "pair",
            both,
            "SET #k = :v",
            ExpressionAttributeNames={"#k": name},
            ExpressionAttributeValues={":v": {"S": "x"}},
        )
    for name, key in (("single", {"pk": {"S": "a"}}), ("pair", both), ("single", {"pk": {"S": "a"}})):
        update(name, key, "SET sk = :v", ExpressionAttributeValues={":v": {"S": "x"}})  # a key of one table only
    for _ in range(2):
        update(
            "pair",
            both,
            "SET n = :one ADD s :set",
            ExpressionAttributeValues={":one": {"N": "1"}, ":set": {"SS": ["p", "q"]}},
        )
        update("pair", both, "DELETE s :gone REMOVE tags[0]", ExpressionAttributeValues={":gone": {"SS": ["p"]}})
        update("pair", both, "SET #status = :v", ExpressionAttributeNames={"#status": "status"})  # a value missing
        update("pair", both, "SET n = n + :s", ExpressionAttributeValues={":s": {"S": "text"}})  # a type mismatch
        update("pair", both, "SET a = :v, a = :v", ExpressionAttributeValues={":v": {"S": "x"}})  # one path twice
        update("pair", both, "SET a = :v SET b = :v", ExpressionAttributeValues={":v": {"S": "x"}})  # two SETs
        update("pair", both, "SET a.b = :v, a = :v", ExpressionAttributeValues={":v": {"S": "x"}})  # paths overlap
        update("pair", both, "SET = :v", ExpressionAttributeValues={":v": {"S": "x"}})  # not an expression
        update(
            "pair",
            both,
            "SET m = :m, b = :b",
            ExpressionAttributeValues={
                ":m": {"M": {"x": {"L": [{"N": "1"}, {"BOOL": True}, {"NULL": True}]}}},
                ":b": {"B": b"\x00\xff"},
            },
            ConditionExpression="attribute_exists(n)",
        )
    increment = {"TableName": "pair", "Key": both, "UpdateExpression": "SET n = n + :one"}
    increment["ExpressionAttributeValues"] = {":one": {"N": "1"}}
    answers.append(answer(client.transact_write_items, TransactItems=[{"Update": increment}]))
    a = {":a": {"S": "a"}}
    answers.append(
        answer(client.query, TableName="pair", KeyConditionExpression="pk = :a", ExpressionAttributeValues=a)
    )
    answers.append(answer(client.scan, TableName="single"))
    return answers


VARYING = {"MessageId", "ReceiptHandle", "SequenceNumber", "SentTimestamp", "CreatedTimestamp", "LastModifiedTimestamp"}


def steady(value: Any) -> Any:
    """The answer without what differs between two runs of the same script (ids, clocks)."""
    if isinstance(value, dict):
        return {k: steady(v) for k, v in value.items() if k not in VARYING and "Timestamp" not in k}
    if isinstance(value, list):
        return [steady(v) for v in value]
    return value


def sqs_script() -> list[Answer]:
    client = boto3.client("sqs", region_name="us-east-1")
    fifo = client.create_queue(QueueName="q.fifo", Attributes={"FifoQueue": "true", "VisibilityTimeout": "0"})[
        "QueueUrl"
    ]
    plain = client.create_queue(QueueName="plain", Attributes={"VisibilityTimeout": "0"})["QueueUrl"]
    answers: list[Answer] = []
    for n in range(3):
        attributes = {
            "kind": {"DataType": "String", "StringValue": f"k{n}"},
            "size": {"DataType": "Number", "StringValue": str(n)},
        }
        fifo_only = {"MessageGroupId": "t", "MessageDeduplicationId": f"d{n}"}
        for url, more in ((fifo, fifo_only), (plain, {})):
            message = {"QueueUrl": url, "MessageBody": f"body {n}", "MessageAttributes": attributes, **more}
            answers.append(answer(client.send_message, **message))
    everything = {"MessageAttributeNames": ["All"], "MessageSystemAttributeNames": ["All"]}
    for url in (fifo, plain):
        answers.append(answer(client.get_queue_attributes, QueueUrl=url, AttributeNames=["All"]))
        answers.append(answer(client.receive_message, QueueUrl=url, MaxNumberOfMessages=10, **everything))
    answers.append(answer(client.send_message, QueueUrl=fifo, MessageBody="no group"))
    answers.append(answer(client.list_queues))
    return [(outcome, steady(value)) for outcome, value in answers]


@pytest.mark.parametrize("script", [dynamodb_script, sqs_script], ids=["dynamodb", "sqs"])
def test_every_answer_and_every_error_is_moto_s_own(script: Script, aws_credentials: None) -> None:
    # Given one script of calls, when it runs on moto as shipped and with the speed patches
    shipped, patched, _ = both_ways(script)

    # Then every answer is the same, errors included
    assert patched == shipped
    assert any(outcome == "error" for outcome, _ in shipped)


def test_with_no_room_left_to_keep_a_text_moto_parses_it_as_shipped(
    aws_credentials: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given room for two texts only
    monkeypatch.setattr(speed, "MAX_KEPT", 2)

    # When the script runs with the speed patches
    shipped, patched, fixes = both_ways(dynamodb_script)

    # Then two texts were kept, and the others parsed on every call gave the same answers
    assert len(fixes.cache._by_text) == 2
    assert patched == shipped


def test_no_update_changes_a_kept_tree(aws_credentials: None) -> None:
    # When the script has run with the speed patches
    _, _, fixes = both_ways(dynamodb_script)

    # Then each kept tree is still what was parsed: its validator rewrote copies only
    kept = list(fixes.cache._by_text.values())
    assert kept
    assert all(k.frozen is not None for k in kept)
    assert all(pickle.dumps(k.tree, protocol=pickle.HIGHEST_PROTOCOL) == k.frozen for k in kept)
    # and the checks that depend only on the text ran once per set of names and table keys it was used with
    claim = fixes.cache._by_text[CLAIM]
    assert claim.checked == {((("#status", "status"),), ("pk", "sk"))}


class Aliased:
    class Meta:
        serialization_aliases: ClassVar[dict[str, str]] = {"Name": "label"}

    label = "by its class's alias"
    name = "by its own name"


class Plain:
    name = "by its own name"
    label = "never read: its class has no alias"


class Renamed:
    renamed = "by the shape's name"


class Machine:
    identifier = "by the name less its structure's prefix"


def test_a_member_is_read_by_the_names_of_its_object_s_class_its_shape_and_the_shape_s_structure() -> None:
    # Given one member name read from objects of three classes and through two shapes,
    renamed = Shape("Name", {"type": "string", "locationName": "renamed"})
    reads = [
        ("Name", obj, shape, None) for shape in (None, renamed) for obj in (Aliased(), Plain(), Renamed(), Aliased())
    ]
    # and one shape read as a member of two structures (moto sets a member's parent as it serializes)
    prefixed = Shape("InstanceIdentifier", {"type": "string"})
    structures = [StructureShape(name, {"type": "structure", "members": {}}) for name in ("Instance", "Other")]
    reads += [("InstanceIdentifier", Machine(), prefixed, parent) for parent in (*structures, *structures)]

    # and by two pickers: moto's, and one that takes a member's name as it is
    pickers = (XFormedAttributePicker(), XFormedAttributePicker(alias_providers=[NoAlias]))

    def values() -> list[Any]:
        found = []
        for picker in pickers:
            for key, obj, shape, parent in reads:
                if parent is not None:
                    shape.parent = parent  # type: ignore[union-attr]
                found.append(picker(AttributePickerContext(obj=obj, key=key, shape=shape)))
        return found

    shipped = values()
    # When they are read with the speed patches, then each read finds what moto as shipped finds
    with speed_patches(speed.SpeedFixes()):
        assert values() == shipped
    assert set(shipped) == {Aliased.label, Plain.name, None, Renamed.renamed, Machine.identifier}
