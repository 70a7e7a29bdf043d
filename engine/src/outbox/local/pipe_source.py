"""An emulated pipe's DynamoDB stream source: the stream's shards read with real shard iterators
(DescribeStream, GetShardIterator, GetRecords), each record buffered as the pipe event Pipes hands on (R7.3
plus eventSourceARN), and per shard the batch under way and the checkpoint behind it. The R numbers are
docs/aws-behaviour.md's."""

from __future__ import annotations

import base64
import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Final

from outbox.local import aws_fixes
from outbox.local.aws_fixes.dynamodb import STREAM_RECORDS
from outbox.local.clock import VirtualClock
from outbox.local.pipe_model import PipeCounters, PipeRecord

# The stream record's own fields that a pipe event carries (R7.3); eventSourceARN is added.
_RECORD_FIELDS: Final = ("eventID", "eventName", "eventVersion", "eventSource", "awsRegion", "userIdentity")


@dataclass
class Batch:
    """The batch a shard is working on: what is still undelivered, and where the checkpoint goes after it."""

    records: list[PipeRecord]
    end_sequence: str
    attempts: int = 0
    internal_errors: int = 0
    retry_at: datetime | None = None

    def waiting(self, now: datetime) -> bool:
        """Whether it backs off after a failed attempt until later than ``now``."""
        return self.retry_at is not None and now < self.retry_at


@dataclass
class Shard:
    shard_id: str
    parent_id: str | None
    iterator: str | None
    buffer: deque[PipeRecord] = field(default_factory=deque)
    checkpoint: str | None = None
    batch: Batch | None = None
    # The count of stream records published when this shard was last read to its end (None: not read out yet).
    read_out_at: int | None = None

    @property
    def has_work(self) -> bool:
        return bool(self.buffer) or self.batch is not None

    @property
    def finished(self) -> bool:
        """Closed, read to its end and fully handled (a child shard waits for this, R4.2)."""
        return self.iterator is None and not self.has_work


@dataclass(frozen=True)
class ShardPosition:
    """Where a pipe stands in one shard, as a saved state keeps it: the last sequence number it fully handled
    (None: nothing yet), its parent, and whether it is closed, read to its end and handled."""

    checkpoint: str | None
    parent_id: str | None
    ended: bool


class StreamSource:
    """The shards of one stream, as one pipe reads them."""

    def __init__(
        self, stream_arn: str, streams: Any, clock: VirtualClock, counters: PipeCounters, starting_position: str
    ) -> None:
        self.stream_arn = stream_arn
        self.shards: dict[str, Shard] = {}
        # How often the shard list is read again (DescribeStream): None, before every poll. Pipes learns of
        # new shards from time to time and when a shard it reads ends; a simulator polling thousands of
        # times sets an interval here, since each DescribeStream costs as much as a batch.
        self.refresh_interval: timedelta | None = None
        self._streams = streams
        self._clock = clock
        self._counters = counters
        self._listed: tuple[datetime, int] | None = None  # when, and how many shards had ended
        # The starting position applies to the shards open when the pipe starts; shards that appear
        # later are children of those and are read from their start.
        self._discover(starting_position)

    def read(self) -> None:
        """Buffer what every shard has now, after looking for new shards when the list may be stale."""
        if self._list_stale():
            self._discover("TRIM_HORIZON")
        for shard in self.shards.values():
            self._read_shard(shard)

    def positions(self) -> dict[str, ShardPosition]:
        return {
            shard_id: ShardPosition(shard.checkpoint, shard.parent_id, shard.finished)
            for shard_id, shard in self.shards.items()
        }

    def resume(self, positions: Mapping[str, ShardPosition]) -> None:
        """Stand where ``positions`` say, as Pipes resumes a pipe from its checkpoints: what was read past a
        checkpoint and not handled (a batch under way, its retries) is read again."""
        for shard_id, position in positions.items():
            if position.ended:
                iterator = None
            elif position.checkpoint is None:
                iterator = self._iterator(shard_id, ShardIteratorType="TRIM_HORIZON")
            else:
                iterator = self._iterator(
                    shard_id, ShardIteratorType="AFTER_SEQUENCE_NUMBER", SequenceNumber=position.checkpoint
                )
            self.shards[shard_id] = Shard(shard_id, position.parent_id, iterator, checkpoint=position.checkpoint)

    def _iterator(self, shard_id: str, **position: str) -> str:
        found: str = self._streams.get_shard_iterator(StreamArn=self.stream_arn, ShardId=shard_id, **position)[
            "ShardIterator"
        ]
        return found

    def parent_finished(self, shard: Shard) -> bool:
        parent = self.shards.get(shard.parent_id) if shard.parent_id else None
        return parent is None or parent.finished

    def _discover(self, position: str) -> None:
        self._listed = (self._clock(), self._ended())
        for description in self._describe():
            shard_id = description["ShardId"]
            if shard_id in self.shards:
                continue
            iterator = self._streams.get_shard_iterator(
                StreamArn=self.stream_arn, ShardId=shard_id, ShardIteratorType=position
            )["ShardIterator"]
            self.shards[shard_id] = Shard(shard_id, description.get("ParentShardId"), iterator)

    def _list_stale(self) -> bool:
        if self.refresh_interval is None or self._listed is None:
            return True
        listed_at, ended = self._listed
        return self._clock() - listed_at >= self.refresh_interval or self._ended() > ended

    def _ended(self) -> int:
        return sum(1 for shard in self.shards.values() if shard.iterator is None)

    def _describe(self) -> list[dict[str, Any]]:
        shards: list[dict[str, Any]] = []
        request: dict[str, Any] = {"StreamArn": self.stream_arn}
        while True:
            description = self._streams.describe_stream(**request)["StreamDescription"]
            shards.extend(description["Shards"])
            if not description.get("LastEvaluatedShardId"):
                return shards
            request["ExclusiveStartShardId"] = description["LastEvaluatedShardId"]

    def _read_shard(self, shard: Shard) -> None:
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
            self._counters.received += len(records)
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
        event["eventSourceARN"] = self.stream_arn
        return event


def _json_ready(value: Any) -> Any:
    """Binary attributes as base64 text, as on the wire; boto3 decodes them into bytes."""
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, Mapping):
        return {key: _json_ready(item) for key, item in value.items()}
    if isinstance(value, list | tuple | set):
        return [_json_ready(item) for item in value]
    return value
