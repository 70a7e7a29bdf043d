"""What both queue-driven consumers share: an engine function fed by one queue, with partial batch failures."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from aws_cdk import Acknowledgment, Duration, Validations
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from constructs import Construct

from outbox_cdk import checkov
from outbox_cdk.alarms import alarm_above
from outbox_cdk.grants import grant_items, grant_messages
from outbox_cdk.lambda_defaults import ApplicationCode, EngineFunction, engine_metric
from outbox_cdk.redriven_queue import RedrivenQueue
from outbox_cdk.timing import CONSUMER_BATCH_SIZE, PERSISTENT_FAILURE_PERIODS, persistent_failure_period_seconds

BATCH_SIZE: Final = CONSUMER_BATCH_SIZE
DEFAULT_MAX_CONCURRENCY: Final = 10
# Lambda's bounds for an SQS event source mapping's MaximumConcurrency.
MIN_MAX_CONCURRENCY: Final = 2
MAX_MAX_CONCURRENCY: Final = 1000
ALARM_PERIOD: Final = Duration.minutes(1)

# What a consumer's role needs on its queue: the event source mapping polls it with the function's role
# (SQS developer guide, "Configuring an Amazon SQS queue to trigger an AWS Lambda function": the execution
# role's three permissions). ReceiveMessage takes a batch, DeleteMessage removes what succeeded, and
# GetQueueAttributes lets Lambda read the queue (the local runtime's mapping does not call it: the one grant
# the least-privilege test keeps without a recorded call). Not CDK's grant_consume_messages, which adds
# ChangeMessageVisibility and GetQueueUrl: a failed message is reported as a batch item failure and SQS makes it
# visible again by itself; no code of the consumers calls SQS.
CONSUME_ACTIONS: Final = ("sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes")
# What the consumers may do with each of the application's tables (OutboxPipeline(data_tables=...)): what a
# handler may ask of them, item by item. Read an item or a partition (GetItem, Query); write items (PutItem,
# UpdateItem, DeleteItem) and check one (ConditionCheckItem): the four kinds of write outbox.log.writes builds, which
# a durable handler's result commits in its completion's transaction (authorised per item as these actions).
# Not Scan, BatchGetItem, BatchWriteItem, DescribeTable or the stream, which CDK's grant_read_write_data adds:
# grant those to ``pipeline.consumer.function`` yourself if a handler of yours needs them.
DATA_TABLE_ACTIONS: Final = (
    "dynamodb:GetItem",
    "dynamodb:Query",
    "dynamodb:PutItem",
    "dynamodb:UpdateItem",
    "dynamodb:DeleteItem",
    "dynamodb:ConditionCheckItem",
)


class QueueConsumer(Construct):
    """``self.function`` consumes ``queue`` in batches; ``self.errors_alarm`` fires on its first failed
    invocation, and ``persistent_failure_alarm`` makes the alarm on a count of failed records that persist.

    Failures are the queue's business, not Lambda's: the mapping reports partial batch failures, SQS
    retries them up to the queue's ``max_receive_count`` and then moves them to the queue's alarmed DLQ.
    The function is only ever invoked synchronously by the mapping, so a Lambda dead-letter queue or
    on-failure destination would never receive anything.

    Parameters
    ----------
    label
        What the consumer is called in alarm texts, e.g. ``"durable consumer"``.
    timeout_seconds, batching_window_seconds
        From ``timing``, where the queue's visibility timeout is derived from the same two numbers.
    max_concurrency
        The mapping's MaximumConcurrency, 2..1000.
    encryption_key
        The pipeline's customer-managed key, for the function's log group; ``None`` for the key CloudWatch
        Logs manages. (The queue's key, if any, is granted with the queue.)
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        queue: RedrivenQueue,
        handler: str,
        service_name: str,
        label: str,
        description: str,
        timeout_seconds: int,
        batching_window_seconds: int,
        application: ApplicationCode,
        environment: Mapping[str, str],
        alarm_topic: sns.ITopic,
        max_concurrency: int,
        encryption_key: kms.IKey | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        self.alarm_topic = alarm_topic
        if isinstance(max_concurrency, bool) or not MIN_MAX_CONCURRENCY <= max_concurrency <= MAX_MAX_CONCURRENCY:
            raise ValueError(
                f"{label} max concurrency must be {MIN_MAX_CONCURRENCY}..{MAX_MAX_CONCURRENCY}, got {max_concurrency!r}"
            )
        self.service_name = service_name
        # The persistent-failure alarms' period follows the queue's visibility timeout, itself derived from
        # timeout_seconds: a longer timeout brings a failed message back later, and the period grows with it.
        self.failure_alarm_period = Duration.seconds(
            persistent_failure_period_seconds(queue.visibility_timeout_seconds)
        )
        engine_function = EngineFunction(
            self,
            "Lambda",
            handler=handler,
            service_name=service_name,
            description=description,
            timeout=Duration.seconds(timeout_seconds),
            application=application,
            environment=environment,
            encryption_key=encryption_key,
        )
        self.function = engine_function.function
        self.role = engine_function.role
        self.log_group = engine_function.log_group

        # With SSE-KMS, kms:Decrypt on the queue's key too. The DLQ a message moves to after max_receive_count
        # receives has the same key (SQS wants an encrypted queue and its DLQ to share one), so whoever reads the
        # DLQ needs that one key only.
        grant_messages(queue.queue, self.function, CONSUME_ACTIONS)
        self.mapping = lambda_.EventSourceMapping(
            self,
            "QueueMapping",
            target=self.function,
            event_source_arn=queue.queue.queue_arn,
            batch_size=BATCH_SIZE,
            max_batching_window=Duration.seconds(batching_window_seconds) if batching_window_seconds else None,
            report_batch_item_failures=True,
            max_concurrency=max_concurrency,
        )
        # Nobody else may take a message off the queue; the mapping polls once its role is the one admitted.
        self.mapping.node.add_dependency(queue.polled_by(self.role).policy)
        self._acknowledge_queue_driven_failure_handling(max_concurrency)
        self.errors_alarm = alarm_above(
            self,
            "ErrorsAlarm",
            self.function.metric_errors(period=ALARM_PERIOD, statistic=cloudwatch.Stats.SUM),
            threshold=0,
            description=f"The {label} failed an invocation (crash, timeout or out of memory): the whole batch "
            "is retried. Its log group has the error.",
            alarm_topic=alarm_topic,
        )

    @property
    def alarms(self) -> list[cloudwatch.IAlarm]:
        return [self.errors_alarm]

    def grant_data_tables(self, tables: Sequence[dynamodb.ITable]) -> None:
        """``DATA_TABLE_ACTIONS`` on each of the application's tables, with its key (the application's own)."""
        for table in tables:
            grant_items(table, self.function, DATA_TABLE_ACTIONS)

    def outcome_metric(self, metric_name: str, period: Duration) -> cloudwatch.Metric:
        """One of the function's own Powertools counts (e.g. ``DEAD_WORK_METRICS``), summed."""
        return engine_metric(self.service_name, metric_name, statistic=cloudwatch.Stats.SUM, period=period)

    def persistent_failure_alarm(self, construct_id: str, metric_name: str, description: str) -> cloudwatch.Alarm:
        """An alarm on one of the function's failure counts that fires when it is above zero in each of
        ``PERSISTENT_FAILURE_PERIODS`` periods in a row (``self.failure_alarm_period``, from the visibility
        timeout): a message failing on every receive lands in each period, one transient failure in one.

        The count is filled with zeros: CloudWatch evaluates an M-of-N alarm on its most recent real datapoints
        when some are missing (docs/aws-behaviour.md R9.6), which would join three failures with quiet
        periods between them; with the gaps filled, only three periods in a row fire it.
        """
        counted = self.outcome_metric(metric_name, self.failure_alarm_period)
        return alarm_above(
            self,
            construct_id,
            cloudwatch.MathExpression(
                expression="FILL(failures, 0)",
                using_metrics={"failures": counted},
                period=self.failure_alarm_period,
                label=f"{metric_name} (0 when none)",
            ),
            threshold=0,
            evaluation_periods=PERSISTENT_FAILURE_PERIODS,
            datapoints_to_alarm=PERSISTENT_FAILURE_PERIODS,
            description=description,
            alarm_topic=self.alarm_topic,
        )

    def _acknowledge_queue_driven_failure_handling(self, max_concurrency: int) -> None:
        function_resource = self.function.node.default_child
        mapping_resource = self.mapping.node.default_child
        assert function_resource is not None
        assert mapping_resource is not None
        synchronous = (
            "Lambda's DeadLetterConfig applies to asynchronous invocations only; this function is "
            "invoked synchronously by its SQS mapping, and failed messages go through its queue's "
            "redrive policy to that queue's DLQ, which is alarmed at > 0."
        )
        Validations.of(function_resource).acknowledge(
            Acknowledgment(id="Serverless::Serverless-LambdaDLQ", reason=synchronous)
        )
        checkov.skip(function_resource, "CKV_AWS_116", synchronous)
        checkov.skip(
            function_resource,
            "CKV_AWS_115",
            f"Its one invoker, the SQS mapping, runs at most MaximumConcurrency ({max_concurrency}) invocations "
            "at once. A reserved concurrency below that would throttle the mapping, and throttled messages return "
            "to the queue with a receive counted towards its DLQ; one at or above it bounds nothing more and "
            "takes capacity from the account's unreserved pool.",
        )
        Validations.of(mapping_resource).acknowledge(
            Acknowledgment(
                id="Serverless::Serverless-LambdaEventSourceMappingDestination",
                reason="Lambda supports on-failure destinations for stream and Kafka sources only, not for SQS; "
                "an SQS mapping's failures are handled by the queue's redrive policy to its alarmed DLQ.",
            )
        )
