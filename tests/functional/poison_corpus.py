"""Malformed durable-queue bodies: what a broken or hostile producer could put on the queue instead of an
event row's image. The durable consumer must record each as a poison pill and acknowledge it.

Everything is built here, deterministically, from one real event image that the engine itself emits (an
``EventStore`` on a private moto, with a fixed clock and event id): the near-valid variants are that image
with one thing wrong. No entry is a valid event: an image whose content changed keeps the seed's hash, so
at the latest the hash check should refuse it (the ``hash-blind-*`` entries change the content in ways the
hash does not see today: NaN or Infinity for null, a string set for a list).

A few bodies cannot travel through SQS at all (a Python str with lone surrogates cannot be encoded as
UTF-8; boto3 refuses to send it). ``PoisonBody.sendable`` says which; the tests hand those to the consumer
as if the transport had delivered them, since reading must survive "any encoding".
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import boto3
from boto3.dynamodb.types import TypeDeserializer
from moto import mock_aws

from outbox import Envelope, EventStore, keys
from outbox.local.clock import VirtualClock
from tests.functional.conftest import create_pk_sk_table

__all__ = ["SEED_EVENT_ID", "SQS_MAX_BODY_BYTES", "PoisonBody", "Seed", "corpus", "seed"]

SEED_TABLE = "poison-corpus-seed"  # not the harness's events table, should a test's moto ever see it
SEED_EVENT_ID = "01KSEED0000000000000000000"  # a valid ULID, so only what each entry breaks is wrong
# One non-ASCII value (for mojibake and raw bytes), a null and a list (for the hash-blind entries).
SEED_PAYLOAD = {"order_id": "o-1", "amount": 10, "customer": "Zoë", "coupon": None, "tags": ["rush"]}
SQS_MAX_BODY_BYTES = 256 * 1024  # SQS's classic message size limit (UTF-8 bytes)
MOTO_MAX_BODY_CHARS = 1024 * 1024  # what moto's SQS accepts (as does SQS since its limit rose to 1 MiB)
NESTING = 100_000  # far past any recursion limit: json.loads raises RecursionError
TYPED_NESTING = 20_000  # as many typed maps (two JSON objects each) as fit well under 1 MiB
_HOLE = '{"S": "<hole>"}'  # where a string-built payload goes into an image's JSON text


@dataclass(frozen=True)
class PoisonBody:
    """One malformed message: its body, any message attributes sent with it, and what a producer did."""

    name: str
    body: str
    why: str
    attributes: Mapping[str, Any] = field(default_factory=dict)  # SQS MessageAttributes, boto3's shape

    @property
    def sendable(self) -> bool:
        """Whether boto3 can send the body at all (a str with lone surrogates is not UTF-8-encodable)."""
        try:
            self.body.encode("utf-8")
        except UnicodeEncodeError:
            return False
        return True

    @property
    def utf8_size(self) -> int:
        return len(self.body.encode("utf-8", "surrogatepass"))


@dataclass(frozen=True)
class Seed:
    """The rows one real emit wrote: the event (as ``Envelope`` and typed image), its head, the tenant index."""

    envelope: Envelope
    image: dict[str, Any]
    head: dict[str, Any]
    tenant_index: dict[str, Any]


@cache
def seed() -> Seed:
    """Emit one event with the engine on a private moto (fixed clock and id) and read back its rows."""
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        create_pk_sk_table(client, SEED_TABLE)
        clock = VirtualClock()
        store = EventStore(
            SEED_TABLE,
            client=client,
            clock=clock.now_ms,
            sleep=clock.sleep,
            new_event_id=lambda: SEED_EVENT_ID,
            unchecked=True,
        )
        envelope = store.emit("order.created", SEED_PAYLOAD, tenant="acme", actor="test")
        rows = {row["kind"]["S"]: row for row in client.scan(TableName=SEED_TABLE)["Items"]}
    return Seed(envelope, rows[keys.KIND_EVENT], rows[keys.KIND_HEAD], rows[keys.KIND_TENANT])


@cache
def corpus() -> tuple[PoisonBody, ...]:
    """Every entry, in a fixed order; the names are unique (they are the test ids)."""
    entries = [
        *_not_an_object(),
        *_nesting(),
        *_not_an_event_image(),
        *_wrong_type_tags(),
        *_one_thing_wrong(),
        *_huge(),
        *_encodings(),
        *_wrappers(),
        *_attributes(),
    ]
    names = [entry.name for entry in entries]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise AssertionError(f"duplicate corpus names: {duplicates}")
    return tuple(entries)


# -- the groups ---------------------------------------------------------------------------------------


def _not_an_object() -> list[PoisonBody]:
    text = _text()
    return [
        PoisonBody("empty", "", "an empty body (SQS refuses one; moto and a transport bug do not)"),
        PoisonBody("whitespace", " \t\r\n ", "only whitespace"),
        PoisonBody("plain-text", "order o-1 was created", "a human-readable line instead of JSON"),
        PoisonBody("xml", "<event><id>1</id></event>", "an XML document"),
        PoisonBody("truncated-image", text[: len(text) // 2], "a real image cut in half"),
        PoisonBody("truncated-last-brace", text[:-1], "a real image missing its closing brace"),
        PoisonBody("json-array-empty", "[]", "a JSON array"),
        PoisonBody("json-array-of-image", _dump([_image()]), "the real image inside a JSON array"),
        PoisonBody("json-number", "42", "a JSON number"),
        PoisonBody("json-string", '"hello"', "a JSON string"),
        PoisonBody("json-true", "true", "a JSON boolean"),
        PoisonBody("json-null", "null", "JSON null"),
        PoisonBody("json-double-encoded", json.dumps(text), "the image JSON-encoded twice: a JSON string"),
        PoisonBody("base64-of-image", base64.b64encode(text.encode()).decode(), "the image base64-encoded"),
        PoisonBody("bom-prefix", "\ufeff" + text, "the real image behind a byte-order mark"),
        PoisonBody("json-nan-literal", _replace(text, '{"N": "1"}', "NaN"), "a bare NaN where seq's value goes"),
        PoisonBody("json-infinity-literal", _replace(text, '{"N": "1"}', "Infinity"), "a bare Infinity"),
        PoisonBody("json-minus-infinity", _replace(text, '{"N": "1"}', "-Infinity"), "a bare -Infinity"),
        PoisonBody("json-number-1e400", _replace(text, '{"N": "1"}', "1e400"), "a bare number past a double"),
        PoisonBody("json-int-5000-digits", "[" + "9" * 5000 + "]", "an integer past Python's 4300-digit limit"),
    ]


def _nesting() -> list[PoisonBody]:
    return [
        PoisonBody("nested-arrays", "[" * NESTING + "]" * NESTING, f"{NESTING:,} nested arrays"),
        PoisonBody("nested-objects", '{"a":' * NESTING + "1" + "}" * NESTING, f"{NESTING:,} nested objects"),
        PoisonBody("nested-typed-maps", _nested_payload(TYPED_NESTING), f"{TYPED_NESTING:,} nested typed maps"),
        PoisonBody(
            "nested-typed-maps-400",
            _nested_payload(400),
            "400 typed maps: parses, then the typed decoder recurses too deep",
        ),
        PoisonBody("nested-typed-maps-40", _nested_payload(40), "40 typed maps: JSON, deeper than DynamoDB allows"),
    ]


def _not_an_event_image() -> list[PoisonBody]:
    plain_row = {name: TypeDeserializer().deserialize(value) for name, value in _image().items()}
    return [
        PoisonBody("empty-object", "{}", "an empty JSON object"),
        PoisonBody("plain-json-envelope", _dump(seed().envelope.model_dump(mode="json")), "an envelope, untyped"),
        PoisonBody("plain-json-row", _dump(plain_row, default=str), "the row as plain JSON (DocumentClient view)"),
        PoisonBody("getitem-response", _dump({"Item": _image()}), "a GetItem response: the image under Item"),
        PoisonBody("sqs-event", _dump({"Records": [{"body": _text()}]}), "a Lambda SQS event as a body"),
        PoisonBody("head-row", _dump(seed().head), "the tenant's chain-head row image (kind HEAD)"),
        PoisonBody("tenant-index-row", _dump(seed().tenant_index), "a tenant-index row image (kind TENANT)"),
        PoisonBody("kind-missing", _dump(_image(kind=None)), "an event image without kind"),
        PoisonBody("kind-lowercase", _dump(_image(kind={"S": "event"})), "kind 'event', not 'EVENT'"),
    ]


def _wrong_type_tags() -> list[PoisonBody]:
    return [
        PoisonBody("tag-s-holds-number", _dump(_image(event_id={"S": 1})), 'event_id {"S": 1}'),
        PoisonBody("tag-n-not-a-number", _dump(_image(seq={"N": "abc"})), 'seq {"N": "abc"}'),
        PoisonBody("tag-unknown", _dump(_image(type={"X": "y"})), 'type {"X": "y"}'),
        PoisonBody("tag-empty", _dump(_image(tenant={})), "tenant {}: no tag"),
        PoisonBody("tag-two-tags", _dump(_image(seq={"S": "one", "N": "1"})), "seq with two tags, the first wrong"),
        PoisonBody("tag-s-null", _dump(_image(actor={"S": None})), 'actor {"S": null}'),
        PoisonBody("tag-null-true", _dump(_image(event_id={"NULL": True})), 'event_id {"NULL": true}'),
        PoisonBody("tag-missing", _dump(_image(seq=1)), "seq 1 with no type tag"),
        PoisonBody("tag-l-holds-string", _dump(_image(payload={"L": "x"})), 'payload {"L": "x"}'),
        PoisonBody("tag-m-holds-list", _dump(_image(payload={"M": [1]})), 'payload {"M": [1]}'),
        PoisonBody("tag-n-nan", _dump(_image(payload=_payload(x={"N": "NaN"}))), 'a payload field {"N": "NaN"}'),
        PoisonBody("tag-n-infinity", _dump(_image(payload=_payload(x={"N": "Infinity"}))), '{"N": "Infinity"}'),
        PoisonBody("tag-n-1e400", _dump(_image(seq={"N": "1e400"})), 'seq {"N": "1e400"}: overflows'),
        PoisonBody("tag-n-100k-digits", _dump(_image(seq={"N": "1" * 100_000})), "seq of 100,000 digits"),
        PoisonBody("tag-b-invalid-base64", _dump(_image(payload=_payload(x={"B": "%%% not base64"}))), "bad B"),
        PoisonBody("tag-b-in-payload", _dump(_image(payload=_payload(x={"B": "AAEC"}))), "binary in the payload"),
        PoisonBody("tag-ss-in-payload", _dump(_image(payload=_payload(x={"SS": ["a", "b"]}))), "a string set"),
    ]


def _one_thing_wrong() -> list[PoisonBody]:
    text = _text()
    second_hash = text[:-1] + ', "hash": {"S": "' + "0" * 64 + '"}}'  # JSON keeps the last of two keys
    return [
        PoisonBody("hash-mismatch", _dump(_image(payload=_payload(amount={"N": "10000"}))), "payload altered"),
        PoisonBody("hash-duplicate-key", second_hash, "a second hash key, which JSON parsers keep"),
        PoisonBody("hash-missing", _dump(_image(hash=None)), "an event image without hash"),
        PoisonBody("event-id-missing", _dump(_image(event_id=None)), "an event image without event_id"),
        PoisonBody("event-id-not-ulid", _dump(_image(event_id={"S": "not-a-ulid"})), "event_id not a ULID"),
        PoisonBody("seq-zero", _dump(_image(seq={"N": "0"})), "seq 0"),
        PoisonBody("tenant-invalid", _dump(_image(tenant={"S": "../../acme"})), "a tenant outside the pattern"),
        PoisonBody("occurred-at-garbage", _dump(_image(occurred_at={"S": "yesterday"})), "occurred_at not a time"),
        PoisonBody("occurred-at-not-utc", _dump(_image(occurred_at={"S": "2026-01-01T01:00:00+01:00"})), "+01:00"),
        PoisonBody("extra-attribute", _dump(_image(smuggled={"S": "x"})), "an attribute the envelope forbids"),
        PoisonBody("payload-not-a-map", _dump(_image(payload={"S": "{}"})), "payload as a string"),
        PoisonBody("mojibake", text.encode("utf-8").decode("latin-1"), "UTF-8 read as Latin-1: 'ZoÃ«'"),
        PoisonBody("hash-blind-nan-for-null", _dump(_image(payload=_payload(coupon={"N": "NaN"}))), "null -> NaN"),
        PoisonBody("hash-blind-infinity-for-null", _dump(_image(payload=_payload(coupon={"N": "-Infinity"}))), "-inf"),
        PoisonBody("hash-blind-set-for-list", _dump(_image(payload=_payload(tags={"SS": ["rush"]}))), "L -> SS"),
    ]


def _huge() -> list[PoisonBody]:
    many = {f"f{index:05d}": {"N": str(index)} for index in range(20_000)}
    return [
        PoisonBody("huge-ascii-field", _grown("x", SQS_MAX_BODY_BYTES), "a 256 KiB body: one 250 KB field"),
        PoisonBody("huge-4-byte-chars", _grown("\U0001d11e", SQS_MAX_BODY_BYTES), "256 KiB of 4-byte characters"),
        PoisonBody("huge-1-mib", _grown("x", MOTO_MAX_BODY_CHARS), "a 1 MiB body (moto's, and SQS's newer, limit)"),
        PoisonBody("wide-payload", _dump(_image(payload=_payload(**many))), "a payload of 20,000 fields"),
    ]


def _encodings() -> list[PoisonBody]:
    text = _text()
    raw_bytes = _replace(text, "Zoë", "Zo<bytes>").encode("utf-8").replace(b"<bytes>", b"\xff\xfe\xc0\xaf")
    return [
        PoisonBody("surrogate-escape-scalar", '"\\ud800"', "a JSON string holding one lone surrogate escape"),
        PoisonBody("surrogate-escape-in-payload", _ascii(_image(payload=_payload(x={"S": "\ud800"}))), "\\ud800"),
        PoisonBody("surrogate-escape-in-tag", _ascii(_image(kind={"\ud800": "EVENT"})), "a type tag \\ud800"),
        PoisonBody("surrogate-escape-in-name", _ascii(_image(**{"\udfff": {"S": "x"}})), "an attribute \\udfff"),
        PoisonBody("raw-lone-surrogate", _replace(text, "Zoë", "Zo\ud800"), "a str with a raw lone surrogate"),
        PoisonBody("raw-undecodable-bytes", raw_bytes.decode("utf-8", "surrogateescape"), "non-UTF-8 bytes in a str"),
        PoisonBody("utf16-as-latin1", text.encode("utf-16").decode("latin-1"), "UTF-16 bytes read as Latin-1"),
        PoisonBody("control-characters", "\x00\x01\x02\x1b[2J\x7f", "NUL and terminal escapes"),
        PoisonBody("noncharacters", "\ufffe\uffff", "Unicode noncharacters"),
    ]


def _wrappers() -> list[PoisonBody]:
    return [
        PoisonBody("stream-record-garbage", _stream("INSERT", NewImage="garbage"), "a stream record, NewImage a str"),
        PoisonBody("stream-record-list", _stream("INSERT", NewImage=[_image()]), "a stream record, NewImage a list"),
        PoisonBody("stream-record-remove", _stream("REMOVE", OldImage=_image()), "a REMOVE record: only OldImage"),
        PoisonBody("stream-record-head", _stream("MODIFY", NewImage=seed().head), "a stream record of the head"),
        PoisonBody("newimage-wrapper-bare", _dump({"newImage": {"kind": {"S": "EVENT"}}}), "newImage: a bare kind"),
    ]


def _attributes() -> list[PoisonBody]:
    """Repair messages that are poison only through their attributes: the body is the seed's intact image
    (of an event in no table the tests use), so only reading the attributes can fail."""
    return [
        PoisonBody(
            "attribute-targets-empty",
            _text(),
            "a repair message that names no subscription",
            {"outbox-subscriptions": {"DataType": "String", "StringValue": " , ,"}},
        ),
        PoisonBody(
            "attribute-targets-binary",
            _text(),
            "a repair message whose targets are binary, not a string",
            {"outbox-subscriptions": {"DataType": "Binary", "BinaryValue": b"shipping.book"}},
        ),
    ]


# -- helpers ------------------------------------------------------------------------------------------


def _dump(document: Any, default: Any = None) -> str:
    return json.dumps(document, ensure_ascii=False, default=default)


def _ascii(document: Any) -> str:
    """JSON text with non-ASCII written as ``\\uXXXX`` escapes: lone surrogates travel as plain ASCII."""
    return json.dumps(document, ensure_ascii=True)


def _text() -> str:
    return _dump(seed().image)


def _image(**changes: Any) -> dict[str, Any]:
    """The seed image with attributes replaced (None removes one); the hash stays the seed's."""
    image = dict(seed().image)
    for name, value in changes.items():
        if value is None:
            image.pop(name, None)
        else:
            image[name] = value
    return image


