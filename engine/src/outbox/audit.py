"""The audit table: each tenant's anchor and its tamper findings, where no runtime role can write.

Two detectors that need nothing from the roles they watch:

- **Tamper findings**, from the events table's stream: every MODIFY or REMOVE of an event row (emit() only
  ever inserts one) reaches the auditor through its own pipe and becomes a finding here, with the old and
  the new hash. No IAM policy can tell an append from an overwrite, so a role that may emit may overwrite;
  the stream sees it anyway.
- **Anchors**: the auditor verifies each tenant's log on a schedule and records the last (seq, hash) it
  verified. A log rewritten at or before an anchor, with every hash recomputed and the head moved with it,
  fails ``verify_chain`` against the anchor even if no stream record was ever seen.

Only the auditor (engine code only, no application module) and the operator role may write this table.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from boto3.dynamodb.types import TypeDeserializer
from botocore.exceptions import ClientError

from outbox import keys
from outbox.verification import Anchor, ChainReport

__all__ = ["AuditLog", "Finding", "FindingKind", "finding_from_stream_record"]

_deserializer = TypeDeserializer()
BATCH_GET_KEYS = 100  # DynamoDB's limit per BatchGetItem
UNPROCESSED_RETRIES = 4  # reads of the keys a BatchGetItem left unprocessed, before they are left out
RESET_PREFIX = "RESET#"  # an anchor reset's finding id: RESET#<when>, so the newest sorts last


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
    # Set on a finding observed at or before the tenant's latest anchor reset, when read back: the repair the
    # reset records dealt with it. It stays in the table (history is never erased) but is no problem any more.
    dealt_with: str | None = None

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


def _anchor_of(tenant: str, item: Mapping[str, Any]) -> Anchor:
    return Anchor(tenant, int(item["seq"]["N"]), item["hash"]["S"], item.get("anchored_at", {}).get("S", ""))


def _change_detail(kind: FindingKind, old: Mapping[str, Any], new: Mapping[str, Any]) -> str:
    """Which attributes changed, by name only: the values are the tenant's data."""
    if kind is FindingKind.REMOVED:
        return "the event row was deleted"
    changed = sorted(name for name in set(old) | set(new) if _value(old.get(name)) != _value(new.get(name)))
    return f"the event row was rewritten; attributes changed: {', '.join(changed) or 'none (rewritten as it was)'}"


def _value(attribute: Any) -> Any:
    return None if attribute is None else _deserializer.deserialize(attribute)


