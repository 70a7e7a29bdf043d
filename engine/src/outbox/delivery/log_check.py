"""Every message is checked against the events table before anything of it runs.

A message's own hash proves nothing about its origin: whoever forges one computes it too. The log does: the
row at the event's (tenant, seq) must hold the event's hash. One strongly consistent read per message that
would run something (a read request unit per started 4 KB of the row; docs/security.md), read ahead for the
whole batch in one BatchGetItem, or one by one when that read failed or left keys unprocessed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from botocore.exceptions import BotoCoreError, ClientError

from outbox import keys
from outbox.log.envelope import Envelope
from outbox.log.store import EventStore
from outbox.messages import Message, read_message

logger = logging.getLogger(__name__)

# DynamoDB's limit of keys per BatchGetItem.
BATCH_GET_KEYS = 100


# A row's place in a BatchGetItem's answer: (table, pk, sk).
RowPlace = tuple[str, str, str]
# Other tables' keys a batch reads in the same request: by table, the keys of the rows it needs.
AlsoRead = Callable[[Sequence[Message]], Mapping[str, Sequence[Mapping[str, Any]]]]


@dataclass
class ReadAhead:
    """What one invocation read before processing its records: each readable record's message (by message
    id), the hash the events table holds at each (tenant, seq) it will run ("" for no row), and the rows of
    other tables read in the same request (``rows``: by (table, pk, sk), None for no row; a key whose read
    failed or was left unprocessed is not there)."""

    messages: dict[str, Message] = field(default_factory=dict)
    logged: dict[tuple[str, int], str] = field(default_factory=dict)
    rows: dict[RowPlace, dict[str, Any] | None] = field(default_factory=dict)

    def message(self, record: SQSRecord) -> Message | None:
        return self.messages.get(str(record.message_id))


def read_record(raw: Mapping[str, Any]) -> Message:
    """The message of one SQS record (raises on anything that is not one: a poison pill)."""
    return read_message(
        raw.get("body"),
        raw.get("messageAttributes") or {},
        int((raw.get("attributes") or {}).get("ApproximateReceiveCount", "1")),
    )


class LogCheck:
    """Whether the events table vouches for an event: its row holds the event's hash."""

    def __init__(self, store: EventStore) -> None:
        self.store = store

    def read_ahead(
        self, records: Sequence[Mapping[str, Any]], runs: Callable[[Message], bool], also: AlsoRead | None = None
    ) -> ReadAhead:
        """Every record of the batch read once, and the hashes the events table holds for the events that
        will run (``runs``), in one consistent BatchGetItem instead of a GetItem per message, with the rows of
        other tables the batch needs (``also``: the ordered subscriptions' watermarks) in the same request. A
        read that fails or leaves keys unprocessed costs nothing but the fallback: those messages read their
        row one by one, and those other rows are read when they are needed."""
        ahead = ReadAhead()
        events = self.store.table_name
        wanted: dict[RowPlace, tuple[str, Mapping[str, Any]]] = {}
        logged_at: dict[RowPlace, tuple[str, int]] = {}  # an event row's place -> its (tenant, seq)
        for record in records:
            try:
                message = read_record(record)
            except Exception:  # read again, and recorded as a poison pill, in its turn
                continue
            ahead.messages[str(record.get("messageId"))] = message
            envelope = message.envelope
            if runs(message):
                key = keys.event_key(envelope.tenant, envelope.seq)
                place = (events, key["pk"]["S"], key["sk"]["S"])
                wanted.setdefault(place, (events, key))
                logged_at[place] = (envelope.tenant, envelope.seq)
        if wanted and also is not None:
            for table, table_keys in also(list(ahead.messages.values())).items():
                for other in table_keys:
                    wanted.setdefault((table, other["pk"]["S"], other["sk"]["S"]), (table, other))
        for place, row in self._read(list(wanted.values())).items():
            if place in logged_at:
                ahead.logged[logged_at[place]] = "" if row is None else str(row.get("hash", {}).get("S", ""))
            else:
                ahead.rows[place] = row
        return ahead

    def _read(self, wanted: Sequence[tuple[str, Mapping[str, Any]]]) -> dict[RowPlace, dict[str, Any] | None]:
        """Each (table, key) read: its row, or None for no row; a key DynamoDB did not process, or whose read
        failed, is left out (docs/aws-behaviour.md R13.2). Consistent BatchGetItems of at most 100 keys over
        the tables asked (R13.1); the events table's rows projected to their keys and hash."""
        found: dict[RowPlace, dict[str, Any] | None] = {}
        for start in range(0, len(wanted), BATCH_GET_KEYS):
            found.update(self._read_chunk(wanted[start : start + BATCH_GET_KEYS]))
        return found

    def _read_chunk(self, wanted: Sequence[tuple[str, Mapping[str, Any]]]) -> dict[RowPlace, dict[str, Any] | None]:
        request: dict[str, dict[str, Any]] = {}
        for table, key in wanted:
            request.setdefault(table, {"Keys": [], "ConsistentRead": True, **self._projection(table)})["Keys"].append(
                key
            )
        try:
            response = self.store.client.batch_get_item(RequestItems=request)
        except (ClientError, BotoCoreError) as exc:
            logger.warning("reading the batch's rows at once failed, reading them one by one: %s", exc)
            return {}
        found: dict[RowPlace, dict[str, Any] | None] = {
            (table, key["pk"]["S"], key["sk"]["S"]): None for table, key in wanted
        }
        for table, items in response.get("Responses", {}).items():
            for item in items:
                found[(table, item["pk"]["S"], item["sk"]["S"])] = item
        for table, left in response.get("UnprocessedKeys", {}).items():
            for key in left.get("Keys", []):
                found.pop((table, key["pk"]["S"], key["sk"]["S"]), None)  # unknown: read when it comes up
        return found

    def _projection(self, table: str) -> dict[str, Any]:
        if table != self.store.table_name:
            return {}
        return {"ProjectionExpression": "pk, sk, #hash", "ExpressionAttributeNames": {"#hash": "hash"}}

    def doubt(self, envelope: Envelope, ahead: ReadAhead | None = None) -> tuple[str, str] | None:
        """Why the events table does not vouch for this event, and the hash it holds at the event's place
        ("" for none); None when the row at (tenant, seq) has the event's hash.

        Strongly consistent, since an eventually consistent read may miss a row the pipe has already relayed
        (the stream carries a transaction only after it commits, R7.4); a repair sends the row as the table
        holds it. Equal hashes mean equal content: the hash covers every field, and the message was checked
        against its own hash when it was read."""
        place = (envelope.tenant, envelope.seq)
        logged = ahead.logged.get(place) if ahead is not None else None
        if logged is None:
            item = self.store.client.get_item(
                TableName=self.store.table_name,
                Key=keys.event_key(envelope.tenant, envelope.seq),
                ConsistentRead=True,
                ProjectionExpression="#hash",
                ExpressionAttributeNames={"#hash": "hash"},
            ).get("Item")
            logged = str(((item or {}).get("hash") or {}).get("S", ""))
        if logged == envelope.hash:
            return None
        where = f"seq {envelope.seq} of tenant {envelope.tenant}"
        if not logged:
            return f"the events table has no event at {where}: the message was not relayed from the log", ""
        return f"the events table holds another event at {where} (hash {logged}): the message is not the log's", logged
