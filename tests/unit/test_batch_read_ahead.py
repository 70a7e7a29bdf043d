"""The batch's one read (``LogCheck.read_ahead``): its events' rows and the other rows it needs (the ordered
subscriptions' watermarks) in consistent BatchGetItems of at most 100 keys; a key DynamoDB leaves unprocessed
is unknown (read later, one by one), never taken for an absent row."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber
from moto import mock_aws

from outbox import EventStore, keys
from outbox.delivery.log_check import BATCH_GET_KEYS, LogCheck
from outbox.log.envelope import Envelope
from outbox.messages import relay_body
from tests.functional.conftest import create_pk_sk_table

EVENTS, INBOX = "events", "inbox"


@pytest.fixture
def envelopes(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Envelope]]:
    """Three events of two tenants, emitted into a moto table (the log the test's stub then answers for)."""
    monkeypatch.setenv("AWS_ACCOUNT_ID_ENDPOINT_MODE", "disabled")
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        create_pk_sk_table(client, EVENTS)
        store = EventStore(EVENTS, client=client, unchecked=True)
        yield [store.emit("order.paid", {"n": n}, tenant=tenant, actor="t") for n, tenant in enumerate("aab")]


def _record(n: int, envelope: Envelope) -> dict[str, Any]:
    return {"messageId": f"m{n}", "body": relay_body(envelope.to_item()), "attributes": {}, "messageAttributes": {}}


def _stubbed() -> tuple[LogCheck, Stubber]:
    client = boto3.client("dynamodb", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    return LogCheck(EventStore(EVENTS, client=client, unchecked=True)), Stubber(client)


def _watermark_row(tenant: str) -> dict[str, Any]:
    return {**keys.watermark_key(tenant, "ledger"), "applied_seq": {"N": "1"}, "version": {"N": "1"}}


def test_events_and_watermarks_in_one_request_present_absent_and_unprocessed_told_apart(
    envelopes: list[Envelope],
) -> None:
    check, stub = _stubbed()
    first, second, other = envelopes
    watermarks = [keys.watermark_key(tenant, "ledger") for tenant in ("a", "b")]
    events_projected = {"ProjectionExpression": "pk, sk, #hash", "ExpressionAttributeNames": {"#hash": "hash"}}
    stub.add_response(
        "batch_get_item",
        {
            "Responses": {
                EVENTS: [{**keys.event_key("a", 1), "hash": {"S": first.hash}}],  # seq 2 of a: no row
                INBOX: [_watermark_row("a")],  # b's watermark: no row yet
            },
            "UnprocessedKeys": {EVENTS: {"Keys": [keys.event_key("b", 1)]}},
        },
        {
            "RequestItems": {
                EVENTS: {
                    "Keys": [keys.event_key(e.tenant, e.seq) for e in envelopes],
                    "ConsistentRead": True,
                    **events_projected,
                },
                INBOX: {"Keys": watermarks, "ConsistentRead": True},
            }
        },
    )
    with stub:
        ahead = check.read_ahead(
            [_record(n, e) for n, e in enumerate(envelopes)], lambda _m: True, also=lambda _ms: {INBOX: watermarks}
        )
    stub.assert_no_pending_responses()

    assert ahead.logged == {("a", 1): first.hash, ("a", 2): ""}, "b's row was not processed: unknown, not absent"
    assert ahead.rows == {
        (INBOX, "TENANT#a#ORDER#ledger", "WATERMARK"): _watermark_row("a"),
        (INBOX, "TENANT#b#ORDER#ledger", "WATERMARK"): None,
    }
    assert (second.tenant, second.seq, other.tenant) == ("a", 2, "b")


def test_more_keys_than_one_request_holds_take_one_request_per_hundred(envelopes: list[Envelope]) -> None:
    check, stub = _stubbed()
    watermarks = [keys.watermark_key(f"tenant-{n}", "ledger") for n in range(BATCH_GET_KEYS)]
    for _ in range(2):  # 3 event keys + 100 watermark keys
        stub.add_response("batch_get_item", {"Responses": {}})
    with stub:
        ahead = check.read_ahead(
            [_record(n, e) for n, e in enumerate(envelopes)], lambda _m: True, also=lambda _ms: {INBOX: watermarks}
        )
    stub.assert_no_pending_responses()
    assert len(ahead.logged) == 3
    assert len(ahead.rows) == BATCH_GET_KEYS
    assert set(ahead.rows.values()) == {None}


def test_nothing_to_run_reads_nothing(envelopes: list[Envelope]) -> None:
    check, stub = _stubbed()
    with stub:  # no response queued: any request would fail the test
        ahead = check.read_ahead(
            [_record(n, e) for n, e in enumerate(envelopes)], lambda _m: False, also=lambda _ms: {INBOX: []}
        )
    assert (ahead.logged, ahead.rows, len(ahead.messages)) == ({}, {}, 3)
