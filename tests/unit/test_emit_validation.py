"""Bad input gets a clear error and writes nothing: emit() validates before any call to AWS."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from outbox import Envelope, EventStore, InvalidEventError, InvalidWriteError, writes
from outbox.log.canonical import GENESIS_HASH

FIXED_TIME = datetime(2026, 11, 29, 8, 30, 0, 123000, tzinfo=UTC)


class NoAwsClient:
    """Any attribute access is a call to AWS, which these tests must never reach."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"validation let the request reach AWS ({name})")


@pytest.fixture
def store() -> EventStore:
    return EventStore("events", client=NoAwsClient(), clock=lambda: FIXED_TIME, unchecked=True)


def emit(store: EventStore, **overrides: Any) -> Envelope:
    arguments: dict[str, Any] = {
        "event_type": "order.created",
        "payload": {"order_id": "o-1"},
        "tenant": "acme",
        "actor": "user:42",
    }
    arguments.update(overrides)
    event_type = arguments.pop("event_type")
    payload = arguments.pop("payload")
    return store.emit(event_type, payload, **arguments)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"tenant": ""}, "tenant"),
        ({"tenant": "acme#evil"}, "tenant"),
        ({"tenant": "a" * 65}, "tenant"),
        ({"event_type": "Order Created"}, "event type"),
        ({"event_type": ".created"}, "event type"),
        ({"event_type": "a." + "b" * 127}, "event type"),
        ({"payload": ["not", "an", "object"]}, "JSON object"),
        ({"payload": {"amount": float("nan")}}, "canonical JSON"),
        ({"payload": {"amount": 2**60}}, "outside"),
        ({"payload": {"amount": 1e300}}, "DynamoDB's number range"),
        ({"payload": {"amount": -1e126}}, "DynamoDB's number range"),
        ({"payload": {"nested": [{"tiny": 5e-324}]}}, "tiny is 5e-324, outside"),
        ({"payload": {"tiny": 1e-131}}, "DynamoDB's number range"),
        ({"payload": {"when": datetime(2026, 1, 1)}}, "payload.when is a datetime"),
        ({"actor": ""}, "actor"),
        ({"correlation_id": "c" * 129}, "correlation_id"),
        ({"schema_version": 0}, "schema_version"),
        ({"payload": {"blob": "x" * (400 * 1024)}}, "event row would be"),
    ],
)
def test_invalid_events_are_refused_before_aws(store: EventStore, overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidEventError, match=message):
        emit(store, **overrides)


def _put(n: int, size: int = 10) -> dict[str, Any]:
    return writes.put("orders", {"pk": f"ORDER#{n}", "sk": "META", "blob": "x" * size})


@pytest.mark.parametrize(
    ("extra_writes", "message"),
    [
        ([_put(n) for n in range(98)], "at most 97 extra_writes"),
        ([_put(1), writes.delete("orders", {"pk": "ORDER#1", "sk": "META"})], "same item"),
        ([_put(1, size=400 * 1024)], r"extra_writes\[0\] is \d+ bytes"),
        ([_put(n, size=390 * 1024) for n in range(11)], "the transaction is"),
        ([{"Put": {"TableName": "orders", "Item": {"pk": "ORDER#1"}}}], "not typed DynamoDB JSON"),
        ([{"Put": {"Item": {"pk": {"S": "x"}}}}], "needs a TableName"),
        ([{"Upsert": {"TableName": "orders"}}], "exactly one of"),
        ([writes.put("events", {"pk": "TENANT#acme#EVENT", "sk": "1"})], "only emit"),
        ([writes.put("orders", {"id": "o-1"})], "lacks its key attributes"),
        ([{"Update": {"TableName": "orders", "Key": {"pk": {"S": "a"}}}}], "needs an UpdateExpression"),
        (
            [{"ConditionCheck": {"TableName": "orders", "Key": {"pk": {"S": "a"}}}}],
            "needs a ConditionExpression",
        ),
    ],
)
def test_invalid_extra_writes_are_refused_before_aws(
    store: EventStore, extra_writes: list[dict[str, Any]], message: str
) -> None:
    with pytest.raises(InvalidWriteError, match=message):
        emit(store, extra_writes=extra_writes)


def test_a_declared_key_schema_finds_duplicates_on_other_key_names() -> None:
    store = EventStore("events", client=NoAwsClient(), table_keys={"orders": ["order_id"]}, unchecked=True)
    with pytest.raises(InvalidWriteError, match="same item"):
        emit(
            store,
            extra_writes=[
                writes.put("orders", {"order_id": "o-1", "total": 5}),
                writes.update("orders", {"order_id": "o-1"}, "SET total = :t", values={":t": 6}),
            ],
        )


