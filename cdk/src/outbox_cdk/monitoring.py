"""Alarms on the pipes and the queues, and one dashboard that shows both lanes of the pipeline.

Hand-written ``aws_cloudwatch`` rather than cdk-monitoring-constructs: the set is small (four alarms a
pipe, one age alarm a queue, one dashboard), and the library would add a dependency (and its transitive
pins) to every synth, plus its own defaults to review, for what a few explicit widgets say directly.
The DLQ alarms are not here: they belong to ``AlarmedDeadLetterQueue``, so no DLQ exists without one;
nor are the consumers' (errors, dead work, persistent failures) or the operator endpoint's, which belong to
each function. The dashboard's alarm widget shows all of them; under it, the status widget (``status_widget``)
says what needs an operator and the command for it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from outbox_cdk.alarms import alarm_above
from outbox_cdk.durable_consumer import CLAIM_METRICS, DEAD_WORK_METRICS, DurableConsumer
from outbox_cdk.inbox_table import InboxTable
from outbox_cdk.queue_consumer import QueueConsumer
from outbox_cdk.record_change_consumer import ROW_CHANGE_METRICS
from outbox_cdk.timing import (
    QUEUE_VISIBILITY_TIMEOUT_SECONDS,
    RECORD_CHANGE_QUEUE_VISIBILITY_TIMEOUT_SECONDS,
)
from outbox_cdk.workflow_settler import WorkflowSettler

PIPES_NAMESPACE: Final = "AWS/EventBridge/Pipes"
# Each failed execution is retried (finite retries, then the pipe DLQ); of a partly failed one, only the
# refused entries (docs/aws-behaviour.md R4.4). A pipe into SQS should never fail, so the first one is worth a
# look: a permission, an unresolved path, a throttle that persisted. Each metric and what it counts (R9.4).
PIPE_FAILURES: Final = {
    "ExecutionFailed": "an execution failed",
    "TargetStageFailed": "the queue refused a batch",
    "ExecutionPartiallyFailed": "an execution failed for part of its batch",
    "TargetStagePartiallyFailed": "the queue refused part of a batch",
}
PIPE_FAILURE_METRICS: Final = tuple(PIPE_FAILURES)
PIPE_ALARM_PERIOD: Final = Duration.minutes(5)

# A message older than two visibility timeouts that is still counted was received fewer than three times
# (R9.1): nobody receives it (no consumer, a throttled or too narrow one, or, on the durable queue, its
# tenant's group is held behind a failing message). A message that fails on every receive drops out of the
# metric at its third receive: the consumers' persistent-failure alarms see that one.
QUEUE_AGE_ALARM_VISIBILITY_TIMEOUTS: Final = 2
# With the default timeouts.
QUEUE_AGE_ALARM_THRESHOLD_SECONDS: Final = QUEUE_AGE_ALARM_VISIBILITY_TIMEOUTS * QUEUE_VISIBILITY_TIMEOUT_SECONDS
RECORD_CHANGE_QUEUE_AGE_ALARM_THRESHOLD_SECONDS: Final = (
    QUEUE_AGE_ALARM_VISIBILITY_TIMEOUTS * RECORD_CHANGE_QUEUE_VISIBILITY_TIMEOUT_SECONDS
)
QUEUE_AGE_ALARM_PERIOD: Final = Duration.minutes(5)

DASHBOARD_PERIOD: Final = Duration.minutes(5)
# The inbox table operations the consumer calls (outbox.inbox.Inbox).
INBOX_OPERATIONS: Final = (
    dynamodb.Operation.GET_ITEM,
    dynamodb.Operation.PUT_ITEM,
    dynamodb.Operation.UPDATE_ITEM,
    dynamodb.Operation.TRANSACT_WRITE_ITEMS,
)
WIDGET_WIDTH: Final = 8


@dataclass(frozen=True)
class RecordChangeLane:
    """What the monitoring watches of the (optional) record-change lane."""

    pipe_name: str
    queue: sqs.IQueue
    consumer: QueueConsumer
    visibility_timeout_seconds: int = RECORD_CHANGE_QUEUE_VISIBILITY_TIMEOUT_SECONDS

    @property
    def age_alarm_threshold_seconds(self) -> int:
        return QUEUE_AGE_ALARM_VISIBILITY_TIMEOUTS * self.visibility_timeout_seconds


class PipelineMonitoring(Construct):
    """``self.pipe_alarms``, ``self.queue_age_alarms`` and ``self.dashboard``, all notifying one topic.

    ``self.pipe_alarms`` and ``self.queue_age_alarms`` list the durable lane's first, then the
    record-change lane's.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        alarm_topic: sns.ITopic,
        relay_pipe_name: str,
        durable_queue: sqs.IQueue,
        consumer: DurableConsumer,
        inbox: InboxTable,
        record_change: RecordChangeLane | None,
        durable_visibility_timeout_seconds: int = QUEUE_VISIBILITY_TIMEOUT_SECONDS,
        dead_letter_queues: Sequence[tuple[str, sqs.IQueue]],
        dead_letter_alarms: Sequence[cloudwatch.IAlarm],
        operator_endpoint_alarms: Sequence[cloudwatch.IAlarm],
        audit_alarms: Sequence[cloudwatch.IAlarm] = (),
        tamper_pipe_name: str | None = None,
        status: cloudwatch.IWidget | None = None,
        status_alarms: Sequence[cloudwatch.IAlarm] = (),
        workflows: WorkflowSettler | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        self.alarm_topic = alarm_topic
        durable_age_threshold = QUEUE_AGE_ALARM_VISIBILITY_TIMEOUTS * durable_visibility_timeout_seconds
        # The relay's construct ids predate the second lane; they stay, so its alarms are not replaced.
        self.pipe_alarms = self._pipe_alarms("Pipe", "relay pipe", relay_pipe_name)
        if record_change is not None:
            self.pipe_alarms += self._pipe_alarms("RecordChangePipe", "record-change pipe", record_change.pipe_name)
        if tamper_pipe_name is not None:  # a detector that fails quietly leaves rewrites unseen: the same four
            self.pipe_alarms += self._pipe_alarms("TamperPipe", "tamper pipe", tamper_pipe_name)
        self.queue_age_alarms = [
            self._queue_age_alarm(
                "QueueAge",
                durable_queue,
                durable_age_threshold,
                _age_description("durable queue", durable_age_threshold, failure_alarm="Retries", fifo=True),
            ),
        ]
        if record_change is not None:
            threshold = record_change.age_alarm_threshold_seconds
            self.queue_age_alarms.append(
                self._queue_age_alarm(
                    "RecordChangeQueueAge",
                    record_change.queue,
                    threshold,
                    _age_description("record-change queue", threshold, failure_alarm="RowChangeFailures", fifo=False),
                )
            )
        self.alarms: list[cloudwatch.IAlarm] = [
            *self.pipe_alarms,
            *self.queue_age_alarms,
            *dead_letter_alarms,
            *consumer.alarms,
            *(record_change.consumer.alarms if record_change is not None else []),
            *operator_endpoint_alarms,
            *audit_alarms,
            *status_alarms,
            *(workflows.alarms if workflows is not None else []),
        ]
        self.dashboard = cloudwatch.Dashboard(self, "Dashboard", default_interval=Duration.hours(6))
        self.dashboard.add_widgets(
            cloudwatch.AlarmStatusWidget(title="Alarms", alarms=self.alarms, width=3 * WIDGET_WIDTH)
        )
        if status is not None:
            self.dashboard.add_widgets(status)
        self.dashboard.add_widgets(
            _relayed_widget(relay_pipe_name, durable_queue),
            *_pipe_widgets("Relay pipe", relay_pipe_name),
        )
        self.dashboard.add_widgets(
            _queue_depth_widget("Durable queue", durable_queue),
            _queue_age_widget("Durable queue", durable_queue, durable_age_threshold),
            cloudwatch.GraphWidget(
                title="Dead letters",
                left=[
                    dlq.metric_approximate_number_of_messages_visible(
                        period=DASHBOARD_PERIOD, statistic=cloudwatch.Stats.MAXIMUM, label=label
                    )
                    for label, dlq in dead_letter_queues
                ],
                width=WIDGET_WIDTH,
            ),
        )
        self._add_durable_consumer_widgets(consumer, inbox)
        if workflows is not None:  # the workflows running, the oldest's age, how they ended; the settle pass
            self.dashboard.add_widgets(
                *workflows.widgets(width=WIDGET_WIDTH, period=DASHBOARD_PERIOD),
                *_function_widgets("Workflow settle pass", workflows.function)[:1],
            )
        if record_change is not None:
            self._add_record_change_widgets(record_change)

    def _add_record_change_widgets(self, lane: RecordChangeLane) -> None:
        self.dashboard.add_widgets(
            *_pipe_widgets("Record-change pipe", lane.pipe_name),
            _queue_depth_widget("Record-change queue", lane.queue),
        )
        self.dashboard.add_widgets(
            _queue_age_widget("Record-change queue", lane.queue, lane.age_alarm_threshold_seconds),
            *_function_widgets("Record-change consumer", lane.consumer.function),
        )
        self.dashboard.add_widgets(
            cloudwatch.GraphWidget(
                title="Record-change consumer: row changes handled, unmatched, failed",
                left=[lane.consumer.outcome_metric(name, DASHBOARD_PERIOD) for name in ROW_CHANGE_METRICS],
                width=WIDGET_WIDTH,
            )
        )

    def _pipe_alarms(self, id_prefix: str, label: str, pipe_name: str) -> list[cloudwatch.Alarm]:
        return [
            alarm_above(
                self,
                f"{id_prefix}{metric_name}",
                _pipe_metric(pipe_name, metric_name, PIPE_ALARM_PERIOD),
                threshold=0,
                description=f"The {label} reports {metric_name}: {meaning}. The pipe retries (a partly failed batch: "
                "only the refused entries) and, when retries run out, puts the batch's metadata in its DLQ. Its log "
                "group (level ERROR) says why: a permission, an unresolved template path, a persisting throttle. See "
                "the runbook.",
                alarm_topic=self.alarm_topic,
            )
            for metric_name, meaning in PIPE_FAILURES.items()
        ]

    def _queue_age_alarm(
        self, construct_id: str, queue: sqs.IQueue, threshold_seconds: int, description: str
    ) -> cloudwatch.Alarm:
        return alarm_above(
            self,
            construct_id,
            queue.metric_approximate_age_of_oldest_message(
                period=QUEUE_AGE_ALARM_PERIOD, statistic=cloudwatch.Stats.MAXIMUM
            ),
            threshold=threshold_seconds,
            description=description,
            alarm_topic=self.alarm_topic,
        )

    def _add_durable_consumer_widgets(self, consumer: DurableConsumer, inbox: InboxTable) -> None:
        table = inbox.table
        self.dashboard.add_widgets(
            *_function_widgets("Durable consumer", consumer.function),
            cloudwatch.GraphWidget(
                title="Inbox: claims",
                left=[consumer.outcome_metric(name, DASHBOARD_PERIOD) for name in CLAIM_METRICS],
                width=WIDGET_WIDTH,
            ),
        )
        self.dashboard.add_widgets(
            cloudwatch.GraphWidget(
                title="Inbox: dead letters, conflicts, poison pills",
                left=[consumer.outcome_metric(name, DASHBOARD_PERIOD) for name in DEAD_WORK_METRICS],
                width=WIDGET_WIDTH,
            ),
            cloudwatch.GraphWidget(
                title="Inbox table: refused conditional writes and throttles",
                left=[
                    # A refused claim (duplicate, live lease) or a fenced write that lost its lease.
                    table.metric_conditional_check_failed_requests(
                        period=DASHBOARD_PERIOD, statistic=cloudwatch.Stats.SUM, label="conditional check failed"
                    ),
                    table.metric_throttled_requests_for_operations(
                        operations=list(INBOX_OPERATIONS), period=DASHBOARD_PERIOD
                    ),
                ],
                width=WIDGET_WIDTH,
            ),
            cloudwatch.GraphWidget(
                title="Inbox table: consumed capacity",
                left=[
                    table.metric_consumed_read_capacity_units(period=DASHBOARD_PERIOD, label="read units"),
                    table.metric_consumed_write_capacity_units(period=DASHBOARD_PERIOD, label="write units"),
                ],
                width=WIDGET_WIDTH,
            ),
        )


