"""An idea measured before it is kept: the chain without its head row.

Every emit writes the tenant's chain head (``TENANT#<t>#HEAD``) in its transaction, 2 of its write units.
The tenant's last event row already holds its seq and hash, so an emit could read that row instead (a
strongly consistent query of the event partition, newest first, one item) and put seq n + 1 conditioned on
its absence: the log stays gapless (n + 1 is written only by someone who read n as the last row) and linked
(its prev_hash is the hash of the row it read), and two writers that read the same n race on the same key, as
they race on the head today.

``HeadlessStore`` is that emit, as a subclass of the engine's ``EventStore`` that replaces only the head's
read and the transaction's items, so that everything else (sealing, validation, retries with backoff, the
retry budget) is the engine's and the comparison is of the head alone. It is a measurement, not a shipped
store: it has no answer for a lost response (the engine recognises its own commit by the head's event id),
and the engine's head is also what the anchoring seals, what status and the tenant index read, and what keeps
a tenant's seq when old rows are gone. ``benchmarks.emit_contention`` measures both side by side.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from outbox import EventStore, keys
from outbox.log.canonical import GENESIS_HASH, chain_hash
from outbox.log.chain import ChainHead
from outbox.log.envelope import Envelope
from outbox.log.transaction import Outcome, SealWrites, event_write, tenant_index_write, unknown_outcome


class HeadlessStore(EventStore):
    """``EventStore`` with the tenant's last event row in place of its head row."""

    def _read_head(self, tenant: str) -> ChainHead:
        items = self.client.query(
            TableName=self.table_name,
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": {"S": keys.event_partition(tenant)}},
            ExpressionAttributeNames={"#hash": "hash"},
            ProjectionExpression="sk, #hash, event_id",
            ScanIndexForward=False,
            Limit=1,
            ConsistentRead=True,
        )["Items"]
        if not items:
            return ChainHead(tenant)
        (last,) = items
        return ChainHead(tenant, int(last["sk"]["S"]), last["hash"]["S"], last["event_id"]["S"])

    def _transact(self, envelopes: Sequence[Envelope], head: ChainHead, writes: SealWrites, token: str) -> Outcome:
        items: list[Any] = [event_write(self.table_name, envelope) for envelope in envelopes]
        items += writes.items
        if head.last_seq == 0:
            items.append(tenant_index_write(self.table_name, envelopes[0]))
        try:
            self.client.transact_write_items(TransactItems=items, ClientRequestToken=token)
            return None
        except ClientError as exc:
            reasons = [reason.get("Code") for reason in exc.response.get("CancellationReasons") or []]
            if "ConditionalCheckFailed" in reasons[: len(envelopes)]:
                return "head", None  # another writer took seq n + 1 first: read the last row again
            return "transient", None
        except BotoCoreError as exc:
            return unknown_outcome(envelopes[-1], exc)


def log_is_gapless_and_linked(client: Any, table: str, tenant: str) -> bool:
    """Whether the tenant's event rows hold seqs 1..n with no gap, each hashed over its body and linked to the
    hash of the one before (genesis for the first): what ``verify_chain`` checks, without the head."""
    expected_seq, previous_hash = 1, GENESIS_HASH
    pages = client.get_paginator("query").paginate(
        TableName=table,
        KeyConditionExpression="pk = :pk",
        ExpressionAttributeValues={":pk": {"S": keys.event_partition(tenant)}},
        ConsistentRead=True,
    )
    for page in pages:
        for item in page["Items"]:
            envelope = Envelope.from_item(item)
            linked = envelope.prev_hash == previous_hash
            if (
                envelope.seq != expected_seq
                or not linked
                or chain_hash(previous_hash, envelope.hashed_body()) != envelope.hash
            ):
                return False
            expected_seq, previous_hash = expected_seq + 1, envelope.hash
    return True
