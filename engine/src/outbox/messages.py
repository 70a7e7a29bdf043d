"""What travels on the durable queue, and how the consumer reads it.

The relay pipe sends each event row's image (typed DynamoDB JSON) as the body, with no attributes. The
operator's repairs (replay, reconcile) send the same body plus one message attribute,
``outbox-subscriptions``: the only subscriptions the message is for (comma-separated). A repair reruns the
(event, subscription) pairs it selected, never the event's other subscriptions, whose completions the inbox
may long have forgotten. Before it sends, a repair gives each pair a REPLAYING claim row, which vouches for
the message at any age; a missing row vouches only for an event younger than the inbox's retention.

Reading can fail only one way: anything that goes wrong while turning a record into a ``Message`` (any
exception, any size, any encoding) is a ``EnvelopeParseError``, which the consumer records as a poison
pill and acknowledges, so that it never blocks its tenant's group.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from outbox.exceptions import EnvelopeParseError
from outbox.log.envelope import Envelope

TARGETS_ATTRIBUTE = "outbox-subscriptions"
# The durable queue's MaximumMessageSize, set explicitly in the stack (outbox_cdk.queue_defaults; an
# infrastructure test keeps the two equal). SQS counts the body and the message attributes.
MAX_MESSAGE_BYTES = 262_144
# What a repair message adds: the attribute above, naming the subscriptions it is for (names are at most 100
# characters: 8 KiB holds some 80 of them).
REPAIR_ATTRIBUTES_RESERVE_BYTES = 8_192
# The largest body the relay may carry, so that a repair of the same event fits the queue too. emit() refuses
# an event whose body would be larger, before any call to AWS.
MAX_RELAY_BODY_BYTES = MAX_MESSAGE_BYTES - REPAIR_ATTRIBUTES_RESERVE_BYTES


def relay_body(item: Mapping[str, Any]) -> str:
    """The body the relay sends for an event row: its image in DynamoDB JSON, compact, UTF-8 as it is (what
    the pipe's ``<$.dynamodb.NewImage>`` template renders; the operator's repairs send the same)."""
    return json.dumps(item, separators=(",", ":"), ensure_ascii=False)


def relay_body_size(item: Mapping[str, Any]) -> int:
    return len(relay_body(item).encode("utf-8"))


@dataclass(frozen=True)
class Message:
    """One durable-queue message, read."""

    envelope: Envelope
    targets: frozenset[str] | None  # None: every matching subscription (a pipe message)
    receive_count: int


def repair_attributes(subscriptions: Iterable[str]) -> dict[str, Any]:
    """The SQS ``MessageAttributes`` of a repair message for ``subscriptions``."""
    names = sorted(set(subscriptions))
    if not names:
        raise ValueError("a repair message must name at least one subscription")
    return {TARGETS_ATTRIBUTE: {"DataType": "String", "StringValue": ",".join(names)}}


def read_message(body: str | None, attributes: Mapping[str, Any], receive_count: int) -> Message:
    """``body`` and the record's message attributes (Lambda's shape: ``{"stringValue": ...}``, or SQS's:
    ``{"StringValue": ...}``) -> a ``Message``; any failure is an ``EnvelopeParseError``."""
    try:
        envelope = parse_body(body)
        return Message(envelope, _targets(attributes), receive_count)
    except EnvelopeParseError:
        raise
    except Exception as exc:  # reading fails one way only, whatever the input did
        raise EnvelopeParseError(f"unreadable message ({type(exc).__name__}): {str(exc)[:500]}") from exc


def parse_body(body: str | None) -> Envelope:
    """The pipe forwards the raw NewImage (typed DynamoDB JSON) as the body; also accept it wrapped in
    a stream record or in ``{"newImage": ...}``, so a changed input template degrades loudly, not silently."""
    try:
        document = json.loads(body or "")
    except (TypeError, ValueError, RecursionError) as exc:
        raise EnvelopeParseError(f"body is not JSON: {str(exc)[:200]}") from exc
    if not isinstance(document, dict):
        raise EnvelopeParseError(f"body is JSON {type(document).__name__}, not a DynamoDB image")
    if isinstance(document.get("dynamodb"), dict):
        document = document["dynamodb"].get("NewImage") or {}
    elif isinstance(document.get("newImage") or document.get("NewImage"), dict):
        document = document.get("newImage") or document["NewImage"]
    envelope = Envelope.from_item(document)
    if envelope.computed_hash() != envelope.hash:
        raise EnvelopeParseError(f"event {envelope.id} does not match its own hash: altered after emit")
    return envelope


def _targets(attributes: Mapping[str, Any]) -> frozenset[str] | None:
    text = _string_attribute(attributes, TARGETS_ATTRIBUTE)
    if text is None:
        return None
    names = frozenset(name.strip() for name in text.split(",") if name.strip())
    if not names:
        raise EnvelopeParseError(f"message attribute {TARGETS_ATTRIBUTE} names no subscription")
    return names


def _string_attribute(attributes: Mapping[str, Any], name: str) -> str | None:
    attribute = attributes.get(name)
    if attribute is None:
        return None
    value = attribute.get("stringValue", attribute.get("StringValue")) if isinstance(attribute, Mapping) else None
    if not isinstance(value, str):
        raise EnvelopeParseError(f"message attribute {name} is not a string")
    return value