def _age_description(queue_label: str, threshold_seconds: int, *, failure_alarm: str, fifo: bool) -> str:
    """What a queue-age alarm sees, and what it cannot (docs/aws-behaviour.md R9.1)."""
    causes = [
        "no consumer receives (mapping disabled, a missing permission)",
        "the consumer is throttled or its concurrency too low for the backlog",
    ]
    if fifo:
        causes.append("a tenant's group is held behind a failing message (the messages waiting behind it age)")
    return (
        f"The {queue_label}'s oldest message is older than {threshold_seconds} s (two visibility timeouts). Seen: "
        f"{'; '.join(causes)}. Blind to a message that fails on every receive: SQS leaves a message received 3+ "
        f"times out of this metric; the {failure_alarm} and Errors alarms see those. See the runbook."
    )


def _pipe_widgets(title: str, pipe_name: str) -> list[cloudwatch.IWidget]:
    return [
        cloudwatch.GraphWidget(
            title=f"{title}: deliveries",
            left=[_pipe_metric(pipe_name, name, DASHBOARD_PERIOD) for name in ("Invocations", "EventCount")],
            width=WIDGET_WIDTH,
        ),
        cloudwatch.GraphWidget(
            title=f"{title}: failures",
            left=[
                _pipe_metric(pipe_name, name, DASHBOARD_PERIOD)
                for name in (*PIPE_FAILURE_METRICS, "ExecutionThrottled", "ExecutionTimeout")
            ],
            width=WIDGET_WIDTH,
        ),
    ]


