"""A catalog with one recording subscription per lane, all on the same order, for the lanes test.
Loaded by the runtime's functions through SUBSCRIPTIONS=tests.e2e.lane_catalog:build_catalog."""

from __future__ import annotations

import os
from typing import Any

from pydantic import BaseModel

from outbox import Delivery, EventStore, Lane, Subscription, writes
from outbox.best_effort.changes import RecordChange
from outbox.catalog import Catalog, EntitySpec, EventTypeSpec, Module

# The rows whose changes lanes.best_effort reads: what the record-change pipe carries in these tests.
WATCHED_ENTITIES = ("LANEORDER",)

# (lane, subscription, who ran it): "caller" in the process that called emit(), else the function name.
RUNS: list[tuple[str, str, str]] = []
# What each lane's handler received, in order: (subscription, Delivery or RecordChange).
RECEIVED: list[tuple[str, Any]] = []


class Placed(BaseModel):
    order_id: str
    details: dict[str, Any] = {}


def _record(lane: Lane, name: str) -> Any:
    def handler(delivery_or_change: Delivery | RecordChange) -> None:
        RUNS.append((lane.value, name, os.environ.get("AWS_LAMBDA_FUNCTION_NAME", "caller")))
        RECEIVED.append((name, delivery_or_change))

    return handler


def place(store: EventStore, data_table: str, tenant: str, order_id: str) -> None:
    store.emit(
        "lanes.placed",
        {"order_id": order_id},
        tenant=tenant,
        actor="test",
        extra_writes=[writes.put(data_table, {"pk": f"LANEORDER#{tenant}#{order_id}", "sk": "ORDER"})],
    )


def build_catalog(data_table: str | None = None) -> Catalog:
    subscriptions = tuple(
        Subscription(f"lanes.{lane.value.lower()}", glob, lane, _record(lane, f"lanes.{lane.value.lower()}"))
        for lane, glob in (
            (Lane.INLINE, "lanes.placed"),
            (Lane.LOCAL, "lanes.placed"),
            (Lane.DURABLE, "lanes.placed"),
            (Lane.BEST_EFFORT, "record.LANEORDER.*"),
        )
    )
    return Catalog(
        [
            Module(
                name="lanes",
                code=("tests.e2e.lane_catalog",),
                event_types=(EventTypeSpec("lanes.placed", Placed),),
                entities=tuple(EntitySpec(name) for name in WATCHED_ENTITIES),
                subscriptions=subscriptions,
            )
        ]
    )
