"""An event written by a newer engine (a field this one does not know, at the top or in its trace context) is read,
verified, delivered and repaired like any other; what this engine seals has the fields it declares, no more."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import ValidationError

from outbox.exceptions import EnvelopeParseError
from outbox.inbox import envelope_digest
from outbox.inbox.rows import envelope_digests, same_content
from outbox.log.canonical import GENESIS_HASH, chain_hash
from outbox.log.chain import ChainHead
from outbox.log.envelope import Envelope
from outbox.log.sealing import seal
from outbox.messages import parse_body, relay_body
from outbox.tracing import TraceContext

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def fields(**more: Any) -> dict[str, Any]:
    return {
        "id": "01ARZ3NDEKTSV4RRFFQ69G5FAV",
        "type": "order.created",
        "tenant": "acme",
        "seq": 1,
        "correlation_id": "c-1",
        "actor": "user:1",
        "occurred_at": datetime(2026, 12, 5, 12, 0, tzinfo=UTC),
        "schema_version": 1,
        "payload": {"order_id": "o-1", "total": 12.5},
        "prev_hash": GENESIS_HASH,
        "hash": GENESIS_HASH,
        **more,
    }


class NewerTraceContext(TraceContext):
    baggage: str


class NewerEnvelope(Envelope):
    """What a newer engine declares: this envelope with one field more, and a trace context with one more."""

    placement: dict[str, Any]
    trace_context: NewerTraceContext | None = None


def newer_row() -> tuple[Envelope, dict[str, Any]]:
    """An event as the newer engine seals and stores it: every field of it hashed."""
    unsealed = NewerEnvelope.model_validate(
        fields(
            placement={"region": "eu-west-1", "cells": [3, 4.5], "primary": True},
            trace_context={"traceparent": TRACEPARENT, "baggage": "k=v"},
        )
    )
    sealed = unsealed.model_copy(update={"hash": chain_hash(GENESIS_HASH, unsealed.hashed_body())})
    return sealed, sealed.to_item()


def test_an_event_of_a_newer_engine_reads_verifies_and_keeps_its_fields() -> None:
    sealed, row = newer_row()
    assert {"placement", "trace_context"} <= set(row)
    assert "baggage" in row["trace_context"]["M"]

    read = Envelope.from_item(row)
    assert type(read) is Envelope
    assert read.computed_hash() == read.hash == sealed.hash
    assert read.hashed_body() == sealed.hashed_body()
    assert read.to_item() == row, "a repair that writes the row back writes what the newer engine wrote"
    assert parse_body(relay_body(row)) == read, "the relay's message of it parses and passes its hash check"
    assert read.handler_copy() == read
    # A claim row the newer engine's consumer wrote for this event is this engine's to take over, and back.
    assert envelope_digest(read) == envelope_digest(sealed)


def test_a_field_added_behind_the_hash_s_back_is_still_an_altered_event() -> None:
    _, row = newer_row()
    with pytest.raises(EnvelopeParseError, match="does not match its own hash"):
        parse_body(relay_body({**row, "added_later": {"S": "not hashed by anyone"}}))
    plain = Envelope.model_validate(fields()).to_item()
    with pytest.raises(EnvelopeParseError, match="does not match its own hash"):
        parse_body(relay_body({**plain, "trace_context": {"M": {"traceparent": {"S": TRACEPARENT}}}}))


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ({"SS": ["a", "b"]}, "placement is a set"),
        ({"M": {"tags": {"NS": ["1", "2"]}}}, "placement.tags is a set"),
    ],
)
def test_a_newer_field_that_is_not_json_makes_no_event(value: dict[str, Any], problem: str) -> None:
    _, row = newer_row()
    with pytest.raises(EnvelopeParseError, match=f"event row placement is not JSON: {problem}"):
        Envelope.from_item({**row, "placement": value})
    context = {"M": {**row["trace_context"]["M"], "baggage": {"SS": ["k=v"]}}}
    with pytest.raises(
        EnvelopeParseError, match=r"event row trace_context is not JSON: trace_context\.baggage is a set"
    ):
        Envelope.from_item({**row, "trace_context": context})


def test_what_emit_seals_has_the_fields_this_engine_declares_and_no_more() -> None:
    draft = {name: value for name, value in fields().items() if name not in ("seq", "prev_hash", "hash")}
    with pytest.raises(ValidationError, match=r"placment\n\s+Extra inputs are not permitted"):
        seal({**draft, "placment": {"region": "eu"}}, ChainHead("acme"))  # a typo in the engine stays an error
    with pytest.raises(ValidationError, match=r"trace_context.bagage\n\s+Extra inputs are not permitted"):
        seal({**draft, "trace_context": {"traceparent": TRACEPARENT, "bagage": "k=v"}}, ChainHead("acme"))
    assert not seal(draft, ChainHead("acme")).model_extra


# An event of this release as the releases before it stored it, with and without a trace context: (hash, the
# inbox's digest). Without one: as release 0.5.0 (2373484), which had no trace_context field, computed them, by
# running its own code: `git archive 2373484 engine/src | tar -x -C "$tmp"`, then, with PYTHONPATH="$tmp/engine/src",
# this test's event (fields() with the payload below) sealed, read back from its row, and hashed with that code's
# Envelope.hashed_body and outbox.inbox.envelope_digest. With one: recorded from c7c7b13.
RECORDED = {
    "without": (
        "7675ebb6ddafdf016ea49436419e0816093dc579ff54aa1182a2179e439a41d1",
        "f42766c744455ef25368949ce8f9f51d2be77b12995885c4d2f85a57ca2f4c2a",
    ),
    "with a trace context": (
        "21396296fb6f1893997eac20dd5da8dac37de1508af33eaed3b34b7735b95ca6",
        "1ba1742cebac166ab3efd5402ce6a40d4c4573d32dd7dd3b9bf204b63968c4b3",
    ),
}


# The digest the engine wrote from a54ead0 (trace_context added) until 0.5.0's digest was restored, for the event
# "without": its dump then said "trace_context": null. Recorded from c7c7b13 (this test's pin until then).
WRITTEN_WITH_NULL_TRACE_CONTEXT = "64368fe95b75fea719abee004e7d451beef84fbdfaa92e60a990637506ac908e"


def recorded_event(case: str) -> Envelope:
    """The event RECORDED holds for ``case``, sealed and read back from its row."""
    base = fields(payload={"order_id": "o-1", "total": 12.5})
    if case == "with a trace context":
        base["trace_context"] = {"traceparent": TRACEPARENT}
    unsealed = Envelope.model_validate(base)
    return Envelope.from_item(
        unsealed.model_copy(update={"hash": chain_hash(GENESIS_HASH, unsealed.hashed_body())}).to_item()
    )


@pytest.mark.parametrize("case", sorted(RECORDED))
def test_an_older_event_hashes_and_digests_as_the_release_before_recorded(case: str) -> None:
    # A field added to the envelope must leave both alone for an event without it (see Envelope's docstring):
    # the hash is stored (a changed one is an altered event), the digest is in claim rows (a changed one makes
    # their redeliveries and take-overs conflicts while a deploy is in flight).
    event = recorded_event(case)
    assert (event.hash, envelope_digest(event)) == RECORDED[case]


def test_a_claim_row_may_hold_the_digest_any_release_wrote_for_the_content_and_no_other() -> None:
    # Without a trace context: 0.5.0's digest (written now too), then the one written with a null trace context.
    without = recorded_event("without")
    assert envelope_digests(without) == (RECORDED["without"][1], WRITTEN_WITH_NULL_TRACE_CONTEXT)
    assert envelope_digests(without, RECORDED["without"][1]) == envelope_digests(without)
    # With one, every release that had the field wrote the same digest.
    traced = recorded_event("with a trace context")
    assert envelope_digests(traced) == (RECORDED["with a trace context"][1],)

    for digest in envelope_digests(without):
        assert same_content({"digest": {"S": digest}}, without)
    assert same_content({}, without), "a row without a digest is not a conflict (as before)"
    assert not same_content({"digest": {"S": RECORDED["with a trace context"][1]}}, without)
    assert not same_content({"digest": {"S": WRITTEN_WITH_NULL_TRACE_CONTEXT}}, traced)
    other = without.model_copy(update={"payload": {"order_id": "o-2", "total": 12.5}})
    assert not same_content({"digest": {"S": RECORDED["without"][1]}}, other)
    assert not same_content({"digest": {"S": WRITTEN_WITH_NULL_TRACE_CONTEXT}}, other)
