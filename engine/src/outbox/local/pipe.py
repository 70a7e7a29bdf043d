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

This module is a batch's way from the source to the target: the stream side is ``outbox.local.pipe_source``,
the queue side ``outbox.local.pipe_target``, and the words they share ``outbox.local.pipe_model`` (all of
which this module exports).

Example
-------
>>> pipe = PipeEmulator(config, streams=streams_client, sqs=sqs_client, clock=clock)  # doctest: +SKIP
>>> pipe.drain()  # doctest: +SKIP
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from datetime import datetime, timedelta
from typing import Any

from outbox.local.clock import VirtualClock
from outbox.local.pipe_filter import compile_filter_criteria
from outbox.local.pipe_model import (
    RECORD_AGE_EXCEEDED,
    RETRY_EXHAUSTED,
    PipeConfig,
    PipeCounters,
    PipeFaults,
    PipeHappening,
    PipeInternalError,
    PipeLogEntry,
    PipeRecord,
    PipeWatcher,
    PollOutcome,
    PollResult,
    TargetInvocationError,
    exponential_backoff,
    reverse_items,
)
from outbox.local.pipe_source import Batch, Shard, ShardPosition, StreamSource
from outbox.local.pipe_target import SqsTarget
from outbox.local.watching import registered

__all__ = [
    "PipeConfig",
    "PipeCounters",
    "PipeEmulator",
    "PipeFaults",
    "PipeHappening",
    "PipeInternalError",
    "PipeLogEntry",
    "PipeRecord",
    "PipeWatcher",
    "PollResult",
    "TargetInvocationError",
    "exponential_backoff",
    "reverse_items",
]

