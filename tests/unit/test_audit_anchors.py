"""The audit table's anchors: read in batches, and reset in one transaction.

An anchor reset is one transaction of the anchor and its record: only the record's own condition (a reset
already recorded at that second) means "reset already"; a throttle or a conflict is DynamoDB's answer, raised
as it came, so the operator retries instead of being told a reset happened."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from botocore.exceptions import ClientError

from outbox.audit.table import AuditLog
from outbox.log.verification import ChainReport

REPORT = ChainReport(tenant="acme", intact=True, events_checked=3, head_seq=3, head_hash="a" * 64)


class Refusing:
    """A DynamoDB client whose every transaction is cancelled for ``reasons``."""

    def __init__(self, *reasons: str) -> None:
        self.reasons = reasons

    def transact_write_items(self, **_: Any) -> None:
        raise ClientError(
            {
                "Error": {"Code": "TransactionCanceledException", "Message": "cancelled"},
                "CancellationReasons": [{"Code": code} for code in self.reasons],
            },
            "TransactWriteItems",
        )


def test_a_reset_recorded_at_the_same_second_is_refused_in_words() -> None:
    with pytest.raises(ValueError, match="re-anchored at"):
        AuditLog("audit", Refusing("None", "ConditionalCheckFailed")).reset(
            REPORT, datetime(2026, 12, 2, tzinfo=UTC), who="ana", reason="ticket 42"
        )


@pytest.mark.parametrize("reasons", [("ThrottlingError", "None"), ("None", "TransactionConflict")])
def test_a_throttled_or_conflicting_reset_is_dynamodb_s_error_not_a_refusal(reasons: tuple[str, str]) -> None:
    with pytest.raises(ClientError, match="TransactionCanceledException"):
        AuditLog("audit", Refusing(*reasons)).reset(
            REPORT, datetime(2026, 12, 2, tzinfo=UTC), who="ana", reason="ticket 42"
        )


class Unprocessing:
    """A DynamoDB client whose BatchGetItem returns the anchors it has and leaves ``stuck`` tenants' keys
    unprocessed on every try."""

    def __init__(self, anchored: dict[str, int], stuck: set[str]) -> None:
        self.anchored, self.stuck, self.calls = anchored, stuck, 0

    def batch_get_item(self, RequestItems: dict[str, Any]) -> dict[str, Any]:  # noqa: N803 (boto3's name)
        self.calls += 1
        ((table, request),) = RequestItems.items()
        responses, unprocessed = [], []
        for key in request["Keys"]:
            tenant = key["pk"]["S"].split("#")[1]
            if tenant in self.stuck:
                unprocessed.append(key)
            elif tenant in self.anchored:
                seq = self.anchored[tenant]
                responses.append({**key, "seq": {"N": str(seq)}, "hash": {"S": "b" * 64}})
        return {
            "Responses": {table: responses},
            "UnprocessedKeys": {table: {"Keys": unprocessed}} if unprocessed else {},
        }


def test_anchors_are_read_a_hundred_at_a_time_and_an_unreadable_one_is_left_out_not_taken_for_none() -> None:
    tenants = [f"t{n}" for n in range(150)]
    client = Unprocessing({"t1": 7}, stuck={"t2"})

    anchors = AuditLog("audit", client).anchors(tenants)

    assert anchors["t1"] is not None
    assert anchors["t1"].seq == 7
    assert anchors["t0"] is None  # never anchored
    assert "t2" not in anchors  # unknown: a pass must not verify it as if it had no anchor
    assert len(anchors) == 149
    assert client.calls == 4 + 1  # the first chunk tried four times while t2 stays unprocessed, the second once
