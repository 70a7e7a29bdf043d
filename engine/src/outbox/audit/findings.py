"""A tamper finding: what should not have happened to a tenant's log (an event row changed or deleted on the
stream, a chain break the hourly pass found, an operator's anchor reset), and how a stream record becomes one.
Written to and read from the audit table by ``outbox.audit.AuditLog``."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from boto3.dynamodb.types import TypeDeserializer

from outbox import keys

__all__ = ["Finding", "FindingKind", "finding_from_stream_record", "iso_seconds"]

_deserializer = TypeDeserializer()


class FindingKind(StrEnum):
    MODIFIED = "modified"  # an event row was overwritten or updated (the stream's MODIFY)
    REMOVED = "removed"  # an event row was deleted (the stream's REMOVE)
    CHAIN_BROKEN = "chain_broken"  # a scheduled verification found the chain broken
    ANCHOR_RESET = "anchor_reset"  # an operator re-anchored a tenant after a documented repair


@dataclass(frozen=True)
class Finding:
    """One thing that should not have happened to a tenant's log. ``finding_id`` makes recording it twice
    (a redelivered message, a second scheduled pass) write one row."""

    tenant: str
    kind: FindingKind
    finding_id: str
    seq: int | None
    observed_at: str
    detail: str
    old_hash: str | None = None
    new_hash: str | None = None
    # Set, when read back, on a finding an anchor reset dealt with (it was in the table when the reset was
    # made): the repair the reset records. It stays in the table (history is never erased) but is no problem.
    dealt_with: str | None = None
    # On an anchor reset: how many findings it dealt with; None on a reset row of the older format.
    deals_with: int | None = None

    @property
    def is_open(self) -> bool:
        """Whether it needs an operator: not a reset (an operator's record) and not dealt with by one."""
        return self.kind is not FindingKind.ANCHOR_RESET and self.dealt_with is None

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "kind": self.kind.value}


def finding_from_stream_record(record: Mapping[str, Any]) -> Finding:
    """A MODIFY or REMOVE stream record of an event row (as the tamper pipe forwards it) -> its finding.

    Refuses (ValueError) a record that is not one: the tamper pipe's filter admits only records with an
    event row's old image, so anything else means the filter and this parser disagree.
    """
    name = record.get("eventName")
    change = record.get("dynamodb")
    if name not in ("MODIFY", "REMOVE") or not isinstance(change, Mapping):
        raise ValueError(f"not a MODIFY or REMOVE stream record: eventName={name!r}")
    key = change.get("Keys") or {}
    tenant = keys.tenant_of_event_partition(str(key.get("pk", {}).get("S", "")))
    if tenant is None:
        raise ValueError(f"not an event row's key: {json.dumps(key)[:200]}")
    old, new = change.get("OldImage") or {}, change.get("NewImage") or {}
    seq_text = str(key.get("sk", {}).get("S", ""))
    kind = FindingKind.MODIFIED if name == "MODIFY" else FindingKind.REMOVED
    return Finding(
        tenant=tenant,
        kind=kind,
        # The stream record's id: the same change, delivered twice, is one finding.
        finding_id=f"STREAM#{record.get('eventID', '')}",
        seq=int(seq_text) if seq_text.isdigit() else None,
        observed_at=_stream_time(change),
        detail=_change_detail(kind, old, new),
        old_hash=old.get("hash", {}).get("S"),
        new_hash=new.get("hash", {}).get("S"),
    )


def _stream_time(change: Mapping[str, Any]) -> str:
    created = change.get("ApproximateCreationDateTime")
    if isinstance(created, (int, float)):
        return iso_seconds(datetime.fromtimestamp(created, UTC))
    return str(created or "")


def iso_seconds(moment: datetime) -> str:
    """A moment as the audit table writes it: UTC, to the second."""
    return moment.astimezone(UTC).isoformat(timespec="seconds")


def _change_detail(kind: FindingKind, old: Mapping[str, Any], new: Mapping[str, Any]) -> str:
    """Which attributes changed, by name only: the values are the tenant's data."""
    if kind is FindingKind.REMOVED:
        return "the event row was deleted"
    changed = sorted(name for name in set(old) | set(new) if _value(old.get(name)) != _value(new.get(name)))
    return f"the event row was rewritten; attributes changed: {', '.join(changed) or 'none (rewritten as it was)'}"


def _value(attribute: Any) -> Any:
    return None if attribute is None else _deserializer.deserialize(attribute)