class AuditLog:
    """Reads and writes of the audit table (``client`` is a boto3 DynamoDB client)."""

    def __init__(self, table_name: str, client: Any) -> None:
        self.table_name, self.client = table_name, client

    # -- anchors ------------------------------------------------------------------------------------

    def anchor(self, tenant: str) -> Anchor | None:
        item = self.client.get_item(TableName=self.table_name, Key=keys.anchor_key(tenant), ConsistentRead=True).get(
            "Item"
        )
        return _anchor_of(tenant, item) if item else None

    def anchors(self, tenants: Sequence[str]) -> dict[str, Anchor | None]:
        """Each tenant's anchor (None: never anchored), read with consistent BatchGetItems of up to 100 keys, so
        that an hourly pass over many tenants spends its time verifying, not reading anchors one by one.

        A tenant whose key DynamoDB still leaves unprocessed after the retries is left out, not taken for one
        without an anchor: a pass that verified it without its anchor would miss a rewrite below the anchor
        and could move the anchor onto the rewritten log."""
        found: dict[str, Anchor | None] = {}
        for start in range(0, len(tenants), BATCH_GET_KEYS):
            chunk = list(tenants[start : start + BATCH_GET_KEYS])
            by_partition = {keys.anchor_partition(tenant): tenant for tenant in chunk}
            pending = [keys.anchor_key(tenant) for tenant in chunk]
            for _ in range(UNPROCESSED_RETRIES):
                response = self.client.batch_get_item(
                    RequestItems={self.table_name: {"Keys": pending, "ConsistentRead": True}}
                )
                for item in response.get("Responses", {}).get(self.table_name, []):
                    tenant = by_partition[item["pk"]["S"]]
                    found[tenant] = _anchor_of(tenant, item)
                pending = response.get("UnprocessedKeys", {}).get(self.table_name, {}).get("Keys", [])
                if not pending:
                    break
            unknown = {by_partition[key["pk"]["S"]] for key in pending}
            found.update({tenant: None for tenant in chunk if tenant not in found and tenant not in unknown})
        return found

    def advance(self, report: ChainReport, now: datetime) -> Anchor | None:
        """Anchor an intact report's head, only ever forward: a pass that read an older head (or runs late)
        changes nothing. Returns the new anchor, or None if there was nothing to advance."""
        if not report.intact or report.head_seq == 0 or (report.anchor_seq or 0) >= report.head_seq:
            return None
        anchor = Anchor(report.tenant, report.head_seq, report.head_hash, iso_seconds(now))
        try:
            self.client.put_item(
                TableName=self.table_name,
                Item=self._anchor_item(anchor),
                ConditionExpression="attribute_not_exists(pk) OR seq < :seq",
                ExpressionAttributeValues={":seq": {"N": str(anchor.seq)}},
            )
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
                raise
            return None
        return anchor

    def reset(self, report: ChainReport, now: datetime, *, who: str, reason: str) -> Anchor:
        """After a documented repair: anchor the tenant's (intact) head as it is now, recorded as a finding
        with who and why. The one way an anchor moves other than forward: the anchor and its record are one
        transaction, so neither is ever written without the other."""
        if not report.intact or report.head_seq == 0:
            raise ValueError(f"tenant {report.tenant}'s chain is not intact ({report.detail}): repair it first")
        anchor = Anchor(report.tenant, report.head_seq, report.head_hash, iso_seconds(now))
        record = Finding(
            tenant=report.tenant,
            kind=FindingKind.ANCHOR_RESET,
            finding_id=f"{RESET_PREFIX}{anchor.anchored_at}",
            seq=anchor.seq,
            observed_at=anchor.anchored_at,
            detail=f"re-anchored at seq {anchor.seq} by {who}: {reason}",
            new_hash=anchor.hash,
        )
        try:
            self.client.transact_write_items(
                TransactItems=[
                    {"Put": {"TableName": self.table_name, "Item": self._anchor_item(anchor)}},
                    {
                        "Put": {
                            "TableName": self.table_name,
                            "Item": self._finding_item(record),
                            "ConditionExpression": "attribute_not_exists(pk)",
                        }
                    },
                ]
            )
        except ClientError as exc:
            reasons = [reason.get("Code") for reason in exc.response.get("CancellationReasons") or []]
            if reasons[1:2] != ["ConditionalCheckFailed"]:  # the record's condition, not a throttle or conflict
                raise
            raise ValueError(
                f"tenant {report.tenant} was re-anchored at {anchor.anchored_at} already: wait a second and "
                "reset again if that one was not yours"
            ) from exc
        return anchor

    @staticmethod
    def _anchor_item(anchor: Anchor) -> dict[str, Any]:
        return {
            **keys.anchor_key(anchor.tenant),
            "seq": {"N": str(anchor.seq)},
            "hash": {"S": anchor.hash},
            "anchored_at": {"S": anchor.anchored_at},
        }

    # -- findings -----------------------------------------------------------------------------------

    def record(self, finding: Finding) -> bool:
        """Write ``finding`` once; False if it was already recorded."""
        try:
            self.client.put_item(
                TableName=self.table_name,
                Item=self._finding_item(finding),
                ConditionExpression="attribute_not_exists(pk)",
            )
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
                raise
            return False
        return True

    @staticmethod
    def _finding_item(finding: Finding) -> dict[str, Any]:
        item: dict[str, Any] = {
            "pk": {"S": keys.finding_partition(finding.tenant)},
            "sk": {"S": finding.finding_id},
            "kind": {"S": finding.kind.value},
            "observed_at": {"S": finding.observed_at},
            "detail": {"S": finding.detail},
        }
        if finding.seq is not None:
            item["seq"] = {"N": str(finding.seq)}
        for name in ("old_hash", "new_hash"):
            value = getattr(finding, name)
            if value:
                item[name] = {"S": value}
        return item

    def findings(self, tenant: str) -> list[Finding]:
        """Every finding of ``tenant``, resets included, each one the latest reset dealt with marked so."""
        found = [self._finding_of(tenant, item) for item in self._finding_items(tenant)]
        latest = max((f.observed_at for f in found if f.kind is FindingKind.ANCHOR_RESET), default=None)
        if latest is None:
            return found
        return [
            replace(f, dealt_with=f"by the anchor reset at {latest}")
            if f.kind is not FindingKind.ANCHOR_RESET and f.observed_at <= latest
            else f
            for f in found
        ]

    def _finding_items(self, tenant: str) -> Iterator[dict[str, Any]]:
        paginator = self.client.get_paginator("query")
        for page in paginator.paginate(
            TableName=self.table_name,
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": {"S": keys.finding_partition(tenant)}},
        ):
            yield from page.get("Items", [])

    @staticmethod
    def _finding_of(tenant: str, item: Mapping[str, Any]) -> Finding:
        return Finding(
            tenant=tenant,
            kind=FindingKind(item["kind"]["S"]),
            finding_id=item["sk"]["S"],
            seq=int(item["seq"]["N"]) if "seq" in item else None,
            observed_at=item["observed_at"]["S"],
            detail=item["detail"]["S"],
            old_hash=item.get("old_hash", {}).get("S"),
            new_hash=item.get("new_hash", {}).get("S"),
        )

    def last_reset(self, tenant: str) -> Finding | None:
        """The tenant's latest anchor reset (its record says when, by whom and why), or None: one item read,
        the newest of the ``RESET#<time>`` keys."""
        response = self.client.query(
            TableName=self.table_name,
            KeyConditionExpression="pk = :pk AND begins_with(sk, :reset)",
            ExpressionAttributeValues={
                ":pk": {"S": keys.finding_partition(tenant)},
                ":reset": {"S": RESET_PREFIX},
            },
            ScanIndexForward=False,
            Limit=1,
            ConsistentRead=True,
        )
        items = response.get("Items", [])
        return self._finding_of(tenant, items[0]) if items else None

    def finding_count(self, tenant: str, *, after: str | None = None) -> int:
        """Open findings: neither anchor resets (those are operators' records, not alarms) nor observed at or
        before ``after`` (the latest reset, which dealt with them); counted by DynamoDB (``Select=COUNT``), so a
        status row transfers no finding's content."""
        condition = "#kind <> :reset"
        values: dict[str, Any] = {
            ":pk": {"S": keys.finding_partition(tenant)},
            ":reset": {"S": FindingKind.ANCHOR_RESET.value},
        }
        if after is not None:
            condition += " AND observed_at > :after"
            values[":after"] = {"S": after}
        paginator = self.client.get_paginator("query")
        return sum(
            page.get("Count", 0)
            for page in paginator.paginate(
                TableName=self.table_name,
                KeyConditionExpression="pk = :pk",
                FilterExpression=condition,
                ExpressionAttributeNames={"#kind": "kind"},
                ExpressionAttributeValues=values,
                Select="COUNT",
            )
        )