def _payload(**fields: Any) -> dict[str, Any]:
    """A typed payload map: the seed's fields plus ``fields`` (typed DynamoDB JSON)."""
    return {"M": {**seed().image["payload"]["M"], **fields}}


def _replace(text: str, old: str, new: str) -> str:
    if old not in text:
        raise AssertionError(f"{old!r} is not in the seed image")
    return text.replace(old, new, 1)


def _nested_payload(depth: int) -> str:
    """The seed image with a payload of ``depth`` nested typed maps, built as text (json.dumps would
    recurse as deep)."""
    nested = '{"M": {"a": ' * depth + '{"S": "x"}' + "}}" * depth
    return _replace(_dump(_image(payload=json.loads(_HOLE))), _HOLE, nested)


def _grown(filler: str, limit: int) -> str:
    """The seed image with one payload string grown until the body is just under ``limit`` UTF-8 bytes
    (and ``limit`` characters)."""
    frame = _dump(_image(payload=_payload(blob={"S": ""})))
    room = limit - len(frame.encode("utf-8")) - 256  # some room for the message's own overhead
    blob = filler * (room // len(filler.encode("utf-8")))
    return _dump(_image(payload=_payload(blob={"S": blob})))


def _stream(event_name: str, **images: Any) -> str:
    return _dump({"eventName": event_name, "eventSource": "aws:dynamodb", "dynamodb": images})
