"""A consumer's queue: redriven to an alarmed dead-letter queue, encrypted, TLS only."""

from __future__ import annotations

from typing import Final

from aws_cdk import Duration
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from outbox_cdk.alarmed_dlq import AlarmedDeadLetterQueue
from outbox_cdk.queue_defaults import encrypted_queue
from outbox_cdk.timing import QUEUE_RETENTION_DAYS

# As long as SQS allows: if a consumer is down for days, work waits here rather than expire. The
# age-of-oldest-message alarms fire long before this matters.
QUEUE_RETENTION: Final = Duration.days(QUEUE_RETENTION_DAYS)


class RedrivenQueue(Construct):
    """``self.queue`` feeds one consumer; ``self.dead_letter_queue`` catches what failed
    ``self.max_receive_count`` receives, and alarms on its first message.

    - The visibility timeout is derived in ``timing`` from the consumer's timeout, never typed here.
    - Encrypted at rest (SSE-SQS, or SSE-KMS with ``encryption_key``, the DLQ with the same key) and TLS
      only, like every queue of the app (``queue_defaults``).
    - The DLQ has the queue's type: a FIFO queue's DLQ must be FIFO (SQS rejects a standard one), and a
      standard queue's must be standard.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        alarm_topic: sns.ITopic,
        fifo: bool,
        visibility_timeout_seconds: int,
        dead_letter_description: str,
        max_receive_count: int,
        encryption_key: kms.IKey | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        self.max_receive_count = max_receive_count
        self.visibility_timeout_seconds = visibility_timeout_seconds
        self.dead_letters = AlarmedDeadLetterQueue(
            self,
            "DeadLetters",
            alarm_topic=alarm_topic,
            fifo=fifo,
            description=dead_letter_description,
            encryption_key=encryption_key,
        )
        self.dead_letter_queue: sqs.IQueue = self.dead_letters.queue
        self.queue = encrypted_queue(
            self,
            "Queue",
            fifo=fifo,
            visibility_timeout=Duration.seconds(visibility_timeout_seconds),
            retention_period=QUEUE_RETENTION,
            dead_letter_queue=sqs.DeadLetterQueue(
                queue=self.dead_letter_queue, max_receive_count=self.max_receive_count
            ),
            # Off on FIFO: the relay sets the event id as the deduplication id, so a re-sent event is
            # dropped within SQS's 5-minute window even if its rendering ever differed.
            content_based_deduplication=False if fifo else None,
            encryption_key=encryption_key,
        )
