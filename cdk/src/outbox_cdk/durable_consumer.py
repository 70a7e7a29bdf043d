"""The durable consumer: a Lambda on the durable FIFO queue that runs each DURABLE subscription once per event."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from constructs import Construct

from outbox.redaction import ErrorDetail
from outbox_cdk.alarms import alarm_above
from outbox_cdk.durable_queue import DurableQueue
from outbox_cdk.events_table import EventsTable
from outbox_cdk.grants import grant_items
from outbox_cdk.inbox_table import InboxTable
from outbox_cdk.lambda_defaults import ApplicationCode
from outbox_cdk.queue_consumer import (
    ALARM_PERIOD,
    BATCH_SIZE,
    DEFAULT_MAX_CONCURRENCY,
    MAX_MAX_CONCURRENCY,
    MIN_MAX_CONCURRENCY,
    QueueConsumer,
)
from outbox_cdk.timing import (
    CONSUMER_BATCHING_WINDOW_SECONDS,
    CONSUMER_TIMEOUT_SECONDS,
    MAX_ATTEMPTS,
    PERSISTENT_FAILURE_PERIODS,
)

__all__ = [
    "BATCH_SIZE",
    "CLAIM_METRICS",
    "CONSUMER_TIMEOUT_SECONDS",
    "DEAD_WORK_METRICS",
    "DEFAULT_MAX_CONCURRENCY",
    "HANDLER",
    "INBOX_ACTIONS",
    "MAX_MAX_CONCURRENCY",
    "MIN_MAX_CONCURRENCY",
    "ORDERED_INBOX_ACTIONS",
    "ORDERED_INBOX_CONDITIONS",
    "ORDERED_LOG_ACTIONS",
    "ORDER_PARTITION_PATTERN",
    "RETRIES_METRIC",
    "SERVICE_NAME",
    "DurableConsumer",
]

HANDLER: Final = "outbox.handlers.durable_consumer.handler"
SERVICE_NAME: Final = "durable-consumer"

# Powertools metrics the consumer publishes (outbox.delivery.consumer.Metric). Dead work ended in an inbox row
# an operator must look at; none of it reaches an SQS DLQ, so the DLQ alarms cannot see it.
CLAIM_METRICS: Final = (
    "Claims",
    "Completions",
    "ClaimSkips",
    "Retries",
    "LeasesLost",
    "UnmatchedEvents",
    "Deferrals",  # ordered subscriptions: an event put aside behind its predecessor,
    "RunAfterPredecessor",  # run right after it in the same invocation,
    "WakeUps",  # or sent back to the queue
    "NoTimeLeft",  # a pair not started for lack of time in the invocation: it comes back, no attempt spent
)
DEAD_WORK_METRICS: Final = ("DeadLetters", "Conflicts", "PoisonPills")
# One per failed attempt that will run again (outbox.delivery.consumer.Metric.RETRIES): what a failing handler
# produces while SQS's age metric no longer sees its message (docs/aws-behaviour.md R9.1).
RETRIES_METRIC: Final = "Retries"

# What the engine's Inbox calls on the inbox table (outbox.inbox.Inbox): a claim is one conditional UpdateItem,
# a release or a completion one more (or an Update item in the completion's transaction), a dead letter, a
# conflict, an unverifiable pair and a poison pill are PutItems (alone, or Put items of a transaction). It
# never reads a row by itself (a conditional write answers with the old row) and never deletes one: the TTL
# does. The operators' reads and repairs there are the runbook role's (outbox_cdk.runbook_role).
INBOX_ACTIONS: Final = ("dynamodb:PutItem", "dynamodb:UpdateItem")
# What ordered subscriptions add (outbox.pairs.order): the batch's watermarks, read in the BatchGetItem that reads
# its events, the queries of a watermark and of the deferred events, and the deferred row deleted in the completion's
# transaction; on the log, the query that finds a predecessor; and sending a deferred event back to the
# durable queue when it may run.
ORDERED_INBOX_ACTIONS: Final = ("dynamodb:BatchGetItem", "dynamodb:Query", "dynamodb:DeleteItem")
# ... and only on an ordered subscription's partitions of the inbox (outbox.keys.order_partition: its
# watermark, deferred and skipped events): a claim, a dead letter or a poison pill is never queried or
# deleted by the consumer, so a compromised consumer cannot delete the record of dead work.
ORDER_PARTITION_PATTERN: Final = "TENANT#*#ORDER#*"
ORDERED_INBOX_CONDITIONS: Final[dict[str, dict[str, Any]]] = {
    "ForAllValues:StringLike": {"dynamodb:LeadingKeys": [ORDER_PARTITION_PATTERN]},
    "Null": {"dynamodb:LeadingKeys": "false"},
}
ORDERED_LOG_ACTIONS: Final = ("dynamodb:Query",)


class DurableConsumer(QueueConsumer):
    """``self.function`` consumes the durable queue; ``self.errors_alarm`` and ``self.dead_work_alarms``
    fire on the first failed invocation and the first dead letter, conflict or poison pill, and
    ``self.retries_alarm`` on handlers that keep failing (retries in three periods in a row).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        queue: DurableQueue,
        events: EventsTable,
        inbox: InboxTable,
        data_tables: Sequence[dynamodb.ITable],
        application: ApplicationCode,
        alarm_topic: sns.ITopic,
        max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
        timeout_seconds: int = CONSUMER_TIMEOUT_SECONDS,
        encryption_key: kms.IKey | None = None,
        error_detail: ErrorDetail = ErrorDetail.REDACTED,
        ordered_subscriptions: bool = False,
    ) -> None:
        ordered = {"DURABLE_QUEUE_URL": queue.queue.queue_url} if ordered_subscriptions else {}
        super().__init__(
            scope,
            construct_id,
            queue=queue,
            handler=HANDLER,
            service_name=SERVICE_NAME,
            label="durable consumer",
            description="Durable consumer: runs every DURABLE subscription once per event, via the inbox claim",
            timeout_seconds=timeout_seconds,
            # Zero today: Lambda does not support a batching window on a FIFO queue (see timing).
            batching_window_seconds=CONSUMER_BATCHING_WINDOW_SECONDS,
            application=application,
            # Exactly the names outbox.settings.ConsumerSettings reads.
            environment={
                "EVENTS_TABLE_NAME": events.table.table_name,
                "INBOX_TABLE_NAME": inbox.table.table_name,
                "MAX_ATTEMPTS": str(MAX_ATTEMPTS),
                "INBOX_RETENTION_DAYS": str(inbox.retention_days),
                "ERROR_DETAIL": error_detail.value,
                **ordered,
            },
            alarm_topic=alarm_topic,
            max_concurrency=max_concurrency,
            encryption_key=encryption_key,
        )
        grant_items(inbox.table, self.function, INBOX_ACTIONS)  # and the inbox's key, if it has one
        # Handlers may emit follow-up events; the grant carries the deny on mutating event rows (and the
        # events table's key, if it has one).
        events.grant_emit(self.function)
        events.grant_confirm(self.function)  # each batch's events, read back at once from the log
        # Handlers commit their writes to the application's tables in the same transaction as the completion.
        self.grant_data_tables(data_tables)
        if ordered_subscriptions:
            grant_items(inbox.table, self.function, ORDERED_INBOX_ACTIONS, conditions=ORDERED_INBOX_CONDITIONS)
            iam.Grant.add_to_principal(
                grantee=self.function, actions=list(ORDERED_LOG_ACTIONS), resource_arns=[events.table.table_arn]
            )
            # SendMessage alone (no GetQueueUrl, no attributes): the URL comes in DURABLE_QUEUE_URL.
            iam.Grant.add_to_principal(
                grantee=self.function, actions=["sqs:SendMessage"], resource_arns=[queue.queue.queue_arn]
            )
            if queue.queue.encryption_master_key is not None:
                queue.queue.encryption_master_key.grant(self.function, "kms:GenerateDataKey", "kms:Decrypt")
            assert self.function.role is not None  # the construct makes one
            queue.admit_sender(self.function.role)  # the queue denies every sender it does not name

        self.dead_work_alarms = [
            alarm_above(
                self,
                f"{metric_name}Alarm",
                self.outcome_metric(metric_name, ALARM_PERIOD),
                threshold=0,
                description=f"The durable consumer recorded {metric_name} in the inbox table. See the runbook "
                "(status, replay).",
                alarm_topic=alarm_topic,
            )
            for metric_name in DEAD_WORK_METRICS
        ]
        minutes = int(self.failure_alarm_period.to_minutes())
        self.retries_alarm = self.persistent_failure_alarm(
            "RetriesAlarm",
            RETRIES_METRIC,
            f"The durable consumer retried handlers in each of {PERSISTENT_FAILURE_PERIODS} periods of {minutes} min "
            "in a row: a handler fails on every receive (a message comes back once per visibility timeout, so "
            f"each period holds one of its failures), and after {MAX_ATTEMPTS} attempts its pair becomes a dead "
            "letter. One transient retry does not fire it; the queue-age alarm cannot see this (SQS leaves a message "
            "received 3+ times out of its age). See the runbook (outbox status, the consumer's log).",
        )

    @property
    def alarms(self) -> list[cloudwatch.IAlarm]:
        return [self.errors_alarm, *self.dead_work_alarms, self.retries_alarm]
