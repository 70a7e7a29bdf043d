"""An emulated pipe's SQS target: each record rendered into a message (the input template, and the dynamic
group and deduplication ids read from the stream record, R2.2), sent with SendMessageBatch (halved on a
refusal for size when the pipe bisects, R4.1), and the metadata of a failed batch written to the pipe's DLQ.
The R numbers are docs/aws-behaviour.md's."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from outbox.local.clock import VirtualClock
from outbox.local.pipe_model import PipeConfig, PipeCounters, PipeFaults, PipeRecord, TargetInvocationError
from outbox.local.pipe_template import (
    InputTemplateError,
    PipeVariables,
    iso8601,
    render_input_template,
    resolve_dynamic_parameter,
)

# What SQS says when a request is refused for what it carries: sending less of it can succeed.
_CONTENT_ERRORS = frozenset(
    {"AWS.SimpleQueueService.BatchRequestTooLong", "BatchRequestTooLong", "InvalidParameterValue"}
)


@dataclass
class TargetMessage:
    record: PipeRecord
    body: str
    group_id: str | None
    deduplication_id: str | None

    def entry(self, index: int) -> dict[str, Any]:
        entry: dict[str, Any] = {"Id": str(index), "MessageBody": self.body}
        if self.group_id is not None:
            entry["MessageGroupId"] = self.group_id
        if self.deduplication_id is not None:
            entry["MessageDeduplicationId"] = self.deduplication_id
        return entry


class SqsTarget:
    """The queue a pipe sends to, and its dead-letter queue."""

    def __init__(
        self, config: PipeConfig, sqs: Any, clock: VirtualClock, counters: PipeCounters, pipe_arn: str
    ) -> None:
        self.config = config
        self._sqs = sqs
        self._clock = clock
        self._counters = counters
        self._pipe_arn = pipe_arn
        self.target_arn = _queue_arn(sqs, config.target_queue_url)

    def render(self, records: list[PipeRecord]) -> tuple[list[TargetMessage], dict[str, str]]:
        """The messages of ``records``, and the failures by eventID of those whose template cannot render."""
        messages: list[TargetMessage] = []
        failures: dict[str, str] = {}
        for record in records:
            try:
                messages.append(self._message(record))
            except InputTemplateError as exc:
                failures[record.event_id] = f"target transformation failed: {exc}"
        return messages, failures

    def send(self, messages: list[TargetMessage], faults: PipeFaults) -> dict[str, str]:
        """SendMessageBatch; the failures by eventID. A rejected call fails every entry in it, unless
        AUTOMATIC_BISECT is on and SQS refused the request for what it carries (a batch over 1 MiB, a message
        over the queue's size): then each half is sent on its own, down to the one record that cannot go.
        Halves are sent in order, so a tenant's events keep theirs. [UNCERTAIN: whether Pipes also bisects
        on a target's 5xx; the emulator retries those whole.]"""
        if not messages:
            return {}
        entries = [message.entry(index) for index, message in enumerate(messages)]
        try:
            if faults.before_send is not None:
                faults.before_send(entries)
            response = self._sqs.send_message_batch(QueueUrl=self.config.target_queue_url, Entries=entries)
        except (ClientError, TargetInvocationError) as exc:
            if self.config.automatic_bisect and len(messages) > 1 and _refused_for_content(exc):
                self._counters.bisections += 1
                half = len(messages) // 2
                return {**self.send(messages[:half], faults), **self.send(messages[half:], faults)}
            return {message.record.event_id: f"SQS SendMessageBatch failed: {exc}" for message in messages}
        failures = {
            messages[int(failed["Id"])].record.event_id: f"SQS rejected the entry: {failed.get('Code')}: "
            f"{failed.get('Message', '')}"
            for failed in response.get("Failed", [])
        }
        self._maybe_duplicate(messages, entries, failures, faults)
        return failures

    def dead_letter_body(
        self, shard_id: str, records: list[PipeRecord], condition: str, reason: str, attempts: int
    ) -> dict[str, Any]:
        """Batch metadata, not the records (R4.1: a stream source's DLQ). The shape follows Lambda's
        stream on-failure record; AWS does not document the Pipes one field by field [UNCERTAIN]."""
        first, last = records[0], records[-1]
        return {
            "requestContext": {
                "requestId": str(uuid.uuid4()),
                "pipeArn": self._pipe_arn,
                "condition": condition,
                "approximateInvokeCount": attempts,
            },
            "errorMessage": reason,
            "version": "1.0",
            "timestamp": iso8601(self._clock()),
            "DDBStreamBatchInfo": {
                "shardId": shard_id,
                "startSequenceNumber": first.sequence_number,
                "endSequenceNumber": last.sequence_number,
                "approximateArrivalOfFirstRecord": iso8601(first.created),
                "approximateArrivalOfLastRecord": iso8601(last.created),
                "batchSize": len(records),
                "streamArn": self.config.stream_arn,
            },
        }

    def send_dead_letter(self, shard_id: str, body: dict[str, Any]) -> None:
        assert self.config.dead_letter_queue_url is not None
        request: dict[str, Any] = {"QueueUrl": self.config.dead_letter_queue_url, "MessageBody": json.dumps(body)}
        if self.config.dead_letter_queue_url.endswith(".fifo"):
            request.update(MessageGroupId=shard_id, MessageDeduplicationId=body["requestContext"]["requestId"])
        self._sqs.send_message(**request)

    def _message(self, record: PipeRecord) -> TargetMessage:
        variables = PipeVariables(
            pipe_name=self.config.name,
            pipe_arn=self._pipe_arn,
            source_arn=self.config.stream_arn,
            target_arn=self.target_arn,
            ingestion_time=record.first_seen,
        )
        body = render_input_template(self.config.input_template, record.event, variables)
        # Dynamic parameters read the stream record, not the rendered body (R2.2).
        return TargetMessage(
            record,
            body,
            _dynamic(self.config.message_group_id, record),
            _dynamic(self.config.message_deduplication_id, record),
        )

    def _maybe_duplicate(
        self,
        messages: list[TargetMessage],
        entries: list[dict[str, Any]],
        failures: dict[str, str],
        faults: PipeFaults,
    ) -> None:
        hook = faults.duplicate_delivery
        if hook is None or not hook([message.record for message in messages]):
            return
        accepted = [entry for entry, m in zip(entries, messages, strict=True) if m.record.event_id not in failures]
        if accepted:
            self._counters.duplicate_sends += 1
            self._sqs.send_message_batch(QueueUrl=self.config.target_queue_url, Entries=accepted)


def _dynamic(value: str | None, record: PipeRecord) -> str | None:
    return None if value is None else resolve_dynamic_parameter(value, record.event)


def _queue_arn(sqs: Any, queue_url: str) -> str:
    attributes = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]
    return str(attributes["QueueArn"])


def _refused_for_content(exc: Exception) -> bool:
    return isinstance(exc, ClientError) and exc.response.get("Error", {}).get("Code") in _CONTENT_ERRORS
