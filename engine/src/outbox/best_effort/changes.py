"""Row changes of the data table, as the record-change pipe forwards them (the whole stream record)."""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Sequence
from typing import Any, Literal

from boto3.dynamodb.types import TypeDeserializer
from pydantic import BaseModel, ConfigDict

from outbox.exceptions import EnvelopeParseError
from outbox.log.canonical import from_dynamodb_numbers

ROW_CHANGE_PREFIX = "record"
OPERATIONS = ("INSERT", "MODIFY", "REMOVE")


def row_change_type(entity: str, operation: str) -> str:
    """``record.<ENTITY>.<INSERT|MODIFY|REMOVE>``: what BEST_EFFORT subscriptions glob on."""
    return f"{ROW_CHANGE_PREFIX}.{entity}.{operation}"


def entity_of(partition_key: str) -> str:
    """The entity of a row is its partition key's prefix: ``CONTACTADDRESS#42`` -> ``CONTACTADDRESS``."""
    return partition_key.split("#", 1)[0]


# What an entity name may be: a partition-key prefix, without the "#" that ends it.
ENTITY_NAME = re.compile(r"[A-Za-z0-9_.-]{1,100}")


def entity_filter(entities: Sequence[str]) -> dict[str, Any]:
    """The stream filter pattern that passes the row changes of ``entities`` only: those whose partition key
    is ``ENTITY#...`` or the bare ``ENTITY`` (``entity_of`` reads both so), matched on the record's keys,
    which every INSERT, MODIFY and REMOVE carries. The record-change pipe's filter when its entities are given
    (``RecordChanges(entities=...)`` of ``OutboxPipeline``)."""
    values: list[Any] = []
    for entity in entities:
        values += [entity, {"prefix": f"{entity}#"}]
    return {"dynamodb": {"Keys": {"pk": {"S": values}}}}


class RecordChange(BaseModel):
    """One INSERT, MODIFY or REMOVE of a data-table row, with plain (deserialized) images."""

    model_config = ConfigDict(frozen=True, defer_build=True)  # only the record-change lane validates one

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


class _WireDeserializer(TypeDeserializer):  # type: ignore[misc]  # boto3 ships no type hints
    """boto3's deserializer for the wire form the pipe forwards, where binary values (``B``, and each member
    of ``BS``, at any depth) are base64 text, as in the DynamoDB API's JSON: they become bytes."""

    def _deserialize_b(self, value: object) -> bytes:
        if not isinstance(value, str):
            raise ValueError(f"a binary value must be base64 text, not {type(value).__name__}")
        try:
            return base64.b64decode(value, validate=True)
        except binascii.Error as exc:
            raise ValueError(f"a binary value is not base64: {exc}") from exc


_deserializer = _WireDeserializer()


def _plain(image: dict[str, Any] | None) -> dict[str, Any] | None:
    if image is None:
        return None
    return {name: from_dynamodb_numbers(_deserializer.deserialize(value)) for name, value in image.items()}


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