def _relayed_widget(relay_pipe_name: str, durable_queue: sqs.IQueue) -> cloudwatch.IWidget:
    # Nothing counts emits: emit() runs in the producer's process, which publishes no metric. What arrives is
    # what the relay carried: the pipe's events, and the queue's sends (the relay's, plus the operator's
    # replay, reconcile and receive-send-delete redrive, which send to the queue themselves).
    return cloudwatch.GraphWidget(
        title="Events relayed to the durable queue",
        left=[
            _pipe_metric(relay_pipe_name, "EventCount", DASHBOARD_PERIOD).with_(label="relay pipe: events"),
            durable_queue.metric_number_of_messages_sent(
                period=DASHBOARD_PERIOD, statistic=cloudwatch.Stats.SUM, label="durable queue: messages sent"
            ),
        ],
        width=WIDGET_WIDTH,
    )


def _queue_depth_widget(title: str, queue: sqs.IQueue) -> cloudwatch.IWidget:
    return cloudwatch.GraphWidget(
        title=f"{title}: depth",
        left=[
            queue.metric_approximate_number_of_messages_visible(
                period=DASHBOARD_PERIOD, statistic=cloudwatch.Stats.MAXIMUM, label="visible"
            ),
            queue.metric_approximate_number_of_messages_not_visible(
                period=DASHBOARD_PERIOD, statistic=cloudwatch.Stats.MAXIMUM, label="in flight"
            ),
        ],
        width=WIDGET_WIDTH,
    )


