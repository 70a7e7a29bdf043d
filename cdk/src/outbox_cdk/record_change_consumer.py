"""The record-change consumer: the one dispatcher of the BEST_EFFORT lane, on the record-change queue."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from constructs import Construct

from outbox_cdk.lambda_defaults import ApplicationCode
from outbox_cdk.queue_consumer import DEFAULT_MAX_CONCURRENCY, QueueConsumer
from outbox_cdk.record_change_queue import RecordChangeQueue
from outbox_cdk.timing import (
    PERSISTENT_FAILURE_PERIODS,
    RECORD_CHANGE_BATCHING_WINDOW_SECONDS,
    RECORD_CHANGE_CONSUMER_TIMEOUT_SECONDS,
)

HANDLER: Final = "outbox.handlers.record_change_consumer.handler"
SERVICE_NAME: Final = "record-change-consumer"

# Powertools metrics the consumer publishes, one per record (outbox.best_effort.consumer.Metric).
ROW_CHANGE_METRICS: Final = ("RowChangesHandled", "UnmatchedRowChanges", "RowChangeFailures")
# A record whose processing raised: it fails as a batch item failure and comes back after the visibility timeout.
FAILURES_METRIC: Final = "RowChangeFailures"


class RecordChangeConsumer(QueueConsumer):
    """``self.function`` runs every matching BEST_EFFORT subscription on each row change of the source table.

    It may read and write the application's tables (best-effort handlers update projections) and nothing else:
    no events table (a row change is not an event, and a best-effort handler does not emit), no inbox
    (the lane keeps no claims and writes no dead-letter rows). A failed record is a batch item failure,
    retried by SQS and finally moved to the record-change queue's alarmed DLQ. ``self.failures_alarm`` fires
    before that, on records failing in three periods in a row; ``self.errors_alarm`` on a failed invocation.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        queue: RecordChangeQueue,
        data_tables: Sequence[dynamodb.ITable],
        application: ApplicationCode,
        alarm_topic: sns.ITopic,
        max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
        timeout_seconds: int = RECORD_CHANGE_CONSUMER_TIMEOUT_SECONDS,
        encryption_key: kms.IKey | None = None,
    ) -> None:
        super().__init__(
            scope,
            construct_id,
            queue=queue,
            handler=HANDLER,
            service_name=SERVICE_NAME,
            label="record-change consumer",
            description="Record-change consumer: runs every BEST_EFFORT subscription on data-table row changes",
            timeout_seconds=timeout_seconds,
            batching_window_seconds=RECORD_CHANGE_BATCHING_WINDOW_SECONDS,
            application=application,
            # Exactly the names outbox.settings.RecordChangeSettings reads.
            environment={},
            alarm_topic=alarm_topic,
            max_concurrency=max_concurrency,
            encryption_key=encryption_key,
        )
        # Best-effort handlers write their projections directly (each table's key, if any, with it).
        self.grant_data_tables(data_tables)
        minutes = int(self.failure_alarm_period.to_minutes())
        self.failures_alarm = self.persistent_failure_alarm(
            "FailuresAlarm",
            FAILURES_METRIC,
            f"The record-change consumer failed records in each of {PERSISTENT_FAILURE_PERIODS} periods of "
            f"{minutes} min in a row: a best-effort handler (or a record it cannot parse) fails on every receive, "
            f"and after {queue.max_receive_count} receives SQS moves the message to the record-change DLQ. One "
            "transient failure does not fire it; the queue-age alarm cannot see this (SQS leaves a message "
            "received 3+ times out of its age). See the runbook (the consumer's log).",
        )

    @property
    def alarms(self) -> list[cloudwatch.IAlarm]:
        return [self.errors_alarm, self.failures_alarm]