def test_the_envelope_round_trips_through_its_row_with_the_same_hash() -> None:
    body = {
        "id": "01KB0000000000000000000000",
        "type": "payment.completed",
        "tenant": "acme",
        "seq": 7,
        "correlation_id": "corr-1",
        "causation_id": None,
        "actor": "system",
        "occurred_at": FIXED_TIME,
        "schema_version": 1,
        "payload": {"amount": 12.5, "items": [{"sku": "tag", "qty": 2}], "gift": False, "note": None},
        "prev_hash": GENESIS_HASH,
        "hash": GENESIS_HASH,
    }
    unsealed = Envelope.model_validate(body)
    envelope = unsealed.model_copy(update={"hash": unsealed.computed_hash()})
    item = envelope.to_item()
    assert item["pk"] == {"S": "TENANT#acme#EVENT"}
    assert item["sk"] == {"S": "00000000000000000007"}
    assert item["kind"] == {"S": "EVENT"}
    assert item["occurred_at"] == {"S": "2026-11-29T08:30:00.123Z"}
    parsed = Envelope.from_item(item)
    assert parsed == envelope
    assert parsed.computed_hash() == envelope.hash
    # Pinned vector: the hash of this exact envelope must never change silently.
    assert envelope.hash == EXPECTED_VECTOR_HASH


EXPECTED_VECTOR_HASH = "9cffd2b2f10066638b8ed25659e84479fb0b450aad1c431557e16af574fdda0f"


def _largest_blob_that_fits(store: EventStore) -> int:
    """The longest string payload emit() lets through to AWS (found by bisection)."""
    low, high = 0, 300 * 1024
    while low < high:
        middle = (low + high + 1) // 2
        try:
            emit(store, payload={"blob": "x" * middle})
        except InvalidEventError:
            high = middle - 1
        except AssertionError:  # NoAwsClient: validation passed and the request would reach AWS
            low = middle
    return low


def test_an_event_the_relay_could_not_carry_is_refused_at_the_boundary(store: EventStore) -> None:
    from outbox.messages import MAX_RELAY_BODY_BYTES

    fits = _largest_blob_that_fits(store)

    assert MAX_RELAY_BODY_BYTES - 1024 < fits < MAX_RELAY_BODY_BYTES, "the bound is the relay body's, not the row's"
    with pytest.raises(InvalidEventError, match="durable queue takes at most"):
        emit(store, payload={"blob": "x" * (fits + 1)})


def test_a_small_row_with_a_large_relay_body_is_refused(store: EventStore) -> None:
    # 40,000 small numbers: about 160 KB as a row, over 400 KB as DynamoDB JSON ({"N":"7"} each).
    payload = {"numbers": [7] * 40_000}

    with pytest.raises(InvalidEventError, match="relay would carry this event as a"):
        emit(store, payload=payload)


def test_a_store_without_a_catalog_refuses_every_type_before_any_aws_call_and_says_what_to_pass() -> None:
    store = EventStore("events", client=NoAwsClient())
    for event_type in ("order.created", "order.craeted"):  # declared somewhere or not: it cannot tell
        with pytest.raises(InvalidEventError, match="has no catalog") as refused:
            emit(store, event_type=event_type)
        assert "catalog=" in str(refused.value)
        assert "unchecked=True" in str(refused.value)


def test_unchecked_and_a_catalog_together_are_refused() -> None:
    from outbox.catalog import Catalog

    with pytest.raises(InvalidEventError, match="unchecked=True"):
        EventStore("events", client=NoAwsClient(), catalog=Catalog([]), unchecked=True)


def test_a_mistyped_type_says_which_declared_type_was_meant() -> None:
    from hypothesis import given
    from hypothesis import strategies as st
    from pydantic import BaseModel

    from outbox.catalog import Catalog, EventTypeSpec, Module

    class Order(BaseModel):
        order_id: str

    declared = ("shop.order_placed", "shop.order_cancelled", "shop.refund_issued")
    catalog = Catalog([Module("shop", (), tuple(EventTypeSpec(name, Order) for name in declared))])
    store = EventStore("events", client=NoAwsClient(), catalog=catalog)

    @given(st.sampled_from(declared), st.integers(min_value=0, max_value=100), st.sampled_from("xqz"))
    def one_letter_off(meant: str, at: int, letter: str) -> None:
        index = at % len(meant)
        typo = meant[:index] + letter + meant[index + 1 :]
        if typo in declared:
            return
        with pytest.raises(InvalidEventError, match="not declared by any module") as refused:
            emit(store, event_type=typo, payload={"order_id": "o-1"})
        assert f"did you mean {meant!r}?" in str(refused.value)

    one_letter_off()
