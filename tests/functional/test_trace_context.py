"""Trace context in the envelope, attacked: what a client can put in ``X-Amzn-Trace-Id`` (malformed, huge, another
request's) is validated and bounded before it is stored, and no context, however wrong, stops a delivery."""

from __future__ import annotations

import json
from typing import Any

import pytest

from outbox import EventStore
from outbox.tracing import XRAY_ENVIRONMENT_VARIABLE, TraceContext
from tests.functional.conftest import EVENTS_TABLE
from tests.functional.inbox_harness import HarnessFactory, one_subscription

VALID_XRAY = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"
HOSTILE_XRAY = [
    "garbage",
    "Root=1-5759e988-bd862e3fe1be46a994272793",  # no parent: no traceparent can be made
    "Root=2-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8",  # another version
    "Root=1-5759e988-BD862E3FE1BE46A994272793;Parent=53995C3F42CD8AD8;Sampled=1",  # W3C wants lower case
    "Root=1-00000000-000000000000000000000000;Parent=53995c3f42cd8ad8",  # an all-zero trace id
    "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=" + "a" * 100_000,  # huge
    "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f\u2028\u00e9d8;Sampled=1",
]


@pytest.mark.parametrize("header", HOSTILE_XRAY)
def test_a_hostile_trace_header_is_not_stored_and_the_event_is(
    make_harness: HarnessFactory, monkeypatch: pytest.MonkeyPatch, header: str
) -> None:
    h = make_harness(one_subscription)
    monkeypatch.setenv(XRAY_ENVIRONMENT_VARIABLE, header)

    event = h.emit()
    h.esm.drain()

    assert event.trace_context is None
    [stored] = list(h.store.events("acme"))
    assert stored.trace_context is None
    assert "trace_context" not in h.dynamodb.get_item(TableName=EVENTS_TABLE, Key=_key(stored))["Item"]
    assert h.claim_status("shipping.book", event) == "COMPLETED"


def test_another_request_s_valid_context_is_stored_as_the_caller_s_word_and_only_links(
    make_harness: HarnessFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A client may name any trace: nothing checks whose it is, and nothing but a link and a log line uses it.
    h = make_harness(one_subscription)
    monkeypatch.setenv(XRAY_ENVIRONMENT_VARIABLE, VALID_XRAY)

    event = h.emit()
    h.esm.drain()

    assert event.trace_context == TraceContext(traceparent="00-5759e988bd862e3fe1be46a994272793-53995c3f42cd8ad8-01")
    assert h.store.verify_chain("acme").intact
    assert h.claim_status("shipping.book", event) == "COMPLETED"


def test_a_recorded_context_that_is_bounded_but_not_w3c_still_verifies_and_runs(make_harness: HarnessFactory) -> None:
    # What another writer of the table might store: not a valid context, within the bounds. It links nothing.
    h = make_harness(one_subscription)
    h.store = EventStore(
        EVENTS_TABLE, client=h.dynamodb, trace_context=lambda: TraceContext(traceparent="x" * 55), unchecked=True
    )

    event = h.emit()
    h.esm.drain()

    assert event.trace_context is not None
    assert not event.trace_context.valid
    assert event.trace_context.headers() == {}
    assert h.store.verify_chain("acme").intact
    assert h.claim_status("shipping.book", event) == "COMPLETED"


def test_a_message_whose_context_is_beyond_the_bounds_is_a_poison_pill_and_its_group_moves_on(
    make_harness: HarnessFactory,
) -> None:
    h = make_harness(one_subscription)
    forged = json.loads(json.dumps(h.store.emit("order.created", {"n": 1}, tenant="acme", actor="test").to_item()))
    forged["trace_context"] = {"M": {"traceparent": {"S": "00-" + "a" * 100_000}}}
    h.send(json.dumps(forged), "acme", "forged")
    after = h.emit()

    h.esm.drain()

    [pill] = h.poison_pills()
    assert "trace_context" in pill["error"]["S"]
    assert len(pill["error"]["S"]) < 2_000, "the error names the field, it does not repeat the input"
    assert h.claim_status("shipping.book", after) == "COMPLETED"


def _key(envelope: Any) -> dict[str, Any]:
    return {"pk": envelope.to_item()["pk"], "sk": envelope.to_item()["sk"]}
