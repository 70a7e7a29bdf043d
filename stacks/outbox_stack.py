"""The stack: thin, it only composes one construct per concern."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, cast

from aws_cdk import CfnOutput, Stack
from aws_cdk import aws_lambda as lambda_
from constructs import Construct, Node

from outbox_cdk import inbox_table, queue_consumer
from outbox_cdk.alarm_topic import AlarmTopic
from outbox_cdk.data_table import DataTable
from outbox_cdk.durable_consumer import DurableConsumer
from outbox_cdk.durable_queue import DurableQueue
from outbox_cdk.engine_layer import EngineLayer
from outbox_cdk.events_table import EventsTable
from outbox_cdk.inbox_table import InboxTable
from outbox_cdk.lambda_defaults import ApplicationCode
from outbox_cdk.monitoring import PipelineMonitoring
from outbox_cdk.operator_endpoint import OperatorEndpoint
from outbox_cdk.record_change_consumer import RecordChangeConsumer
from outbox_cdk.record_change_pipe import RecordChangePipe
from outbox_cdk.record_change_queue import RecordChangeQueue
from outbox_cdk.relay_pipe import RelayPipe
from outbox_cdk.stream_pipe import PIPE_LOG_LEVELS, PipeLogLevel

PROJECT_ROOT: Final = Path(__file__).resolve().parents[1]
# The functions' code is the project root filtered down to the application modules (the engine and every
# dependency come from the layer). Glob mode, the last matching pattern decides: "*" and ".*" exclude
# everything (a pattern without a slash matches any base name; "*" alone skips dot files such as .git and
# .venv), the package is taken back, and byte code is dropped again.
CODE_PACKAGES: Final = ("modules",)
CODE_EXCLUDE: Final = [
    "*",
    ".*",
    *(f"!{p}{tail}" for p in CODE_PACKAGES for tail in ("", "/**")),
    "**/__pycache__",
    "*.pyc",
]
# The example's catalog, loaded by every function at cold start (outbox.settings.load_catalog).
CATALOG: Final = "modules:build_catalog"

# CDK context keys (cdk.json or `cdk synth -c key=value`).
ALARM_EMAIL_CONTEXT: Final = "alarmEmail"
PIPE_LOG_LEVEL_CONTEXT: Final = "pipeLogLevel"
PIPE_LOG_EXECUTION_DATA_CONTEXT: Final = "pipeLogExecutionData"
INBOX_RETENTION_DAYS_CONTEXT: Final = "inboxRetentionDays"
CONSUMER_MAX_CONCURRENCY_CONTEXT: Final = "consumerMaxConcurrency"
RECORD_CHANGE_MAX_CONCURRENCY_CONTEXT: Final = "recordChangeMaxConcurrency"


@dataclass(frozen=True)
class OutboxSettings:
    """What may change between deployments, read once from CDK context and validated."""

    alarm_email: str | None = None
    pipe_log_level: PipeLogLevel = "ERROR"
    pipe_log_execution_data: bool = False
    inbox_retention_days: int = inbox_table.DEFAULT_RETENTION_DAYS
    consumer_max_concurrency: int = queue_consumer.DEFAULT_MAX_CONCURRENCY
    # Its own key: the standard queue scales its consumer far beyond the FIFO queue's one-per-tenant, so
    # a burst of row changes (a bulk import) is capped here without touching the durable lane.
    record_change_max_concurrency: int = queue_consumer.DEFAULT_MAX_CONCURRENCY

    @classmethod
    def from_context(cls, node: Node) -> OutboxSettings:
        """Read the settings; a value that is present but wrong fails the synth, never falls back."""
        email = node.try_get_context(ALARM_EMAIL_CONTEXT)
        if email is not None and (not isinstance(email, str) or "@" not in email):
            raise ValueError(f"context {ALARM_EMAIL_CONTEXT} must be an e-mail address, got {email!r}")
        level = node.try_get_context(PIPE_LOG_LEVEL_CONTEXT) or "ERROR"
        if level not in PIPE_LOG_LEVELS:
            raise ValueError(f"context {PIPE_LOG_LEVEL_CONTEXT} must be one of {PIPE_LOG_LEVELS}, got {level!r}")
        return cls(
            alarm_email=email or None,
            pipe_log_level=cast(PipeLogLevel, level),
            pipe_log_execution_data=_flag(node.try_get_context(PIPE_LOG_EXECUTION_DATA_CONTEXT)),
            inbox_retention_days=_integer(
                node,
                INBOX_RETENTION_DAYS_CONTEXT,
                default=inbox_table.DEFAULT_RETENTION_DAYS,
                minimum=inbox_table.MIN_RETENTION_DAYS,
                maximum=inbox_table.MAX_RETENTION_DAYS,
            ),
            consumer_max_concurrency=_max_concurrency(node, CONSUMER_MAX_CONCURRENCY_CONTEXT),
            record_change_max_concurrency=_max_concurrency(node, RECORD_CHANGE_MAX_CONCURRENCY_CONTEXT),
        )


def _flag(value: Any) -> bool:
    # `-c key=true` arrives as a string, cdk.json as a JSON boolean.
    if value is None:
        return False
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise ValueError(f"context {PIPE_LOG_EXECUTION_DATA_CONTEXT} must be true or false, got {value!r}")


def _max_concurrency(node: Node, key: str) -> int:
    return _integer(
        node,
        key,
        default=queue_consumer.DEFAULT_MAX_CONCURRENCY,
        minimum=queue_consumer.MIN_MAX_CONCURRENCY,
        maximum=queue_consumer.MAX_MAX_CONCURRENCY,
    )


def _integer(node: Node, key: str, *, default: int, minimum: int, maximum: int) -> int:
    # `-c key=14` arrives as a string, cdk.json as a JSON number; a bool is not a number here.
    value = node.try_get_context(key)
    if value is None:
        return default
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        raise ValueError(f"context {key} must be a whole number from {minimum} to {maximum}, got {value!r}")
    return value


class OutboxStack(Stack):
    def __init__(self, scope: Construct, construct_id: str, **kwargs: Any) -> None:
        super().__init__(scope, construct_id, **kwargs)
        settings = OutboxSettings.from_context(self.node)

        self.events = EventsTable(self, "Events")
        self.data = DataTable(self, "Data")
        self.engine = EngineLayer(self, "Engine")
        application = ApplicationCode(
            code=lambda_.Code.from_asset(str(PROJECT_ROOT), exclude=CODE_EXCLUDE),
            catalog=CATALOG,
            layer=self.engine.layer,
        )
        self.alarms = AlarmTopic(self, "Alarms", email=settings.alarm_email)
        topic = self.alarms.topic

        # DURABLE lane: events stream -> relay pipe -> FIFO queue -> durable consumer (inbox claim).
        self.durable = DurableQueue(self, "Durable", alarm_topic=topic)
        self.relay = RelayPipe(
            self,
            "Relay",
            events=self.events,
            target=self.durable.queue,
            alarm_topic=topic,
            log_level=settings.pipe_log_level,
            log_execution_data=settings.pipe_log_execution_data,
        )
        self.inbox = InboxTable(self, "Inbox", retention_days=settings.inbox_retention_days)
        self.consumer = DurableConsumer(
            self,
            "DurableConsumer",
            queue=self.durable,
            events=self.events,
            inbox=self.inbox,
            data=self.data,
            application=application,
            alarm_topic=topic,
            max_concurrency=settings.consumer_max_concurrency,
        )

        # BEST_EFFORT lane: data stream -> record-change pipe -> standard queue -> record-change consumer.
        self.record_changes = RecordChangeQueue(self, "RecordChanges", alarm_topic=topic)
        self.record_change_pipe = RecordChangePipe(
            self,
            "RecordChangePipe",
            data=self.data,
            target=self.record_changes.queue,
            alarm_topic=topic,
            log_level=settings.pipe_log_level,
            log_execution_data=settings.pipe_log_execution_data,
        )
        self.record_change_consumer = RecordChangeConsumer(
            self,
            "RecordChangeConsumer",
            queue=self.record_changes,
            data=self.data,
            application=application,
            alarm_topic=topic,
            max_concurrency=settings.record_change_max_concurrency,
        )

        # Read-only status for operators: chain_intact per tenant, dead letters, DLQ depths.
        self.operator_endpoint = OperatorEndpoint(
            self,
            "OperatorEndpoint",
            events=self.events,
            inbox=self.inbox,
            data=self.data,
            durable_queue=self.durable,
            relay_pipe=self.relay,
            record_change_queue=self.record_changes,
            record_change_pipe=self.record_change_pipe,
            application=application,
            alarm_topic=topic,
        )
        self.operator_endpoint.grant_invoke_url(self.events.operator_role)

        dead_letters = [
            ("durable DLQ", self.durable.dead_letters),
            ("relay pipe DLQ", self.relay.dead_letters),
            ("record-change DLQ", self.record_changes.dead_letters),
            ("record-change pipe DLQ", self.record_change_pipe.dead_letters),
        ]
        self.monitoring = PipelineMonitoring(
            self,
            "Monitoring",
            alarm_topic=topic,
            relay_pipe_name=self.relay.pipe_name,
            durable_queue=self.durable.queue,
            consumer=self.consumer,
            inbox=self.inbox,
            record_change_pipe_name=self.record_change_pipe.pipe_name,
            record_change_queue=self.record_changes.queue,
            record_change_consumer=self.record_change_consumer,
            dead_letter_queues=[(label, dlq.queue) for label, dlq in dead_letters],
            dead_letter_alarms=[dlq.alarm for _, dlq in dead_letters],
            operator_endpoint_alarms=self.operator_endpoint.alarms,
        )

        CfnOutput(self, "EventsTableName", value=self.events.table.table_name)
        CfnOutput(self, "OperatorRoleArn", value=self.events.operator_role.role_arn)
        CfnOutput(self, "DurableQueueUrl", value=self.durable.queue.queue_url)
        CfnOutput(self, "DurableDeadLetterQueueUrl", value=self.durable.dead_letter_queue.queue_url)
        CfnOutput(self, "RelayPipeName", value=self.relay.pipe_name)
        CfnOutput(self, "RelayDeadLetterQueueUrl", value=self.relay.dead_letter_queue.queue_url)
        CfnOutput(self, "InboxTableName", value=self.inbox.table.table_name)
        CfnOutput(self, "InboxRetentionDays", value=str(self.inbox.retention_days))
        CfnOutput(self, "DurableConsumerFunctionName", value=self.consumer.function.function_name)
        CfnOutput(self, "AlarmTopicArn", value=self.alarms.topic.topic_arn)
        CfnOutput(self, "DataTableName", value=self.data.table.table_name)
        CfnOutput(self, "RecordChangeQueueUrl", value=self.record_changes.queue.queue_url)
        CfnOutput(self, "RecordChangeDeadLetterQueueUrl", value=self.record_changes.dead_letter_queue.queue_url)
        CfnOutput(self, "RecordChangePipeName", value=self.record_change_pipe.pipe_name)
        CfnOutput(self, "RecordChangePipeDeadLetterQueueUrl", value=self.record_change_pipe.dead_letter_queue.queue_url)
        CfnOutput(self, "RecordChangeConsumerFunctionName", value=self.record_change_consumer.function.function_name)
        CfnOutput(self, "OperatorEndpointUrl", value=self.operator_endpoint.url.url)
