"""The durable lane's queue: SQS FIFO, one message group per tenant, redriven to an alarmed FIFO DLQ."""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from constructs import Construct

from outbox_cdk.redriven_queue import QUEUE_RETENTION, RedrivenQueue
from outbox_cdk.timing import (
    CONSUMER_BATCHING_WINDOW_SECONDS,
    CONSUMER_TIMEOUT_SECONDS,
    DURABLE_MAX_RECEIVE_COUNT,
    visibility_timeout_seconds,
)

__all__ = ["QUEUE_RETENTION", "DurableQueue"]


class DurableQueue(RedrivenQueue):
    """``self.queue`` carries domain events to the durable consumer, one message group per tenant.

    Content-based deduplication is off: the relay sets the event id as the deduplication id. The
    visibility timeout leaves a live handler's inbox lease alone (``timing``). Its DLQ is a transport
    backstop: the inbox's claims decide when work is dead and acknowledge it with a dead-letter row, so a
    message reaches the DLQ only when the consumer could not process it at all (``timing``).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        alarm_topic: sns.ITopic,
        consumer_timeout_seconds: int = CONSUMER_TIMEOUT_SECONDS,
        encryption_key: kms.IKey | None = None,
        senders: Sequence[iam.IRole] = (),
    ) -> None:
        super().__init__(
            scope,
            construct_id,
            alarm_topic=alarm_topic,
            encryption_key=encryption_key,
            senders=senders,
            fifo=True,
            visibility_timeout_seconds=visibility_timeout_seconds(
                consumer_timeout_seconds, CONSUMER_BATCHING_WINDOW_SECONDS
            ),
            dead_letter_description="domain events the durable consumer could not process at all",
            max_receive_count=DURABLE_MAX_RECEIVE_COUNT,
        )
