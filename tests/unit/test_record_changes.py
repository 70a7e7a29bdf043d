"""The record-change lane reads every DynamoDB type as the pipe forwards it: the stream record as JSON,
where binary values (B, and each member of BS) are base64 text, as on the wire of the DynamoDB API."""

from __future__ import annotations

import base64
import json
from decimal import Decimal
from typing import Any

import pytest

from outbox.best_effort.changes import parse_record_change
from outbox.exceptions import EnvelopeParseError

ARN = "arn:aws:dynamodb:us-east-1:123456789012:table/data/stream/2026-12-01T00:00:00.000"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


EVERY_TYPE_WIRE: dict[str, Any] = {
    "pk": {"S": "ORDER#1"},
    "sk": {"S": "META"},
    "n": {"N": "12.5"},
    "blob": {"B": b64(b"\x00\xffpng")},
    "names": {"SS": ["a", "b"]},
    "counts": {"NS": ["1", "2.5"]},
    "blobs": {"BS": [b64(b"x"), b64(b"\x01\x02")]},
    "nested": {"M": {"inner": {"B": b64(b"deep")}, "list": {"L": [{"N": "3"}, {"B": b64(b"in-list")}]}}},
    "items": {"L": [{"S": "s"}, {"BOOL": True}, {"NULL": True}]},
    "flag": {"BOOL": False},
    "nothing": {"NULL": True},
}
EVERY_TYPE_PLAIN: dict[str, Any] = {
    "pk": "ORDER#1",
    "sk": "META",
    "n": 12.5,
    "blob": b"\x00\xffpng",
    "names": {"a", "b"},
    "counts": {Decimal("1"), Decimal("2.5")},
    "blobs": {b"x", b"\x01\x02"},
    "nested": {"inner": b"deep", "list": [3, b"in-list"]},
    "items": ["s", True, None],
    "flag": False,
    "nothing": None,
}


def body(operation: str, new: dict[str, Any] | None, old: dict[str, Any] | None = None) -> str:
    change: dict[str, Any] = {"Keys": {"pk": {"S": "ORDER#1"}, "sk": {"S": "META"}}}
    if new is not None:
        change["NewImage"] = new
    if old is not None:
        change["OldImage"] = old
    return json.dumps({"eventID": "e-1", "eventName": operation, "eventSourceARN": ARN, "dynamodb": change})


def test_every_dynamodb_type_is_read_from_the_wire_format() -> None:
    change = parse_record_change(body("MODIFY", EVERY_TYPE_WIRE, old=EVERY_TYPE_WIRE))

    assert change.new_image == EVERY_TYPE_PLAIN
    assert change.old_image == EVERY_TYPE_PLAIN
    assert change.type == "record.ORDER.MODIFY"
    assert isinstance(change.new_image["blob"], bytes)


@pytest.mark.parametrize(
    "bad",
    [{"B": "not base64!"}, {"BS": ["also not"]}, {"B": 12}],
    ids=["bad-b", "bad-bs", "b-not-text"],
)
def test_a_binary_value_that_is_not_base64_is_a_parse_error_not_a_crash(bad: dict[str, Any]) -> None:
    with pytest.raises(EnvelopeParseError, match="base64"):
        parse_record_change(body("INSERT", {"pk": {"S": "ORDER#1"}, "sk": {"S": "META"}, "blob": bad}))
