"""An anchor reset is one transaction of the anchor and its record: only the record's own condition (a reset
already recorded at that second) means "reset already"; a throttle or a conflict is DynamoDB's answer, raised
as it came, so the operator retries instead of being told a reset happened."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from botocore.exceptions import ClientError

from outbox.audit import AuditLog
from outbox.chain import ChainReport

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
