"""Wake-ups: the message that puts a deferred event of an ordered subscription back on the durable queue once it
may run (``outbox.pairs.order``). Also importable as ``outbox.pairs.order.WakeUps``."""

from __future__ import annotations

import hashlib
from typing import Any, Protocol

from outbox import keys
from outbox.exceptions import OutboxError
from outbox.messages import relay_body, repair_attributes
from outbox.observing import AROUND, observed

__all__ = ["Waiting", "WakeUps"]


class Waiting(Protocol):
    """A deferred event as a wake-up needs it (``outbox.pairs.order.Deferred``)."""

    @property
    def tenant(self) -> str: ...
    @property
    def subscription(self) -> str: ...
    @property
    def seq(self) -> int: ...
    @property
    def event_id(self) -> str: ...


class WakeUps:
    """Sends a deferred event back to the durable queue once it may run: its event row as the relay sends it,
    for the one subscription it waits in (a repair message), in its tenant's group.

    The deduplication id is the same for the same (event, subscription, watermark): a wake-up sent twice (a
    redelivery of the message whose completion sent it) is one message for SQS's five minutes, and a later
    duplicate finds the pair done."""

    def __init__(self, queue_url: str, *, sqs: Any, dynamodb: Any, events_table: str) -> None:
        self.queue_url = queue_url
        self.sqs = sqs
        self.dynamodb = dynamodb
        self.events_table = events_table

    @observed(AROUND["wake"])
    def send(self, deferred: Waiting, applied_seq: int) -> None:
        item = self.dynamodb.get_item(
            TableName=self.events_table, Key=keys.event_key(deferred.tenant, deferred.seq), ConsistentRead=True
        ).get("Item")
        if item is None:  # the log lost a row it had: the chain check reports it; nothing to send
            raise OutboxError(f"tenant {deferred.tenant!r} has no event at seq {deferred.seq} to wake")
        identity = f"{deferred.event_id}:{deferred.subscription}:{applied_seq}"
        self.sqs.send_message(
            QueueUrl=self.queue_url,
            MessageBody=relay_body(item),
            MessageGroupId=deferred.tenant,
            MessageDeduplicationId="wake-" + hashlib.sha256(identity.encode()).hexdigest()[:64],
            MessageAttributes=repair_attributes([deferred.subscription]),
        )
