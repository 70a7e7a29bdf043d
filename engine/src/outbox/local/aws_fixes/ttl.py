"""DynamoDB Time to Live on the virtual clock (rule 11): moto 5.2.5 stores a table's TTL setting but never
deletes an expired item.

On AWS, once an item's TTL attribute (a top-level Number, epoch seconds) is at or before the current time
the item is expired, and a background process deletes it at an unspecified time afterwards: the API
reference says "typically within two days", the developer guide "within a few days". Until then the item
is still returned by reads, queries and scans. Each deletion is an ordinary delete (indexes follow), and
on a table with a stream it writes a REMOVE record whose ``userIdentity`` is ``{"Type": "Service",
"PrincipalId": "dynamodb.amazonaws.com"}`` (the GetRecords spelling; Lambda event records spell the
same fields ``type`` and ``principalId``). An item whose TTL attribute is missing or not a Number (a
string, a number set) never expires.

The boundary: the API reference calls an item expired when its value is "less than the current time";
the developer guide filters pending-deletion items with ``<= now``. This sweep uses ``<=``: either is
AWS, since nothing is deleted at the moment of expiry anyway.

Nothing here runs by itself. ``sweep_expired_items`` deletes, when called, every expired item of the
tables it is given, through moto's ``DynamoDBBackend.delete_item`` (the path of a DeleteItem request,
so rules 1 to 5 apply to it), each delete under ``DYNAMODB_LOCK``. moto builds each stream record as a
plain dict that GetRecords serializes through the service model, so the REMOVE record of a TTL deletion
can carry the real ``userIdentity``: it is set on the record moto appended, and other records carry none,
as on AWS. Call it from outside any DynamoDB request (the runtime's test code does): inside one, rule 3
would hold the record back until that request ends, and it would go out unmarked.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from decimal import Decimal
from typing import Any

from moto.dynamodb.models import DynamoDBBackend, dynamodb_backends
from moto.dynamodb.models.dynamo_type import Item
from moto.dynamodb.models.table import Table

from outbox.local.aws_fixes.dynamodb import DYNAMODB_LOCK

__all__ = ["TTL_USER_IDENTITY", "sweep_expired_items"]

# A TTL deletion's stream record names the DynamoDB service as its author (GetRecords' Identity shape).
TTL_USER_IDENTITY = {"Type": "Service", "PrincipalId": "dynamodb.amazonaws.com"}


def sweep_expired_items(table_arns: Iterable[str], now: datetime) -> dict[str, int]:
    """Delete every item of these tables whose TTL attribute is a Number ``<= now`` (epoch seconds).

    Tables are named by ARN (``arn:aws:dynamodb:<region>:<account>:table/<name>``), which locates moto's
    backend. Only a table whose TTL is enabled (UpdateTimeToLive, as the runtime does from the template's
    TimeToLiveSpecification) is swept, on the attribute it names. Returns the number of items deleted,
    by table name, for every swept table (0 included); tables without TTL are absent from the result.
    """
    deadline = Decimal(str(now.timestamp()))
    deleted: dict[str, int] = {}
    for arn in table_arns:
        backend, name = _locate(arn)
        with DYNAMODB_LOCK:
            table = backend.get_table(name)
            attribute = _ttl_attribute(table)
            if attribute is None:
                continue
            expired = [item for item in table.all_items() if _expired(item, attribute, deadline)]
            for item in expired:
                _delete(backend, table, item)
            deleted[name] = len(expired)
    return deleted


def _locate(arn: str) -> tuple[DynamoDBBackend, str]:
    parts = arn.split(":", 5)
    if len(parts) != 6 or parts[2] != "dynamodb" or not parts[5].startswith("table/"):
        raise ValueError(f"{arn!r} is not a DynamoDB table ARN")
    region, account, name = parts[3], parts[4], parts[5].removeprefix("table/")
    return dynamodb_backends[account][region], name


def _ttl_attribute(table: Table) -> str | None:
    ttl: dict[str, Any] = table.ttl
    if ttl.get("TimeToLiveStatus") != "ENABLED":
        return None
    attribute = ttl.get("AttributeName")
    return str(attribute) if attribute else None


def _expired(item: Item, attribute: str, deadline: Decimal) -> bool:
    value = item.attrs.get(attribute)
    if value is None or value.type != "N":
        return False  # AWS ignores an item whose TTL attribute is missing or not a Number
    return Decimal(str(value.value)) <= deadline


def _delete(backend: DynamoDBBackend, table: Table, item: Item) -> None:
    key = {table.hash_key_attr: item.hash_key.to_json()}
    if table.range_key_attr is not None and item.range_key is not None:
        key[table.range_key_attr] = item.range_key.to_json()
    shard = table.stream_shard
    published = len(shard.items) if shard is not None else 0
    backend.delete_item(table.name, key)
    if shard is None:
        return
    # The records this delete published (one REMOVE); fewer if moto handed them to its own Lambda ESMs.
    for record in shard.items[published:]:
        if record.record["eventName"] == "REMOVE":
            record.record["userIdentity"] = dict(TTL_USER_IDENTITY)
