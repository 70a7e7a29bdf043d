"""What an emulated EventBridge Pipe is configured with, the records it carries, its fault hooks and what a
poll reports: the vocabulary ``outbox.local.pipe`` (the emulator), ``outbox.local.pipe_target`` (its SQS
target) and their callers share. The R numbers are docs/aws-behaviour.md's."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Final, Literal

from outbox.local.pipe_filter import compile_filter_criteria

SQS_BATCH_LIMIT: Final = 10  # a pipe to SQS sends at most 10 messages per batch (R2.4)
STARTING_POSITIONS: Final = ("TRIM_HORIZON", "LATEST")
RETRY_EXHAUSTED: Final = "RetryAttemptsExhausted"
RECORD_AGE_EXCEEDED: Final = "RecordAgeExceeded"

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


@dataclass(frozen=True)
class PipeHappening:
    """What a pipe did that a watcher is told of: the records of an attempt to send (a batch, or what is left of
    one), or of a dead letter (with its ``condition`` and ``reason``), at the pipe's time ``at``."""

    pipe: str
    at: datetime
    maximum_record_age_seconds: int
    records: tuple[PipeRecord, ...]
    condition: str = ""
    reason: str = ""


@dataclass(frozen=True)
class PipeWatcher:
    """A watcher of a pipe (``PipeEmulator.watched``); each hook optional, told before the pipe acts:

    - ``attempting(happening)``: these records are about to be sent to the target;
    - ``dead_lettering(happening)``: these records go to the dead-letter queue (or are discarded, without one).
    """

    attempting: Callable[[PipeHappening], None] | None = None
    dead_lettering: Callable[[PipeHappening], None] | None = None


def exponential_backoff(attempts: int) -> timedelta:
    """1 s, 2 s, 4 s ... capped at a minute. AWS backs off "gradually" without numbers (R4.5)."""
    return timedelta(seconds=min(2 ** max(attempts - 1, 0), 60))


def reverse_items(records: list[PipeRecord]) -> list[PipeRecord]:
    """A ``reorder`` hook: items in reverse order of first appearance, each item's records in stream order."""
    by_item: dict[str, list[PipeRecord]] = {}
    for record in records:
        by_item.setdefault(record.item_key, []).append(record)
    return [record for item in reversed(by_item.values()) for record in item]
