"""Reading one whole partition of a table (every page of a consistent query), and the tenant index."""

from __future__ import annotations

from typing import Any

from outbox import keys


def read_partition(client: Any, table_name: str, partition: str) -> list[dict[str, Any]]:
    """Every item under ``pk = partition``, in sort-key order, with consistent reads."""
    pages = client.get_paginator("query").paginate(
        TableName=table_name,
        KeyConditionExpression="pk = :pk",
        ExpressionAttributeValues={":pk": {"S": partition}},
        ConsistentRead=True,
    )
    return [item for page in pages for item in page["Items"]]


def read_tenants(client: Any, events_table: str) -> list[str]:
    """Every tenant that ever emitted, sorted: the few partitions of the events table's tenant index."""
    found: list[str] = []
    for partition in keys.tenant_index_partitions():
        found.extend(item["sk"]["S"] for item in read_partition(client, events_table, partition))
    return sorted(found)
