"""The event envelope, its hash, and its shape as an events-table row."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

from boto3.dynamodb.types import DYNAMODB_CONTEXT, TypeDeserializer, TypeSerializer
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_serializer, field_validator

from outbox import keys
from outbox.exceptions import EnvelopeParseError
from outbox.log.canonical import chain_hash, from_dynamodb_numbers, json_problem, to_dynamodb_numbers
from outbox.redaction import validation_summary
from outbox.tracing import TraceContext

ULID_PATTERN = r"^[0-9A-HJKMNP-TV-Z]{26}$"
HASH_PATTERN = r"^[0-9a-f]{64}$"
TIMESTAMP_FORMAT = "%Y-%m-%dT%H:%M:%S.%f"

_serializer = TypeSerializer()
_deserializer = TypeDeserializer()

# Attributes of an event row that are not envelope fields.
ROW_ONLY_ATTRIBUTES = ("pk", "sk", "kind")


class Envelope(BaseModel):
    """One event, self-contained: everything a consumer needs travels in the payload.

    The hash covers every field but ``hash`` itself, chained through ``prev_hash``:
    ``hash = sha256(prev_hash + canonical_json(body))`` where ``body`` is :meth:`hashed_body`.

    Every attribute of an event row but its keys, its kind and its hash is part of the hash, so an event that a
    newer engine wrote, with fields this one does not know, keeps them (``extra="allow"``): they are hashed,
    dumped and written back like the others, and never read. emit() seals with ``extra="forbid"``
    (``outbox.log.sealing``): what this engine writes has the fields it declares, no more.

    The other way round, a field added to this model must leave an event without it as it was: out of its hash
    and its row (``_absent``, as ``trace_context`` is) and out of the inbox's digest (``digested_body``, which
    ``outbox.inbox.envelope_digest`` hashes): a changed digest of an older event makes its claim rows, written by
    the release before, conflicts. tests/unit/test_envelope_compatibility.py pins both.
    """

    model_config = ConfigDict(frozen=True, extra="allow")

    id: str = Field(pattern=ULID_PATTERN, description="ULID: unique and time-sortable")
    type: str
    tenant: str
    seq: int = Field(ge=1, description="per-tenant sequence number, gap-free from 1")
    correlation_id: str = Field(min_length=1, max_length=128)
    causation_id: str | None = Field(default=None, min_length=1, max_length=128)
    actor: str = Field(min_length=1, max_length=256)
    occurred_at: datetime
    schema_version: int = Field(ge=1)
    payload: dict[str, Any]
    prev_hash: str = Field(pattern=HASH_PATTERN)
    hash: str = Field(pattern=HASH_PATTERN)
    # The emitting code's trace context (outbox.tracing); absent from events stored before it was recorded, and
    # then absent from the hashed body too, so those keep verifying.
    trace_context: TraceContext | None = None

    @field_validator("tenant")
    @classmethod
    def _tenant_format(cls, tenant: str) -> str:
        if not keys.is_valid_tenant(tenant):
            raise ValueError(f"tenant {tenant!r} must match {keys.TENANT_PATTERN.pattern}")
        return tenant

    @field_validator("type")
    @classmethod
    def _type_format(cls, event_type: str) -> str:
        if not keys.is_valid_event_type(event_type):
            raise ValueError(
                f"event type {event_type!r} must be dotted names matching {keys.EVENT_TYPE_PATTERN.pattern}"
                f" (at most {keys.EVENT_TYPE_MAX_LENGTH} characters)"
            )
        return event_type

    @field_validator("occurred_at")
    @classmethod
    def _utc_milliseconds(cls, value: datetime) -> datetime:
        if value.tzinfo is None or value.utcoffset() != UTC.utcoffset(None):
            raise ValueError("occurred_at must be timezone-aware UTC")
        if value.microsecond % 1000:
            raise ValueError("occurred_at carries millisecond precision at most")
        return value

    @field_serializer("occurred_at")
    def _format_timestamp(self, value: datetime) -> str:
        return format_timestamp(value)

    def handler_copy(self) -> Envelope:
        """The envelope with a payload of its own: a model frozen at the top can still have its nested lists
        and maps changed, and a handler that does so must change neither the event nor another handler's view."""
        return self.model_copy(update={"payload": _json_copy(self.payload)})

    def hashed_body(self) -> dict[str, Any]:
        """Every field except ``hash`` and ``prev_hash`` (the latter is prepended instead); ``trace_context``
        only when the event has one, and then without an absent ``tracestate``."""
        return self.model_dump(mode="json", exclude={"hash": True, "prev_hash": True, **self._absent()})

    def _absent(self) -> dict[str, Any]:
        """What the event does not have, left out of its hash and its row rather than written as null."""
        if self.trace_context is None:
            return {"trace_context": True}
        return {"trace_context": {"tracestate"}} if self.trace_context.tracestate is None else {}

    def digested_body(self) -> dict[str, Any]:
        """Every field, as the inbox's digest covers them; ``trace_context`` only when the event has one. Release
        0.5.0 had no such field, and its claim rows hold the digest of the event without it: written as null,
        every event without a trace context would be other content than the claims 0.5.0 wrote for it. (Not
        ``Field(exclude_if=...)``: that would change ``model_dump`` for every caller; an absent ``tracestate``
        stays null here, as the releases that had it digested it.)"""
        if self.trace_context is None:
            return self.model_dump(mode="json", exclude={"trace_context"})
        return self.model_dump(mode="json")

    def computed_hash(self) -> str:
        return chain_hash(self.prev_hash, self.hashed_body())

    def to_item(self) -> dict[str, Any]:
        """The event row in DynamoDB's typed JSON, keyed for an ordered per-tenant query."""
        fields = to_dynamodb_numbers(self.model_dump(mode="json", exclude=self._absent()))
        row = {
            "pk": keys.event_partition(self.tenant),
            "sk": keys.seq_sort_key(self.seq),
            "kind": keys.KIND_EVENT,
            "event_id": fields.pop("id"),
            **fields,
        }
        return {name: _serializer.serialize(value) for name, value in row.items()}

    @classmethod
    def from_item(cls, item: dict[str, Any]) -> Envelope:
        """Parse an event row or a stream NewImage (typed DynamoDB JSON) back into an envelope."""
        try:
            plain = {name: plain_value(value) for name, value in item.items()}
        except (TypeError, ValueError, AttributeError, KeyError) as exc:
            raise EnvelopeParseError(f"not a DynamoDB image: {exc}") from exc
        if plain.get("kind") != keys.KIND_EVENT:
            raise EnvelopeParseError(f"not an event row (kind={plain.get('kind')!r})")
        for name in ROW_ONLY_ATTRIBUTES:
            plain.pop(name, None)
        if "event_id" not in plain:
            raise EnvelopeParseError("event row without event_id")
        plain["id"] = plain.pop("event_id")
        # The hash is computed over the JSON form, which writes NaN as null and a set as a list: a payload, a
        # trace context or a newer engine's field that is not plain JSON could be altered without changing the
        # hash, so it is not an event.
        for name in ("payload", "trace_context", *(plain.keys() - cls.model_fields.keys())):
            problem = json_problem(plain.get(name), path=name) or _non_finite(plain.get(name), name)
            if problem:
                raise EnvelopeParseError(f"event row {name} is not JSON: {problem}")
        try:
            return cls.model_validate(plain)
        except ValidationError as exc:
            # Fields and error kinds only: pydantic's own text repeats the input, which may be personal data.
            raise EnvelopeParseError(f"event row is not a valid envelope: {validation_summary(exc)}") from exc


