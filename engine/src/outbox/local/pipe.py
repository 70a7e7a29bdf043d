"""An EventBridge Pipe from a DynamoDB stream to an SQS queue, emulated over moto and the virtual clock.

moto stores pipes but delivers nothing (docs/aws-behaviour.md M22), so this module does what the Pipes
service does for this source and target:

- reads the stream with real shard iterators (DescribeStream, GetShardIterator, GetRecords);
- filters each record (dropped records move the checkpoint past them, R3.1), renders the input
  template and resolves the dynamic group and deduplication ids against the stream record (R2.2);
- sends batches of at most 10 with SendMessageBatch (R2.4);
- keeps one checkpoint per shard that moves only when a batch is fully handled (R4.3), so a failing
  batch blocks the records behind it in its shard, as in AWS (R4.2, R4.6);
- retries what failed per ``MaximumRetryAttempts`` and ``MaximumRecordAgeInSeconds`` (R4.1, R4.5),
  then writes the batch's metadata, not its records, to the pipe DLQ;
- logs every failure at ERROR, to ``logging`` and to ``PipeEmulator.log`` (R4.7), where AWS would
  stay silent about an unresolved path ("Decisions where the sources disagree" in docs/aws-behaviour.md).

Example
-------
>>> pipe = PipeEmulator(config, streams=streams_client, sqs=sqs_client, clock=clock)  # doctest: +SKIP
>>> pipe.drain()  # doctest: +SKIP
"""

from __future__ import annotations

import base64
import json
import logging
import math
import uuid
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Final, Literal

from botocore.exceptions import ClientError

from outbox.local import aws_fixes
from outbox.local.aws_fixes.dynamodb import STREAM_RECORDS
from outbox.local.clock import VirtualClock
from outbox.local.pipe_filter import compile_filter_criteria
from outbox.local.pipe_template import (
    PipeVariables,
    TemplateError,
    iso8601,
    render_input_template,
    resolve_dynamic_parameter,
)

__all__ = [
    "PipeConfig",
    "PipeCounters",
    "PipeEmulator",
    "PipeFaults",
    "PipeInternalError",
    "PipeLogEntry",
    "PipeRecord",
    "PollResult",
    "TargetInvocationError",
    "exponential_backoff",
    "reverse_items",
]

logger = logging.getLogger(__name__)

SQS_BATCH_LIMIT: Final = 10  # a pipe to SQS sends at most 10 messages per batch (R2.4)
STARTING_POSITIONS: Final = ("TRIM_HORIZON", "LATEST")
RETRY_EXHAUSTED: Final = "RetryAttemptsExhausted"
RECORD_AGE_EXCEEDED: Final = "RecordAgeExceeded"
# The stream record's own fields that a pipe event carries (R7.3); eventSourceARN is added.
_RECORD_FIELDS: Final = ("eventID", "eventName", "eventVersion", "eventSource", "awsRegion", "userIdentity")

PollOutcome = Literal["filtered", "delivered", "retrying", "dead_lettered"]
LogLevel = Literal["ERROR", "WARN", "INFO"]


class TargetInvocationError(Exception):
    """A fault hook raises this (or a botocore ``ClientError``) to fail a send; it counts as a retry (R4.5)."""


class PipeInternalError(Exception):
    """A fault hook raises this for a pipe-internal error: retried, never counted against retries (R4.5)."""