logger = logging.getLogger(__name__)


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
        self._clock = clock
        self.faults = faults or PipeFaults()
        self.watchers: list[PipeWatcher] = []
        self._backoff = backoff
        self._matcher = compile_filter_criteria(config.filter_patterns)
        self._turn = 0
        self.counters = PipeCounters()
        self.log: list[PipeLogEntry] = []
        self.pipe_arn = _pipe_arn(config)
        self._target = SqsTarget(config, sqs, clock, self.counters, self.pipe_arn)
        self.target_arn = self._target.target_arn
        self._source = StreamSource(config.stream_arn, streams, clock, self.counters, config.starting_position)

    def watched(self, watcher: PipeWatcher) -> AbstractContextManager[PipeWatcher]:
        """Tell ``watcher`` of this pipe's sends and dead letters for the duration of the block."""
        return registered(self.watchers, watcher)

    def _tell(self, hook: str, records: Sequence[PipeRecord], condition: str = "", reason: str = "") -> None:
        if not self.watchers:
            return
        max_age = self.config.maximum_record_age_seconds
        happening = PipeHappening(self.config.name, self._clock(), max_age, tuple(records), condition, reason)
        for watcher in list(self.watchers):
            told = getattr(watcher, hook)
            if told is not None:
                told(happening)

    @property
    def shard_refresh_interval(self) -> timedelta | None:
        """How often the shard list is read again (``StreamSource.refresh_interval``); None: every poll."""
        return self._source.refresh_interval

    @shard_refresh_interval.setter
    def shard_refresh_interval(self, interval: timedelta | None) -> None:
        self._source.refresh_interval = interval

    @property
    def checkpoints(self) -> dict[str, str | None]:
        """Per shard, the sequence number of the last record fully handled (None: nothing yet)."""
        return {shard_id: shard.checkpoint for shard_id, shard in self._source.shards.items()}

    def positions(self) -> dict[str, ShardPosition]:
        """Where the pipe stands in each shard (its checkpoints), for a saved state."""
        return self._source.positions()

    def resume(self, positions: dict[str, ShardPosition]) -> None:
        """Resume from saved checkpoints (``positions``), as Pipes does when a pipe starts again."""
        self._source.resume(positions)

    @property
    def pending(self) -> bool:
        """Whether records already read wait to be handled (new stream records are seen on the next poll)."""
        return any(shard.has_work for shard in self._source.shards.values())

    @property
    def next_retry_at(self) -> datetime | None:
        """When the earliest failed batch may be retried; None if no batch is waiting."""
        waits = [shard.batch.retry_at for shard in self._source.shards.values() if shard.batch and shard.batch.retry_at]
        return min(waits, default=None)

    def poll(self) -> PollResult | None:
        """Read the stream, then make one attempt at one batch of one shard.

        None when there is nothing to do now: no records, or every failed batch still backs off (then
        ``next_retry_at`` says until when).
        """
        self._source.read()
        now = self._clock()
        due = [
            shard
            for shard in self._source.shards.values()
            if shard.has_work and self._source.parent_finished(shard) and not (shard.batch and shard.batch.waiting(now))
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

    # -- handling a batch -----------------------------------------------------------------------------

    def _handle(self, shard: Shard) -> PollResult:
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

    def _start_batch(self, shard: Shard) -> int:
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
            shard.batch = Batch(matching, last.sequence_number)
        else:
            shard.checkpoint = last.sequence_number  # R3.1: the iterator moves past dropped records
        return filtered

    def _dead_letter_expired(self, shard: Shard, batch: Batch) -> tuple[str, ...]:
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

    def _attempt(self, shard: Shard, batch: Batch, expired: tuple[str, ...]) -> PollResult:
        self._tell("attempting", batch.records)
        messages, failures = self._target.render(self._send_order(batch.records))
        try:
            failures.update(self._target.send(messages, self.faults))
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
        self, shard: Shard, batch: Batch, delivered: tuple[str, ...], expired: tuple[str, ...], reason: str
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
        self, shard: Shard, batch: Batch, exc: PipeInternalError, expired: tuple[str, ...]
    ) -> PollResult:
        """R4.5: retried until the records expire, never counted against MaximumRetryAttempts."""
        batch.internal_errors += 1
        self.counters.internal_errors += 1
        self._error(f"pipe internal error, will retry: {exc}", None)
        batch.retry_at = self._clock() + self._backoff(batch.attempts + batch.internal_errors)
        failed = tuple(record.event_id for record in batch.records)
        return PollResult("retrying", shard.shard_id, failed=failed, dead_lettered=expired)

    def _finish(self, shard: Shard) -> None:
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

    # -- dead letters and logs ------------------------------------------------------------------------

    def _dead_letter(self, shard: Shard, records: list[PipeRecord], condition: str, reason: str, attempts: int) -> None:
        self._tell("dead_lettering", records, condition, reason)
        ordered = sorted(records, key=lambda record: int(record.sequence_number))
        self.counters.dead_lettered += len(ordered)
        body = self._target.dead_letter_body(shard.shard_id, ordered, condition, reason, attempts)
        info = body["DDBStreamBatchInfo"]
        summary = f"{condition}: sequence numbers {info['startSequenceNumber']}..{info['endSequenceNumber']} ({reason})"
        if self.config.dead_letter_queue_url is None:
            self._error(f"batch discarded, no dead-letter queue: {summary}", None)
            return
        self._error(f"batch sent to the dead-letter queue: {summary}", None)
        self._target.send_dead_letter(shard.shard_id, body)

    def _error(self, message: str, event_id: str | None) -> None:
        logger.error("pipe %s: %s (eventID=%s)", self.config.name, message, event_id)
        self.log.append(PipeLogEntry(self.config.name, "ERROR", message, event_id, self._clock()))


def _check_item_order(original: list[PipeRecord], reordered: list[PipeRecord]) -> None:
    """A reorder hook may permute items, never the records of one item (R7.1)."""
    if sorted(r.event_id for r in original) != sorted(r.event_id for r in reordered):
        raise ValueError("a reorder hook must return the same records")
    for key in {record.item_key for record in original}:
        if [r.event_id for r in original if r.item_key == key] != [r.event_id for r in reordered if r.item_key == key]:
            raise ValueError(
                f"a reorder hook changed the order of one item's records ({key}); see docs/aws-behaviour.md R7.1"
            )


def _pipe_arn(config: PipeConfig) -> str:
    # arn:aws:dynamodb:<region>:<account>:table/... -> the pipe lives in the same region and account.
    _, partition, _, region, account, *_ = config.stream_arn.split(":")
    return f"arn:{partition}:pipes:{region}:{account}:pipe/{config.name}"
