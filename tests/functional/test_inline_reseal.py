"""INLINE handlers see exactly the envelope that commits.

An INLINE write joins the event's transaction, so it must be computed from the event as committed: the seq
and hash it finally gets, and the state its transaction commits against. When the transaction loses the
race for the tenant's head, emit re-seals the event on the new head and runs the INLINE handlers again;
a re-send of an unchanged request (an ambiguous answer) does not run them again, because the request
must stay byte for byte the same.
"""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError
from pydantic import BaseModel

from outbox import Delivery, EventStore, HandlerResult, Lane, Subscription, writes
from outbox.catalog import Catalog, EventTypeSpec, Module
from outbox.exceptions import CallerWriteConditionFailedError, InlineWriteConditionFailedError
from tests.functional.conftest import EVENTS_TABLE, ORDERS_TABLE


class Anything(BaseModel):
    n: int = 0
    tags: list[str] = []


def catalog(*subscriptions: Subscription) -> Catalog:
    return Catalog([Module("test", (), (EventTypeSpec("order.created", Anything),), (), subscriptions)])


def projection(dynamodb: Any) -> dict[str, Any]:
    item = dynamodb.get_item(TableName=ORDERS_TABLE, Key={"pk": {"S": "PROJECTION#acme"}, "sk": {"S": "LAST"}})
    return dict(item["Item"])


def project_last(delivery: Delivery) -> HandlerResult:
    """A projection written inline: the tenant's last event, by seq and hash."""
    envelope = delivery.envelope
    row = {"pk": "PROJECTION#acme", "sk": "LAST", "seq": envelope.seq, "hash": envelope.hash, "id": envelope.id}
    return HandlerResult(writes=[writes.put(ORDERS_TABLE, row)])


class CountingInline:
    """An INLINE read-modify-write: reads the counter when it runs and writes it plus one."""

    def __init__(self, dynamodb: Any) -> None:
        self.dynamodb = dynamodb
        self.runs = 0

    def __call__(self, _delivery: Delivery) -> HandlerResult:
        self.runs += 1
        key = {"pk": {"S": "COUNTER#acme"}, "sk": {"S": "N"}}
        item = self.dynamodb.get_item(TableName=ORDERS_TABLE, Key=key, ConsistentRead=True).get("Item")
        current = int(item["n"]["N"]) if item else 0
        return HandlerResult(writes=[writes.put(ORDERS_TABLE, {"pk": "COUNTER#acme", "sk": "N", "n": current + 1})])


class RivalFirst:
    """Lets a rival emit commit right before our first transaction, once: our first attempt loses the head."""

    def __init__(self, client: Any, rival: EventStore) -> None:
        self._client = client
        self._rival: EventStore | None = rival

    def transact_write_items(self, **request: Any) -> Any:
        if self._rival is not None:
            rival, self._rival = self._rival, None
            rival.emit("order.created", {"n": 99}, tenant="acme", actor="rival")
        return self._client.transact_write_items(**request)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


def test_an_inline_projection_written_after_a_lost_head_race_points_at_the_committed_seal(dynamodb: Any) -> None:
    module = catalog(Subscription("a.project", "order.*", Lane.INLINE, project_last))
    rival = EventStore(EVENTS_TABLE, client=dynamodb, catalog=module)
    store = EventStore(EVENTS_TABLE, client=RivalFirst(dynamodb, rival), catalog=module, sleep=lambda _s: None)

    envelope = store.emit("order.created", {"n": 1}, tenant="acme", actor="t")

    assert envelope.seq == 2, "the rival took seq 1"
    logged = {e.seq: e for e in store.events("acme")}
    row = projection(dynamodb)
    assert row["seq"] == {"N": "2"}
    assert row["id"] == {"S": envelope.id}
    assert row["hash"] == {"S": logged[2].hash}, "the projection names a hash that was committed"
    assert store.verify_chain("acme").intact


def test_an_inline_counter_counts_every_event_when_the_head_race_is_lost(dynamodb: Any) -> None:
    counter = CountingInline(dynamodb)
    module = catalog(Subscription("a.count", "order.*", Lane.INLINE, counter))
    rival = EventStore(EVENTS_TABLE, client=dynamodb, catalog=module)
    store = EventStore(EVENTS_TABLE, client=RivalFirst(dynamodb, rival), catalog=module, sleep=lambda _s: None)

    store.emit("order.created", {"n": 1}, tenant="acme", actor="t")

    events = list(store.events("acme"))
    item = dynamodb.get_item(TableName=ORDERS_TABLE, Key={"pk": {"S": "COUNTER#acme"}, "sk": {"S": "N"}})["Item"]
    assert len(events) == 2
    assert item["n"] == {"N": "2"}, "two events committed: the counter must say 2"
    assert counter.runs == 3, "the rival's run, our first (lost) seal, and our re-seal"


