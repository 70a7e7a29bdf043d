"""What every pipe of the app shares: a DynamoDB stream into an SQS queue, bounded, logged and dead-lettered.

``StreamPipe`` is the base of the relay (events stream -> durable FIFO queue) and of the record-change
pipe (data stream -> record-change queue). The source settings, the dead-letter queue, the log group,
the role and the log switch are the same for both; a subclass only says what to keep (the filter) and
what to send (the target parameters).

``CfnPipe`` (the stable L1) rather than ``aws_pipes_alpha.Pipe``: the alpha L2 and its source/target
packages are experimental (breaking changes between minor versions, three extra pinned packages), and
here the template's exact shape is the contract: the local runtime reads each pipe's filter, input
template and dynamic ids from the synthesized template, so writing them out literally is a feature.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final, Literal

from aws_cdk import Acknowledgment, Duration, Names, Stack, Validations
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import aws_pipes as pipes
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from outbox_cdk import checkov
from outbox_cdk.alarmed_dlq import AlarmedDeadLetterQueue
from outbox_cdk.encryption import acknowledge_key_wildcards
from outbox_cdk.timing import RELAY_MAXIMUM_RECORD_AGE_HOURS

PipeLogLevel = Literal["OFF", "ERROR", "INFO", "TRACE"]
PIPE_LOG_LEVELS: Final[tuple[PipeLogLevel, ...]] = ("OFF", "ERROR", "INFO", "TRACE")

# TRIM_HORIZON, not LATEST: a pipe created (or replaced) after rows were written must still forward
# them; LATEST would silently skip everything already in the stream. The price is that a replaced pipe
# re-sends the stream's records younger than MAXIMUM_RECORD_AGE (the rest of the 24 h it keeps go to the
# pipe's DLQ: the age counts from each record's creation), so whatever consumes them must tolerate a repeat.
STARTING_POSITION: Final = "TRIM_HORIZON"
# SQS takes at most 10 messages per batch (R2.4).
BATCH_SIZE: Final = 10
# Finite, so a record the target keeps rejecting reaches the DLQ instead of blocking its shard for 24 h
# (R4.6). Pipe-internal errors are retried regardless and do not count (R4.5).
MAXIMUM_RETRY_ATTEMPTS: Final = 10
# Well inside the stream's 24 h retention, so an undeliverable record reaches the DLQ before the stream
# trims it (R4.5); also bounds the otherwise endless retries of pipe-internal errors.
MAXIMUM_RECORD_AGE: Final = Duration.hours(RELAY_MAXIMUM_RECORD_AGE_HOURS)
# One record that cannot be sent (an unresolvable dynamic id, a message over SQS's size limit) is
# isolated by halving the batch, so it goes to the DLQ alone rather than with up to nine good ones.
ON_PARTIAL_BATCH_ITEM_FAILURE: Final = "AUTOMATIC_BISECT"

LOG_RETENTION: Final = logs.RetentionDays.THREE_MONTHS

PIPES_PRINCIPAL: Final = "pipes.amazonaws.com"
# Pipes names: 1 to 64 of letters, digits, ".", "-" and "_" (Pipes API reference, Pipe.Name).
PIPE_NAME_MAX_LENGTH: Final = 64


class StreamPipe(Construct):
    """The pipe (``self.pipe``, named ``self.pipe_name``), its role, log group and dead-letter queue.

    The pipe has a name fixed at synth (the stack's name and the construct's path, unique in the account and
    region, as CDK's ``Names.unique_resource_name`` makes it), so that its role can trust ``pipes.amazonaws.com``
    only on behalf of this pipe (``aws:SourceArn`` is the pipe's ARN): a pipe someone else creates in the account
    and passes the role to cannot act as it. The pipe's ARN itself cannot be referenced there (the pipe refers
    to the role: a cycle), its name can. The price of a fixed name: a change that replaces the pipe (its source
    table replaced, its starting position) fails the deploy until the name changes too; the name follows the
    construct's path, so a pipe moved in the tree gets a new one.

    The pipe DLQ is a standard queue: for a DynamoDB stream source the pipe writes batch metadata
    (shard and sequence-number range), not the records, and a stream source's DLQ may be any SQS queue
    or SNS topic (R4.1). What lands there cannot be redriven, only recovered from the source table. The
    pipe writes it with its role (R10.8), the one principal the DLQ's policy lets send.

    Parameters
    ----------
    table
        The table whose stream is the source; it must have a stream.
    target
        The queue every forwarded record is sent to.
    label
        What the pipe is called in descriptions, e.g. ``"relay pipe"``.
    description, role_description, dead_letter_description
        The pipe's and its role's descriptions, and what its DLQ holds (the DLQ alarm's text).
    filter_pattern
        The one filter, or ``None`` to forward every record of the stream.
    target_parameters
        The input template and SQS parameters, or ``None`` to send each stream record as it is.
    log_level, log_execution_data
        The pipe's log configuration (context ``pipeLogLevel`` and ``pipeLogExecutionData``).
    encryption_key
        A customer-managed KMS key for the DLQ and the log group (the pipeline's ``encryption_key``);
        ``None`` for SSE-SQS and the key CloudWatch Logs manages.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        table: dynamodb.ITable,
        target: sqs.IQueue,
        alarm_topic: sns.ITopic,
        label: str,
        description: str,
        role_description: str,
        dead_letter_description: str,
        filter_pattern: Mapping[str, Any] | None,
        target_parameters: pipes.CfnPipe.PipeTargetParametersProperty | None,
        log_level: PipeLogLevel = "ERROR",
        log_execution_data: bool = False,
        encryption_key: kms.IKey | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        if log_level not in PIPE_LOG_LEVELS:
            raise ValueError(f"pipe log level {log_level!r} is not one of {PIPE_LOG_LEVELS}")
        stream_arn = table.table_stream_arn
        if stream_arn is None:
            raise ValueError(f"the {label}'s source table has no stream")

        self.dead_letters = AlarmedDeadLetterQueue(
            self,
            "DeadLetters",
            alarm_topic=alarm_topic,
            fifo=False,
            description=dead_letter_description,
            encryption_key=encryption_key,
        )
        self.dead_letter_queue: sqs.IQueue = self.dead_letters.queue
        dead_letter_resource = self.dead_letters.queue.node.default_child
        assert dead_letter_resource is not None
        Validations.of(dead_letter_resource).acknowledge(
            Acknowledgment(
                id="AwsSolutions::AwsSolutions-SQS3",
                reason=f"This is the {label}'s dead-letter queue (the pipe's DeadLetterConfig, which the "
                "rule does not recognise, unlike a queue redrive policy); it is alarmed at > 0.",
            )
        )
        self.log_group = logs.LogGroup(self, "Logs", retention=LOG_RETENTION, encryption_key=encryption_key)
        if encryption_key is None:  # with a customer-managed key, the check passes
            checkov.skip(self.log_group, "CKV_AWS_158", checkov.LOG_GROUP_KEY_REASON)
        self.name = Names.unique_resource_name(self, max_length=PIPE_NAME_MAX_LENGTH, separator="-")
        self.role = self._role(table, target, role_description)

        filters = [pipes.CfnPipe.FilterProperty(pattern=json.dumps(filter_pattern))] if filter_pattern else None
        self.pipe = pipes.CfnPipe(
            self,
            "Pipe",
            name=self.name,
            description=description,
            role_arn=self.role.role_arn,
            source=stream_arn,
            source_parameters=pipes.CfnPipe.PipeSourceParametersProperty(
                filter_criteria=pipes.CfnPipe.FilterCriteriaProperty(filters=filters) if filters else None,
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
            target_parameters=target_parameters,
            log_configuration=pipes.CfnPipe.PipeLogConfigurationProperty(
                level=log_level,
                cloudwatch_logs_log_destination=pipes.CfnPipe.CloudwatchLogsLogDestinationProperty(
                    log_group_arn=self.log_group.log_group_arn
                ),
                # Off by default: execution data is the records' payload, tenant data included. Switch it
                # on (context pipeLogExecutionData) to see what the pipe really sent.
                include_execution_data=["ALL"] if log_execution_data else None,
            ),
        )
        # The role's policy must exist before the pipe starts polling, or its first reads fail; the
        # role itself is already a dependency through RoleArn. So must the DLQ's policy, which admits the role:
        # a replaced role is admitted before the pipe writes a failed batch as it.
        self.pipe.node.add_dependency(self.role.node.find_child("DefaultPolicy"))
        self.pipe.node.add_dependency(self.dead_letters.send_deny.policy)
        self.pipe_name: str = self.pipe.ref

    @property
    def arn(self) -> str:
        """The pipe's ARN, built from its name (no reference to the pipe: its role may name it)."""
        return Stack.of(self).format_arn(service="pipes", resource="pipe", resource_name=self.name)

    def trust_conditions(self) -> dict[str, dict[str, str]]:
        """What Pipes must show to assume the role: this account (``aws:SourceAccount``), and this pipe
        (``aws:SourceArn``, which Pipes sets to the pipe's ARN: docs/aws-behaviour.md R10.10)."""
        return {"StringEquals": {"aws:SourceAccount": Stack.of(self).account}, "ArnEquals": {"aws:SourceArn": self.arn}}

    def _role(self, table: dynamodb.ITable, target: sqs.IQueue, description: str) -> iam.Role:
        """Exactly: read this stream, send to the target and the DLQ, write the pipe's logs."""
        role = iam.Role(
            self,
            "Role",
            description=description,
            # Only this pipe may act as it: another pipe of the account given this role (iam:PassRole) cannot.
            assumed_by=iam.ServicePrincipal(PIPES_PRINCIPAL, conditions=self.trust_conditions()),
        )
        # With a customer-managed key on the table, kms:Decrypt and kms:DescribeKey on it too, which a pipe
        # needs to read an encrypted source (EventBridge Pipes user guide, "Custom encryption failures").
        table.grant_stream_read(role)
        policy_resource = role.node.find_child("DefaultPolicy").node.default_child
        assert policy_resource is not None
        Validations.of(policy_resource).acknowledge(
            Acknowledgment(
                id="AwsSolutions::AwsSolutions-IAM5[Resource::*]",
                reason="dynamodb:ListStreams (from grant_stream_read) supports no resource-level "
                "permissions; DescribeStream, GetRecords and GetShardIterator are scoped to this stream.",
            )
        )
        # A queue with SSE-KMS grants its key with the send (kms:GenerateDataKey* and kms:Decrypt among the
        # actions, what an SQS producer needs): the target, and the DLQ the pipe writes failed batches to.
        target.grant_send_messages(role)
        self.dead_letter_queue.grant_send_messages(role)
        self.dead_letters.admit_sender(role)  # its policy denies every other principal's send
        if target.encryption_master_key is not None or self.dead_letter_queue.encryption_master_key is not None:
            acknowledge_key_wildcards(role, "grant_send_messages on the pipe's target and DLQ")
        # Writing to an encrypted log group needs no key permission: CloudWatch Logs itself uses the key.
        self.log_group.grant_write(role)
        return role
