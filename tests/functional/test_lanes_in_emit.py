"""emit() is the one dispatcher of INLINE (before the commit, fail-closed) and LOCAL (after, best effort)."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from pydantic import BaseModel

from outbox import Delivery, EventStore, HandlerResult, Lane, Subscription, TerminalError, writes
from outbox.catalog import Catalog, EventTypeSpec, Module
from tests.functional.conftest import EVENTS_TABLE, ORDERS_TABLE


class Anything(BaseModel):
    n: int


def catalog(*subscriptions: Subscription) -> Catalog:
    return Catalog([Module("test", (), (EventTypeSpec("order.created", Anything),), (), subscriptions)])


def audit_write(delivery: Delivery) -> HandlerResult:
    return HandlerResult(writes=[writes.put(ORDERS_TABLE, {"pk": f"AUDIT#{delivery.envelope.id}", "sk": "A"})])


def count(dynamodb: Any) -> int:
    return int(dynamodb.scan(TableName=ORDERS_TABLE, Select="COUNT")["Count"])


def test_an_inline_handler_s_writes_commit_in_the_event_s_transaction(dynamodb: Any) -> None:
    store = EventStore(
        EVENTS_TABLE, client=dynamodb, catalog=catalog(Subscription("a.audit", "order.*", Lane.INLINE, audit_write))
    )

    envelope = store.emit("order.created", {"n": 1}, tenant="acme", actor="t")

    assert dynamodb.get_item(TableName=ORDERS_TABLE, Key={"pk": {"S": f"AUDIT#{envelope.id}"}, "sk": {"S": "A"}})[
        "Item"
    ]


def test_a_failing_inline_handler_fails_the_request_and_commits_nothing(dynamodb: Any) -> None:
    def refuse(_delivery: Delivery) -> None:
        raise TerminalError("screening refused it")

    store = EventStore(
        EVENTS_TABLE,
        client=dynamodb,
        catalog=catalog(
            Subscription("a.audit", "order.*", Lane.INLINE, audit_write),
            Subscription("b.screen", "order.*", Lane.INLINE, refuse),
        ),
    )

    with pytest.raises(TerminalError):
        store.emit("order.created", {"n": 1}, tenant="acme", actor="t")

    assert list(store.events("acme")) == []
    assert count(dynamodb) == 0
    assert store.head("acme").last_seq == 0


def test_a_failing_local_handler_is_logged_and_never_reaches_the_caller(
    dynamodb: Any, caplog: pytest.LogCaptureFixture
) -> None:
    ran: list[str] = []

    def broken(_delivery: Delivery) -> None:
        raise RuntimeError("cache is down")

    def works(delivery: Delivery) -> None:
        ran.append(delivery.envelope.id)

    store = EventStore(
        EVENTS_TABLE,
        client=dynamodb,
        catalog=catalog(
            Subscription("a.broken", "order.*", Lane.LOCAL, broken),
            Subscription("b.works", "order.*", Lane.LOCAL, works),
        ),
    )

    with caplog.at_level(logging.ERROR, logger="outbox.store"):
        envelope = store.emit("order.created", {"n": 1}, tenant="acme", actor="t")

    assert ran == [envelope.id], "the event committed, and the next LOCAL handler still ran"
    assert [e.id for e in store.events("acme")] == [envelope.id]
    assert any(envelope.id in r.getMessage() and "a.broken" in r.getMessage() for r in caplog.records)


def test_emit_runs_neither_durable_nor_best_effort_subscriptions(dynamodb: Any) -> None:
    def must_not_run(_: Any) -> None:
        raise AssertionError("emit() is not the dispatcher of this lane")

    store = EventStore(
        EVENTS_TABLE,
        client=dynamodb,
        catalog=catalog(Subscription("a.durable", "order.*", Lane.DURABLE, must_not_run)),
    )

    store.emit("order.created", {"n": 1}, tenant="acme", actor="t")
