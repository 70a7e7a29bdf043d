"""The relay: an EventBridge Pipe from the events table's stream into the durable FIFO queue.

No relay code runs anywhere: the pipe polls the stream, keeps only inserted event rows, and sends each
one's raw NewImage to the queue with the tenant as the message group and the event id as the
deduplication id. Every failure it cannot retry away ends in its alarmed dead-letter queue. What all
pipes share (source settings, DLQ, role, logs) is in ``stream_pipe``.
"""

from __future__ import annotations

from typing import Final

from aws_cdk import aws_kms as kms
from aws_cdk import aws_pipes as pipes
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from outbox_cdk.events_table import EventsTable
from outbox_cdk.stream_pipe import PIPE_LOG_LEVELS, PipeLogLevel, StreamPipe

__all__ = ["PIPE_LOG_LEVELS", "PipeLogLevel", "RelayPipe"]

# Attribute names of an event row, as written by the engine's emit() (outbox.log.envelope.Envelope.to_item).
KIND_ATTRIBUTE: Final = "kind"
EVENT_KIND: Final = "EVENT"  # outbox.keys.KIND_EVENT; chain heads carry "HEAD" and must not be relayed
TENANT_ATTRIBUTE: Final = "tenant"
EVENT_ID_ATTRIBUTE: Final = "event_id"

# Inserted event rows only, by what is certain: the kind in the new image, and no old image (the stream
# carries NEW_AND_OLD_IMAGES, so only an insert lacks one). Chain heads, tenant rows, removals (no new
# image) and rewrites of an event row (an old image) do not match. Not eventName: whether Pipes filters on
# it is uncertain (one AWS page says it cannot), and a pattern on a field Pipes ignores or refuses would
# silence the durable lane. Equality and exists only, both supported by Pipes; exists on the leaf (the
# "S" of the old kind), as exists does not work on intermediate nodes.
FILTER_PATTERN: Final = {
    "dynamodb": {
        "NewImage": {KIND_ATTRIBUTE: {"S": [EVENT_KIND]}},
        "OldImage": {KIND_ATTRIBUTE: {"S": [{"exists": False}]}},
    }
}
# The raw image as one blob; the consumer parses the DynamoDB JSON itself. Safe here, unlike on the
# record-change pipe: the filter admits records with a NewImage only.
INPUT_TEMPLATE: Final = "<$.dynamodb.NewImage>"
# Dynamic target parameters are evaluated against the stream record, not the rendered template (R2.2).
MESSAGE_GROUP_ID_PATH: Final = f"$.dynamodb.NewImage.{TENANT_ATTRIBUTE}.S"
MESSAGE_DEDUPLICATION_ID_PATH: Final = f"$.dynamodb.NewImage.{EVENT_ID_ATTRIBUTE}.S"


class RelayPipe(StreamPipe):
    """The events stream's inserted event rows, into the durable FIFO queue.

    A replaced pipe re-sends the stream's events younger than its maximum record age (TRIM_HORIZON; older
    ones, up to the stream's 24 h, go to the pipe's DLQ); SQS deduplicates only for 5 minutes, and the inbox
    claim absorbs the rest. Whatever reaches the DLQ is recovered by reconciliation from the events table,
    not by redrive.
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
        encryption_key: kms.IKey | None = None,
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
            encryption_key=encryption_key,
        )