@dataclass(frozen=True)
class PipeConfig:
    """What the emulator needs from an ``AWS::Pipes::Pipe`` with a DynamoDB stream source and an SQS target."""

    name: str
    stream_arn: str
    target_queue_url: str
    filter_patterns: list[str] = field(default_factory=list)
    input_template: str | None = None
    message_group_id: str | None = None
    message_deduplication_id: str | None = None
    batch_size: int = SQS_BATCH_LIMIT
    maximum_retry_attempts: int = -1  # -1: until the record expires (R4.1)
    maximum_record_age_seconds: int = -1  # -1: never expires (R4.1)
    starting_position: str = "TRIM_HORIZON"
    dead_letter_queue_url: str | None = None
    automatic_bisect: bool = False  # OnPartialBatchItemFailure: AUTOMATIC_BISECT (R4.1)

    def __post_init__(self) -> None:
        if not 1 <= self.batch_size <= SQS_BATCH_LIMIT:
            raise ValueError(f"batch_size {self.batch_size}: a pipe to SQS takes 1 to {SQS_BATCH_LIMIT} (R2.4)")
        if not -1 <= self.maximum_retry_attempts <= 10000:
            raise ValueError(f"maximum_retry_attempts {self.maximum_retry_attempts} is outside -1..10000 (R4.1)")
        if not -1 <= self.maximum_record_age_seconds <= 604800:
            raise ValueError(f"maximum_record_age_seconds {self.maximum_record_age_seconds} is outside -1..604800")
        if self.starting_position not in STARTING_POSITIONS:
            raise ValueError(f"starting_position {self.starting_position!r} is not one of {STARTING_POSITIONS}")
        compile_filter_criteria(self.filter_patterns)  # Pipes refuses a bad pattern at creation (R3.1)


@dataclass(frozen=True)
class PipeRecord:
    """One stream record as the pipe sees it: the pipe event (R7.3 plus eventSourceARN) and when it arrived."""

    shard_id: str
    event: dict[str, Any]
    first_seen: datetime

    @property
    def event_id(self) -> str:
        return str(self.event["eventID"])

    @property
    def created(self) -> datetime:
        """When the stream record was written (ApproximateCreationDateTime, epoch seconds): what
        MaximumRecordAgeInSeconds counts from on AWS, however late the pipe first reads it."""
        created = self.event["dynamodb"].get("ApproximateCreationDateTime")
        return datetime.fromtimestamp(created, UTC) if isinstance(created, int | float) else self.first_seen

    @property
    def sequence_number(self) -> str:
        return str(self.event["dynamodb"]["SequenceNumber"])

    @property
    def item_key(self) -> str:
        return json.dumps(self.event["dynamodb"].get("Keys", {}), sort_keys=True)


@dataclass(frozen=True)
class PipeLogEntry:
    pipe_name: str
    level: LogLevel
    message: str
    event_id: str | None
    timestamp: datetime


@dataclass
class PipeCounters:
    received: int = 0
    filtered_out: int = 0
    delivered: int = 0
    failed_attempts: int = 0
    dead_lettered: int = 0
    internal_errors: int = 0
    duplicate_sends: int = 0
    bisections: int = 0  # batches halved by AUTOMATIC_BISECT


@dataclass(frozen=True)
class PollResult:
    """What one poll did, by eventID."""

    outcome: PollOutcome
    shard_id: str | None = None
    delivered: tuple[str, ...] = ()
    failed: tuple[str, ...] = ()
    dead_lettered: tuple[str, ...] = ()
    filtered_out: int = 0


@dataclass
class PipeFaults:
    """Fault hooks. Each is optional; each sees the records (in send order) or the entries about to go out.

    - ``before_send(entries)``: raise ``ClientError`` or ``TargetInvocationError`` to fail the send,
      ``PipeInternalError`` for an error that does not count against retries;
    - ``duplicate_delivery(records)``: return True to send the same entries a second time (at-least-once
      delivery: FIFO deduplication should collapse it);
    - ``reorder(records)``: return a new order; only records of different items may change places,
      because stream order is promised per item only (R7.1). ``reverse_items`` is one such hook.
    """

    before_send: Callable[[Sequence[Mapping[str, Any]]], None] | None = None
    duplicate_delivery: Callable[[Sequence[PipeRecord]], bool] | None = None
    reorder: Callable[[list[PipeRecord]], list[PipeRecord]] | None = None


def exponential_backoff(attempts: int) -> timedelta:
    """1 s, 2 s, 4 s ... capped at a minute. AWS backs off "gradually" without numbers (R4.5)."""
    return timedelta(seconds=min(2 ** max(attempts - 1, 0), 60))


def reverse_items(records: list[PipeRecord]) -> list[PipeRecord]:
    """A ``reorder`` hook: items in reverse order of first appearance, each item's records in stream order."""
    by_item: dict[str, list[PipeRecord]] = {}
    for record in records:
        by_item.setdefault(record.item_key, []).append(record)
    return [record for item in reversed(by_item.values()) for record in item]


