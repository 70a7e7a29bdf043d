"""What every operator action works on: the stack's topology, the injected clients and clock, and what
several actions share (the tenants, an event's row, the repair message)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

from botocore.exceptions import ClientError

from outbox import clock as engine_clock
from outbox import entropy, keys
from outbox.audit.table import AuditLog
from outbox.catalog import Catalog
from outbox.exceptions import OperationRefusedError
from outbox.inbox import InboxReader
from outbox.messages import relay_body, repair_attributes
from outbox.ops.topology import Topology
from outbox.pairs import DeployedCatalog, Placement
from outbox.query import read_tenants
from outbox.subscriptions import Subscription
from outbox.tracing import repair_span, trace_context_of_image

# What a long action reports as it goes: what it is doing, how far it is, and of how much (None: unknown).
ProgressCallback = Callable[[str, int, int | None], None]


def no_progress(_step: str, _done: int, _total: int | None) -> None:
    """The default: report nothing."""


class OperatorContext:
    """The clients (AWS, or the local runtime) and the clock of the operator's actions. The clients are
    plain attributes, read at each call: a test or the simulator may swap one."""

    def __init__(
        self,
        topology: Topology,
        *,
        dynamodb: Any,
        sqs: Any,
        catalog: Catalog,
        pipes: Any | None = None,
        cloudwatch: Any | None = None,
        clock: Callable[[], datetime] = engine_clock.now,
        sleep: Callable[[float], None] = engine_clock.sleep,
    ) -> None:
        self.topology = topology
        self.dynamodb = dynamodb
        self.sqs = sqs
        self.catalog = catalog
        self.pipes = pipes
        self.cloudwatch = cloudwatch
        self._clock = clock
        self._sleep = sleep
        # Told of each repair message right before it is sent (``publish``): (event id, the pairs it names, the
        # repair that sends it). A caller that must know what a repair sent, even one cut short, listens here.
        self.sending: list[Callable[[str, list[str], str], None]] = []

    def now(self) -> datetime:
        """The operations' clock: the system clock, or the local runtime's virtual one."""
        return self._clock()

    def sleep(self, seconds: float) -> None:
        self._sleep(seconds)

    @property
    def audit(self) -> AuditLog | None:
        """Anchors and tamper findings; None for a stack without an audit table."""
        table = self.topology.audit_table
        return AuditLog(table, client=self.dynamodb) if table else None

    @property
    def inbox(self) -> InboxReader:
        """The inbox's claims and dead letters, read through the current DynamoDB client."""
        return InboxReader(self.topology.inbox_table, client=self.dynamodb)

    def tenants(self) -> list[str]:
        return read_tenants(self.dynamodb, self.topology.events_table)

    def require_tenant(self, tenant: str) -> str:
        if not keys.is_valid_tenant(tenant):
            raise OperationRefusedError(f"{tenant!r} is not a tenant name ({keys.TENANT_PATTERN.pattern})")
        if tenant not in self.tenants():
            raise OperationRefusedError(f"unknown tenant {tenant!r}: it has never emitted an event")
        return tenant

    @property
    def deployed(self) -> DeployedCatalog:
        """What the deployed catalog does with each pair (``outbox.pairs``): every repair and status asks it."""
        return DeployedCatalog(self.catalog.registry)

    def placement(self, tenant: str, seq: int, event_type: str | None, subscription: str) -> Placement:
        """The route of the pair (``tenant``'s event at ``seq``, ``subscription``) under the deployed catalog;
        the event's row is read only when its type is not known or its time decides (``ordered_since``)."""
        if event_type is None:
            event_type = self.event_image(tenant, seq)["type"]["S"]
        return self.deployed.place(
            subscription, event_type, lambda: str(self.event_image(tenant, seq)["occurred_at"]["S"])
        )

    def require_subscription(self, name: str) -> Subscription:
        """The catalog's subscription called ``name``; refused, naming where to look, when there is none."""
        for subscription in self.catalog.registry.subscriptions:
            if subscription.name == name:
                return subscription
        raise OperationRefusedError(f"unknown subscription {name!r}: outbox catalog lists them")

    def event_image(self, tenant: str, seq: int) -> dict[str, Any]:
        """The event row at ``seq`` of ``tenant``'s log, as the stream would carry it."""
        item: dict[str, Any] | None = self.dynamodb.get_item(
            TableName=self.topology.events_table, Key=keys.event_key(tenant, seq), ConsistentRead=True
        ).get("Item")
        if item is None:
            raise OperationRefusedError(f"tenant {tenant!r} has no event at seq {seq}")
        return item

    def message_counts(self, queue_url: str) -> tuple[int, int]:
        """A queue's visible and in-flight messages (approximate, as SQS counts them)."""
        attributes = self.sqs.get_queue_attributes(
            QueueUrl=queue_url,
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        )["Attributes"]
        return int(attributes["ApproximateNumberOfMessages"]), int(attributes["ApproximateNumberOfMessagesNotVisible"])

    def publish(
        self, image: dict[str, Any], tenant: str, dedup_id: str, *, targets: Iterable[str], repair: str
    ) -> None:
        """Send an event row as the relay pipe does (the raw image, group = tenant), naming the subscriptions
        it is for: each has a DEAD-turned-REPLAYING, or a REPLAYING, claim row that vouches for it. ``repair``
        (replay, reconcile) names the span that sends it, linked to the event's own trace context."""
        targets = list(targets)
        event_id = str(image.get("event_id", {}).get("S", ""))
        attributes = {"tenant": tenant, "event.id": event_id, "subscriptions": ",".join(targets)}
        for listener in self.sending:
            listener(event_id, targets, repair)
        with repair_span(repair, attributes, trace_context_of_image(image)):
            self.sqs.send_message(
                QueueUrl=self.topology.durable_queue_url,
                MessageBody=relay_body(image),
                MessageGroupId=tenant,
                MessageDeduplicationId=dedup_id[:128],
                MessageAttributes=repair_attributes(targets),
            )


def resolved_letter_update(context: OperatorContext, key: dict[str, Any], decision: str) -> dict[str, Any]:
    """The update that resolves the dead letter at ``key`` with an operator's ``decision`` (who, when, why),
    refused by DynamoDB if it is gone or was resolved meanwhile."""
    return {
        "TableName": context.topology.inbox_table,
        "Key": key,
        "UpdateExpression": "SET resolved = :decision",
        "ConditionExpression": "attribute_exists(pk) AND attribute_not_exists(resolved)",
        "ExpressionAttributeValues": {":decision": {"S": decision[:2000]}},
    }


def transact_or_refuse(context: OperatorContext, items: list[dict[str, Any]], refusal: str) -> None:
    """Write ``items`` in one transaction; if a condition refuses it (what it acts on changed meanwhile),
    nothing was written, and the operator is told ``refusal``."""
    try:
        context.dynamodb.transact_write_items(TransactItems=items)
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") != "TransactionCanceledException":
            raise
        raise OperationRefusedError(refusal) from exc


def repair_dedup_id(repair: str, event_id: str) -> str:
    """A repair message's deduplication id, new for every send: SQS must not drop the message of a repair run
    again after an interruption as a duplicate of the first run's."""
    return f"{repair}-{event_id}-{entropy.current().repair_token()}"
