"""The inbox's rows read back typed, for the operator's views (``InboxReader``): a claim row, a dead letter,
a poison pill.

Apart from ``rows`` so that the durable consumer, which never reads them, does not build their classes at its
cold start (make bench, section 3).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from outbox import keys
from outbox.inbox.rows import _moment, _number, _string


@dataclass(frozen=True)
class ClaimRecord:
    """A claim row as read back (what the operator tools and tests look at); ``Claim`` is a worker's hold."""

    event_id: str
    subscription: str
    tenant: str
    status: str
    attempts: int
    digest: str
    owner: str | None  # None on a row no worker has claimed yet, and after a replay
    lease_expires_at: datetime | None  # while PENDING (the epoch once released)
    event_type: str | None
    event_seq: int | None
    created_at: str | None
    updated_at: str | None
    last_error: str | None = None
    dead_reason: str | None = None  # a DeadReason, while DEAD (kept by a replay)
    dead_at: str | None = None
    replayed_at: str | None = None
    open_dead_letter: str | None = None  # the dead letter a replay left open (its sort key)
    completed_at: str | None = None
    expires_at: datetime | None = None  # when a COMPLETED row is forgotten (TTL)
    waits_for: int | None = None  # while DEFERRED: the seq of the predecessor it waits for
    skipped: str | None = None  # once SKIPPED: by whom, when and why

    @classmethod
    def from_item(cls, item: Mapping[str, Any]) -> ClaimRecord:
        return cls(
            # A claim's own writes leave out what its key says (CLAIM#<event id>, subscription): every byte of
            # the hot path's requests costs client CPU. Rows other writers made carry both.
            event_id=_string(item, "event_id") or item["pk"]["S"].removeprefix(keys.claim_partition("")),
            subscription=_string(item, "subscription") or item["sk"]["S"],
            tenant=item["tenant"]["S"],
            status=item["status"]["S"],
            attempts=int(item["attempts"]["N"]),
            digest=item["digest"]["S"],
            owner=_string(item, "owner"),
            lease_expires_at=_moment(item, "lease_expires_at", per_second=1000),
            event_type=_string(item, "event_type"),
            event_seq=_number(item, "event_seq"),
            created_at=_string(item, "created_at"),
            updated_at=_string(item, "updated_at"),
            last_error=_string(item, "last_error"),
            dead_reason=_string(item, "dead_reason"),
            dead_at=_string(item, "dead_at"),
            replayed_at=_string(item, "replayed_at"),
            open_dead_letter=_string(item, "open_dead_letter"),
            completed_at=_string(item, "completed_at"),
            expires_at=_moment(item, "expires_at", per_second=1),
            waits_for=_number(item, "waits_for"),
            skipped=_string(item, "skipped"),
        )


@dataclass(frozen=True)
class DeadLetter:
    tenant: str
    event_id: str
    event_seq: int
    event_type: str
    subscription: str
    reason: str
    error: str
    error_type: str
    attempts: int | None
    dead_at: str
    resolved: str | None  # "replayed at ..." once an operator acted on it
    # A conflict's: the digest of the content that arrived (one dead letter per content: its row's key says so).
    received_digest: str | None = None

    @property
    def key(self) -> dict[str, Any]:
        """The dead letter's row key in the inbox table."""
        key = keys.dead_letter_key(self.tenant, self.event_id, self.subscription)
        if self.received_digest is not None:
            key["sk"] = {"S": keys.conflict_sort_key(self.event_id, self.subscription, self.received_digest)}
        return key

    @classmethod
    def from_item(cls, item: Mapping[str, Any]) -> DeadLetter:
        return cls(
            tenant=item["tenant"]["S"],
            event_id=item["event_id"]["S"],
            event_seq=int(item["event_seq"]["N"]),
            event_type=item["event_type"]["S"],
            subscription=item["subscription"]["S"],
            reason=item["reason"]["S"],
            error=item["error"]["S"],
            error_type=item["error_type"]["S"],
            attempts=_number(item, "attempts"),
            dead_at=item["dead_at"]["S"],
            resolved=_string(item, "resolved"),
            received_digest=_string(item, "received_digest"),
        )


@dataclass(frozen=True)
class PoisonPill:
    """A message that was not an event, as the consumer recorded it (``Inbox.record_poison``)."""

    message_id: str
    recorded_at: str
    error: str
    body: str
    body_truncated: bool
    attributes: dict[str, str]  # MessageGroupId, MessageDeduplicationId, ApproximateReceiveCount

    @classmethod
    def from_item(cls, item: Mapping[str, Any]) -> PoisonPill:
        attributes = item.get("attributes", {}).get("M", {})
        return cls(
            message_id=item["message_id"]["S"],
            recorded_at=item["recorded_at"]["S"],
            error=item["error"]["S"],
            body=item["body"]["S"],
            body_truncated=bool(item.get("body_truncated", {}).get("BOOL", False)),
            attributes={name: value.get("S", "") for name, value in attributes.items()},
        )
