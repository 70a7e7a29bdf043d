"""The application both consumers run in the first-batch comparison (``make bench``, section 3).

A user's payload model and what their subscription does with a payment: the same module under the engine's
durable consumer (``engine_app``) and under the Powertools Idempotency handler (``idempotent_app_handler``),
so each cold start carries the same user code and the ratio is the consumer's, not the application's.
It imports neither the engine nor Powertools.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

EVENT_TYPE = "bench.payment_completed"


class LineItem(BaseModel):
    sku: str
    quantity: int
    unit_price_cents: int


class PaymentCompleted(BaseModel):
    order_id: str
    payment_id: str
    amount_cents: int
    currency: str
    buyer_email: str
    items: list[LineItem]
    shipping_address: str


def check_payment(payload: Mapping[str, Any]) -> PaymentCompleted:
    """Parse the payment and refuse one whose lines do not add up (a handler that writes nothing)."""
    payment = PaymentCompleted.model_validate(dict(payload))
    lines = sum(item.quantity * item.unit_price_cents for item in payment.items)
    if lines > payment.amount_cents:
        raise ValueError(f"payment {payment.payment_id}: lines {lines} exceed the amount {payment.amount_cents}")
    return payment


def sample_payload(n: int) -> dict[str, Any]:
    """About the size of the example application's ``payment.completed`` payload."""
    return {
        "order_id": f"order-{n:06d}",
        "payment_id": f"pay-{n:06d}",
        "amount_cents": 1500 + n,
        "currency": "EUR",
        "buyer_email": f"buyer-{n}@example.com",
        "items": [{"sku": "pet-tag", "quantity": 2, "unit_price_cents": 750}],
        "shipping_address": f"{n} Main Street, Springfield",
    }
