"""Key layout of the events and inbox tables, and the formats of the names that go into keys.

Every key the engine writes or reads is spelled here, once::

    events table   TENANT#<tenant>#EVENT / <seq, zero-padded>      a tenant's log
                   TENANT#<tenant>#HEAD  / HEAD                    its chain head
                   TENANTS#<shard>       / <tenant>                the tenant index
    inbox table    CLAIM#<event id>      / <subscription>          a claim row
                   TENANT#<tenant>#DEAD  / <event id>#<subscription>[#CONFLICT#<digest>]   dead letters
                   POISON#<YYYY-MM-DD>   / <recorded at>#<message id>                      poison pills
                   TENANT#<tenant>#ORDER#<subscription> / WATERMARK        an ordered subscription's place
                   TENANT#<tenant>#ORDER#<subscription> / DEFERRED#<seq>   an event waiting for its predecessor
                   TENANT#<tenant>#ORDER#<subscription> / SKIPPED#<seq>    an event an operator skipped
    audit table    TENANT#<tenant>#ANCHOR / ANCHOR                 the last (seq, hash) verified
                   TENANT#<tenant>#FINDING / <finding id>          tamper findings

and the idempotency key of an (event, subscription) pair, ``<event id>:<subscription>``; an event id is a ULID.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

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


# -- the events table ---------------------------------------------------------------------------------------


def event_partition(tenant: str) -> str:
    return f"TENANT#{tenant}#EVENT"


def head_partition(tenant: str) -> str:
    return f"TENANT#{tenant}#HEAD"


def seq_sort_key(seq: int) -> str:
    return str(seq).zfill(SEQ_WIDTH)


def event_key(tenant: str, seq: int) -> dict[str, Any]:
    return {"pk": {"S": event_partition(tenant)}, "sk": {"S": seq_sort_key(seq)}}


def head_key(tenant: str) -> dict[str, Any]:
    return {"pk": {"S": head_partition(tenant)}, "sk": {"S": HEAD_SORT_KEY}}


def tenant_index_partition(tenant: str) -> str:
    import hashlib

    shard = int(hashlib.sha256(tenant.encode()).hexdigest(), 16) % TENANT_INDEX_SHARDS
    return f"TENANTS#{shard:02d}"


def tenant_index_partitions() -> list[str]:
    return [f"TENANTS#{shard:02d}" for shard in range(TENANT_INDEX_SHARDS)]


# -- the inbox table ----------------------------------------------------------------------------------------


def claim_partition(event_id: str) -> str:
    """Every claim row of one event (one per subscription) shares this partition."""
    return f"CLAIM#{event_id}"


def claim_key(event_id: str, subscription: str) -> dict[str, Any]:
    return {"pk": {"S": claim_partition(event_id)}, "sk": {"S": subscription}}


def dead_letter_partition(tenant: str) -> str:
    return f"TENANT#{tenant}#DEAD"


def dead_letter_sort_key(event_id: str, subscription: str) -> str:
    """A pair's dead letter; also what a replayed claim names in ``open_dead_letter``."""
    return f"{event_id}#{subscription}"


def dead_letter_key(tenant: str, event_id: str, subscription: str) -> dict[str, Any]:
    return {"pk": {"S": dead_letter_partition(tenant)}, "sk": {"S": dead_letter_sort_key(event_id, subscription)}}


def conflict_sort_key(event_id: str, subscription: str, received_digest: str) -> str:
    """A conflict's dead letter: one per content that arrived under a claimed event id."""
    return f"{dead_letter_sort_key(event_id, subscription)}#CONFLICT#{received_digest}"


def poison_partition(moment: datetime) -> str:
    """The poison pills of ``moment``'s day (one global partition per day)."""
    return f"POISON#{moment.strftime('%Y-%m-%d')}"


def poison_sort_key(recorded_at: str, message_id: str) -> str:
    return f"{recorded_at}#{message_id}"


def order_partition(tenant: str, subscription: str) -> str:
    """Everything of one ordered subscription for one tenant: its watermark, deferred and skipped events."""
    return f"TENANT#{tenant}#ORDER#{subscription}"


WATERMARK_SORT_KEY = "WATERMARK"
DEFERRED_PREFIX = "DEFERRED#"
SKIPPED_PREFIX = "SKIPPED#"


def watermark_key(tenant: str, subscription: str) -> dict[str, Any]:
    return {"pk": {"S": order_partition(tenant, subscription)}, "sk": {"S": WATERMARK_SORT_KEY}}


def deferred_key(tenant: str, subscription: str, seq: int) -> dict[str, Any]:
    return {"pk": {"S": order_partition(tenant, subscription)}, "sk": {"S": DEFERRED_PREFIX + seq_sort_key(seq)}}


def skipped_key(tenant: str, subscription: str, seq: int) -> dict[str, Any]:
    return {"pk": {"S": order_partition(tenant, subscription)}, "sk": {"S": SKIPPED_PREFIX + seq_sort_key(seq)}}


# -- the audit table ----------------------------------------------------------------------------------------

ANCHOR_SORT_KEY = "ANCHOR"


def anchor_partition(tenant: str) -> str:
    return f"TENANT#{tenant}#ANCHOR"


def anchor_key(tenant: str) -> dict[str, Any]:
    return {"pk": {"S": anchor_partition(tenant)}, "sk": {"S": ANCHOR_SORT_KEY}}


def finding_partition(tenant: str) -> str:
    return f"TENANT#{tenant}#FINDING"


def tenant_of_event_partition(partition: str) -> str | None:
    """``TENANT#<tenant>#EVENT`` -> the tenant; None for any other key."""
    prefix, suffix = "TENANT#", "#EVENT"
    if not (partition.startswith(prefix) and partition.endswith(suffix)):
        return None
    tenant = partition[len(prefix) : -len(suffix)]
    return tenant if is_valid_tenant(tenant) else None


# -- names --------------------------------------------------------------------------------------------------


def new_event_id() -> str:
    """A new event id: a ULID, unique and time-sortable. python-ulid is imported at the first one, not with the
    store: the durable consumer imports the store, and its cold start need not pay for the package."""
    from ulid import ULID

    return str(ULID())


def idempotency_key(event_id: str, subscription: str) -> str:
    """An (event, subscription) pair's key for external APIs: stable across retries and take-overs."""
    return f"{event_id}:{subscription}"


def is_valid_tenant(tenant: str) -> bool:
    return bool(TENANT_PATTERN.fullmatch(tenant))


def is_valid_event_type(event_type: str) -> bool:
    return len(event_type) <= EVENT_TYPE_MAX_LENGTH and bool(EVENT_TYPE_PATTERN.fullmatch(event_type))
