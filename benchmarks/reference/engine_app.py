"""The first-batch comparison's application as the engine's catalog: ``order_app`` behind one DURABLE
subscription (a lease per (event, subscription), the default effects). The durable consumer loads it with
``SUBSCRIPTIONS=engine_app:build_catalog``."""

from __future__ import annotations

from order_app import EVENT_TYPE, PaymentCompleted, check_payment

from outbox.catalog import Catalog, EventTypeSpec, Module
from outbox.subscriptions import Delivery, Lane, Subscription

SUBSCRIPTION = "bench.check_payment"


def on_payment(delivery: Delivery) -> None:
    check_payment(delivery.envelope.payload)


def build_catalog() -> Catalog:
    return Catalog(
        [
            Module(
                name="bench",
                code=("engine_app",),
                event_types=(EventTypeSpec(EVENT_TYPE, PaymentCompleted),),
                subscriptions=(Subscription(SUBSCRIPTION, EVENT_TYPE, Lane.DURABLE, on_payment),),
            )
        ]
    )
