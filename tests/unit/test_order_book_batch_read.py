"""``OrderBook.watermarks``: a batch's watermarks in consistent BatchGetItems of at most 100 keys; a key
DynamoDB leaves unprocessed is left out (read alone when needed), never taken for an absent row."""

from __future__ import annotations

from typing import Any

import boto3
from botocore.stub import Stubber

from outbox import keys
from outbox.ordering import BATCH_GET_KEYS, OrderBook, Watermark


def _row(tenant: str, subscription: str, applied: int, version: int) -> dict[str, Any]:
    return {
        **keys.watermark_key(tenant, subscription),
        "applied_seq": {"N": str(applied)},
        "version": {"N": str(version)},
        "deferred_count": {"N": "0"},
    }


def _book() -> tuple[OrderBook, Stubber]:
    client = boto3.client("dynamodb", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    return OrderBook("inbox", "events", client=client), Stubber(client)


def test_present_absent_and_unprocessed_watermarks_are_told_apart() -> None:
    book, stub = _book()
    places = [("acme", "ledger"), ("globex", "ledger"), ("initech", "ledger"), ("acme", "ledger")]
    distinct = list(dict.fromkeys(places))
    stub.add_response(
        "batch_get_item",
        {
            "Responses": {"inbox": [_row("acme", "ledger", 7, 9)]},
            "UnprocessedKeys": {"inbox": {"Keys": [keys.watermark_key("initech", "ledger")]}},
        },
        {"RequestItems": {"inbox": {"Keys": [keys.watermark_key(*p) for p in distinct], "ConsistentRead": True}}},
    )
    with stub:
        found = book.watermarks(places)
    stub.assert_no_pending_responses()

    assert found == {
        ("acme", "ledger"): Watermark("acme", "ledger", applied_seq=7, version=9),
        ("globex", "ledger"): Watermark("globex", "ledger"),  # no row: nothing applied yet
    }, "an unprocessed key is unknown, not absent"


def test_more_places_than_one_request_holds_take_one_request_per_hundred() -> None:
    book, stub = _book()
    places = [(f"tenant-{n}", "ledger") for n in range(BATCH_GET_KEYS + 1)]
    for chunk in (places[:BATCH_GET_KEYS], places[BATCH_GET_KEYS:]):
        stub.add_response(
            "batch_get_item",
            {"Responses": {"inbox": []}},
            {"RequestItems": {"inbox": {"Keys": [keys.watermark_key(*p) for p in chunk], "ConsistentRead": True}}},
        )
    with stub:
        found = book.watermarks(places)
    stub.assert_no_pending_responses()
    assert len(found) == BATCH_GET_KEYS + 1
    assert all(mark.version == 0 for mark in found.values())
