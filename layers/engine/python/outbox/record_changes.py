"""Row changes of the data table, as the record-change pipe forwards them (the whole stream record)."""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any, Literal

from boto3.dynamodb.types import Binary, TypeDeserializer
from pydantic import BaseModel, ConfigDict

from outbox.canonical import from_dynamodb_numbers
from outbox.exceptions import EnvelopeParseError

ROW_CHANGE_PREFIX = "record"
OPERATIONS = ("INSERT", "MODIFY", "REMOVE")
_deserializer = TypeDeserializer()


def row_change_type(entity: str, operation: str) -> str:
    """``record.<ENTITY>.<INSERT|MODIFY|REMOVE>``: what BEST_EFFORT subscriptions glob on."""
    return f"{ROW_CHANGE_PREFIX}.{entity}.{operation}"


def entity_of(partition_key: str) -> str:
    """The entity of a row is its partition key's prefix: ``CONTACTADDRESS#42`` -> ``CONTACTADDRESS``."""
    return partition_key.split("#", 1)[0]


class RecordChange(BaseModel):
    """One INSERT, MODIFY or REMOVE of a data-table row, with plain (deserialized) images."""

    model_config = ConfigDict(frozen=True)

    event_id: str
    table: str
    operation: Literal["INSERT", "MODIFY", "REMOVE"]
    keys: dict[str, Any]
    old_image: dict[str, Any] | None = None
    new_image: dict[str, Any] | None = None

    @property
    def entity(self) -> str:
        return entity_of(str(self.keys.get("pk", "")))

    @property
    def type(self) -> str:
        return row_change_type(self.entity, self.operation)


def _plain(image: dict[str, Any] | None) -> dict[str, Any] | None:
    if image is None:
        return None
    return {name: _unwrapped(_deserializer.deserialize(_decoded(value))) for name, value in image.items()}


def _unwrapped(value: Any) -> Any:
    """boto3's ``Binary`` wrappers become bytes, and numbers what JSON would make of them (ints when integral)."""
    if isinstance(value, Binary):
        return bytes(value.value)
    if isinstance(value, set) and any(isinstance(member, Binary) for member in value):
        return {bytes(member.value) for member in value}
    if isinstance(value, dict):
        return {key: _unwrapped(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_unwrapped(item) for item in value]
    return from_dynamodb_numbers(value)


def _decoded(value: dict[str, Any]) -> dict[str, Any]:
    """The wire form (binary as base64 text, as in the DynamoDB API's JSON) -> what TypeDeserializer takes
    (binary as bytes), at any depth of maps and lists."""
    (tag, inner), *_ = value.items()
    if tag == "B":
        return {"B": _base64(inner)}
    if tag == "BS":
        return {"BS": [_base64(member) for member in inner]}
    if tag == "M":
        return {"M": {name: _decoded(item) for name, item in inner.items()}}
    if tag == "L":
        return {"L": [_decoded(item) for item in inner]}
    return value


def _base64(text: object) -> bytes:
    if not isinstance(text, str):
        raise ValueError(f"a binary value must be base64 text, not {type(text).__name__}")
    try:
        return base64.b64decode(text, validate=True)
    except binascii.Error as exc:
        raise ValueError(f"a binary value is not base64: {exc}") from exc


def parse_record_change(body: str) -> RecordChange:
    """Parse a pipe-forwarded DynamoDB stream record (no input template: the record as JSON)."""
    try:
        record = json.loads(body)
        change = record["dynamodb"]
        table = str(record["eventSourceARN"]).split(":table/", 1)[1].split("/", 1)[0]
        return RecordChange(
            event_id=record["eventID"],
            table=table,
            operation=record["eventName"],
            keys=_plain(change["Keys"]) or {},
            old_image=_plain(change.get("OldImage")),
            new_image=_plain(change.get("NewImage")),
        )
    except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
        raise EnvelopeParseError(f"not a DynamoDB stream record: {exc}") from exc