@dataclass
class _Message:
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


@dataclass
class _Batch:
    """The batch a shard is working on: what is still undelivered, and where the checkpoint goes after it."""

    records: list[PipeRecord]
    end_sequence: str
    attempts: int = 0
    internal_errors: int = 0
    retry_at: datetime | None = None


@dataclass
class _Shard:
    shard_id: str
    parent_id: str | None
    iterator: str | None
    buffer: deque[PipeRecord] = field(default_factory=deque)
    checkpoint: str | None = None
    batch: _Batch | None = None
    # The count of stream records published when this shard was last read to its end (None: not read out yet).
    read_out_at: int | None = None

    @property
    def has_work(self) -> bool:
        return bool(self.buffer) or self.batch is not None

    @property
    def finished(self) -> bool:
        """Closed, read to its end and fully handled (a child shard waits for this, R4.2)."""
        return self.iterator is None and not self.has_work


class PipeEmulator:
    """One pipe: DynamoDB stream source, SQS target. ``poll()`` handles one batch; ``drain()`` all of them."""

    def __init__(
        self,
        config: PipeConfig,
        streams: Any,
        sqs: Any,
        clock: VirtualClock,
        *,
        faults: PipeFaults | None = None,
        backoff: Callable[[int], timedelta] = exponential_backoff,
    ) -> None:
        self.config = config
        self._streams = streams
        self._sqs = sqs
        self._clock = clock
        self.faults = faults or PipeFaults()
        self._backoff = backoff
        self._matcher = compile_filter_criteria(config.filter_patterns)
        self._shards: dict[str, _Shard] = {}
        self._turn = 0
        self.counters = PipeCounters()
        self.log: list[PipeLogEntry] = []
        self.pipe_arn = _pipe_arn(config)
        self.target_arn = _queue_arn(sqs, config.target_queue_url)
        # How often the shard list is read again (DescribeStream): None, before every poll. Pipes learns of
        # new shards from time to time and when a shard it reads ends; a simulator polling thousands of
        # times sets an interval here, since each DescribeStream costs as much as a batch.
        self.shard_refresh_interval: timedelta | None = None
        self._shards_listed: tuple[datetime, int] | None = None  # when, and how many shards had ended
        # The starting position applies to the shards open when the pipe starts; shards that appear
        # later are children of those and are read from their start.
        self._discover_shards(config.starting_position)

    @property
    def checkpoints(self) -> dict[str, str | None]:
        """Per shard, the sequence number of the last record fully handled (None: nothing yet)."""
        return {shard_id: shard.checkpoint for shard_id, shard in self._shards.items()}

    @property
    def pending(self) -> bool:
        """Whether records already read wait to be handled (new stream records are seen on the next poll)."""
        return any(shard.has_work for shard in self._shards.values())

    @property
    def next_retry_at(self) -> datetime | None:
        """When the earliest failed batch may be retried; None if no batch is waiting."""
        waits = [shard.batch.retry_at for shard in self._shards.values() if shard.batch and shard.batch.retry_at]
        return min(waits, default=None)

    def poll(self) -> PollResult | None:
        """Read the stream, then make one attempt at one batch of one shard.

        None when there is nothing to do now: no records, or every failed batch still backs off (then
        ``next_retry_at`` says until when).
        """
        self._read_streams()
        now = self._clock()
        due = [
            shard
            for shard in self._shards.values()
            if shard.has_work and self._parent_finished(shard) and not _waiting(shard.batch, now)
        ]
        if not due:
            return None
        shard = due[self._turn % len(due)]
        self._turn += 1
        return self._handle(shard)

    def drain(self, max_polls: int = 10_000) -> list[PollResult]:
        """Poll until nothing is pending, letting virtual time pass while a failed batch backs off."""
        results: list[PollResult] = []
        for _ in range(max_polls):
            result = self.poll()
            if result is not None:
                results.append(result)
                continue
            retry_at = self.next_retry_at
            if retry_at is None:
                return results
            self._clock.advance(max(retry_at - self._clock(), timedelta(0)))
        raise RuntimeError(f"pipe {self.config.name} still had work after {max_polls} polls")

    # -- reading the stream ---------------------------------------------------------------------------

    def _discover_shards(self, position: str) -> None:
        self._shards_listed = (self._clock(), self._ended_shards())
        for description in self._describe_shards():
            shard_id = description["ShardId"]
            if shard_id in self._shards:
                continue
            iterator = self._streams.get_shard_iterator(
                StreamArn=self.config.stream_arn, ShardId=shard_id, ShardIteratorType=position
            )["ShardIterator"]
            self._shards[shard_id] = _Shard(shard_id, description.get("ParentShardId"), iterator)

    def _shard_list_stale(self) -> bool:
        if self.shard_refresh_interval is None or self._shards_listed is None:
            return True
        listed_at, ended = self._shards_listed
        return self._clock() - listed_at >= self.shard_refresh_interval or self._ended_shards() > ended

    def _ended_shards(self) -> int:
        return sum(1 for shard in self._shards.values() if shard.iterator is None)

    def _describe_shards(self) -> list[dict[str, Any]]:
        shards: list[dict[str, Any]] = []
        request: dict[str, Any] = {"StreamArn": self.config.stream_arn}
        while True:
            description = self._streams.describe_stream(**request)["StreamDescription"]
            shards.extend(description["Shards"])
            if not description.get("LastEvaluatedShardId"):
                return shards
            request["ExclusiveStartShardId"] = description["LastEvaluatedShardId"]

    def _read_streams(self) -> None:
        if self._shard_list_stale():
            self._discover_shards("TRIM_HORIZON")
        for shard in self._shards.values():
            self._read_shard(shard)

    def _read_shard(self, shard: _Shard) -> None:
        """Buffer every record now readable. Its age counts from its ApproximateCreationDateTime, which the
        local runtime's DynamoDB fixes stamp on the virtual clock (M5), not from when the pipe reads it.

        With the fixes installed, a shard read to its end is read again only once a stream record was published
        somewhere: an empty GetRecords changes nothing, and a pipe polls every step of the runtime."""
        published = STREAM_RECORDS.published if aws_fixes.installed() else None
        if published is not None and shard.read_out_at == published:
            return
        while shard.iterator is not None:
            response = self._streams.get_records(ShardIterator=shard.iterator)
            shard.iterator = response.get("NextShardIterator")  # None once a closed shard is read out
            records = response["Records"]
            for raw in records:
                shard.buffer.append(PipeRecord(shard.shard_id, self._pipe_event(raw), self._clock()))
            self.counters.received += len(records)
            if not records:
                shard.read_out_at = published
                return

    def _pipe_event(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        """The record as Pipes hands it on: the R7.3 fields plus eventSourceARN, as JSON-ready values."""
        event = {name: raw[name] for name in _RECORD_FIELDS if name in raw}
        dynamodb = dict(raw["dynamodb"])
        created = dynamodb.get("ApproximateCreationDateTime")
        if isinstance(created, datetime):
            # Epoch seconds, rounded down (R7.3); boto3 parses it into a datetime, moto adds milliseconds.
            dynamodb["ApproximateCreationDateTime"] = math.floor(created.timestamp())
        event["dynamodb"] = _json_ready(dynamodb)
        event["eventSourceARN"] = self.config.stream_arn
        return event

    def _parent_finished(self, shard: _Shard) -> bool:
        parent = self._shards.get(shard.parent_id) if shard.parent_id else None
        return parent is None or parent.finished

    # -- handling a batch -----------------------------------------------------------------------------

    def _handle(self, shard: _Shard) -> PollResult:
        if shard.batch is None:
            filtered = self._start_batch(shard)
            if shard.batch is None:
                return PollResult("filtered", shard.shard_id, filtered_out=filtered)
        batch = shard.batch
        expired = self._dead_letter_expired(shard, batch)
        if not batch.records:
            self._finish(shard)
            return PollResult("dead_lettered", shard.shard_id, dead_lettered=expired)
        return self._attempt(shard, batch, expired)

    def _start_batch(self, shard: _Shard) -> int:
        """Take up to ``batch_size`` matching records from the buffer; drop the ones the filter rejects."""
        matching: list[PipeRecord] = []
        filtered = 0
        last: PipeRecord | None = None
        while shard.buffer and len(matching) < self.config.batch_size:
            last = shard.buffer.popleft()
            if self._matcher.matches(last.event):
                matching.append(last)
            else:
                filtered += 1
        self.counters.filtered_out += filtered
        if last is None:
            return 0
        if matching:
            shard.batch = _Batch(matching, last.sequence_number)
        else:
            shard.checkpoint = last.sequence_number  # R3.1: the iterator moves past dropped records
        return filtered

    def _dead_letter_expired(self, shard: _Shard, batch: _Batch) -> tuple[str, ...]:
        max_age = self.config.maximum_record_age_seconds
        if max_age < 0:
            return ()
        cutoff = self._clock() - timedelta(seconds=max_age)
        expired = [record for record in batch.records if record.created < cutoff]
        if not expired:
            return ()
        batch.records = [record for record in batch.records if record.created >= cutoff]
        reason = f"{len(expired)} record(s) older than MaximumRecordAgeInSeconds={max_age}"
        self._dead_letter(shard, expired, RECORD_AGE_EXCEEDED, reason, batch.attempts)
        return tuple(record.event_id for record in expired)

    def _attempt(self, shard: _Shard, batch: _Batch, expired: tuple[str, ...]) -> PollResult:
        messages, failures = self._render(self._send_order(batch.records))
        try:
            failures.update(self._send(messages))
        except PipeInternalError as exc:
            return self._internal_error(shard, batch, exc, expired)
        batch.attempts += 1
        for record in batch.records:
            if record.event_id in failures:
                self._error(failures[record.event_id], record.event_id)
        delivered = tuple(m.record.event_id for m in messages if m.record.event_id not in failures)
        self.counters.delivered += len(delivered)
        # What SQS accepted is not sent again; only the remainder is retried (R4.4).
        batch.records = [record for record in batch.records if record.event_id in failures]
        if not batch.records:
            self._finish(shard)
            outcome: PollOutcome = "dead_lettered" if expired else "delivered"
            return PollResult(outcome, shard.shard_id, delivered, dead_lettered=expired)
        return self._failed_attempt(shard, batch, delivered, expired, next(iter(failures.values())))

    def _failed_attempt(
        self, shard: _Shard, batch: _Batch, delivered: tuple[str, ...], expired: tuple[str, ...], reason: str
    ) -> PollResult:
        self.counters.failed_attempts += 1
        failed = tuple(record.event_id for record in batch.records)
        retries = self.config.maximum_retry_attempts
        if 0 <= retries < batch.attempts:
            # With AUTOMATIC_BISECT the failing batch was halved down to the records that fail alone: each one is
            # a failed batch of its own, with its own dead letter (R4.1), never a group of them.
            groups = [[record] for record in batch.records] if self.config.automatic_bisect else [batch.records]
            for group in groups:
                self._dead_letter(shard, group, RETRY_EXHAUSTED, reason, batch.attempts)
            self._finish(shard)
            return PollResult("dead_lettered", shard.shard_id, delivered, failed, expired + failed)
        # The checkpoint stays put: the shard's later records wait behind this batch (R4.3, R4.6).
        batch.retry_at = self._clock() + self._backoff(batch.attempts + batch.internal_errors)
        return PollResult("retrying", shard.shard_id, delivered, failed, expired)

    def _internal_error(
        self, shard: _Shard, batch: _Batch, exc: PipeInternalError, expired: tuple[str, ...]
    ) -> PollResult:
        """R4.5: retried until the records expire, never counted against MaximumRetryAttempts."""
        batch.internal_errors += 1
        self.counters.internal_errors += 1
        self._error(f"pipe internal error, will retry: {exc}", None)
        batch.retry_at = self._clock() + self._backoff(batch.attempts + batch.internal_errors)
        failed = tuple(record.event_id for record in batch.records)
        return PollResult("retrying", shard.shard_id, failed=failed, dead_lettered=expired)

    def _finish(self, shard: _Shard) -> None:
        assert shard.batch is not None
        shard.checkpoint = shard.batch.end_sequence
        shard.batch = None

    # -- rendering and sending ------------------------------------------------------------------------

    def _send_order(self, records: list[PipeRecord]) -> list[PipeRecord]:
        if self.faults.reorder is None:
            return list(records)
        reordered = self.faults.reorder(list(records))
        _check_item_order(records, reordered)
        return reordered

    def _render(self, records: list[PipeRecord]) -> tuple[list[_Message], dict[str, str]]:
        messages: list[_Message] = []
        failures: dict[str, str] = {}
        for record in records:
            try:
                messages.append(self._message(record))
            except TemplateError as exc:
                failures[record.event_id] = f"target transformation failed: {exc}"
        return messages, failures

    def _message(self, record: PipeRecord) -> _Message:
        variables = PipeVariables(
            pipe_name=self.config.name,
            pipe_arn=self.pipe_arn,
            source_arn=self.config.stream_arn,
            target_arn=self.target_arn,
            ingestion_time=record.first_seen,
        )
        body = render_input_template(self.config.input_template, record.event, variables)
        # Dynamic parameters read the stream record, not the rendered body (R2.2).
        return _Message(
            record,
            body,
            self._dynamic(self.config.message_group_id, record),
            self._dynamic(self.config.message_deduplication_id, record),
        )

    @staticmethod
    def _dynamic(value: str | None, record: PipeRecord) -> str | None:
        return None if value is None else resolve_dynamic_parameter(value, record.event)

    def _send(self, messages: list[_Message]) -> dict[str, str]:
        """SendMessageBatch; the failures by eventID. A rejected call fails every entry in it, unless
        AUTOMATIC_BISECT is on and SQS refused the request for what it carries (a batch over 1 MiB, a message
        over the queue's size): then each half is sent on its own, down to the one record that cannot go.
        Halves are sent in order, so a tenant's events keep theirs. [UNCERTAIN: whether Pipes also bisects
        on a target's 5xx; the emulator retries those whole.]"""
        if not messages:
            return {}
        entries = [message.entry(index) for index, message in enumerate(messages)]
        try:
            if self.faults.before_send is not None:
                self.faults.before_send(entries)
            response = self._sqs.send_message_batch(QueueUrl=self.config.target_queue_url, Entries=entries)
        except (ClientError, TargetInvocationError) as exc:
            if self.config.automatic_bisect and len(messages) > 1 and _refused_for_content(exc):
                self.counters.bisections += 1
                half = len(messages) // 2
                return {**self._send(messages[:half]), **self._send(messages[half:])}
            return {message.record.event_id: f"SQS SendMessageBatch failed: {exc}" for message in messages}
        failures = {
            messages[int(failed["Id"])].record.event_id: f"SQS rejected the entry: {failed.get('Code')}: "
            f"{failed.get('Message', '')}"
            for failed in response.get("Failed", [])
        }
        self._maybe_duplicate(messages, entries, failures)
        return failures

    def _maybe_duplicate(
        self, messages: list[_Message], entries: list[dict[str, Any]], failures: dict[str, str]
    ) -> None:
        hook = self.faults.duplicate_delivery
        if hook is None or not hook([message.record for message in messages]):
            return
        accepted = [entry for entry, m in zip(entries, messages, strict=True) if m.record.event_id not in failures]
        if accepted:
            self.counters.duplicate_sends += 1
            self._sqs.send_message_batch(QueueUrl=self.config.target_queue_url, Entries=accepted)

    # -- dead letters and logs ------------------------------------------------------------------------

    def _dead_letter(
        self, shard: _Shard, records: list[PipeRecord], condition: str, reason: str, attempts: int
    ) -> None:
        ordered = sorted(records, key=lambda record: int(record.sequence_number))
        self.counters.dead_lettered += len(ordered)
        body = self._dead_letter_body(shard, ordered, condition, reason, attempts)
        info = body["DDBStreamBatchInfo"]
        summary = f"{condition}: sequence numbers {info['startSequenceNumber']}..{info['endSequenceNumber']} ({reason})"
        if self.config.dead_letter_queue_url is None:
            self._error(f"batch discarded, no dead-letter queue: {summary}", None)
            return
        self._error(f"batch sent to the dead-letter queue: {summary}", None)
        request: dict[str, Any] = {"QueueUrl": self.config.dead_letter_queue_url, "MessageBody": json.dumps(body)}
        if self.config.dead_letter_queue_url.endswith(".fifo"):
            request.update(MessageGroupId=shard.shard_id, MessageDeduplicationId=body["requestContext"]["requestId"])
        self._sqs.send_message(**request)

    def _dead_letter_body(
        self, shard: _Shard, records: list[PipeRecord], condition: str, reason: str, attempts: int
    ) -> dict[str, Any]:
        """Batch metadata, not the records (R4.1: a stream source's DLQ). The shape follows Lambda's
        stream on-failure record; AWS does not document the Pipes one field by field [UNCERTAIN]."""
        first, last = records[0], records[-1]
        return {
            "requestContext": {
                "requestId": str(uuid.uuid4()),
                "pipeArn": self.pipe_arn,
                "condition": condition,
                "approximateInvokeCount": attempts,
            },
            "errorMessage": reason,
            "version": "1.0",
            "timestamp": iso8601(self._clock()),
            "DDBStreamBatchInfo": {
                "shardId": shard.shard_id,
                "startSequenceNumber": first.sequence_number,
                "endSequenceNumber": last.sequence_number,
                "approximateArrivalOfFirstRecord": _arrival(first),
                "approximateArrivalOfLastRecord": _arrival(last),
                "batchSize": len(records),
                "streamArn": self.config.stream_arn,
            },
        }

    def _error(self, message: str, event_id: str | None) -> None:
        logger.error("pipe %s: %s (eventID=%s)", self.config.name, message, event_id)
        self.log.append(PipeLogEntry(self.config.name, "ERROR", message, event_id, self._clock()))


def _waiting(batch: _Batch | None, now: datetime) -> bool:
    return batch is not None and batch.retry_at is not None and now < batch.retry_at


def _check_item_order(original: list[PipeRecord], reordered: list[PipeRecord]) -> None:
    """A reorder hook may permute items, never the records of one item (R7.1)."""
    if sorted(r.event_id for r in original) != sorted(r.event_id for r in reordered):
        raise ValueError("a reorder hook must return the same records")
    for key in {record.item_key for record in original}:
        if [r.event_id for r in original if r.item_key == key] != [r.event_id for r in reordered if r.item_key == key]:
            raise ValueError(
                f"a reorder hook changed the order of one item's records ({key}); see docs/aws-behaviour.md R7.1"
            )


def _json_ready(value: Any) -> Any:
    """Binary attributes as base64 text, as on the wire; boto3 decodes them into bytes."""
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, Mapping):
        return {key: _json_ready(item) for key, item in value.items()}
    if isinstance(value, list | tuple | set):
        return [_json_ready(item) for item in value]
    return value


def _pipe_arn(config: PipeConfig) -> str:
    # arn:aws:dynamodb:<region>:<account>:table/... -> the pipe lives in the same region and account.
    _, partition, _, region, account, *_ = config.stream_arn.split(":")
    return f"arn:{partition}:pipes:{region}:{account}:pipe/{config.name}"


def _queue_arn(sqs: Any, queue_url: str) -> str:
    attributes = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]
    return str(attributes["QueueArn"])


def _arrival(record: PipeRecord) -> str:
    return iso8601(record.created)


# What SQS says when a request is refused for what it carries: sending less of it can succeed.
_CONTENT_ERRORS = frozenset(
    {"AWS.SimpleQueueService.BatchRequestTooLong", "BatchRequestTooLong", "InvalidParameterValue"}
)


def _refused_for_content(exc: Exception) -> bool:
    return isinstance(exc, ClientError) and exc.response.get("Error", {}).get("Code") in _CONTENT_ERRORS
