"""The audit table: each tenant's anchor and its tamper findings, where no producer's or consumer's role can
write (the anchoring function writes anchors, the tamper recorder findings, and the operator role both).

Two detectors that need nothing from the roles they watch:

- **Tamper findings**, from the events table's stream: every MODIFY or REMOVE of an event row (emit() only
  ever inserts one) reaches the auditor through its own pipe and becomes a finding here, with the old and
  the new hash. No IAM policy can tell an append from an overwrite, so a role that may emit may overwrite;
  the stream sees it anyway.
- **Anchors**: the auditor verifies each tenant's log on a schedule and records the last (seq, hash) it
  verified. A log rewritten at or before an anchor, with every hash recomputed and the head moved with it,
  fails ``verify_chain`` against the anchor even if no stream record was ever seen.

Only the auditor (engine code only, no application module) and the operator role may write this table.

What an operator's anchor reset deals with is recorded, never inferred from times: a finding's time is AWS's
(the stream record's, to the second) and a reset's is the operator's own clock, so comparing them would hide a
rewrite made in the reset's second, or stamped before it by a clock behind the operator's, though it arrived
after. The reset deals with exactly the findings in the table when the operator's command starts (read
consistently), and marks each of them with its id (``dealt_with_by``); a finding that arrives later carries
no mark and stays open, whatever its time.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from boto3.dynamodb.types import TypeDeserializer
from botocore.exceptions import ClientError

from outbox import keys
from outbox.audit.findings import Finding, FindingKind, finding_from_stream_record, iso_seconds
from outbox.log.verification import Anchor, ChainReport

__all__ = ["AuditLog", "Finding", "FindingKind", "finding_from_stream_record", "iso_seconds"]

_deserializer = TypeDeserializer()
BATCH_GET_KEYS = 100  # DynamoDB's limit per BatchGetItem
UNPROCESSED_RETRIES = 4  # reads of the keys a BatchGetItem left unprocessed, before they are left out
RESET_PREFIX = "RESET#"  # an anchor reset's finding id: RESET#<when>, so the newest sorts last
# On a finding: the id of the anchor reset that dealt with it (the reset's finding id).
DEALT_WITH_BY = "dealt_with_by"
# On a reset: how many findings it dealt with (marked). Its absence marks a reset row of the older format,
# which recorded only its time.
DEALS_WITH = "deals_with"
# A reset row of the older format deals only with findings stamped strictly before its second less this
# margin: the operator's clock may run ahead of AWS's, and a finding stamped within the margin may have
# arrived after the reset. Wide, to err on the side of showing a finding; a new reset settles any it shows.
LEGACY_RESET_SKEW_MARGIN = timedelta(minutes=5)
# Findings a reset marks in its own transaction (DynamoDB's 100 items, less the anchor and the reset's record).
RESET_MARKS_IN_TRANSACTION = 98


def _anchor_of(tenant: str, item: Mapping[str, Any]) -> Anchor:
    return Anchor(tenant, int(item["seq"]["N"]), item["hash"]["S"], item.get("anchored_at", {}).get("S", ""))


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

    def reset(
        self,
        report: ChainReport,
        now: datetime,
        *,
        who: str,
        reason: str,
        dealing_with: Sequence[Finding] = (),
    ) -> Anchor:
        """After a documented repair: anchor the tenant's (intact) head as it is now, recorded as a finding
        with who and why. The one way an anchor moves other than forward: the anchor and its record are one
        transaction, so neither is ever written without the other.

        ``dealing_with``: the findings the reset deals with, as ``findings_to_deal_with`` read them before (the
        operator's reset passes every one there was); none by default. They are marked after the record is
        written, in the same transaction as far as it holds them, so a refused reset marks nothing, and one cut short
        past the first transaction leaves the rest open, to be reset again."""
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
            deals_with=len(dealing_with),
        )
        # The marks that fit ride in the reset's own transaction: a reset cut short (the operator's process
        # dies) has dealt with all of them or none, and a rerun refused as "re-anchored already" leaves none
        # open. Past a transaction's 100 items, the rest are marked after it.
        now_marked, later = dealing_with[:RESET_MARKS_IN_TRANSACTION], dealing_with[RESET_MARKS_IN_TRANSACTION:]
        self._record_reset(anchor, record, [self._mark_item(f, record.finding_id) for f in now_marked])
        self._mark_dealt_with(later, record.finding_id)
        return anchor

    def _mark_item(self, finding: Finding, reset_id: str) -> dict[str, Any]:
        """A finding marked as dealt with by ``reset_id``, as a transaction item (one marked already by another
        reset keeps its mark: the first reset that saw it dealt with it)."""
        return {
            "Update": {
                "TableName": self.table_name,
                "Key": self._finding_key(finding.tenant, finding.finding_id),
                "UpdateExpression": "SET #dealt = if_not_exists(#dealt, :reset)",
                "ConditionExpression": "attribute_exists(pk)",
                "ExpressionAttributeNames": {"#dealt": DEALT_WITH_BY},
                "ExpressionAttributeValues": {":reset": {"S": reset_id}},
            }
        }

    def _record_reset(self, anchor: Anchor, record: Finding, marks: Sequence[dict[str, Any]] = ()) -> None:
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
                    *marks,
                ]
            )
        except ClientError as exc:
            reasons = [reason.get("Code") for reason in exc.response.get("CancellationReasons") or []]
            if reasons[1:2] != ["ConditionalCheckFailed"]:  # the record's condition, not a throttle or conflict
                raise
            raise ValueError(
                f"tenant {anchor.tenant} was re-anchored at {anchor.anchored_at} already: wait a second and "
                "reset again if that one was not yours"
            ) from exc

    def _mark_dealt_with(self, found: Sequence[Finding], reset_id: str) -> None:
        """Mark each of ``found`` as dealt with by the reset ``reset_id``. One marked already (by another reset
        made meanwhile) keeps its mark: the first reset that saw it dealt with it."""
        for finding in found:
            try:
                self.client.update_item(
                    TableName=self.table_name,
                    Key=self._finding_key(finding.tenant, finding.finding_id),
                    UpdateExpression="SET #dealt = :reset",
                    ConditionExpression="attribute_exists(pk) AND attribute_not_exists(#dealt)",
                    ExpressionAttributeNames={"#dealt": DEALT_WITH_BY},
                    ExpressionAttributeValues={":reset": {"S": reset_id}},
                )
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
                    raise

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
    def _finding_key(tenant: str, finding_id: str) -> dict[str, Any]:
        return {"pk": {"S": keys.finding_partition(tenant)}, "sk": {"S": finding_id}}

    @classmethod
    def _finding_item(cls, finding: Finding) -> dict[str, Any]:
        item: dict[str, Any] = {
            **cls._finding_key(finding.tenant, finding.finding_id),
            "kind": {"S": finding.kind.value},
            "observed_at": {"S": finding.observed_at},
            "detail": {"S": finding.detail},
        }
        if finding.seq is not None:
            item["seq"] = {"N": str(finding.seq)}
        if finding.deals_with is not None:
            item[DEALS_WITH] = {"N": str(finding.deals_with)}
        for name in ("old_hash", "new_hash"):
            value = getattr(finding, name)
            if value:
                item[name] = {"S": value}
        return item

    def findings(self, tenant: str) -> list[Finding]:
        """Every finding of ``tenant``, resets included, each one a reset dealt with marked so."""
        found = [self._finding_of(tenant, item) for item in self._finding_items(tenant)]
        latest = max((f for f in found if f.kind is FindingKind.ANCHOR_RESET), key=_reset_order, default=None)
        if latest is None or latest.deals_with is not None:
            return found  # the marks say which findings resets dealt with
        cutoff = legacy_reset_cutoff(latest.observed_at)
        return [
            replace(f, dealt_with=_by_reset(latest.finding_id)) if f.is_open and f.observed_at < cutoff else f
            for f in found
        ]

    def findings_to_deal_with(self, tenant: str) -> list[Finding]:
        """What a reset made now deals with: every finding in the table (read consistently) that no reset has
        dealt with yet, also one an older-format reset's time covered: the new reset's marks replace it."""
        return [
            f
            for f in (self._finding_of(tenant, item) for item in self._finding_items(tenant))
            if f.kind is not FindingKind.ANCHOR_RESET and f.dealt_with is None
        ]

    def _finding_items(self, tenant: str) -> Iterator[dict[str, Any]]:
        paginator = self.client.get_paginator("query")
        for page in paginator.paginate(
            TableName=self.table_name,
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": {"S": keys.finding_partition(tenant)}},
            ConsistentRead=True,  # a reset deals with what is there: one just recorded included
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
            dealt_with=_by_reset(item[DEALT_WITH_BY]["S"]) if DEALT_WITH_BY in item else None,
            deals_with=int(item[DEALS_WITH]["N"]) if DEALS_WITH in item else None,
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

    def finding_count(self, tenant: str, *, after: Finding | str | None = None) -> int:
        """Open findings: neither anchor resets (those are operators' records, not alarms) nor dealt with by
        one; counted by DynamoDB (``Select=COUNT``), so a status row transfers no finding's content.

        ``after``: the tenant's latest reset (``last_reset``), or its time from a caller that kept only that
        (the record is then read again: what a reset dealt with is in the table, not in its time). None: no
        reset applies, and every finding but the resets counts."""
        condition = "#kind <> :reset"
        names = {"#kind": "kind"}
        values: dict[str, Any] = {
            ":pk": {"S": keys.finding_partition(tenant)},
            ":reset": {"S": FindingKind.ANCHOR_RESET.value},
        }
        if after is not None:
            reset = after if isinstance(after, Finding) else self.last_reset(tenant)
            condition += " AND attribute_not_exists(#dealt)"
            names["#dealt"] = DEALT_WITH_BY
            if reset is None or reset.deals_with is None:  # an older-format reset: its time, with the margin
                reset_at = reset.observed_at if reset else str(after)  # no row found: the time the caller read
                condition += " AND observed_at >= :cutoff"
                values[":cutoff"] = {"S": legacy_reset_cutoff(reset_at)}
        paginator = self.client.get_paginator("query")
        return sum(
            page.get("Count", 0)
            for page in paginator.paginate(
                TableName=self.table_name,
                KeyConditionExpression="pk = :pk",
                FilterExpression=condition,
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=values,
                Select="COUNT",
            )
        )


def legacy_reset_cutoff(reset_at: str) -> str:
    """For a reset row of the older format (its time only): the findings it deals with are those stamped
    before this, its second less ``LEGACY_RESET_SKEW_MARGIN``. An unreadable time deals with none."""
    try:
        moment = datetime.fromisoformat(reset_at)
    except ValueError:
        return ""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)  # the table's times are UTC (``iso_seconds``)
    return iso_seconds(moment.replace(microsecond=0) - LEGACY_RESET_SKEW_MARGIN)


def _by_reset(reset_id: str) -> str:
    return f"by the anchor reset at {reset_id.removeprefix(RESET_PREFIX)}"


def _reset_order(reset: Finding) -> str:
    return reset.finding_id  # RESET#<when>: the order ``last_reset`` reads them in
