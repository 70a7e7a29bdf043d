"""The record-change pipe: the data table's row changes, into the record-change (BEST_EFFORT) queue."""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from outbox.best_effort.changes import entity_filter
from outbox_cdk.stream_pipe import PipeLogLevel, StreamPipe


class RecordChangePipe(StreamPipe):
    """The data table's stream, record by record, into the standard record-change queue.

    ``entities``: the entities whose row changes a BEST_EFFORT subscription watches; the pipe drops every
    other row's change at the source (``entity_filter``), so the queue, its consumer and their bills see only
    what someone reads (R3.5). None: every row change, and the consumer logs what matched no subscriber.

    No filter on the operation. The pattern ``{"eventName": ["INSERT", "MODIFY", "REMOVE"]}`` would name every value a
    DynamoDB stream record's eventName can take (docs/aws-behaviour.md R7.3), so it would select nothing; it
    would only add a dependency on eventName being filterable in Pipes, which one AWS page denies
    (R3.4). Should that page be right, the pattern would be refused at creation, or worse, match no
    record, and the lane would go quiet. Which row changes a subscriber cares about is the consumer's
    business: it matches them against the BEST_EFFORT subscriptions and logs what matched nothing.

    No input template, so each message body is the whole stream record as the pipe sees it (eventName,
    dynamodb.Keys, NewImage and/or OldImage, SequenceNumber, eventSourceARN, ...). Any template that
    names ``$.dynamodb.NewImage`` or ``$.dynamodb.OldImage`` breaks on the records that lack it: an
    INSERT has no OldImage and a REMOVE no NewImage. A path that does not resolve raises nothing at
    creation; the pipe just stops delivering those records (a silent failure: docs/aws-behaviour.md R2.3
    and its decisions). Without a template there is no path to miss.

    No target parameters either: a standard queue takes no message group or deduplication id. A replaced
    pipe re-sends the row changes younger than its maximum record age (TRIM_HORIZON; older ones go to the
    pipe's DLQ), and SQS may deliver any message twice, so
    best-effort handlers must tolerate a repeat. What reaches the DLQ is a shard and sequence range, not
    the records: recover by rebuilding the affected projections from the data table.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        table: dynamodb.ITable,
        target: sqs.IQueue,
        alarm_topic: sns.ITopic,
        log_level: PipeLogLevel = "ERROR",
        log_execution_data: bool = False,
        encryption_key: kms.IKey | None = None,
        entities: Sequence[str] | None = None,
    ) -> None:
        super().__init__(
            scope,
            construct_id,
            table=table,
            target=target,
            alarm_topic=alarm_topic,
            label="record-change pipe",
            description=(
                "Forwards every row change of the application table to the record-change queue (best effort)"
                if entities is None
                else "Forwards the row changes of the watched entities to the record-change queue (best effort)"
            ),
            role_description="The record-change pipe: reads the data stream, sends to the record-change queue "
            "and its DLQ",
            dead_letter_description="stream batches the record-change pipe could not deliver (rebuild the "
            "affected projections from the source table)",
            filter_pattern=None if entities is None else entity_filter(entities),
            target_parameters=None,
            log_level=log_level,
            log_execution_data=log_execution_data,
            encryption_key=encryption_key,
        )