def _queue_age_widget(title: str, queue: sqs.IQueue, alarm_threshold_seconds: int) -> cloudwatch.IWidget:
    return cloudwatch.GraphWidget(
        title=f"{title}: age of oldest message (s)",
        left=[
            queue.metric_approximate_age_of_oldest_message(period=DASHBOARD_PERIOD, statistic=cloudwatch.Stats.MAXIMUM)
        ],
        left_annotations=[cloudwatch.HorizontalAnnotation(value=alarm_threshold_seconds, label="alarm")],
        width=WIDGET_WIDTH,
    )


def _function_widgets(title: str, function: lambda_.Function) -> list[cloudwatch.IWidget]:
    timeout = function.timeout
    assert timeout is not None, "every engine function has a timeout"
    return [
        cloudwatch.GraphWidget(
            title=f"{title}: invocations",
            left=[
                function.metric_invocations(period=DASHBOARD_PERIOD, statistic=cloudwatch.Stats.SUM),
                function.metric_errors(period=DASHBOARD_PERIOD, statistic=cloudwatch.Stats.SUM),
                function.metric_throttles(period=DASHBOARD_PERIOD, statistic=cloudwatch.Stats.SUM),
            ],
            width=WIDGET_WIDTH,
        ),
        cloudwatch.GraphWidget(
            title=f"{title}: duration (ms)",
            left=[
                function.metric_duration(period=DASHBOARD_PERIOD, statistic=statistic, label=statistic)
                for statistic in (cloudwatch.Stats.p(50), cloudwatch.Stats.p(99), cloudwatch.Stats.MAXIMUM)
            ],
            left_annotations=[cloudwatch.HorizontalAnnotation(value=timeout.to_milliseconds(), label="timeout")],
            width=WIDGET_WIDTH,
        ),
    ]


def _pipe_metric(pipe_name: str, metric_name: str, period: Duration) -> cloudwatch.Metric:
    return cloudwatch.Metric(
        namespace=PIPES_NAMESPACE,
        metric_name=metric_name,
        dimensions_map={"PipeName": pipe_name},
        statistic=cloudwatch.Stats.SUM,
        period=period,
    )
