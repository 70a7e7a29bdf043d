"""Reading one whole partition of a table: every page of a consistent query."""

from __future__ import annotations

from typing import Any


def read_partition(client: Any, table_name: str, partition: str) -> list[dict[str, Any]]:
    """Every item under ``pk = partition``, in sort-key order, with consistent reads."""
    pages = client.get_paginator("query").paginate(
        TableName=table_name,
        KeyConditionExpression="pk = :pk",
        ExpressionAttributeValues={":pk": {"S": partition}},
        ConsistentRead=True,
    )
    return [item for page in pages for item in page["Items"]]
