"""What an anchor reset deals with: exactly the findings in the audit table when it was made, never a finding
that arrives after it, whatever the two clocks say.

A finding's time is AWS's (the stream record's ApproximateCreationDateTime, rounded down to the second); a
reset's is the operator's clock. A rewrite in the reset's second, or stamped a little before it by a stream
whose clock is behind the operator's, still arrived after the reset: nobody saw it when the reset was decided,
so it stays open, in ``outbox status``'s count and in ``outbox findings``. A reset row written before resets
recorded what they deal with falls back to the times, with a margin that shows rather than hides.

The operator's path is the real one (``outbox.ops.audit.reset_anchor``, ``findings`` and
``outbox.ops.status.tenant_status``) on a moto audit table; only the chain verification is stood in for."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from itertools import count
from types import SimpleNamespace
from typing import Any

import boto3
import pytest
from moto import mock_aws

from outbox import keys
from outbox.audit.findings import FindingKind, finding_from_stream_record, iso_seconds
from outbox.audit.table import RESET_PREFIX, AuditLog
from outbox.log.verification import ChainReport
from outbox.ops import audit as ops_audit
from outbox.ops import status as ops_status

AUDIT, TENANT = "audit", "acme"
REPORT = ChainReport(tenant=TENANT, intact=True, events_checked=3, head_seq=3, head_hash="a" * 64)
# The operator's clock when the reset is made: to the sub-second, as a laptop's is.
RESET_AT = datetime(2026, 12, 2, 12, 0, 0, 400_000, tzinfo=UTC)
_stream_ids = count(1)


@pytest.fixture
def log(monkeypatch: pytest.MonkeyPatch) -> Iterator[AuditLog]:
    """An empty moto audit table; the tenant's chain verifies intact (the reset's precondition)."""
    from tests.functional.conftest import create_pk_sk_table

    monkeypatch.setenv("AWS_ACCOUNT_ID_ENDPOINT_MODE", "disabled")
    monkeypatch.setattr(ops_audit, "verify", lambda *_, **__: REPORT)
    monkeypatch.setattr(ops_status, "verify", lambda *_, **__: REPORT)
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        create_pk_sk_table(client, AUDIT)
        yield AuditLog(AUDIT, client)


def operator(log: AuditLog) -> Any:
    """What the operator's commands read: the audit table, the clock, no dead letters."""
    return SimpleNamespace(
        audit=log, now=lambda: RESET_AT, inbox=SimpleNamespace(dead_letters=lambda tenant: []), tenants=lambda: [TENANT]
    )


def rewrite(log: AuditLog, seq: int, stream_time: datetime) -> None:
    """An event row overwritten, as the tamper recorder records the stream's MODIFY of it (stamped by AWS's
    clock, to the second)."""
    record = {
        "eventID": f"stream-{next(_stream_ids)}",
        "eventName": "MODIFY",
        "dynamodb": {
            "Keys": keys.event_key(TENANT, seq),
            "ApproximateCreationDateTime": int(stream_time.timestamp()),
            "OldImage": {**keys.event_key(TENANT, seq), "hash": {"S": "o" * 64}},
            "NewImage": {**keys.event_key(TENANT, seq), "hash": {"S": "n" * 64}},
        },
    }
    assert log.record(finding_from_stream_record(record))


def reset(log: AuditLog) -> None:
    ops_audit.reset_anchor(operator(log), TENANT, who="ana", reason="ticket 42")


def status_count(log: AuditLog) -> int:
    return ops_status.tenant_status(operator(log), TENANT).tamper_findings


def open_seqs(log: AuditLog) -> list[int]:
    """The seqs of the open findings, as ``outbox findings`` lists them (every finding here names one)."""
    return sorted(f.seq or 0 for f in ops_audit.findings(operator(log), [TENANT]) if f.is_open)


def dealt_seqs(log: AuditLog) -> list[int]:
    found = ops_audit.findings(operator(log), [TENANT])
    return sorted(f.seq or 0 for f in found if f.kind is not FindingKind.ANCHOR_RESET and f.dealt_with)


def test_a_rewrite_in_the_reset_s_own_second_arriving_after_it_is_open(log: AuditLog) -> None:
    reset(log)

    rewrite(log, 2, stream_time=RESET_AT.replace(microsecond=0))  # the same second, on AWS's clock

    assert status_count(log) == 1
    assert open_seqs(log) == [2]


def test_a_rewrite_stamped_before_the_reset_by_a_clock_behind_the_operator_s_but_arriving_after_is_open(
    log: AuditLog,
) -> None:
    reset(log)

    rewrite(log, 2, stream_time=RESET_AT - timedelta(seconds=5))  # the operator's clock 5 s ahead of AWS's
    rewrite(log, 3, stream_time=RESET_AT - timedelta(seconds=1))

    assert status_count(log) == 2
    assert open_seqs(log) == [2, 3]


def test_the_findings_there_when_the_reset_was_made_are_dealt_with_whatever_their_times(log: AuditLog) -> None:
    rewrite(log, 1, stream_time=RESET_AT - timedelta(hours=1))
    rewrite(log, 2, stream_time=RESET_AT + timedelta(seconds=3))  # the operator's clock 3 s behind AWS's
    assert status_count(log) == 2

    reset(log)

    assert status_count(log) == 0
    assert (open_seqs(log), dealt_seqs(log)) == ([], [1, 2])
    # and one that arrives later, in the same second as the last of them, is open: the reset never saw it
    rewrite(log, 3, stream_time=RESET_AT + timedelta(seconds=3))
    assert (status_count(log), open_seqs(log)) == (1, [3])


def test_a_reset_row_of_the_older_format_deals_with_what_is_well_before_it_and_shows_what_is_close(
    log: AuditLog,
) -> None:
    # Given a reset recorded by the older code: its time only, no record of which findings it dealt with
    at = iso_seconds(RESET_AT)
    log.client.put_item(
        TableName=AUDIT,
        Item={
            "pk": {"S": keys.finding_partition(TENANT)},
            "sk": {"S": f"{RESET_PREFIX}{at}"},
            "kind": {"S": FindingKind.ANCHOR_RESET.value},
            "observed_at": {"S": at},
            "detail": {"S": "re-anchored at seq 3 by ana: ticket 41"},
            "seq": {"N": "3"},
            "new_hash": {"S": "a" * 64},
        },
    )
    # When findings are read: one an hour before it, and two within the operators' clock skew of it
    rewrite(log, 1, stream_time=RESET_AT - timedelta(hours=1))
    rewrite(log, 2, stream_time=RESET_AT - timedelta(seconds=5))
    rewrite(log, 3, stream_time=RESET_AT.replace(microsecond=0))

    # Then the old one is dealt with, and those it cannot be told to have preceded it stay open
    assert dealt_seqs(log) == [1]
    assert open_seqs(log) == [2, 3]
    assert status_count(log) == 2
