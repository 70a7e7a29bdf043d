"""The upgrade test's application: one catalog that release 0.5.0 and this release both load, through
``SUBSCRIPTIONS=tests.upgrade.upgrade_catalog:build_catalog`` on the example stack's functions.

It imports only what both releases export. Three DURABLE subscriptions:

- ``upg.lease`` (``upg.order``): an external effect, under a lease; it counts its effect with its own write.
- ``upg.direct`` (``upg.order``): DynamoDB-only; its effect is the write it returns, committed with its completion.
- ``upg.ordered`` (``upg.step``): ordered per tenant, DynamoDB-only.

Every effect adds 1 to ``EFFECT#<event id>:<subscription>`` in the data table: after the upgrade each pair must
hold exactly 1 (0 for a skipped one). An event says how a handler fails by its payload, ``fail``: subscription
-> ``"terminal"`` (a TerminalError until ``FIXED``), ``"retry"`` (a retryable error until ``FIXED``), or
``"terminal-once"`` (a TerminalError on the pair's first run only, remembered in the data table, so across the
two releases' processes).
"""

from __future__ import annotations

import os
from typing import Any

from pydantic import BaseModel

from outbox import Delivery, EventStore, HandlerResult, Lane, Subscription, TerminalError, writes
from outbox.catalog import Catalog, EventTypeSpec, Module

DATA_TABLE_VARIABLE = "DATA_TABLE_NAME"  # the example stack's functions have it
EFFECTS_PK = "UPG#EFFECT"
FAILED_ONCE_PK = "UPG#FAILED-ONCE"

LEASE, DIRECT, ORDERED = "upg.lease", "upg.direct", "upg.ordered"

# The "fix" deployed after the upgrade: the test sets it; until then, "terminal" and "retry" fail.
FIXED = False
# Each handler run in this process: (event id, subscription).
RUNS: list[tuple[str, str]] = []


class Order(BaseModel):
    n: int
    fail: dict[str, str] = {}


class Step(BaseModel):
    n: int
    fail: dict[str, str] = {}


def place(store: EventStore, tenant: str, n: int, **fail: str) -> Any:
    """An ``upg.order`` event; ``fail``: subscription name (``lease``, ``direct``) -> how it fails."""
    return store.emit("upg.order", {"n": n, "fail": _named(fail)}, tenant=tenant, actor="upgrade-test")


def step(store: EventStore, tenant: str, n: int, **fail: str) -> Any:
    """An ``upg.step`` event, which ``upg.ordered`` applies in the tenant's order."""
    return store.emit("upg.step", {"n": n, "fail": _named(fail)}, tenant=tenant, actor="upgrade-test")


def _named(fail: dict[str, str]) -> dict[str, str]:
    return {f"upg.{name}": how for name, how in fail.items()}


def _table() -> str:
    return os.environ[DATA_TABLE_VARIABLE]


def effect_key(event_id: str, subscription: str) -> dict[str, Any]:
    return {"pk": {"S": EFFECTS_PK}, "sk": {"S": f"{event_id}:{subscription}"}}


def _fail_if_asked(delivery: Delivery) -> None:
    how = delivery.envelope.payload.get("fail", {}).get(delivery.subscription)
    if how == "terminal-once":
        try:
            _dynamodb().put_item(
                TableName=_table(),
                Item={"pk": {"S": FAILED_ONCE_PK}, "sk": {"S": delivery.idempotency_key}},
                ConditionExpression="attribute_not_exists(pk)",
            )
        except _dynamodb().exceptions.ConditionalCheckFailedException:
            return  # it failed once already
        raise TerminalError(f"{delivery.subscription} refuses {delivery.envelope.id} once")
    if how == "terminal" and not FIXED:
        raise TerminalError(f"{delivery.subscription} refuses {delivery.envelope.id}")
    if how == "retry" and not FIXED:
        raise ConnectionError(f"{delivery.subscription} cannot reach its service")


_clients: dict[str, Any] = {}


def _dynamodb() -> Any:
    # One client per process and endpoint: the local runtime's functions run in-process, on its moto.
    endpoint = os.environ.get("AWS_ENDPOINT_URL", "")
    client = _clients.get(endpoint)
    if client is None:
        import boto3

        client = _clients[endpoint] = boto3.client("dynamodb", endpoint_url=endpoint or None)
    return client


def count_effect_now(delivery: Delivery) -> None:
    """``upg.lease``: the external effect, applied by the handler itself."""
    RUNS.append((delivery.envelope.id, delivery.subscription))
    _fail_if_asked(delivery)
    _dynamodb().update_item(
        TableName=_table(),
        Key=effect_key(delivery.envelope.id, delivery.subscription),
        UpdateExpression="ADD effects :one",
        ExpressionAttributeValues={":one": {"N": "1"}},
    )


def count_effect_with_completion(delivery: Delivery) -> HandlerResult:
    """``upg.direct`` and ``upg.ordered``: the effect is the write committed with the completion."""
    RUNS.append((delivery.envelope.id, delivery.subscription))
    _fail_if_asked(delivery)
    key = {"pk": EFFECTS_PK, "sk": f"{delivery.envelope.id}:{delivery.subscription}"}
    return HandlerResult(writes=[writes.update(_table(), key, "ADD effects :one", values={":one": 1})])


def build_catalog() -> Catalog:
    return Catalog(
        [
            Module(
                name="upg",
                code=("tests.upgrade.upgrade_catalog",),
                event_types=(EventTypeSpec("upg.order", Order), EventTypeSpec("upg.step", Step)),
                subscriptions=(
                    Subscription(LEASE, "upg.order", Lane.DURABLE, count_effect_now),
                    Subscription(DIRECT, "upg.order", Lane.DURABLE, count_effect_with_completion, effects="dynamodb"),
                    Subscription(
                        ORDERED,
                        "upg.step",
                        Lane.DURABLE,
                        count_effect_with_completion,
                        effects="dynamodb",
                        ordered=True,
                    ),
                ),
            )
        ]
    )
