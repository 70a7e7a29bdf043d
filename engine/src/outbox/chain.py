"""The per-tenant hash chain: its head row, reading the log in order, and verify_chain()."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from outbox import keys
from outbox.canonical import GENESIS_HASH
from outbox.envelope import Envelope
from outbox.exceptions import EnvelopeParseError


@dataclass(frozen=True)
class ChainHead:
    """The tenant's last committed sequence number and hash (seq 0 and the genesis hash before any)."""

    tenant: str
    last_seq: int = 0
    last_hash: str = GENESIS_HASH
    last_event_id: str | None = None

    @classmethod
    def from_item(cls, tenant: str, item: dict[str, Any] | None) -> ChainHead:
        if not item:
            return cls(tenant=tenant)
        return cls(
            tenant=tenant,
            last_seq=int(item["last_seq"]["N"]),
            last_hash=item["last_hash"]["S"],
            last_event_id=item.get("last_event_id", {}).get("S"),
        )


def read_head(client: Any, table_name: str, tenant: str) -> ChainHead:
    response = client.get_item(
        TableName=table_name,
        Key=keys.head_key(tenant),
        ConsistentRead=True,
    )
    return ChainHead.from_item(tenant, response.get("Item"))


def read_event_rows(client: Any, table_name: str, tenant: str, from_seq: int = 1) -> Iterator[dict[str, Any]]:
    """The tenant's event rows in sequence order, page by page, with consistent reads."""
    paginator = client.get_paginator("query")
    pages = paginator.paginate(
        TableName=table_name,
        KeyConditionExpression="pk = :pk AND sk >= :from",
        ExpressionAttributeValues={
            ":pk": {"S": keys.event_partition(tenant)},
            ":from": {"S": keys.seq_sort_key(from_seq)},
        },
        ConsistentRead=True,
    )
    for page in pages:
        yield from page.get("Items", [])


def read_events(client: Any, table_name: str, tenant: str, from_seq: int = 1) -> Iterator[Envelope]:
    for item in read_event_rows(client, table_name, tenant, from_seq):
        yield Envelope.from_item(item)


class ChainBreak(StrEnum):
    GAP = "gap"  # a sequence number is missing
    ALTERED = "altered"  # a row's content no longer matches its own hash
    REORDERED = "reordered"  # a row sits at another position than its sequence number
    BROKEN_LINK = "broken_link"  # a row's prev_hash is not the hash of the row before it
    HEAD_MISMATCH = "head_mismatch"  # the chain head disagrees with the end of the log


@dataclass(frozen=True)
class ChainReport:
    tenant: str
    intact: bool
    events_checked: int
    head_seq: int
    first_broken_seq: int | None = None
    reason: ChainBreak | None = None
    detail: str = ""


def verify_chain(client: Any, table_name: str, tenant: str) -> ChainReport:
    """Recompute the tenant's chain from genesis; report intact, or the first broken seq and why.

    Streams the log (constant memory) and reads the head after the log, so an emit that lands during
    the check shows up as a head ahead of the log only if it committed between the two reads; run it
    again in that case (the report says so).
    """
    prev_seq, prev_hash, checked = 0, GENESIS_HASH, 0

    def broken(seq: int, reason: ChainBreak, detail: str) -> ChainReport:
        return ChainReport(tenant, False, checked, prev_seq, seq, reason, detail)

    for item in read_event_rows(client, table_name, tenant):
        expected = prev_seq + 1
        row_seq = int(item["sk"]["S"])
        if row_seq != expected:
            return broken(expected, ChainBreak.GAP, f"seq {expected} is missing; the next row is seq {row_seq}")
        try:
            envelope = Envelope.from_item(item)
        except EnvelopeParseError as exc:
            return broken(row_seq, ChainBreak.ALTERED, f"seq {row_seq} is not a valid event row: {exc}")
        if envelope.seq != row_seq or envelope.tenant != tenant:
            return broken(
                row_seq,
                ChainBreak.REORDERED,
                f"the row at seq {row_seq} holds event {envelope.id} of tenant {envelope.tenant!r} seq {envelope.seq}",
            )
        if envelope.computed_hash() != envelope.hash:
            return broken(row_seq, ChainBreak.ALTERED, f"seq {row_seq} ({envelope.id}) does not match its hash")
        if envelope.prev_hash != prev_hash:
            return broken(
                row_seq,
                ChainBreak.BROKEN_LINK,
                f"seq {row_seq} does not link to seq {prev_seq}: an event before it was replaced or moved",
            )
        prev_seq, prev_hash, checked = row_seq, envelope.hash, checked + 1

    head = read_head(client, table_name, tenant)
    if (head.last_seq, head.last_hash) != (prev_seq, prev_hash):
        return ChainReport(
            tenant,
            False,
            checked,
            head.last_seq,
            min(head.last_seq, prev_seq) + 1,
            ChainBreak.HEAD_MISMATCH,
            f"the head says seq {head.last_seq}, the log ends at seq {prev_seq}"
            + (" (an emit may have landed during the check: run it again)" if head.last_seq > prev_seq else ""),
        )
    return ChainReport(tenant, True, checked, head.last_seq)
