"""Payload schemas of the commerce module's events. Events are self-contained: a consumer never needs
to read the order back (it may not be visible yet: stream order is per item only)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class LineItem(BaseModel):
    model_config = ConfigDict(extra="forbid")

    sku: str = Field(min_length=1, max_length=64)
    quantity: int = Field(ge=1, le=1000)
    unit_price_cents: int = Field(ge=0)


class OrderCreatedV1(BaseModel):
    """``order.created`` as version 1 stored it, before orders came from more than the web shop. Kept as it
    was: events of it stay in the log, and catalog.json holds this schema to its record."""

    model_config = ConfigDict(extra="forbid")

    order_id: str = Field(min_length=1, max_length=64)
    buyer_email: str = Field(pattern=r"^[^@\s]+@[^@\s]+$")
    items: list[LineItem] = Field(min_length=1)
    total_cents: int = Field(ge=0)
    currency: str = Field(pattern=r"^[A-Z]{3}$")


Channel = Literal["web", "phone", "marketplace"]


class OrderCreated(OrderCreatedV1):
    """``order.created`` version 2: version 1 and where the order was taken (a new required field, hence
    the version). Version 1 may change only as the compatibility check allows: its events stay in the log."""

    channel: Channel


def order_created_v1_to_v2(payload: dict[str, Any]) -> dict[str, Any]:
    """Every order of version 1 was taken by the web shop, the only channel there was."""
    return {**payload, "channel": "web"}


class PaymentCompleted(BaseModel):
    model_config = ConfigDict(extra="forbid")

    order_id: str
    payment_id: str = Field(min_length=1, max_length=64)
    amount_cents: int = Field(ge=0)
    currency: str = Field(pattern=r"^[A-Z]{3}$")
    buyer_email: str
    pet_tag_id: str = Field(min_length=1, max_length=64)
    shipping_address: str = Field(min_length=1)


class ShipmentBooked(BaseModel):
    model_config = ConfigDict(extra="forbid")

    order_id: str
    carrier_reference: str
    buyer_email: str


class ShipmentLabelled(BaseModel):
    """The carrier's label of a booked shipment is printed (the shipping workflow, modules.commerce.shipping)."""

    model_config = ConfigDict(extra="forbid")

    order_id: str
    carrier_reference: str
    label: str
