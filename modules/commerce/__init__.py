"""The commerce module: orders and payments. A completed payment fans out to four durable subscriptions
(storefront mirror, shipment booking, buyer notification, pet tag), each exactly once; a booked shipment's label is
a workflow (``modules.commerce.shipping``: ask the carrier, wait the night, announce it)."""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from typing import Any

from modules.commerce.events import (
    Channel,
    LineItem,
    OrderCreated,
    OrderCreatedV1,
    PaymentCompleted,
    ShipmentBooked,
    ShipmentLabelled,
    order_created_v1_to_v2,
)
from modules.services import Services
from outbox import (
    CallerWriteConditionFailedError,
    Delivery,
    Effects,
    EventStore,
    FollowUp,
    HandlerResult,
    Lane,
    OutboxError,
    Subscription,
    TerminalError,
    Upcaster,
    canonical_json,
    writes,
)
from outbox.catalog import EntitySpec, EventTypeSpec, Module
from outbox.workflows import workflow

logger = logging.getLogger(__name__)

# Payments above this are refused by the INLINE screening: fail-closed, the request fails, nothing commits.
SCREENING_LIMIT_CENTS = 1_000_000


class OrderConflictError(OutboxError):
    """The same order id was placed again with different content."""


class OrderNotFoundError(OutboxError):
    pass


class PaymentMismatchError(OutboxError):
    pass


@dataclass(frozen=True)
class CommandResult:
    """``created`` is False when the same command had already been applied (the existing result)."""

    entity_id: str
    created: bool
    event_id: str | None = None


def _digest(payload: dict[str, Any]) -> str:
    return hashlib.sha256(canonical_json(payload)).hexdigest()


def _order_digests(payload: dict[str, Any]) -> set[str]:
    """The digests the same order may be stored under: a web order placed before ``order.created`` version 2
    was digested without its channel, and placing it again must still find it the same."""
    digests = {_digest(payload)}
    if payload["channel"] == "web":
        digests.add(_digest({name: value for name, value in payload.items() if name != "channel"}))
    return digests