def _non_finite(value: Any, path: str = "payload") -> str | None:
    if isinstance(value, float) and not math.isfinite(value):
        return f"{path} is {value}, which JSON cannot carry"
    if isinstance(value, dict):
        return next((p for key, item in value.items() if (p := _non_finite(item, f"{path}.{key}"))), None)
    if isinstance(value, list):
        return next((p for index, item in enumerate(value) if (p := _non_finite(item, f"{path}[{index}]"))), None)
    return None


def format_timestamp(value: datetime) -> str:
    return value.astimezone(UTC).strftime(TIMESTAMP_FORMAT)[:-3] + "Z"


def _json_copy(value: Any) -> Any:
    """A deep copy of JSON data (maps, lists and immutable scalars), several times faster than
    ``copy.deepcopy``, which the payload of every handler's delivery would otherwise pay for."""
    if isinstance(value, dict):
        return {key: _json_copy(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_json_copy(item) for item in value]
    return value


def plain_value(value: Any) -> Any:
    """One typed DynamoDB value as the JSON value it holds: what boto3's ``TypeDeserializer`` followed by
    ``from_dynamodb_numbers`` returns, in one pass for the types an event row holds (S, N, BOOL, NULL, M, L),
    and through them for anything else, errors included. The consumer reads every message this way."""
    if type(value) is dict and len(value) == 1:
        ((tag, inner),) = value.items()
        if tag == "S" or tag == "BOOL":
            return inner
        if tag == "N":
            return from_dynamodb_numbers(DYNAMODB_CONTEXT.create_decimal(inner))
        if tag == "M" and type(inner) is dict:
            return {name: plain_value(item) for name, item in inner.items()}
        if tag == "L" and type(inner) is list:
            return [plain_value(item) for item in inner]
        if tag == "NULL":
            return None
    return from_dynamodb_numbers(_deserializer.deserialize(value))
