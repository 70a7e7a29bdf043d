"""emit_many(): k events of one tenant under one head update, with the caller's writes, in one transaction.

Each test is one promise: one request for k events, hash-chained in order; all or nothing; the limits of one
transaction checked before any AWS call; a lost head race re-seals every event; a lost answer commits once;
INLINE subscribers run for every event and LOCAL ones after the commit.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from pydantic import BaseModel

from outbox import (
    CallerWriteConditionFailedError,
    Delivery,
    EventStore,
    HandlerResult,
    InvalidEventError,
    InvalidWriteError,
    Lane,
    NewEvent,
    Subscription,
    writes,
)
from outbox.catalog import Catalog, EventTypeSpec, Module
from outbox.local import faults
from outbox.local.faults import FaultCount
from tests.functional.conftest import EVENTS_TABLE, ORDERS_TABLE


def events(k: int, event_type: str = "counter.bumped") -> list[NewEvent]:
    return [NewEvent(event_type, {"n": n}) for n in range(k)]


def requests(dynamodb: Any) -> Counter[str]:
    counts: Counter[str] = Counter()
    dynamodb.meta.events.register("before-call.dynamodb", lambda model, **_: counts.update([model.name]))
    return counts


def test_k_events_commit_in_order_under_one_head_update_in_one_request(store: EventStore, dynamodb: Any) -> None:
    store.emit("counter.bumped", {"n": -1}, tenant="acme", actor="system")
    sent = requests(dynamodb)

    emitted = store.emit_many(events(25), tenant="acme", actor="system")

    assert sent == Counter({"GetItem": 1, "TransactWriteItems": 1})  # the head read, then one transaction
    assert [e.seq for e in emitted] == list(range(2, 27))
    assert [e.prev_hash for e in emitted[1:]] == [e.hash for e in emitted[:-1]]
    logged = list(store.events("acme"))
    assert [e.id for e in logged[1:]] == [e.id for e in emitted]
    assert [e.payload["n"] for e in logged[1:]] == list(range(25))
    assert (store.head("acme").last_seq, store.head("acme").last_event_id) == (26, emitted[-1].id)
    assert store.verify_chain("acme").intact


def test_the_caller_s_writes_commit_with_every_event_or_nothing_does(store: EventStore, dynamodb: Any) -> None:
    taken = {"pk": "ORDER#o-1", "sk": "META"}
    dynamodb.put_item(TableName=ORDERS_TABLE, Item=writes.typed(taken))
    ok = writes.put(ORDERS_TABLE, {"pk": "ORDER#o-2", "sk": "META"})
    refused = writes.put(ORDERS_TABLE, taken, condition="attribute_not_exists(pk)")

    with pytest.raises(CallerWriteConditionFailedError) as raised:
        store.emit_many(events(5), tenant="acme", actor="system", extra_writes=[ok, refused])

    assert raised.value.index == 1
    assert list(store.events("acme")) == []
    assert store.head("acme").last_seq == 0
    assert "Item" not in dynamodb.get_item(TableName=ORDERS_TABLE, Key=writes.typed({"pk": "ORDER#o-2", "sk": "META"}))

    committed = store.emit_many(events(5), tenant="acme", actor="system", extra_writes=[ok])
    assert [e.seq for e in committed] == [1, 2, 3, 4, 5]


def test_more_actions_than_a_transaction_holds_are_refused_before_any_call(store: EventStore, dynamodb: Any) -> None:
    sent = requests(dynamodb)
    store.emit_many(events(98), tenant="acme", actor="system")  # the head, 98 rows, the tenant index: 100
    sent.clear()

    with pytest.raises(InvalidWriteError, match="101 actions; DynamoDB allows 100 and emit\\(\\) needs 100"):
        store.emit_many(events(98), tenant="acme", actor="system", extra_writes=[writes.put(ORDERS_TABLE, {"pk": "x"})])
    with pytest.raises(InvalidWriteError, match="101 actions"):
        store.emit_many(events(99), tenant="acme", actor="system")

    assert sent == Counter()


def test_a_batch_past_four_megabytes_is_refused_before_any_call(store: EventStore, dynamodb: Any) -> None:
    large = [NewEvent("blob.stored", {"data": "x" * 200_000, "n": n}) for n in range(21)]
    sent = requests(dynamodb)

    with pytest.raises(InvalidWriteError, match="DynamoDB allows 4194304"):
        store.emit_many(large, tenant="acme", actor="system")

    assert sent == Counter()


def test_an_empty_batch_and_a_bad_event_among_good_ones_are_refused(store: EventStore) -> None:
    with pytest.raises(InvalidEventError, match="at least one event"):
        store.emit_many([], tenant="acme", actor="system")
    with pytest.raises(InvalidEventError):
        store.emit_many([*events(3), NewEvent("counter.bumped", {"n": float("nan")})], tenant="acme", actor="system")
    assert list(store.events("acme")) == []


def test_a_lost_head_race_reseals_every_event_on_the_new_head(dynamodb: Any) -> None:
    store = EventStore(EVENTS_TABLE, client=dynamodb, sleep=lambda _s: None, unchecked=True)
    rival = EventStore(EVENTS_TABLE, client=dynamodb, sleep=lambda _s: None, unchecked=True)

    with faults.rival_emit_before_commit(lambda tenant: rival.emit("rival.won", {}, tenant=tenant, actor="rival")):
        emitted = store.emit_many(events(5), tenant="acme", actor="system")

    assert [e.seq for e in emitted] == [2, 3, 4, 5, 6]  # the rival took seq 1
    assert [e.type for e in store.events("acme")] == ["rival.won", *["counter.bumped"] * 5]
    assert store.verify_chain("acme").intact


@pytest.mark.parametrize("resent", [False, True], ids=["surfaced", "resent-by-the-sdk"])
def test_a_lost_answer_commits_the_batch_once(dynamodb: Any, resent: bool) -> None:
    store = EventStore(EVENTS_TABLE, client=dynamodb, sleep=lambda _s: None, unchecked=True)
    lost = FaultCount(1)

    with faults.lose_answers_after_commit(lost, operations=("TransactWriteItems",), resent=lambda _s: resent):
        emitted = store.emit_many(events(5), tenant="acme", actor="system")

    assert lost.fired == 1
    assert [e.id for e in store.events("acme")] == [e.id for e in emitted]
    assert store.verify_chain("acme").intact


class Bumped(BaseModel):
    n: int


def test_inline_subscribers_run_for_every_event_and_local_ones_after_the_commit(dynamodb: Any) -> None:
    seen: list[tuple[str, int]] = []

    def count_inline(delivery: Delivery) -> HandlerResult:
        seen.append(("inline", delivery.envelope.seq))
        row = {"pk": f"SEEN#{delivery.envelope.id}", "sk": str(delivery.envelope.seq)}
        return HandlerResult(writes=[writes.put(ORDERS_TABLE, row)])

    def count_local(delivery: Delivery) -> None:
        seen.append(("local", delivery.envelope.seq))

    subscriptions = (
        Subscription("test.inline", "counter.bumped", Lane.INLINE, count_inline),
        Subscription("test.local", "counter.bumped", Lane.LOCAL, count_local),
    )
    catalog = Catalog([Module("test", (), (EventTypeSpec("counter.bumped", Bumped),), (), subscriptions)])
    store = EventStore(EVENTS_TABLE, client=dynamodb, sleep=lambda _s: None, catalog=catalog)

    store.emit_many(events(3), tenant="acme", actor="system")

    assert seen == [("inline", 1), ("inline", 2), ("inline", 3), ("local", 1), ("local", 2), ("local", 3)]
    assert int(dynamodb.scan(TableName=ORDERS_TABLE, Select="COUNT")["Count"]) == 3
