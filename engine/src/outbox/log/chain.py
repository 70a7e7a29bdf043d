"""The per-tenant hash chain: its head row and reading the log in order (``outbox.log.verification`` checks it)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from outbox import keys
from outbox.log.canonical import GENESIS_HASH
from outbox.log.envelope import Envelope


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


def read_event_row(client: Any, table_name: str, tenant: str, seq: int) -> dict[str, Any] | None:
    response = client.get_item(TableName=table_name, Key=keys.event_key(tenant, seq), ConsistentRead=True)
    item: dict[str, Any] | None = response.get("Item")
    return item
