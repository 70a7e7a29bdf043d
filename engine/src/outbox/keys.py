"""Key layout of the events table and the formats of the names that go into keys."""

from __future__ import annotations

import re

# Tenants become part of keys (`#` is the separator) and the SQS FIFO MessageGroupId (<= 128 chars).
TENANT_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$")
# Dotted names, e.g. "payment.completed" or "record.profile.CONTACTADDRESS".
EVENT_TYPE_PATTERN = re.compile(r"^[A-Za-z][A-Za-z0-9_]*(\.[A-Za-z][A-Za-z0-9_]*)*$")
EVENT_TYPE_MAX_LENGTH = 128
SEQ_WIDTH = 20  # zero-padded so that a plain query returns a tenant's log in order

KIND_EVENT = "EVENT"
KIND_HEAD = "HEAD"
KIND_TENANT = "TENANT"
HEAD_SORT_KEY = "HEAD"
# Every tenant is listed once, on its first emit, in one of a few index partitions (so listing tenants is a
# handful of queries, and no partition is written more than once per new tenant).
TENANT_INDEX_SHARDS = 16
# emit()'s own share of a transaction: the head, the event row and, on a tenant's first emit, its index row.
OWN_TRANSACTION_ITEMS = 3


def event_partition(tenant: str) -> str:
    return f"TENANT#{tenant}#EVENT"


def head_partition(tenant: str) -> str:
    return f"TENANT#{tenant}#HEAD"


def seq_sort_key(seq: int) -> str:
    return str(seq).zfill(SEQ_WIDTH)


def is_valid_tenant(tenant: str) -> bool:
    return bool(TENANT_PATTERN.fullmatch(tenant))


def is_valid_event_type(event_type: str) -> bool:
    return len(event_type) <= EVENT_TYPE_MAX_LENGTH and bool(EVENT_TYPE_PATTERN.fullmatch(event_type))


def tenant_index_partition(tenant: str) -> str:
    import hashlib

    shard = int(hashlib.sha256(tenant.encode()).hexdigest(), 16) % TENANT_INDEX_SHARDS
    return f"TENANTS#{shard:02d}"


def tenant_index_partitions() -> list[str]:
    return [f"TENANTS#{shard:02d}" for shard in range(TENANT_INDEX_SHARDS)]
