"""emit() against moto: atomic with the caller's writes, gapless, hash-chained, safe under contention."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from outbox import (
    GENESIS_HASH,
    CallerWriteConditionFailedError,
    ChainHeadContentionError,
    EventStore,
    writes,
)
from tests.functional.conftest import EVENTS_TABLE, ORDERS_TABLE


def order_put(order_id: str, total: int) -> dict[str, Any]:
    return writes.put(
        ORDERS_TABLE,
        {"pk": f"ORDER#{order_id}", "sk": "META", "total": total},
        condition="attribute_not_exists(pk)",
    )


def count_items(dynamodb: Any, table: str) -> int:
    return int(dynamodb.scan(TableName=table, Select="COUNT")["Count"])


def test_first_emit_starts_the_chain_and_commits_the_entity_with_it(store: EventStore, dynamodb: Any) -> None:
    envelope = store.emit(
        "order.created",
        {"order_id": "o-1"},
        tenant="acme",
        actor="user:42",
        extra_writes=[order_put("o-1", 5)],
    )

    assert (envelope.seq, envelope.prev_hash) == (1, GENESIS_HASH)
    assert envelope.correlation_id == envelope.id, "a new causal chain starts at its first event"
    assert store.head("acme").last_seq == 1
    assert store.head("acme").last_hash == envelope.hash
    order = dynamodb.get_item(TableName=ORDERS_TABLE, Key={"pk": {"S": "ORDER#o-1"}, "sk": {"S": "META"}})
    assert order["Item"]["total"] == {"N": "5"}
    assert [e.id for e in store.events("acme")] == [envelope.id]
    assert store.verify_chain("acme").intact


def test_500_sequential_emits_are_gapless_and_intact(store: EventStore) -> None:
    emitted = [store.emit("counter.bumped", {"n": n}, tenant="acme", actor="system") for n in range(500)]

    logged = list(store.events("acme"))
    assert [e.seq for e in logged] == list(range(1, 501))
    assert [e.payload["n"] for e in logged] == list(range(500))
    assert [e.id for e in logged] == [e.id for e in emitted]
    report = store.verify_chain("acme")
    assert (report.intact, report.events_checked, report.head_seq) == (True, 500, 500)


def test_tenants_have_independent_chains(store: EventStore) -> None:
    for n in range(3):
        store.emit("counter.bumped", {"n": n}, tenant="acme", actor="system")
    other = store.emit("counter.bumped", {"n": 0}, tenant="globex", actor="system")

    assert (other.seq, other.prev_hash) == (1, GENESIS_HASH)
    assert store.verify_chain("acme").intact
    assert store.verify_chain("globex").intact


def test_eight_concurrent_emitters_on_one_tenant_lose_nothing_and_stay_gapless(dynamodb: Any) -> None:
    per_thread, threads = 15, 8
    contention_errors: list[ChainHeadContentionError] = []
    failures: list[BaseException] = []

    def emitter(worker: int) -> None:
        # Each worker is its own process in spirit: its own store, so its own head cache.
        store = EventStore(EVENTS_TABLE, client=dynamodb, max_head_retries=5, unchecked=True)
        try:
            for n in range(per_thread):
                while True:
                    try:
                        store.emit("counter.bumped", {"worker": worker, "n": n}, tenant="acme", actor="system")
                        break
                    except ChainHeadContentionError as exc:  # the caller's retry: nothing was committed
                        contention_errors.append(exc)
        except BaseException as exc:
            failures.append(exc)

    workers = [threading.Thread(target=emitter, args=(w,)) for w in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()

    assert failures == []
    logged = list(EventStore(EVENTS_TABLE, client=dynamodb, unchecked=True).events("acme"))
    assert [e.seq for e in logged] == list(range(1, per_thread * threads + 1))
    committed = sorted((e.payload["worker"], e.payload["n"]) for e in logged)
    assert committed == sorted((w, n) for w in range(threads) for n in range(per_thread)), "lost or doubled"
    assert EventStore(EVENTS_TABLE, client=dynamodb, unchecked=True).verify_chain("acme").intact


class RacingClient:
    """Lets a rival emit for the same tenant right before each of our transactions: we always lose."""

    def __init__(self, client: Any, rival: EventStore) -> None:
        self._client = client
        self._rival = rival
        self.attempts = 0

    def transact_write_items(self, **request: Any) -> Any:
        self.attempts += 1
        self._rival.emit("counter.bumped", {"rival": self.attempts}, tenant="acme", actor="rival")
        return self._client.transact_write_items(**request)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


def test_exhausted_head_retries_raise_the_typed_error_and_commit_nothing(dynamodb: Any) -> None:
    rival = EventStore(EVENTS_TABLE, client=dynamodb, unchecked=True)
    racing = RacingClient(dynamodb, rival)
    loser = EventStore(EVENTS_TABLE, client=racing, max_head_retries=3, sleep=lambda _s: None, unchecked=True)

    with pytest.raises(ChainHeadContentionError) as raised:
        loser.emit(
            "order.created",
            {"order_id": "o-9"},
            tenant="acme",
            actor="user",
            extra_writes=[order_put("o-9", 1)],
        )

    assert raised.value.attempts == 4
    assert racing.attempts == 4, "one first try and three retries"
    logged = list(rival.events("acme"))
    assert all("rival" in e.payload for e in logged), "the loser's event must not be in the log"
    assert count_items(dynamodb, ORDERS_TABLE) == 0, "the loser's entity must not exist"
    assert rival.verify_chain("acme").intact


def test_a_stale_head_cache_costs_one_retry_and_never_breaks_the_chain(dynamodb: Any) -> None:
    first = EventStore(EVENTS_TABLE, client=dynamodb, cache_heads=True, unchecked=True)
    second = EventStore(EVENTS_TABLE, client=dynamodb, unchecked=True)
    first.emit("counter.bumped", {"n": 1}, tenant="acme", actor="system")  # first caches seq 1
    second.emit("counter.bumped", {"n": 2}, tenant="acme", actor="system")  # head moves to 2 behind its back

    third = first.emit("counter.bumped", {"n": 3}, tenant="acme", actor="system")

    assert third.seq == 3
    assert first.verify_chain("acme").intact


def test_a_failing_condition_on_a_caller_write_commits_nothing(store: EventStore, dynamodb: Any) -> None:
    store.emit("order.created", {"order_id": "o-1"}, tenant="acme", actor="u", extra_writes=[order_put("o-1", 5)])
    head_before = store.head("acme")

    with pytest.raises(CallerWriteConditionFailedError) as raised:
        store.emit(
            "order.created",
            {"order_id": "o-1"},
            tenant="acme",
            actor="u",
            extra_writes=[writes.put(ORDERS_TABLE, {"pk": "AUDIT#1", "sk": "x"}), order_put("o-1", 99)],
        )

    assert raised.value.index == 1
    assert raised.value.table_name == ORDERS_TABLE
    assert "extra_writes[1]" in str(raised.value)
    assert store.head("acme") == head_before, "the head must not move"
    assert len(list(store.events("acme"))) == 1, "no event row"
    assert count_items(dynamodb, ORDERS_TABLE) == 1, "neither the audit row nor a changed order"
    order = dynamodb.get_item(TableName=ORDERS_TABLE, Key={"pk": {"S": "ORDER#o-1"}, "sk": {"S": "META"}})
    assert order["Item"]["total"] == {"N": "5"}


class LostResponseClient:
    """Commits the first transaction but reports a dropped connection, as a timeout on the wire would."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.calls = 0

    def transact_write_items(self, **request: Any) -> Any:
        from botocore.exceptions import ReadTimeoutError

        self.calls += 1
        response = self._client.transact_write_items(**request)
        if self.calls == 1:
            raise ReadTimeoutError(endpoint_url="https://dynamodb.us-east-1.amazonaws.com")
        return response

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


