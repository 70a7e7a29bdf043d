"""What every write of the inbox shares: its settings, its clock, and the writes fenced on a claim's owner.

Every write after a claim is conditioned on the claim's ``owner`` token and PENDING status, so a worker whose
lease was taken over can neither complete, release, defer nor kill the new owner's claim. The same token
recognises a worker's own write whose answer was lost (an HTTP 500 after the write applied, re-sent by the SDK).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any

from botocore.exceptions import ClientError

from outbox import clock as engine_clock
from outbox import entropy, keys
from outbox.exceptions import LeaseLostError, WatermarkMovedError
from outbox.inbox.reader import InboxReader
from outbox.inbox.rows import PENDING, Claim, _string
from outbox.log.envelope import format_timestamp


class InboxTable(InboxReader):
    """The inbox table as every write of it sees it: its limits, its clock, and the fenced writes (``Inbox``
    documents the parameters)."""

    def __init__(
        self,
        table_name: str,
        *,
        client: Any,
        max_attempts: int,
        retention: timedelta = timedelta(days=7),
        clock: Callable[[], datetime] = engine_clock.now,
        new_owner: Callable[[], str] | None = None,
    ) -> None:
        super().__init__(table_name, client=client)
        self.max_attempts = max_attempts
        self.retention = retention
        self._clock = clock
        self._new_owner = new_owner or (lambda: entropy.current().owner_token())

    @property
    def clock(self) -> Callable[[], datetime]:
        """The clock the inbox judges leases and retention by (the ordered subscriptions' rows use it too)."""
        return self._clock

    # -- helpers ------------------------------------------------------------------------------------

    def _fenced_item(self, claim: Claim, update: Mapping[str, Any]) -> dict[str, Any]:
        now_iso = format_timestamp(self._clock())
        return {
            "TableName": self.table_name,
            "Key": keys.claim_key(claim.event_id, claim.subscription),
            "UpdateExpression": update["UpdateExpression"],
            "ConditionExpression": "#owner = :owner AND #status = :pending",
            "ExpressionAttributeNames": {"#status": "status", "#owner": "owner"},
            "ExpressionAttributeValues": {
                **update["ExpressionAttributeValues"],
                ":owner": {"S": claim.owner},
                ":pending": {"S": PENDING},
                ":now_iso": {"S": now_iso},
            },
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }

    def _fenced_update(self, claim: Claim, action: str, update: Mapping[str, Any], landed: str | None = None) -> None:
        """One fenced UpdateItem. ``landed`` is the status our own write leaves: finding it under our owner
        token after a failed condition means an earlier send of this write applied and its answer was lost."""
        request = update if "TableName" in update else self._fenced_item(claim, update)
        try:
            self.client.update_item(**request)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
                raise
            if not _is_own(exc.response.get("Item"), claim, landed):
                raise LeaseLostError(claim.event_id, claim.subscription, action) from exc

    def _fenced_transaction(
        self, claim: Claim, action: str, items: list[dict[str, Any]], landed: str, watermark_at: int | None = None
    ) -> None:
        """A transaction whose first item is the fenced claim update (see ``_fenced_update``); the item at
        ``watermark_at``, if any, is an ordered subscription's watermark, conditioned on the version read."""
        first = next(iter(items[0].values()))
        first.setdefault("ReturnValuesOnConditionCheckFailure", "ALL_OLD")
        try:
            self.client.transact_write_items(TransactItems=items)
        except ClientError as exc:
            reasons = exc.response.get("CancellationReasons") or []
            if not reasons:
                raise
            if reasons[0].get("Code") == "ConditionalCheckFailed":
                if not _is_own(reasons[0].get("Item"), claim, landed):
                    raise LeaseLostError(claim.event_id, claim.subscription, action) from exc
                return
            if watermark_at is not None and refused_at(exc, watermark_at):
                raise WatermarkMovedError(
                    f"the watermark of {claim.subscription} for tenant {claim.tenant} moved while {action}"
                ) from exc
            raise


def refused_at(exc: ClientError, index: int) -> bool:
    """Whether the cancelled transaction's item at ``index`` failed its condition (an ordered subscription's
    watermark, conditioned on the version read, when ``index`` is where the watermark's update stands)."""
    reasons = exc.response.get("CancellationReasons") or []
    return index < len(reasons) and reasons[index].get("Code") == "ConditionalCheckFailed"


def _refusing_row(exc: ClientError) -> dict[str, Any] | None:
    """The row whose condition refused a write (a single write's, or a transaction's first item's), as the
    request asked DynamoDB to return it; None when the write failed for another reason."""
    if exc.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException":
        return dict(exc.response.get("Item") or {})
    reasons = exc.response.get("CancellationReasons") or []
    if reasons and reasons[0].get("Code") == "ConditionalCheckFailed":
        return dict(reasons[0].get("Item") or {})
    return None


def _is_own_claim(existing: Mapping[str, Any], owner: str) -> bool:
    # Our own claim, applied by an earlier send whose answer was lost (the SDK re-sent it).
    return _string(existing, "owner") == owner and _string(existing, "status") == PENDING


def _is_own(existing: Mapping[str, Any] | None, claim: Claim, landed: str | None) -> bool:
    return landed is not None and _string(existing, "owner") == claim.owner and _string(existing, "status") == landed


def _cancelled_by_condition(exc: ClientError) -> bool:
    if exc.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException":
        return True
    reasons = exc.response.get("CancellationReasons") or []
    return any(reason.get("Code") == "ConditionalCheckFailed" for reason in reasons)
