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
from outbox.envelope import Envelope
from outbox.messages import Message, read_message
from outbox.store import EventStore

logger = logging.getLogger(__name__)

# DynamoDB's limit of keys per BatchGetItem.
BATCH_GET_KEYS = 100


@dataclass
class ReadAhead:
    """What one invocation read before processing its records: each readable record's message (by message
    id), and the hash the events table holds at each (tenant, seq) it will run ("" for no row)."""

    messages: dict[str, Message] = field(default_factory=dict)
    logged: dict[tuple[str, int], str] = field(default_factory=dict)

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

    def read_ahead(self, records: Sequence[Mapping[str, Any]], runs: Callable[[Message], bool]) -> ReadAhead:
        """Every record of the batch read once, and the hashes the events table holds for the events that
        will run (``runs``), in one consistent BatchGetItem instead of a GetItem per message. A read that fails
        or leaves keys unprocessed costs nothing but the fallback: those messages read their row one by one."""
        ahead = ReadAhead()
        keys_wanted: dict[tuple[str, int], dict[str, Any]] = {}
        for record in records:
            try:
                message = read_record(record)
            except Exception:  # read again, and recorded as a poison pill, in its turn
                continue
            ahead.messages[str(record.get("messageId"))] = message
            envelope = message.envelope
            if runs(message):
                keys_wanted.setdefault((envelope.tenant, envelope.seq), keys.event_key(envelope.tenant, envelope.seq))
        if keys_wanted:
            ahead.logged = self._logged_hashes(keys_wanted)
        return ahead

    def _logged_hashes(self, wanted: Mapping[tuple[str, int], dict[str, Any]]) -> dict[tuple[str, int], str]:
        """(tenant, seq) -> the hash the events table holds there ("" for no row), for every key DynamoDB
        processed: consistent BatchGetItems of at most 100 keys (a FIFO batch holds at most 10 messages)."""
        places = list(wanted)
        found: dict[tuple[str, int], str] = {}
        for start in range(0, len(places), BATCH_GET_KEYS):
            chunk = {place: wanted[place] for place in places[start : start + BATCH_GET_KEYS]}
            found.update(self._logged_chunk(chunk))
        return found

    def _logged_chunk(self, wanted: Mapping[tuple[str, int], dict[str, Any]]) -> dict[tuple[str, int], str]:
        table = self.store.table_name
        by_key = {(key["pk"]["S"], key["sk"]["S"]): place for place, key in wanted.items()}
        try:
            response = self.store.client.batch_get_item(
                RequestItems={
                    table: {
                        "Keys": list(wanted.values()),
                        "ConsistentRead": True,
                        "ProjectionExpression": "pk, sk, #hash",
                        "ExpressionAttributeNames": {"#hash": "hash"},
                    }
                }
            )
        except (ClientError, BotoCoreError) as exc:
            logger.warning("reading the batch's events at once failed, reading them one by one: %s", exc)
            return {}
        found = dict.fromkeys(wanted, "")
        for item in response.get("Responses", {}).get(table, []):
            place = by_key.get((item["pk"]["S"], item["sk"]["S"]))
            if place is not None:
                found[place] = str(item.get("hash", {}).get("S", ""))
        for key in response.get("UnprocessedKeys", {}).get(table, {}).get("Keys", []):
            # Unknown: read one by one when its message comes up.
            found.pop(by_key.get((key["pk"]["S"], key["sk"]["S"]), ("", -1)), None)
        return found

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
