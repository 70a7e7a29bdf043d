"""The relay: an EventBridge Pipe from the events table's stream into the durable FIFO queue.

No relay code runs anywhere: the pipe polls the stream, keeps only inserted event rows, and sends each
one's raw NewImage to the queue with the tenant as the message group and the event id as the
deduplication id. Every failure it cannot retry away ends in its alarmed dead-letter queue.

``CfnPipe`` (the stable L1) rather than ``aws_pipes_alpha.Pipe``: the alpha L2 and its source/target
packages are experimental (breaking changes between minor versions, three extra pinned packages), and
here the template's exact shape is the contract: the local runtime reads this pipe's filter, input
template and dynamic ids from the synthesized template, so writing them out literally is a feature.
"""

from __future__ import annotations

import json
from typing import Final, Literal

from aws_cdk import Acknowledgment, Duration, Stack, Validations
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from aws_cdk import aws_pipes as pipes
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from stacks.constructs.alarmed_dlq import AlarmedDeadLetterQueue
from stacks.constructs.events_table import EventsTable

PipeLogLevel = Literal["OFF", "ERROR", "INFO", "TRACE"]
PIPE_LOG_LEVELS: Final[tuple[PipeLogLevel, ...]] = ("OFF", "ERROR", "INFO", "TRACE")

# Attribute names of an event row, as written by the engine's emit() (outbox.envelope.Envelope.to_item).
KIND_ATTRIBUTE: Final = "kind"
EVENT_KIND: Final = "EVENT"  # outbox.keys.KIND_EVENT; chain heads carry "HEAD" and must not be relayed
TENANT_ATTRIBUTE: Final = "tenant"
EVENT_ID_ATTRIBUTE: Final = "event_id"

# Only inserts of event rows. Event rows are insert-only, so INSERT alone would do; the kind test keeps
# chain-head inserts (a tenant's first emit) out. Plain equality only: Pipes rejects several operators
# the event-bus matcher accepts (AWS-SEMANTICS R3.2).
FILTER_PATTERN: Final = {
    "eventName": ["INSERT"],
    "dynamodb": {"NewImage": {KIND_ATTRIBUTE: {"S": [EVENT_KIND]}}},
}
# The raw image as one blob (the decision at the top of AWS-SEMANTICS.md); the consumer parses the
# DynamoDB JSON itself.
INPUT_TEMPLATE: Final = "<$.dynamodb.NewImage>"
# Dynamic target parameters are evaluated against the stream record, not the rendered template (R2.2).
MESSAGE_GROUP_ID_PATH: Final = f"$.dynamodb.NewImage.{TENANT_ATTRIBUTE}.S"
MESSAGE_DEDUPLICATION_ID_PATH: Final = f"$.dynamodb.NewImage.{EVENT_ID_ATTRIBUTE}.S"

# TRIM_HORIZON, not LATEST: a pipe created (or replaced) after events were written must still relay
# them; LATEST would silently skip everything already in the stream. A replaced pipe re-sends up to 24 h
# of events; SQS deduplicates only for 5 minutes, and the inbox claim absorbs the rest.
STARTING_POSITION: Final = "TRIM_HORIZON"
# SQS takes at most 10 messages per batch (R2.4).
BATCH_SIZE: Final = 10
# Finite, so a record the target keeps rejecting reaches the DLQ instead of blocking its shard for 24 h
# (R4.6). Pipe-internal errors are retried regardless and do not count (R4.5).
MAXIMUM_RETRY_ATTEMPTS: Final = 10
# Well inside the stream's 24 h retention, so an undeliverable record reaches the DLQ before the stream
# trims it (R4.5); also bounds the otherwise endless retries of pipe-internal errors.
MAXIMUM_RECORD_AGE: Final = Duration.hours(12)
# One record that cannot be sent (say, an image without a tenant) is isolated by halving the batch, so
# it goes to the DLQ alone rather than with up to nine good events.
ON_PARTIAL_BATCH_ITEM_FAILURE: Final = "AUTOMATIC_BISECT"

LOG_RETENTION: Final = logs.RetentionDays.THREE_MONTHS