def test_a_lost_response_is_resolved_without_a_duplicate_event(dynamodb: Any) -> None:
    flaky = LostResponseClient(dynamodb)
    store = EventStore(EVENTS_TABLE, client=flaky, sleep=lambda _s: None, unchecked=True)

    envelope = store.emit("order.created", {"order_id": "o-1"}, tenant="acme", actor="u")

    logged = list(store.events("acme"))
    assert [e.id for e in logged] == [envelope.id], "committed exactly once"
    assert flaky.calls == 2
    assert store.verify_chain("acme").intact


def test_a_tenant_is_listed_in_the_tenant_index_by_its_first_emit_only(store: EventStore, dynamodb: Any) -> None:
    from outbox.keys import tenant_index_partition

    for n in range(3):
        store.emit("counter.bumped", {"n": n}, tenant="acme", actor="system")

    rows = dynamodb.query(
        TableName=EVENTS_TABLE,
        KeyConditionExpression="pk = :pk",
        ExpressionAttributeValues={":pk": {"S": tenant_index_partition("acme")}},
    )["Items"]
    assert [(r["sk"]["S"], r["kind"]["S"]) for r in rows] == [("acme", "TENANT")]


def test_a_throttled_head_read_is_retried_and_surfaces_only_as_the_engine_s_error(dynamodb: Any) -> None:
    """Found by simulation seed 16: botocore's throttling error escaped emit()."""
    import boto3
    from botocore.config import Config

    from outbox import EventStoreUnavailableError
    from outbox.local import faults

    no_sdk_retries = boto3.client("dynamodb", region_name="us-east-1", config=Config(retries={"max_attempts": 1}))
    store = EventStore(
        EVENTS_TABLE, client=no_sdk_retries, sleep=lambda _s: None, max_transient_retries=3, unchecked=True
    )

    with faults.throttle_dynamodb("GetItem", times=2):
        envelope = store.emit("counter.bumped", {"n": 1}, tenant="acme", actor="system")
    assert envelope.seq == 1

    with faults.throttle_dynamodb("GetItem", times=10), pytest.raises(EventStoreUnavailableError, match="throttling"):
        store.emit("counter.bumped", {"n": 2}, tenant="acme", actor="system")
    assert store.head("acme").last_seq == 1, "nothing committed"