@dataclass
class Commerce:
    data_table: str
    services: Services

    # -- keys (entity first, so row changes are typed by entity) -------------------------------------

    @staticmethod
    def order_key(tenant: str, order_id: str) -> dict[str, str]:
        return {"pk": f"ORDER#{tenant}#{order_id}", "sk": "ORDER"}

    # -- commands ------------------------------------------------------------------------------------

    def place_order(
        self,
        store: EventStore,
        *,
        tenant: str,
        actor: str,
        order_id: str,
        buyer_email: str,
        items: list[dict[str, Any]],
        currency: str = "EUR",
        channel: Channel = "web",
    ) -> CommandResult:
        """Create the order and its ``order.created`` event in one transaction. Placing the same order
        again returns the existing result; placing different content under the same id fails."""
        lines = [LineItem.model_validate(item) for item in items]
        payload = OrderCreated(
            order_id=order_id,
            buyer_email=buyer_email,
            items=lines,
            total_cents=sum(line.quantity * line.unit_price_cents for line in lines),
            currency=currency,
            channel=channel,
        ).model_dump()
        order = {
            **self.order_key(tenant, order_id),
            "tenant": tenant,
            "status": "PLACED",
            "buyer_email": buyer_email,
            "total_cents": payload["total_cents"],
            "currency": currency,
            "command_digest": _digest(payload),
        }
        try:
            envelope = store.emit(
                "order.created",
                payload,
                tenant=tenant,
                actor=actor,
                extra_writes=[writes.put(self.data_table, order, condition="attribute_not_exists(pk)")],
            )
        except CallerWriteConditionFailedError:
            existing = self._order(store, tenant, order_id)
            if existing is not None and existing["command_digest"]["S"] in _order_digests(payload):
                return CommandResult(order_id, created=False)
            raise OrderConflictError(f"order {order_id!r} already exists with different content") from None
        return CommandResult(order_id, created=True, event_id=envelope.id)

    def complete_payment(
        self,
        store: EventStore,
        *,
        tenant: str,
        actor: str,
        order_id: str,
        payment_id: str,
        amount_cents: int,
        pet_tag_id: str,
        shipping_address: str,
    ) -> CommandResult:
        """Record the payment, mark the order paid and emit ``payment.completed``, atomically."""
        order = self._order(store, tenant, order_id)
        if order is None:
            raise OrderNotFoundError(f"order {order_id!r} of tenant {tenant!r} does not exist")
        if int(order["total_cents"]["N"]) != amount_cents:
            raise PaymentMismatchError(f"payment of {amount_cents} for an order of {order['total_cents']['N']}")
        payload = PaymentCompleted(
            order_id=order_id,
            payment_id=payment_id,
            amount_cents=amount_cents,
            currency=order["currency"]["S"],
            buyer_email=order["buyer_email"]["S"],
            pet_tag_id=pet_tag_id,
            shipping_address=shipping_address,
        ).model_dump()
        payment = {"pk": f"PAYMENT#{tenant}#{payment_id}", "sk": "PAYMENT", "order_id": order_id, **payload}
        try:
            envelope = store.emit(
                "payment.completed",
                payload,
                tenant=tenant,
                actor=actor,
                extra_writes=[
                    writes.put(self.data_table, payment, condition="attribute_not_exists(pk)"),
                    writes.update(
                        self.data_table,
                        self.order_key(tenant, order_id),
                        "SET #status = :paid, payment_id = :payment",
                        condition="#status = :placed",
                        names={"#status": "status"},
                        values={":paid": "PAID", ":placed": "PLACED", ":payment": payment_id},
                    ),
                ],
            )
        except CallerWriteConditionFailedError:
            if order.get("payment_id", {}).get("S") == payment_id:
                return CommandResult(payment_id, created=False)
            raise
        return CommandResult(payment_id, created=True, event_id=envelope.id)

    def _order(self, store: EventStore, tenant: str, order_id: str) -> dict[str, Any] | None:
        response = store.client.get_item(
            TableName=self.data_table, Key=writes.typed(self.order_key(tenant, order_id)), ConsistentRead=True
        )
        item: dict[str, Any] | None = response.get("Item")
        return item

    # -- subscriptions -------------------------------------------------------------------------------

    def screen_payment(self, delivery: Delivery) -> HandlerResult:
        """INLINE: refuse suspicious payments before anything commits; record the screening with the event."""
        payment = PaymentCompleted.model_validate(delivery.envelope.payload)
        if payment.amount_cents > SCREENING_LIMIT_CENTS:
            raise TerminalError(f"payment {payment.payment_id} of {payment.amount_cents} exceeds the screening limit")
        screening = {"pk": f"SCREENING#{delivery.envelope.tenant}#{payment.payment_id}", "sk": "SCREENING"}
        return HandlerResult(writes=[writes.put(self.data_table, {**screening, "verdict": "PASSED"})])

    def log_order(self, delivery: Delivery) -> None:
        """LOCAL: best effort, after the commit, in the caller's process."""
        logger.info("order %s placed for tenant %s", delivery.envelope.payload["order_id"], delivery.envelope.tenant)

    def mirror_order(self, delivery: Delivery) -> None:
        payment = PaymentCompleted.model_validate(delivery.envelope.payload)
        self.services.storefront.call(
            "orders",
            delivery.idempotency_key,
            {"order_id": payment.order_id, "status": "PAID"},
            headers=delivery.trace_headers(),
        )

    def book_shipment(self, delivery: Delivery) -> HandlerResult:
        payment = PaymentCompleted.model_validate(delivery.envelope.payload)
        booking = self.services.carrier.call(
            "shipments",
            delivery.idempotency_key,
            {"order_id": payment.order_id, "address": payment.shipping_address},
            headers=delivery.trace_headers(),
        )
        booked = ShipmentBooked(
            order_id=payment.order_id, carrier_reference=str(booking["reference"]), buyer_email=payment.buyer_email
        )
        return HandlerResult(follow_up=FollowUp("shipment.booked", booked.model_dump()))

    def notify_buyer(self, delivery: Delivery) -> None:
        payment = PaymentCompleted.model_validate(delivery.envelope.payload)
        self.services.notifier.call(
            "emails",
            delivery.idempotency_key,
            {"to": payment.buyer_email, "template": "payment-received"},
            headers=delivery.trace_headers(),
        )

    def notify_shipment(self, delivery: Delivery) -> None:
        shipment = ShipmentBooked.model_validate(delivery.envelope.payload)
        self.services.notifier.call(
            "emails",
            delivery.idempotency_key,
            {"to": shipment.buyer_email, "template": "shipment-booked", "tracking": shipment.carrier_reference},
            headers=delivery.trace_headers(),
        )

    def mark_pet_tag_ordered(self, delivery: Delivery) -> HandlerResult:
        payment = PaymentCompleted.model_validate(delivery.envelope.payload)
        tag = {"pk": f"PETTAG#{delivery.envelope.tenant}#{payment.pet_tag_id}", "sk": "PETTAG"}
        return HandlerResult(
            writes=[
                writes.update(
                    self.data_table,
                    tag,
                    "SET #status = :ordered, order_id = :order",
                    names={"#status": "status"},
                    values={":ordered": "ORDERED", ":order": payment.order_id},
                )
            ]
        )

    def project_sales(self, delivery: Delivery) -> HandlerResult:
        """Atomic completion: the counter moves in the same transaction as the COMPLETED mark, so a
        redelivery can never count an order twice."""
        order = OrderCreated.model_validate(delivery.envelope.payload)  # version 2, whatever was stored
        return HandlerResult(
            writes=[
                writes.update(
                    self.data_table,
                    {"pk": f"SALES#{delivery.envelope.tenant}", "sk": "TOTALS"},
                    "ADD orders :one, revenue_cents :total, #channel :one",
                    names={"#channel": f"orders_{order.channel}"},
                    values={":one": 1, ":total": order.total_cents},
                )
            ]
        )

    def journal_order(self, delivery: Delivery) -> HandlerResult:
        """The tenant's order journal: a line per order, appended in the order the orders were placed. The
        head's condition refuses a line older than the last one, so the journal needs its events in seq
        order: the subscription is ordered, and a redriven or replayed order waits for its predecessors."""
        envelope = delivery.envelope
        order = OrderCreated.model_validate(envelope.payload)
        journal = f"JOURNAL#{envelope.tenant}"
        return HandlerResult(
            writes=[
                writes.update(
                    self.data_table,
                    {"pk": journal, "sk": "HEAD"},
                    "SET last_seq = :seq ADD #lines :one",
                    condition="attribute_not_exists(last_seq) OR last_seq < :seq",
                    names={"#lines": "lines"},
                    values={":seq": envelope.seq, ":one": 1},
                ),
                writes.put(
                    self.data_table,
                    {
                        "pk": journal,
                        "sk": f"LINE#{envelope.seq:020d}",
                        "order_id": order.order_id,
                        "total_cents": order.total_cents,
                    },
                ),
            ]
        )

    def module(self) -> Module:
        return Module(
            name="commerce",
            code=("modules.commerce", "modules.commerce.shipping"),
            event_types=(
                EventTypeSpec(
                    "order.created",
                    OrderCreated,
                    "An order was placed (entity and event together)",
                    version=2,
                    upcasters=(Upcaster(1, OrderCreatedV1, order_created_v1_to_v2),),
                ),
                EventTypeSpec("payment.completed", PaymentCompleted, "A payment settled an order"),
                EventTypeSpec("shipment.booked", ShipmentBooked, "The carrier accepted the shipment"),
                EventTypeSpec("shipment.labelled", ShipmentLabelled, "The carrier printed the shipment's label"),
            ),
            entities=(
                EntitySpec("ORDER", "Orders"),
                EntitySpec("JOURNAL", "Order journal per tenant, in the order orders were placed"),
                EntitySpec("PAYMENT", "Payments"),
                EntitySpec("PETTAG", "Pet tags"),
                EntitySpec("SALES", "Sales projection per tenant"),
                EntitySpec("SCREENING", "Payment screening verdicts"),
            ),
            subscriptions=(
                Subscription("commerce.screen_payment", "payment.completed", Lane.INLINE, self.screen_payment),
                Subscription("commerce.log_order", "order.created", Lane.LOCAL, self.log_order),
                Subscription("storefront.mirror_order", "payment.completed", Lane.DURABLE, self.mirror_order),
                Subscription("shipping.book_shipment", "payment.completed", Lane.DURABLE, self.book_shipment),
                Subscription("notify.buyer", "payment.completed", Lane.DURABLE, self.notify_buyer),
                Subscription("notify.shipment_booked", "shipment.booked", Lane.DURABLE, self.notify_shipment),
                # Ask for the label, wait the night for it, announce it: a durable execution per event.
                Subscription(
                    "shipping.print_label",
                    "shipment.booked",
                    Lane.WORKFLOW,
                    workflow("modules.commerce.shipping:print_label"),
                ),
                # Their only effects are the writes they return: no lease, one request each (Effects).
                Subscription(
                    "pet_tag.mark_ordered",
                    "payment.completed",
                    Lane.DURABLE,
                    self.mark_pet_tag_ordered,
                    effects=Effects.DYNAMODB,
                ),
                Subscription(
                    "sales.project_order", "order.created", Lane.DURABLE, self.project_sales, effects=Effects.DYNAMODB
                ),
                # Each tenant's orders in seq order, each once (outbox.pairs.order).
                Subscription(
                    "sales.journal_order",
                    "order.created",
                    Lane.DURABLE,
                    self.journal_order,
                    effects=Effects.DYNAMODB,
                    ordered=True,
                ),
            ),
        )