class RelayPipe(Construct):
    """The pipe (``self.pipe``, named ``self.pipe_name``), its role, log group and dead-letter queue.

    The pipe DLQ is a standard queue: for a DynamoDB stream source the pipe writes batch metadata
    (shard and sequence-number range), not the records, and a stream source's DLQ may be any SQS queue
    or SNS topic (R4.1). Recovery is therefore by reconciliation from the events table, not by redrive.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        events: EventsTable,
        target: sqs.IQueue,
        alarm_topic: sns.ITopic,
        log_level: PipeLogLevel = "ERROR",
        log_execution_data: bool = False,
    ) -> None:
        super().__init__(scope, construct_id)
        if log_level not in PIPE_LOG_LEVELS:
            raise ValueError(f"pipe log level {log_level!r} is not one of {PIPE_LOG_LEVELS}")

        self.dead_letters = AlarmedDeadLetterQueue(
            self,
            "DeadLetters",
            alarm_topic=alarm_topic,
            fifo=False,
            description="stream batches the relay pipe could not deliver (reconcile from the events table)",
        )
        self.dead_letter_queue: sqs.IQueue = self.dead_letters.queue
        dead_letter_resource = self.dead_letters.queue.node.default_child
        assert dead_letter_resource is not None
        Validations.of(dead_letter_resource).acknowledge(
            Acknowledgment(
                id="AwsSolutions::AwsSolutions-SQS3",
                reason="This is the relay pipe's dead-letter queue (the pipe's DeadLetterConfig, which the "
                "rule does not recognise, unlike a queue redrive policy); it is alarmed at > 0.",
            )
        )
        self.log_group = logs.LogGroup(self, "Logs", retention=LOG_RETENTION)
        self.role = self._role(events, target)

        self.pipe = pipes.CfnPipe(
            self,
            "Pipe",
            description="Relays inserted event rows from the events stream to the durable FIFO queue",
            role_arn=self.role.role_arn,
            source=events.stream_arn,
            source_parameters=pipes.CfnPipe.PipeSourceParametersProperty(
                filter_criteria=pipes.CfnPipe.FilterCriteriaProperty(
                    filters=[pipes.CfnPipe.FilterProperty(pattern=json.dumps(FILTER_PATTERN))]
                ),
                dynamo_db_stream_parameters=pipes.CfnPipe.PipeSourceDynamoDBStreamParametersProperty(
                    starting_position=STARTING_POSITION,
                    batch_size=BATCH_SIZE,
                    maximum_retry_attempts=MAXIMUM_RETRY_ATTEMPTS,
                    maximum_record_age_in_seconds=int(MAXIMUM_RECORD_AGE.to_seconds()),
                    on_partial_batch_item_failure=ON_PARTIAL_BATCH_ITEM_FAILURE,
                    dead_letter_config=pipes.CfnPipe.DeadLetterConfigProperty(arn=self.dead_letter_queue.queue_arn),
                ),
            ),
            target=target.queue_arn,
            target_parameters=pipes.CfnPipe.PipeTargetParametersProperty(
                input_template=INPUT_TEMPLATE,
                sqs_queue_parameters=pipes.CfnPipe.PipeTargetSqsQueueParametersProperty(
                    message_group_id=MESSAGE_GROUP_ID_PATH,
                    message_deduplication_id=MESSAGE_DEDUPLICATION_ID_PATH,
                ),
            ),
            log_configuration=pipes.CfnPipe.PipeLogConfigurationProperty(
                level=log_level,
                cloudwatch_logs_log_destination=pipes.CfnPipe.CloudwatchLogsLogDestinationProperty(
                    log_group_arn=self.log_group.log_group_arn
                ),
                # Off by default: execution data is the event payload, tenant data included. Switch it
                # on (context pipeLogExecutionData) to see what the input template really rendered.
                include_execution_data=["ALL"] if log_execution_data else None,
            ),
        )
        # The role's policy must exist before the pipe starts polling, or its first reads fail; the
        # role itself is already a dependency through RoleArn.
        self.pipe.node.add_dependency(self.role.node.find_child("DefaultPolicy"))
        self.pipe_name: str = self.pipe.ref

    def _role(self, events: EventsTable, target: sqs.IQueue) -> iam.Role:
        """Exactly: read this stream, send to the target and the DLQ, write the pipe's logs."""
        role = iam.Role(
            self,
            "Role",
            description="The relay pipe: reads the events stream, sends to the durable queue and its DLQ",
            assumed_by=iam.ServicePrincipal(
                "pipes.amazonaws.com",
                conditions={"StringEquals": {"aws:SourceAccount": Stack.of(self).account}},
            ),
        )
        events.table.grant_stream_read(role)
        policy_resource = role.node.find_child("DefaultPolicy").node.default_child
        assert policy_resource is not None
        Validations.of(policy_resource).acknowledge(
            Acknowledgment(
                id="AwsSolutions::AwsSolutions-IAM5[Resource::*]",
                reason="dynamodb:ListStreams (from grant_stream_read) supports no resource-level "
                "permissions; DescribeStream, GetRecords and GetShardIterator are scoped to this stream.",
            )
        )
        target.grant_send_messages(role)
        self.dead_letter_queue.grant_send_messages(role)
        self.log_group.grant_write(role)
        return role
