"""The durable consumer: a Lambda on the durable FIFO queue that runs each DURABLE subscription once per event."""

from __future__ import annotations

from typing import Final

from aws_cdk import Acknowledgment, Duration, Validations
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cloudwatch_actions
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from constructs import Construct

from stacks.constructs.durable_queue import DurableQueue
from stacks.constructs.events_table import EventsTable
from stacks.constructs.inbox_table import InboxTable
from stacks.constructs.lambda_defaults import METRICS_NAMESPACE, EngineFunction
from stacks.constructs.timing import CONSUMER_BATCHING_WINDOW_SECONDS, CONSUMER_TIMEOUT_SECONDS

HANDLER: Final = "lambdas.durable_consumer.handler.handler"
SERVICE_NAME: Final = "durable-consumer"
# The application's modules, loaded by the handler at cold start (outbox.settings.load_registry).
SUBSCRIPTIONS: Final = "modules:build_registry"

# SQS hands Lambda at most 10 messages per batch from a FIFO queue.
BATCH_SIZE: Final = 10
DEFAULT_MAX_CONCURRENCY: Final = 10
# Lambda's bounds for an SQS event source mapping's MaximumConcurrency.
MIN_MAX_CONCURRENCY: Final = 2
MAX_MAX_CONCURRENCY: Final = 1000

# Powertools metrics the consumer publishes (outbox.consumer.Metric). Dead work ended in an inbox row
# an operator must look at; none of it reaches an SQS DLQ, so the DLQ alarms cannot see it.
CLAIM_METRICS: Final = ("Claims", "Completions", "ClaimSkips", "Retries", "LeasesLost", "UnmatchedEvents")
DEAD_WORK_METRICS: Final = ("DeadLetters", "Conflicts", "PoisonPills")
ALARM_PERIOD: Final = Duration.minutes(1)


class DurableConsumer(Construct):
    """``self.function`` consumes ``queue`` in batches; ``self.errors_alarm`` and ``self.dead_work_alarms``
    fire on the first failed invocation and the first dead letter, conflict or poison pill.

    Failures are the queue's business, not Lambda's: the mapping reports partial batch failures, SQS
    retries them up to the queue's ``max_receive_count`` and then moves them to the queue's alarmed DLQ.
    The function is only ever invoked synchronously by the mapping, so a Lambda dead-letter queue or
    on-failure destination would never receive anything.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        queue: DurableQueue,
        events: EventsTable,
        inbox: InboxTable,
        layer: lambda_.ILayerVersion,
        alarm_topic: sns.ITopic,
        max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
    ) -> None:
        super().__init__(scope, construct_id)
        if isinstance(max_concurrency, bool) or not MIN_MAX_CONCURRENCY <= max_concurrency <= MAX_MAX_CONCURRENCY:
            raise ValueError(
                f"consumer max concurrency must be {MIN_MAX_CONCURRENCY}..{MAX_MAX_CONCURRENCY}, "
                f"got {max_concurrency!r}"
            )
        engine_function = EngineFunction(
            self,
            "Lambda",
            handler=HANDLER,
            service_name=SERVICE_NAME,
            description="Durable consumer: runs every DURABLE subscription once per event, via the inbox claim",
            timeout=Duration.seconds(CONSUMER_TIMEOUT_SECONDS),
            layer=layer,
            # Exactly the names outbox.settings.ConsumerSettings reads.
            environment={
                "EVENTS_TABLE_NAME": events.table.table_name,
                "INBOX_TABLE_NAME": inbox.table.table_name,
                "MAX_RECEIVE_COUNT": str(queue.max_receive_count),
                "INBOX_RETENTION_DAYS": str(inbox.retention_days),
                "SUBSCRIPTIONS": SUBSCRIPTIONS,
            },
        )
        self.function = engine_function.function
        self.role = engine_function.role
        self.log_group = engine_function.log_group
        inbox.table.grant_read_write_data(self.function)
        # Handlers may emit follow-up events; the grant carries the deny on mutating event rows.
        events.grant_emit(self.function)

        queue.queue.grant_consume_messages(self.function)
        self.mapping = lambda_.EventSourceMapping(
            self,
            "QueueMapping",
            target=self.function,
            event_source_arn=queue.queue.queue_arn,
            batch_size=BATCH_SIZE,
            # Zero today: Lambda does not support a batching window on a FIFO queue (see timing).
            max_batching_window=(
                Duration.seconds(CONSUMER_BATCHING_WINDOW_SECONDS) if CONSUMER_BATCHING_WINDOW_SECONDS else None
            ),
            report_batch_item_failures=True,
            max_concurrency=max_concurrency,
        )
        self._acknowledge_queue_driven_failure_handling()

        action = cloudwatch_actions.SnsAction(alarm_topic)
        self.errors_alarm = self._alarm(
            "Errors",
            self.function.metric_errors(period=ALARM_PERIOD, statistic=cloudwatch.Stats.SUM),
            "The durable consumer failed an invocation (crash, timeout or out of memory): the whole batch is "
            "retried. Its log group has the error.",
            action,
        )
        self.dead_work_alarms = [
            self._alarm(
                metric_name,
                self.outcome_metric(metric_name, ALARM_PERIOD),
                f"The durable consumer recorded {metric_name} in the inbox table. See the runbook (status, replay).",
                action,
            )
            for metric_name in DEAD_WORK_METRICS
        ]

    @property
    def alarms(self) -> list[cloudwatch.IAlarm]:
        return [self.errors_alarm, *self.dead_work_alarms]

    def outcome_metric(self, metric_name: str, period: Duration) -> cloudwatch.Metric:
        """One of the consumer's own counts (``CLAIM_METRICS``, ``DEAD_WORK_METRICS``), summed."""
        return cloudwatch.Metric(
            namespace=METRICS_NAMESPACE,
            metric_name=metric_name,
            # Powertools adds the service as a dimension to every metric it publishes.
            dimensions_map={"service": SERVICE_NAME},
            statistic=cloudwatch.Stats.SUM,
            period=period,
        )

    def _alarm(
        self, construct_id: str, metric: cloudwatch.IMetric, description: str, action: cloudwatch.IAlarmAction
    ) -> cloudwatch.Alarm:
        alarm = cloudwatch.Alarm(
            self,
            f"{construct_id}Alarm",
            alarm_description=description,
            metric=metric,
            threshold=0,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            evaluation_periods=1,
            datapoints_to_alarm=1,
            # An idle function publishes nothing; silence is health here, not a breach.
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )
        alarm.add_alarm_action(action)
        alarm.add_ok_action(action)
        return alarm

    def _acknowledge_queue_driven_failure_handling(self) -> None:
        function_resource = self.function.node.default_child
        mapping_resource = self.mapping.node.default_child
        assert function_resource is not None
        assert mapping_resource is not None
        Validations.of(function_resource).acknowledge(
            Acknowledgment(
                id="Serverless::Serverless-LambdaDLQ",
                reason="Lambda's DeadLetterConfig applies to asynchronous invocations only; this function is "
                "invoked synchronously by its SQS mapping, and failed messages go through the durable queue's "
                "redrive policy to its FIFO DLQ, which is alarmed at > 0.",
            )
        )
        Validations.of(mapping_resource).acknowledge(
            Acknowledgment(
                id="Serverless::Serverless-LambdaEventSourceMappingDestination",
                reason="Lambda supports on-failure destinations for stream and Kafka sources only, not for SQS; "
                "an SQS mapping's failures are handled by the queue's redrive policy to its alarmed FIFO DLQ.",
            )
        )
