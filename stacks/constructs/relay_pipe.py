"""The relay: an EventBridge Pipe from the events table's stream into the durable FIFO queue.

No relay code runs anywhere: the pipe polls the stream, keeps only inserted event rows, and sends each
one's raw NewImage to the queue with the tenant as the message group and the event id as the
deduplication id. Every failure it cannot retry away ends in its alarmed dead-letter queue. What all
pipes share (source settings, DLQ, role, logs) is in ``stream_pipe``.
"""

from __future__ import annotations

from typing import Final

from aws_cdk import aws_pipes as pipes
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from stacks.constructs.events_table import EventsTable
from stacks.constructs.stream_pipe import PIPE_LOG_LEVELS, PipeLogLevel, StreamPipe

__all__ = ["PIPE_LOG_LEVELS", "PipeLogLevel", "RelayPipe"]

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
# DynamoDB JSON itself. Safe here, unlike on the record-change pipe: the filter admits INSERTs only,
# and every INSERT has a NewImage.
INPUT_TEMPLATE: Final = "<$.dynamodb.NewImage>"
# Dynamic target parameters are evaluated against the stream record, not the rendered template (R2.2).
MESSAGE_GROUP_ID_PATH: Final = f"$.dynamodb.NewImage.{TENANT_ATTRIBUTE}.S"
MESSAGE_DEDUPLICATION_ID_PATH: Final = f"$.dynamodb.NewImage.{EVENT_ID_ATTRIBUTE}.S"


class RelayPipe(StreamPipe):
    """The events stream's inserted event rows, into the durable FIFO queue.

    A replaced pipe re-sends up to 24 h of events (TRIM_HORIZON); SQS deduplicates only for 5 minutes,
    and the inbox claim absorbs the rest. Whatever reaches the DLQ is recovered by reconciliation from
    the events table, not by redrive.
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
        super().__init__(
            scope,
            construct_id,
            table=events.table,
            target=target,
            alarm_topic=alarm_topic,
            label="relay pipe",
            description="Relays inserted event rows from the events stream to the durable FIFO queue",
            role_description="The relay pipe: reads the events stream, sends to the durable queue and its DLQ",
            dead_letter_description="stream batches the relay pipe could not deliver (reconcile from the events table)",
            filter_pattern=FILTER_PATTERN,
            target_parameters=pipes.CfnPipe.PipeTargetParametersProperty(
                input_template=INPUT_TEMPLATE,
                sqs_queue_parameters=pipes.CfnPipe.PipeTargetSqsQueueParametersProperty(
                    message_group_id=MESSAGE_GROUP_ID_PATH,
                    message_deduplication_id=MESSAGE_DEDUPLICATION_ID_PATH,
                ),
            ),
            log_level=log_level,
            log_execution_data=log_execution_data,
        )
