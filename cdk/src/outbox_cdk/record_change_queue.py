"""The record-change (BEST_EFFORT) lane's queue: standard SQS, redriven to an alarmed standard DLQ."""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from constructs import Construct

from outbox_cdk.redriven_queue import RedrivenQueue
from outbox_cdk.timing import (
    RECORD_CHANGE_BATCHING_WINDOW_SECONDS,
    RECORD_CHANGE_CONSUMER_TIMEOUT_SECONDS,
    RECORD_CHANGE_MAX_RECEIVE_COUNT,
    visibility_timeout_seconds,
)


class RecordChangeQueue(RedrivenQueue):
    """``self.queue`` carries data-table row changes to the record-change consumer.

    Standard, not FIFO: row changes promise no order across items (a stream orders per item only), the
    lane promises none, and a standard queue has no message groups to block and scales its consumer
    further. Its DLQ is the SQS one only: a best-effort handler that keeps failing writes no dead-letter
    row; the message moves to the alarmed DLQ after ``max_receive_count`` receives.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        alarm_topic: sns.ITopic,
        consumer_timeout_seconds: int = RECORD_CHANGE_CONSUMER_TIMEOUT_SECONDS,
        encryption_key: kms.IKey | None = None,
        senders: Sequence[iam.IRole] = (),
    ) -> None:
        super().__init__(
            scope,
            construct_id,
            alarm_topic=alarm_topic,
            encryption_key=encryption_key,
            senders=senders,
            fifo=False,
            visibility_timeout_seconds=visibility_timeout_seconds(
                consumer_timeout_seconds, RECORD_CHANGE_BATCHING_WINDOW_SECONDS
            ),
            dead_letter_description="row changes the record-change consumer failed on every receive",
            max_receive_count=RECORD_CHANGE_MAX_RECEIVE_COUNT,
        )
