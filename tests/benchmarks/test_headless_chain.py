"""The measured idea of a chain without its head row (``benchmarks.headless_chain``) must itself be sound for
its figures to mean anything: concurrent writers leave a gapless, linked log, and the check that says so
fails on a log that is not."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from benchmarks import aws
from benchmarks.headless_chain import HeadlessStore, log_is_gapless_and_linked
from benchmarks.reference.order_app import sample_payload
from outbox import ChainHeadContentionError, keys

TABLE, TENANT = "events", "acme"


@pytest.fixture
def admin() -> Iterator[Any]:
    with aws.moto(fixes=True):
        client = aws.client("dynamodb")
        aws.create_table(client, TABLE, stream=True)
        yield client


def _emit_concurrently(writers: int, emits: int) -> int:
    committed = [0] * writers

    def worker(index: int) -> None:
        store = HeadlessStore(TABLE, client=aws.client("dynamodb"), unchecked=True)
        for n in range(emits):
            try:
                store.emit("bench.order_paid", sample_payload(n), tenant=TENANT, actor=f"writer-{index}")
                committed[index] += 1
            except ChainHeadContentionError:
                pass

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(committed)


def test_concurrent_headless_writers_leave_a_gapless_linked_log_of_exactly_what_they_committed(admin: Any) -> None:
    committed = _emit_concurrently(writers=4, emits=15)

    assert log_is_gapless_and_linked(admin, TABLE, TENANT)
    rows = admin.query(
        TableName=TABLE,
        KeyConditionExpression="pk = :pk",
        ExpressionAttributeValues={":pk": {"S": keys.event_partition(TENANT)}},
        ConsistentRead=True,
    )["Items"]
    assert len(rows) == committed > 0
    head = admin.get_item(TableName=TABLE, Key=keys.head_key(TENANT))
    assert "Item" not in head, "the idea writes no head row"


def test_the_check_fails_on_a_gap_and_on_a_broken_link(admin: Any) -> None:
    store = HeadlessStore(TABLE, client=admin, unchecked=True)
    for n in range(3):
        store.emit("bench.order_paid", sample_payload(n), tenant=TENANT, actor="test")
    assert log_is_gapless_and_linked(admin, TABLE, TENANT)

    second = admin.get_item(TableName=TABLE, Key=keys.event_key(TENANT, 2))["Item"]
    admin.put_item(TableName=TABLE, Item={**second, "prev_hash": {"S": "0" * 64}})
    assert not log_is_gapless_and_linked(admin, TABLE, TENANT), "a broken link"

    admin.delete_item(TableName=TABLE, Key=keys.event_key(TENANT, 2))
    assert not log_is_gapless_and_linked(admin, TABLE, TENANT), "a gap"
