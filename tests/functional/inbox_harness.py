"""The durable consumer wired to moto: FIFO queue with its DLQ, inbox, events table, the local ESM.

Messages are published the way the relay pipe sends them (body = the raw NewImage, group = tenant,
dedup id = event id), so every test drives the handler with real SQS messages.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

__all__ = ["Harness", "Recorder", "WorkerCrash", "build_harness"]

import boto3

from outbox import Envelope, EventStore, writes
from outbox.catalog import Catalog, Module
from outbox.delivery.consumer import DurableConsumer
from outbox.inbox import Inbox
from outbox.local.clock import VirtualClock
from outbox.local.esm import SqsEventSourceMapping
from outbox.local.faults import WorkerCrash
from outbox.ops.context import OperatorContext
from outbox.ops.topology import Topology
from outbox.pairs.order import WakeUps
from outbox.subscriptions import Delivery, HandlerResult, Lane, Subscription, SubscriptionRegistry
from outbox_cdk.timing import durable_max_receive_count
from tests.functional.conftest import EVENTS_TABLE, ORDERS_TABLE, create_pk_sk_table

INBOX_TABLE = "inbox"
MAX_ATTEMPTS = 5
# The queue's redrive count is a transport backstop, derived as the stack derives it.
MAX_RECEIVE_COUNT = durable_max_receive_count(MAX_ATTEMPTS, 10)
FUNCTION_TIMEOUT = timedelta(seconds=60)
VISIBILITY_TIMEOUT = FUNCTION_TIMEOUT * 6


@dataclass
class Recorder:
    """Test subscriptions' handler: counts runs per (subscription, event) and writes one effect row each,
    committed atomically with the completion (so a double effect would be a second row)."""

    runs: dict[tuple[str, str], int] = field(default_factory=lambda: defaultdict(int))
    behaviours: dict[str, Callable[[Delivery], None]] = field(default_factory=dict)

    def handler(self, delivery: Delivery) -> HandlerResult:
        self.runs[(delivery.subscription, delivery.envelope.id)] += 1
        behaviour = self.behaviours.get(delivery.subscription)
        if behaviour is not None:
            behaviour(delivery)
        return HandlerResult(
            writes=[
                writes.put(
                    ORDERS_TABLE,
                    {"pk": f"EFFECT#{delivery.idempotency_key}", "sk": "EFFECT", "attempt": delivery.attempt},
                    condition="attribute_not_exists(pk)",
                )
            ]
        )

    def subscription(self, name: str, pattern: str = "*") -> Subscription:
        return Subscription(name=name, pattern=pattern, lane=Lane.DURABLE, handler=self.handler)


@dataclass
class Harness:
    dynamodb: Any
    sqs: Any
    clock: VirtualClock
    store: EventStore
    inbox: Inbox
    queue_url: str
    dlq_url: str
    recorder: Recorder
    esm: SqsEventSourceMapping
    consumer: DurableConsumer

    def emit(self, event_type: str = "order.created", tenant: str = "acme", **payload: Any) -> Envelope:
        envelope = self.store.emit(event_type, payload or {"n": 1}, tenant=tenant, actor="test")
        self.publish(envelope)
        return envelope

    def publish(self, envelope: Envelope, dedup_id: str | None = None) -> None:
        self.send(json.dumps(envelope.to_item()), envelope.tenant, dedup_id or envelope.id)

    def send(self, body: str, group: str, dedup_id: str) -> None:
        self.sqs.send_message(
            QueueUrl=self.queue_url, MessageBody=body, MessageGroupId=group, MessageDeduplicationId=dedup_id
        )

    def runs(self, subscription: str, envelope: Envelope) -> int:
        return self.recorder.runs[(subscription, envelope.id)]

    def effects(self, subscription: str, envelope: Envelope) -> int:
        response = self.dynamodb.query(
            TableName=ORDERS_TABLE,
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": {"S": f"EFFECT#{envelope.id}:{subscription}"}},
        )
        return int(response["Count"])

    def claim_status(self, subscription: str, envelope: Envelope) -> str | None:
        record = self.inbox.read_claim(envelope.id, subscription)
        return None if record is None else record.status

    def dead_letters(self, tenant: str = "acme") -> list[dict[str, Any]]:
        response = self.dynamodb.query(
            TableName=INBOX_TABLE,
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": {"S": f"TENANT#{tenant}#DEAD"}},
        )
        items: list[dict[str, Any]] = response["Items"]
        return items

    def poison_pills(self) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.dynamodb.scan(
            TableName=INBOX_TABLE,
            FilterExpression="kind = :poison",
            ExpressionAttributeValues={":poison": {"S": "POISON"}},
        )["Items"]
        return items

    def queue_depth(self, url: str) -> int:
        attributes = self.sqs.get_queue_attributes(
            QueueUrl=url,
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        )["Attributes"]
        return int(attributes["ApproximateNumberOfMessages"]) + int(attributes["ApproximateNumberOfMessagesNotVisible"])

    def dlq_bodies(self) -> list[str]:
        """Read (and leave) what sits in the DLQ."""
        messages = self.sqs.receive_message(QueueUrl=self.dlq_url, MaxNumberOfMessages=10, VisibilityTimeout=0)
        return [message["Body"] for message in messages.get("Messages", [])]


def create_fifo_pair(sqs: Any) -> tuple[str, str]:
    dlq_url = sqs.create_queue(QueueName="durable-dlq.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    queue_url = sqs.create_queue(
        QueueName="durable.fifo",
        Attributes={
            "FifoQueue": "true",
            "ContentBasedDeduplication": "false",
            "VisibilityTimeout": str(int(VISIBILITY_TIMEOUT.total_seconds())),
            "RedrivePolicy": json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": str(MAX_RECEIVE_COUNT)}),
        },
    )["QueueUrl"]
    return queue_url, dlq_url


def build_harness(
    subscriptions: Callable[[Recorder], Iterable[Subscription]], clock: VirtualClock, **consumer_options: Any
) -> Harness:
    """Inside an active ``mock_aws`` (with the AWS fixes on ``clock``): create everything and wire the
    consumer with the given subscriptions (and ``consumer_options``, the WORKFLOW lane's starter, say)."""
    dynamodb = boto3.client("dynamodb", region_name="us-east-1")
    sqs = boto3.client("sqs", region_name="us-east-1")
    for table in (EVENTS_TABLE, ORDERS_TABLE, INBOX_TABLE):
        create_pk_sk_table(dynamodb, table, stream=table == EVENTS_TABLE)
    queue_url, dlq_url = create_fifo_pair(sqs)
    store = EventStore(EVENTS_TABLE, client=dynamodb, clock=clock.now_ms, sleep=clock.sleep, unchecked=True)
    inbox = Inbox(INBOX_TABLE, client=dynamodb, max_attempts=MAX_ATTEMPTS, clock=clock)
    recorder = Recorder()
    wake_ups = WakeUps(queue_url, sqs=sqs, dynamodb=dynamodb, events_table=EVENTS_TABLE)
    consumer = DurableConsumer(
        SubscriptionRegistry.of(subscriptions(recorder)), inbox, store, wake_ups=wake_ups, **consumer_options
    )
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    esm = SqsEventSourceMapping(
        sqs=sqs,
        queue_url=queue_url,
        queue_arn=queue_arn,
        handler=consumer.handle,
        function_name="durable-consumer",
        function_timeout=FUNCTION_TIMEOUT,
        visibility_timeout=VISIBILITY_TIMEOUT,
        clock=clock,
    )
    return Harness(dynamodb, sqs, clock, store, inbox, queue_url, dlq_url, recorder, esm, consumer)


def operator_context(h: Harness, subscriptions: Iterable[Subscription] | None = None) -> OperatorContext:
    """The operator's tools on the harness's tables and queue, with a catalog of ``subscriptions`` (by default
    the consumer's: pass fewer to stand for a deploy that removed some)."""
    topology = Topology(
        events_table=EVENTS_TABLE,
        inbox_table=INBOX_TABLE,
        durable_queue_url=h.queue_url,
        durable_dlq_url=h.dlq_url,
        relay_dlq_url=h.dlq_url,
    )
    deployed = tuple(h.consumer.registry.subscriptions if subscriptions is None else subscriptions)
    catalog = Catalog([Module(name="app", code=(), subscriptions=deployed)])
    return OperatorContext(topology, dynamodb=h.dynamodb, sqs=h.sqs, catalog=catalog, clock=h.clock)


# What the make_harness fixture (conftest) gives: subscriptions in, a wired harness out.
HarnessFactory = Callable[[Callable[[Recorder], Iterable[Subscription]]], Harness]


def one_subscription(recorder: Recorder) -> list[Subscription]:
    """The smallest catalog: one recording DURABLE subscription on every event."""
    return [recorder.subscription("shipping.book")]
