"""The durable consumer delivers every stored version as the current one: an old event through its
upcasters, a newer one than the code knows as a terminal dead letter that says to deploy the consumer."""

from __future__ import annotations

from typing import Any

import pytest

from outbox import EventStore
from outbox.catalog import Catalog, EventTypeSpec, Module
from outbox.log.schemas import Upcaster
from outbox.subscriptions import Effects, Lane, Subscription
from tests.functional.inbox_harness import Harness, HarnessFactory, Recorder
from tests.unit.test_schema_evolution import V1, V2, v1_to_v2

ORDERED = "shop.ordered"
SPEC = EventTypeSpec(ORDERED, V2, version=2, upcasters=(Upcaster(1, V1, v1_to_v2),))
V1_PAYLOAD = {"order_id": "o-1", "total": 5}


def seen_by(recorder: Recorder, name: str) -> list[tuple[int, dict[str, Any]]]:
    """Record (stored version, payload) of each delivery ``name``'s handler gets."""
    seen: list[tuple[int, dict[str, Any]]] = []
    recorder.behaviours[name] = lambda d: seen.append((d.envelope.schema_version, dict(d.envelope.payload)))
    return seen


def versioned_harness(make_harness: HarnessFactory, effects: Effects = Effects.EXTERNAL) -> Harness:
    def subscriptions(recorder: Recorder) -> list[Subscription]:
        return [Subscription("shop.project", "shop.*", Lane.DURABLE, recorder.handler, effects=effects)]

    h = make_harness(subscriptions)
    h.store.catalog = Catalog([Module(name="shop", code=(), event_types=(SPEC,))])
    return h


def stored_by_old_code(h: Harness, version: int, payload: dict[str, Any]) -> Any:
    """An event as code of another version stored it: emitted without today's catalog."""
    old = EventStore(h.store.table_name, client=h.dynamodb, clock=h.clock.now_ms, sleep=h.clock.sleep, unchecked=True)
    envelope = old.emit(ORDERED, payload, tenant="acme", actor="last-year", schema_version=version)
    h.publish(envelope)
    return envelope


@pytest.mark.parametrize("effects", [Effects.EXTERNAL, Effects.DYNAMODB])
def test_an_old_event_reaches_the_handler_as_the_current_version_and_says_what_was_stored(
    make_harness: HarnessFactory, effects: Effects
) -> None:
    h = versioned_harness(make_harness, effects)
    seen = seen_by(h.recorder, "shop.project")
    envelope = stored_by_old_code(h, 1, V1_PAYLOAD)
    h.esm.drain()
    assert seen == [(1, {**V1_PAYLOAD, "channel": "web"})]
    assert h.claim_status("shop.project", envelope) == "COMPLETED"
    # The log keeps the event as it was stored: the upcast is a view, and the chain still verifies.
    (stored,) = [e for e in h.store.events("acme") if e.id == envelope.id]
    assert (stored.schema_version, stored.payload) == (1, V1_PAYLOAD)
    assert h.store.verify_chain("acme").intact


def test_a_current_event_is_delivered_as_stored(make_harness: HarnessFactory) -> None:
    h = versioned_harness(make_harness)
    seen = seen_by(h.recorder, "shop.project")
    h.emit(ORDERED, **V1_PAYLOAD, channel="phone")
    h.esm.drain()
    assert seen == [(2, {**V1_PAYLOAD, "channel": "phone"})]


@pytest.mark.parametrize("effects", [Effects.EXTERNAL, Effects.DYNAMODB])
def test_a_version_newer_than_the_consumer_is_a_terminal_dead_letter_that_says_to_deploy_it(
    make_harness: HarnessFactory, effects: Effects
) -> None:
    h = versioned_harness(make_harness, effects)
    seen = seen_by(h.recorder, "shop.project")
    envelope = stored_by_old_code(h, 3, {**V1_PAYLOAD, "channel": "web", "currency": "EUR"})
    h.esm.drain()
    assert seen == [], "no handler runs a version it cannot read"
    assert h.claim_status("shop.project", envelope) == "DEAD"
    (dead,) = h.dead_letters()
    assert dead["reason"]["S"] == "terminal"
    assert "knows versions up to 2: deploy the consumer that declares version 3, then replay" in dead["error"]["S"]
    assert h.poison_pills() == [], "a readable message of a newer version is not a poison pill"
    assert h.queue_depth(h.dlq_url) == 0


def test_an_upcaster_that_fails_is_the_handlers_failure_retried_then_dead_lettered(
    make_harness: HarnessFactory,
) -> None:
    def broken(payload: dict[str, Any]) -> dict[str, Any]:
        raise KeyError("region")

    h = versioned_harness(make_harness)
    assert h.store.catalog is not None
    h.store.catalog = Catalog(
        [
            Module(
                name="shop",
                code=(),
                event_types=(EventTypeSpec(ORDERED, V2, version=2, upcasters=(Upcaster(1, V1, broken),)),),
            )
        ]
    )
    seen = seen_by(h.recorder, "shop.project")
    envelope = stored_by_old_code(h, 1, V1_PAYLOAD)
    h.esm.drain()
    assert seen == []
    record = h.inbox.read_claim(envelope.id, "shop.project")
    assert record is not None
    assert (record.status, record.attempts) == ("DEAD", 5), "every attempt was spent"
    (dead,) = h.dead_letters()
    assert dead["reason"]["S"] == "exhausted"
    assert "KeyError" in dead["error"]["S"]
