"""Alarms on the relay and the durable queue, and one dashboard that shows the whole pipeline.

Hand-written ``aws_cloudwatch`` rather than cdk-monitoring-constructs: the set is small (two pipe
alarms, one age alarm, one dashboard), and the library would add a dependency (and its transitive
pins) to every synth, plus its own defaults to review, for what a few explicit widgets say directly.
The DLQ alarms are not here: they belong to ``AlarmedDeadLetterQueue``, so no DLQ exists without one;
nor are the consumer's, which belong to ``DurableConsumer``. The dashboard shows all of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cloudwatch_actions
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from stacks.constructs.durable_consumer import CLAIM_METRICS, DEAD_WORK_METRICS, DurableConsumer
from stacks.constructs.inbox_table import InboxTable
from stacks.constructs.lambda_defaults import METRICS_NAMESPACE
from stacks.constructs.timing import CONSUMER_TIMEOUT_SECONDS, QUEUE_VISIBILITY_TIMEOUT_SECONDS

# The engine publishes one count per committed event here (Powertools metrics, EMF).
EMITS_NAMESPACE: Final = METRICS_NAMESPACE
EMITS_METRIC_NAME: Final = "EventsEmitted"

PIPES_NAMESPACE: Final = "AWS/EventBridge/Pipes"
# Each failed execution is retried (finite retries, then the pipe DLQ). A relay into SQS should never
# fail, so the first one is worth a look: a permission, an unresolved path, a throttle that persisted.
PIPE_FAILURE_METRICS: Final = ("ExecutionFailed", "TargetStageFailed")
PIPE_ALARM_PERIOD: Final = Duration.minutes(5)

# A message older than two visibility timeouts has failed at least once, or no consumer is polling, or
# its tenant's group is blocked behind a message that keeps failing.
QUEUE_AGE_ALARM_THRESHOLD_SECONDS: Final = 2 * QUEUE_VISIBILITY_TIMEOUT_SECONDS
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


class PipelineMonitoring(Construct):
    """``self.pipe_alarms``, ``self.queue_age_alarm`` and ``self.dashboard``, all notifying one topic."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        alarm_topic: sns.ITopic,
        pipe_name: str,
        queue: sqs.IQueue,
        dead_letter_queues: Sequence[tuple[str, sqs.IQueue]],
        dead_letter_alarms: Sequence[cloudwatch.IAlarm],
        consumer: DurableConsumer,
        inbox: InboxTable,
    ) -> None:
        super().__init__(scope, construct_id)
        action = cloudwatch_actions.SnsAction(alarm_topic)

        self.pipe_alarms = [
            self._alarm(
                f"Pipe{metric_name}",
                _pipe_metric(pipe_name, metric_name, PIPE_ALARM_PERIOD),
                threshold=0,
                description=f"The relay pipe reports {metric_name}; its log group has the error.",
                action=action,
            )
            for metric_name in PIPE_FAILURE_METRICS
        ]
        self.queue_age_alarm = self._alarm(
            "QueueAge",
            queue.metric_approximate_age_of_oldest_message(
                period=QUEUE_AGE_ALARM_PERIOD, statistic=cloudwatch.Stats.MAXIMUM
            ),
            threshold=QUEUE_AGE_ALARM_THRESHOLD_SECONDS,
            description="The durable queue's oldest message is older than two visibility timeouts: "
            "a failing handler, a blocked tenant group or no consumer.",
            action=action,
        )
        alarms = [*self.pipe_alarms, self.queue_age_alarm, *dead_letter_alarms, *consumer.alarms]
        self.dashboard = self._dashboard(pipe_name, queue, dead_letter_queues, alarms)
        self._add_consumer_widgets(self.dashboard, consumer, inbox)

    def _alarm(
        self,
        construct_id: str,
        metric: cloudwatch.IMetric,
        *,
        threshold: float,
        description: str,
        action: cloudwatch.IAlarmAction,
    ) -> cloudwatch.Alarm:
        alarm = cloudwatch.Alarm(
            self,
            construct_id,
            alarm_description=description,
            metric=metric,
            threshold=threshold,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            evaluation_periods=1,
            datapoints_to_alarm=1,
            # Pipes and SQS publish nothing while idle; silence is health here, not a breach.
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )
        alarm.add_alarm_action(action)
        alarm.add_ok_action(action)
        return alarm

    def _dashboard(
        self,
        pipe_name: str,
        queue: sqs.IQueue,
        dead_letter_queues: Sequence[tuple[str, sqs.IQueue]],
        alarms: Sequence[cloudwatch.IAlarm],
    ) -> cloudwatch.Dashboard:
        dashboard = cloudwatch.Dashboard(self, "Dashboard", default_interval=Duration.hours(6))
        dashboard.add_widgets(cloudwatch.AlarmStatusWidget(title="Alarms", alarms=list(alarms), width=3 * WIDGET_WIDTH))
        dashboard.add_widgets(
            cloudwatch.GraphWidget(title="Events emitted", left=[_emits()], width=WIDGET_WIDTH),
            cloudwatch.GraphWidget(
                title="Relay pipe: deliveries",
                left=[_pipe_metric(pipe_name, name, DASHBOARD_PERIOD) for name in ("Invocations", "EventCount")],
                width=WIDGET_WIDTH,
            ),
            cloudwatch.GraphWidget(
                title="Relay pipe: failures",
                left=[
                    _pipe_metric(pipe_name, name, DASHBOARD_PERIOD)
                    for name in (*PIPE_FAILURE_METRICS, "ExecutionThrottled", "ExecutionTimeout")
                ],
                width=WIDGET_WIDTH,
            ),
        )
        dashboard.add_widgets(
            cloudwatch.GraphWidget(
                title="Durable queue: depth",
                left=[
                    queue.metric_approximate_number_of_messages_visible(
                        period=DASHBOARD_PERIOD, statistic=cloudwatch.Stats.MAXIMUM, label="visible"
                    ),
                    queue.metric_approximate_number_of_messages_not_visible(
                        period=DASHBOARD_PERIOD, statistic=cloudwatch.Stats.MAXIMUM, label="in flight"
                    ),
                ],
                width=WIDGET_WIDTH,
            ),
            cloudwatch.GraphWidget(
                title="Durable queue: age of oldest message (s)",
                left=[
                    queue.metric_approximate_age_of_oldest_message(
                        period=DASHBOARD_PERIOD, statistic=cloudwatch.Stats.MAXIMUM
                    )
                ],
                left_annotations=[
                    cloudwatch.HorizontalAnnotation(value=QUEUE_AGE_ALARM_THRESHOLD_SECONDS, label="alarm")
                ],
                width=WIDGET_WIDTH,
            ),
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
        return dashboard

    def _add_consumer_widgets(
        self, dashboard: cloudwatch.Dashboard, consumer: DurableConsumer, inbox: InboxTable
    ) -> None:
        function = consumer.function
        table = inbox.table
        dashboard.add_widgets(
            cloudwatch.GraphWidget(
                title="Durable consumer: invocations",
                left=[
                    function.metric_invocations(period=DASHBOARD_PERIOD, statistic=cloudwatch.Stats.SUM),
                    function.metric_errors(period=DASHBOARD_PERIOD, statistic=cloudwatch.Stats.SUM),
                    function.metric_throttles(period=DASHBOARD_PERIOD, statistic=cloudwatch.Stats.SUM),
                ],
                width=WIDGET_WIDTH,
            ),
            cloudwatch.GraphWidget(
                title="Durable consumer: duration (ms)",
                left=[
                    function.metric_duration(period=DASHBOARD_PERIOD, statistic=statistic, label=statistic)
                    for statistic in (cloudwatch.Stats.p(50), cloudwatch.Stats.p(99), cloudwatch.Stats.MAXIMUM)
                ],
                left_annotations=[
                    cloudwatch.HorizontalAnnotation(value=CONSUMER_TIMEOUT_SECONDS * 1000, label="timeout")
                ],
                width=WIDGET_WIDTH,
            ),
            cloudwatch.GraphWidget(
                title="Inbox: claims",
                left=[consumer.outcome_metric(name, DASHBOARD_PERIOD) for name in CLAIM_METRICS],
                width=WIDGET_WIDTH,
            ),
        )
        dashboard.add_widgets(
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


def _pipe_metric(pipe_name: str, metric_name: str, period: Duration) -> cloudwatch.Metric:
    return cloudwatch.Metric(
        namespace=PIPES_NAMESPACE,
        metric_name=metric_name,
        dimensions_map={"PipeName": pipe_name},
        statistic=cloudwatch.Stats.SUM,
        period=period,
    )


def _emits() -> cloudwatch.MathExpression:
    # A search over every dimension set, summed: Powertools adds a "service" dimension (and modules
    # may add more), and a plain metric without dimensions would match none of them and graph nothing.
    seconds = int(DASHBOARD_PERIOD.to_seconds())
    search = f"SEARCH('Namespace=\"{EMITS_NAMESPACE}\" MetricName=\"{EMITS_METRIC_NAME}\"', 'Sum', {seconds})"
    return cloudwatch.MathExpression(
        expression=f"SUM({search})", using_metrics={}, label="emitted", period=DASHBOARD_PERIOD
    )
