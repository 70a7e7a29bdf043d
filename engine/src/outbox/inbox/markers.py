"""The DynamoDB-only path's completion marker: a COMPLETED row for a pair that has none, committed with the
handler's writes in one request, with no claim and no lease (``outbox.delivery.direct``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from botocore.exceptions import ClientError

from outbox.exceptions import CompletionTooLargeError, WatermarkMovedError
from outbox.inbox.rows import COMPLETED, unclaimed_row
from outbox.inbox.table import InboxTable, _refusing_row, refused_at
from outbox.log.envelope import Envelope, format_timestamp
from outbox.log.limits import MAX_TRANSACT_ITEMS


class CompletionMarkers(InboxTable):
    """DynamoDB-only subscriptions: no lease, one request."""

    def completion_marker(self, envelope: Envelope, subscription: str, digest: str) -> dict[str, Any]:
        """A COMPLETED row for a pair that has none, as a transaction item: it commits with the handler's
        writes, and only where no row exists. A duplicate delivery fails its condition (the row it finds says
        whether the content was the same), and a pair with any history (a failed attempt, a replay, a live
        lease) is left to the lease path."""
        now = self._clock()
        row = unclaimed_row(envelope, subscription, COMPLETED, now, digest, completed_at=format_timestamp(now))
        row["attempts"] = {"N": "1"}
        row["expires_at"] = {"N": str(int((now + self.retention).timestamp()))}
        return {
            "Put": {
                "TableName": self.table_name,
                "Item": row,
                "ConditionExpression": "attribute_not_exists(pk)",
                "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
            }
        }

    def complete_directly(
        self,
        marker: Mapping[str, Any],
        writes: Sequence[Mapping[str, Any]] = (),
        order: Sequence[Mapping[str, Any]] = (),
    ) -> dict[str, Any] | None:
        """Commit ``marker`` (``completion_marker``) with the handler's ``writes`` and, for an ordered
        subscription, ``order`` (``OrderBook.advance_items``): one PutItem alone, else one TransactWriteItems.
        Returns None once committed, or the row that was there instead (the marker's condition failed, nothing
        was written). ``WatermarkMovedError`` when the watermark is not as read; a failed condition of one of
        the writes raises the transaction's ClientError, as a completion on the lease path does."""
        own = 1 + len(order)  # the marker and the watermark's items, before the writes
        if len(writes) + own > MAX_TRANSACT_ITEMS:
            raise CompletionTooLargeError(
                f"{marker['Put']['Item']['subscription']['S']} returned {len(writes)} writes; at most "
                f"{MAX_TRANSACT_ITEMS - own} fit in one transaction with the completion"
            )
        try:
            if own == 1 and not writes:
                self.client.put_item(**marker["Put"])
            else:
                items = [dict(marker), *map(dict, order), *map(dict, writes)]
                self.client.transact_write_items(TransactItems=items)
        except ClientError as exc:
            existing = _refusing_row(exc)
            if existing is not None:
                return existing
            if any(refused_at(exc, index) for index in range(1, own)):  # the watermark's items
                subscription = marker["Put"]["Item"]["subscription"]["S"]
                raise WatermarkMovedError(
                    f"the watermark of {subscription} moved before its direct completion"
                ) from exc
            raise
        return None