def test_a_stale_head_cache_never_commits_inline_writes_of_the_stale_seal(dynamodb: Any) -> None:
    module = catalog(Subscription("a.project", "order.*", Lane.INLINE, project_last))
    cached = EventStore(EVENTS_TABLE, client=dynamodb, catalog=module, cache_heads=True)
    other = EventStore(EVENTS_TABLE, client=dynamodb, catalog=module)
    cached.emit("order.created", {"n": 1}, tenant="acme", actor="t")  # caches seq 1
    other.emit("order.created", {"n": 2}, tenant="acme", actor="t")  # the head moves to 2 behind its back

    third = cached.emit("order.created", {"n": 3}, tenant="acme", actor="t")

    assert third.seq == 3
    assert projection(dynamodb)["seq"] == {"N": "3"}
    assert projection(dynamodb)["hash"] == {"S": third.hash}


class AmbiguousOnce:
    """Answers the first transaction with HTTP 500 without applying it: emit must re-send it unchanged."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.requests: list[dict[str, Any]] = []

    def transact_write_items(self, **request: Any) -> Any:
        self.requests.append(request)
        if len(self.requests) == 1:
            raise ClientError(
                {"Error": {"Code": "InternalServerError"}, "ResponseMetadata": {"HTTPStatusCode": 500}},
                "TransactWriteItems",
            )
        return self._client.transact_write_items(**request)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


def test_a_re_sent_request_does_not_run_the_inline_handlers_again(dynamodb: Any) -> None:
    counter = CountingInline(dynamodb)
    client = AmbiguousOnce(dynamodb)
    store = EventStore(
        EVENTS_TABLE,
        client=client,
        catalog=catalog(Subscription("a.count", "order.*", Lane.INLINE, counter)),
        sleep=lambda _s: None,
    )

    store.emit("order.created", {"n": 1}, tenant="acme", actor="t")

    assert counter.runs == 1
    assert len(client.requests) == 2
    assert client.requests[0] == client.requests[1], "the same token carries the same request"


def test_handlers_cannot_change_the_event_or_the_caller_s_payload(dynamodb: Any) -> None:
    seen: list[list[str]] = []

    def vandal(delivery: Delivery) -> None:
        delivery.envelope.payload["tags"].append("vandal")

    def witness(delivery: Delivery) -> None:
        seen.append(list(delivery.envelope.payload["tags"]))

    store = EventStore(
        EVENTS_TABLE,
        client=dynamodb,
        catalog=catalog(
            Subscription("a.vandal", "order.*", Lane.INLINE, vandal),
            Subscription("b.witness", "order.*", Lane.INLINE, witness),
            Subscription("c.vandal", "order.*", Lane.LOCAL, vandal),
            Subscription("d.witness", "order.*", Lane.LOCAL, witness),
        ),
    )
    payload = {"n": 1, "tags": ["a"]}

    envelope = store.emit("order.created", payload, tenant="acme", actor="t")

    assert payload == {"n": 1, "tags": ["a"]}, "the caller's dict is the caller's"
    assert seen == [["a"], ["a"]], "each handler sees the event as it commits"
    assert envelope.payload["tags"] == ["a"]
    assert next(iter(store.events("acme"))).payload["tags"] == ["a"]
    assert store.verify_chain("acme").intact


def test_a_failing_inline_write_names_its_subscription_not_a_caller_write(dynamodb: Any) -> None:
    def create_once(_delivery: Delivery) -> HandlerResult:
        row = {"pk": "AUDIT#only", "sk": "A"}
        return HandlerResult(writes=[writes.put(ORDERS_TABLE, row, condition="attribute_not_exists(pk)")])

    store = EventStore(
        EVENTS_TABLE, client=dynamodb, catalog=catalog(Subscription("a.audit", "order.*", Lane.INLINE, create_once))
    )
    store.emit("order.created", {"n": 1}, tenant="acme", actor="t")
    head = store.head("acme")

    with pytest.raises(InlineWriteConditionFailedError) as raised:
        store.emit(
            "order.created",
            {"n": 2},
            tenant="acme",
            actor="t",
            extra_writes=[writes.put(ORDERS_TABLE, {"pk": "ORDER#2", "sk": "META"})],
        )

    assert raised.value.subscription == "a.audit"
    assert raised.value.table_name == ORDERS_TABLE
    assert "a.audit" in str(raised.value)
    assert "extra_writes" not in str(raised.value)
    assert not isinstance(raised.value, CallerWriteConditionFailedError), "the caller's own write did not fail"
    assert store.head("acme") == head, "nothing committed"
