"""emit() is the one dispatcher of INLINE (before the commit, fail-closed) and LOCAL (after, best effort)."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from pydantic import BaseModel

from outbox import Delivery, EventStore, FollowUp, HandlerResult, Lane, Subscription, TerminalError, writes
from outbox.catalog import Catalog, EventTypeSpec, Module
from outbox.exceptions import ContractViolationError
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

    with caplog.at_level(logging.ERROR, logger="outbox.log.lanes"):
        envelope = store.emit("order.created", {"n": 1}, tenant="acme", actor="t")

    assert ran == [envelope.id], "the event committed, and the next LOCAL handler still ran"
    assert [e.id for e in store.events("acme")] == [envelope.id]
    assert any(envelope.id in r.getMessage() and "a.broken" in r.getMessage() for r in caplog.records)


class Signup(BaseModel):
    email: str


def test_a_failing_local_handler_s_log_says_what_the_durable_lane_says_never_the_payload(
    dynamodb: Any, caplog: pytest.LogCaptureFixture
) -> None:
    email = "jane.doe@example.com"

    def bounce(delivery: Delivery) -> None:
        raise LookupError(f"no mailbox for {delivery.envelope.payload['email']}")

    store = EventStore(
        EVENTS_TABLE,
        client=dynamodb,
        catalog=Catalog(
            [
                Module(
                    "test",
                    (),
                    (EventTypeSpec("user.signed_up", Signup),),
                    (),
                    (Subscription("a.welcome", "user.*", Lane.LOCAL, bounce),),
                )
            ]
        ),
    )

    with caplog.at_level(logging.DEBUG, logger="outbox"):
        envelope = store.emit("user.signed_up", {"email": email}, tenant="acme", actor="t")

    records = [r for r in caplog.records if r.name.startswith("outbox")]
    formatter = logging.Formatter()
    assert all(email not in formatter.format(r) for r in records), caplog.text
    assert all(r.exc_info is None and r.exc_text is None for r in records), "no traceback, which repeats the text"
    failures = [r.getMessage() for r in records if r.levelno >= logging.ERROR]
    assert any(
        "a.welcome" in message and envelope.id in message and "LookupError at test_lanes_in_emit.py" in message
        for message in failures
    ), failures


def test_emit_runs_neither_durable_nor_best_effort_subscriptions(dynamodb: Any) -> None:
    def must_not_run(_: Any) -> None:
        raise AssertionError("emit() is not the dispatcher of this lane")

    store = EventStore(
        EVENTS_TABLE,
        client=dynamodb,
        catalog=catalog(Subscription("a.durable", "order.*", Lane.DURABLE, must_not_run)),
    )

    store.emit("order.created", {"n": 1}, tenant="acme", actor="t")


class Interrupted(BaseException):
    """What a handler may raise that is not an Exception (asyncio's CancelledError is one)."""


def test_a_local_handler_raising_a_base_exception_is_logged_and_later_handlers_still_run(
    dynamodb: Any, caplog: pytest.LogCaptureFixture
) -> None:
    ran: list[str] = []

    def cancelled(_delivery: Delivery) -> None:
        raise Interrupted("cancelled")

    store = EventStore(
        EVENTS_TABLE,
        client=dynamodb,
        catalog=catalog(
            Subscription("a.cancelled", "order.*", Lane.LOCAL, cancelled),
            Subscription("b.works", "order.*", Lane.LOCAL, lambda d: ran.append(d.envelope.id)),
        ),
    )

    with caplog.at_level(logging.ERROR, logger="outbox.log.lanes"):
        envelope = store.emit("order.created", {"n": 1}, tenant="acme", actor="t")

    assert ran == [envelope.id]
    assert any("a.cancelled" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(
    "returned",
    [
        HandlerResult(writes=[writes.put(ORDERS_TABLE, {"pk": "X#1", "sk": "A"})]),
        HandlerResult(follow_up=FollowUp("order.created", {"n": 2})),
        "done",
    ],
    ids=["writes", "follow-up", "not-a-result"],
)
def test_a_local_handler_that_returns_something_is_reported_not_silently_dropped(
    dynamodb: Any, caplog: pytest.LogCaptureFixture, returned: object
) -> None:
    store = EventStore(
        EVENTS_TABLE,
        client=dynamodb,
        catalog=catalog(Subscription("a.local", "order.*", Lane.LOCAL, lambda _d: returned)),
    )

    with caplog.at_level(logging.ERROR, logger="outbox.log.lanes"):
        envelope = store.emit("order.created", {"n": 1}, tenant="acme", actor="t")

    assert [e.id for e in store.events("acme")] == [envelope.id], "the event is committed, and only it"
    assert count(dynamodb) == 0, "a LOCAL handler's writes are never committed"
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert any("a.local" in message and "LOCAL handlers return None" in message for message in errors), errors


@pytest.mark.parametrize(
    "returned",
    [HandlerResult(follow_up=FollowUp("order.created", {"n": 2})), "done", {"writes": []}],
    ids=["follow-up", "a-string", "a-dict"],
)
def test_an_inline_handler_that_breaks_its_contract_fails_the_emit_and_commits_nothing(
    dynamodb: Any, returned: object
) -> None:
    store = EventStore(
        EVENTS_TABLE,
        client=dynamodb,
        catalog=catalog(Subscription("a.inline", "order.*", Lane.INLINE, lambda _d: returned)),
    )

    with pytest.raises(ContractViolationError, match=r"a\.inline"):
        store.emit("order.created", {"n": 1}, tenant="acme", actor="t")

    assert list(store.events("acme")) == []
