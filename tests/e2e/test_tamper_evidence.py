"""Tamper evidence: a rewrite of the log by a role that may emit (PutItem), with every hash recomputed and the
head moved along, fools a plain ``verify_chain``; the tamper pipe records it as a finding, and the anchors
catch it even when no stream record was seen. Status verifies only what was appended since the anchor.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from outbox import keys
from outbox.audit.auditor import PASS_MARGIN_SECONDS, Auditor
from outbox.audit.findings import FindingKind
from outbox.audit.table import AuditLog
from outbox.log.chain import read_event_rows
from outbox.log.envelope import Envelope
from outbox.log.verification import ChainBreak, verify_chain
from tests.e2e.backends import LocalBackend
from tests.e2e.test_pipeline import order_and_pay, unique
from tests.e2e.test_runbook import as_json, operations, outbox

SCHEDULED_EVENT = {"source": "aws.events", "detail-type": "Scheduled Event", "detail": {}}


def rewrite_with_recomputed_hashes(local: LocalBackend, tenant: str, seq: int) -> None:
    """What a role allowed to emit could do: overwrite event ``seq`` (PutItem), recompute the hash of it and of
    every event after it, and move the head to the new last hash. No UpdateItem, no DeleteItem."""
    client, table = local.client("dynamodb"), local.output("EventsTableName")
    rows = [Envelope.from_item(item) for item in read_event_rows(client, table, tenant, from_seq=seq)]
    prev_hash = None
    for index, envelope in enumerate(rows):
        changes: dict[str, Any] = {} if prev_hash is None else {"prev_hash": prev_hash}
        if index == 0:
            changes["payload"] = {**envelope.payload, "forged": True}
        forged = envelope.model_copy(update=changes)
        forged = forged.model_copy(update={"hash": forged.computed_hash()})
        client.put_item(TableName=table, Item=forged.to_item())
        prev_hash = forged.hash
    head = client.get_item(TableName=table, Key=keys.head_key(tenant), ConsistentRead=True)["Item"]
    client.put_item(TableName=table, Item={**head, "last_hash": {"S": prev_hash}})


def audit(local: LocalBackend) -> AuditLog:
    return AuditLog(local.output("AuditTableName"), client=local.client("dynamodb"))


def run_anchoring(local: LocalBackend) -> dict[str, Any]:
    result: dict[str, Any] = local.runtime.function("AnchoringFunctionName").invoke(SCHEDULED_EVENT)
    return result


def head_seq(local: LocalBackend, tenant: str) -> int:
    return local.store().head(tenant).last_seq


def plain_verification(local: LocalBackend, tenant: str) -> bool:
    return verify_chain(local.client("dynamodb"), local.output("EventsTableName"), tenant).intact


@pytest.fixture
def tenant(local: LocalBackend) -> str:
    name = unique("tenant")
    for _ in range(3):
        order_and_pay(local, name)
    local.settle()
    return name


def test_a_rewrite_with_recomputed_hashes_fools_the_plain_check_and_is_recorded_as_a_finding(
    local: LocalBackend, tenant: str
) -> None:
    # Given a log with no finding
    assert list(audit(local).findings(tenant)) == []

    # When an emitting role rewrites its second event and every event after it, hashes recomputed
    rewrite_with_recomputed_hashes(local, tenant, seq=2)

    # Then the chain alone looks intact ...
    assert plain_verification(local, tenant)
    # ... but each overwritten row reaches the tamper recorder through the stream and is a finding
    local.settle()
    found = list(audit(local).findings(tenant))
    last = head_seq(local, tenant)
    assert {f.seq for f in found} == set(range(2, last + 1))
    assert {f.kind for f in found} == {FindingKind.MODIFIED}
    second = next(f for f in found if f.seq == 2)
    assert second.old_hash != second.new_hash
    assert "payload" in second.detail
    # ... the recorded detail names attributes, never their values
    assert "forged" not in second.detail
    # ... and status and `outbox findings` say so, with exit code 1
    status = operations(local).status()
    assert f"tenant {tenant}: {last - 1} tamper findings: outbox findings --tenant {tenant}" in status.problems()
    result = outbox(local, "findings", "--tenant", tenant, "--json")
    assert result.exit_code == 1
    assert len(json.loads(result.stdout)) == last - 1


def test_the_same_stream_record_delivered_twice_is_one_finding(local: LocalBackend, tenant: str) -> None:
    last = head_seq(local, tenant)
    rewrite_with_recomputed_hashes(local, tenant, seq=last)
    local.runtime.pipe("TamperPipeName").drain()
    # the pipe sent it; SQS delivers it twice (at-least-once): the recorder writes one row
    messages = local.client("sqs").receive_message(QueueUrl=local.output("TamperQueueUrl"), VisibilityTimeout=0)
    body = messages["Messages"][0]["Body"]
    local.client("sqs").send_message(QueueUrl=local.output("TamperQueueUrl"), MessageBody=body)
    local.settle()
    assert [f.seq for f in audit(local).findings(tenant)] == [last]


def test_a_body_that_is_not_a_stream_record_goes_to_the_tamper_dlq_and_is_not_dropped(local: LocalBackend) -> None:
    sqs = local.client("sqs")
    sqs.send_message(QueueUrl=local.output("TamperQueueUrl"), MessageBody="not json at all")
    sqs.send_message(QueueUrl=local.output("TamperQueueUrl"), MessageBody='{"eventName": "INSERT", "dynamodb": {}}')
    local.settle()
    attributes = sqs.get_queue_attributes(
        QueueUrl=local.output("TamperDeadLetterQueueUrl"), AttributeNames=["ApproximateNumberOfMessages"]
    )["Attributes"]
    assert int(attributes["ApproximateNumberOfMessages"]) == 2
    assert any(p.startswith("tamper-dlq: 2 messages") for p in operations(local).status().problems())
    # ... and a redrive sends them back unchanged: they fail again and wait in the DLQ once more
    assert outbox(local, "redrive", "--dlq", "tamper-dlq", "--yes").exit_code == 0
    local.settle()
    assert any(p.startswith("tamper-dlq: 2 messages") for p in operations(local).status().problems())


def test_the_anchor_catches_a_rewrite_the_stream_never_showed(local: LocalBackend, tenant: str) -> None:
    # Given the hourly pass anchored the tenant's head
    last = head_seq(local, tenant)
    assert run_anchoring(local)["advanced"][tenant] == last
    assert audit(local).anchor(tenant).seq == last  # type: ignore[union-attr]

    # When the log is rewritten below the anchor, hashes recomputed, and the stream's records of it are lost
    # (purged from the tamper queue before the recorder sees them)
    rewrite_with_recomputed_hashes(local, tenant, seq=3)
    local.runtime.pipe("TamperPipeName").drain()
    local.client("sqs").purge_queue(QueueUrl=local.output("TamperQueueUrl"))
    local.settle()
    assert plain_verification(local, tenant)
    assert list(audit(local).findings(tenant)) == []

    # Then a full verification, the incremental status and the next hourly pass all see the anchor contradicted
    report = operations(local).verify(tenant)
    assert (report.intact, report.reason, report.first_broken_seq) == (False, ChainBreak.ANCHOR_MISMATCH, last)
    (row,) = [t for t in operations(local).status().tenants if t.tenant == tenant]
    assert (row.chain_intact, row.break_reason, row.verified_from_seq) == (False, "anchor_mismatch", last + 1)
    assert run_anchoring(local)["broken"][tenant]["reason"] == "anchor_mismatch"
    assert [f.kind for f in audit(local).findings(tenant)] == [FindingKind.CHAIN_BROKEN]


def test_status_reads_only_what_was_appended_since_the_anchor(local: LocalBackend, tenant: str) -> None:
    run_anchoring(local)
    anchored = head_seq(local, tenant)
    order_and_pay(local, tenant)
    local.settle()
    last = head_seq(local, tenant)
    (row,) = [t for t in operations(local).status().tenants if t.tenant == tenant]
    assert (row.chain_intact, row.anchor_seq, row.verified_from_seq, row.head_seq) == (
        True,
        anchored,
        anchored + 1,
        last,
    )
    report = operations(local).verify(tenant, full=False)
    assert report.events_checked == last - anchored
    # the full verification is the explicit one, and reads the whole log
    assert operations(local).verify(tenant).events_checked == last


def test_a_removed_event_row_is_a_finding_and_contradicts_the_anchor(local: LocalBackend, tenant: str) -> None:
    run_anchoring(local)
    last = head_seq(local, tenant)
    client, table = local.client("dynamodb"), local.output("EventsTableName")
    client.delete_item(TableName=table, Key=keys.event_key(tenant, last))  # the operator role could
    local.settle()
    assert [(f.kind, f.seq) for f in audit(local).findings(tenant)] == [(FindingKind.REMOVED, last)]
    report = operations(local).verify(tenant, full=False)
    assert (report.intact, report.reason) == (False, ChainBreak.ANCHOR_MISMATCH)


def test_an_anchor_is_reset_only_on_an_intact_chain_and_says_who_and_why(local: LocalBackend, tenant: str) -> None:
    run_anchoring(local)
    rewrite_with_recomputed_hashes(local, tenant, seq=4)  # say, an operator's documented repair
    local.settle()
    refused = outbox(local, "anchor", "--tenant", tenant, "--reset", "--yes", "--json")
    assert refused.exit_code == 2  # no reason, no name: refused

    arguments = ["--tenant", tenant, "--reset", "--reason", "ticket 42", "--by", "ana", "--yes", "--json"]
    reset = as_json(outbox(local, "anchor", *arguments))

    assert reset["seq"] == head_seq(local, tenant)
    assert operations(local).verify(tenant).intact
    (record,) = [f for f in audit(local).findings(tenant) if f.kind is FindingKind.ANCHOR_RESET]
    assert "by ana: ticket 42" in record.detail
    # the rewrite's own findings stay: a reset records, it does not erase
    assert {f.kind for f in audit(local).findings(tenant)} == {FindingKind.MODIFIED, FindingKind.ANCHOR_RESET}


def test_a_pass_short_of_time_leaves_the_most_recently_anchored_to_the_next_which_starts_with_them(
    local: LocalBackend, tenant: str
) -> None:
    auditor = Auditor(local.output("EventsTableName"), audit(local), local.client("dynamodb"))
    later = unique("tenant")
    order_and_pay(local, later)
    local.settle()
    now = datetime(2026, 12, 2, 12, tzinfo=UTC)
    auditor.anchor_all(now, [tenant])  # the earlier tenant is anchored an hour before the other
    auditor.anchor_all(now + timedelta(hours=1), [later])
    order_and_pay(local, tenant)
    order_and_pay(local, later)
    local.settle()
    budget = iter([PASS_MARGIN_SECONDS + 1, 0.0])  # time for one tenant, then none

    cut_short = auditor.anchor_all(now + timedelta(hours=2), [later, tenant], time_left=lambda: next(budget))

    assert (list(cut_short.advanced), cut_short.deferred) == ([tenant], [later])  # the oldest anchor went first
    following = auditor.anchor_all(now + timedelta(hours=3), [later, tenant], time_left=lambda: 300.0)
    assert (list(following.advanced), following.deferred) == ([later], [])
    assert following.unchanged == [tenant]
    assert audit(local).anchor(later).seq == head_seq(local, later)  # type: ignore[union-attr]


def test_a_second_reset_in_the_same_second_is_refused_and_writes_nothing(local: LocalBackend, tenant: str) -> None:
    log = audit(local)
    report = verify_chain(local.client("dynamodb"), local.output("EventsTableName"), tenant)
    now = datetime(2026, 12, 2, 12, tzinfo=UTC)
    log.reset(report, now, who="ana", reason="ticket 42")

    with pytest.raises(ValueError, match=r"re-anchored at 2026-12-02T12:00:00\+00:00 already"):
        log.reset(report, now, who="bo", reason="ticket 43")

    (record,) = list(log.findings(tenant))
    assert "by ana: ticket 42" in record.detail
    assert log.finding_count(tenant) == 0  # a reset is an operator's record, not an alarm


def test_a_tenant_whose_anchor_cannot_be_read_is_left_to_the_next_pass_untouched(
    local: LocalBackend, tenant: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = audit(local)
    monkeypatch.setattr(log, "anchors", lambda names: {})  # DynamoDB left every key unprocessed
    auditor = Auditor(local.output("EventsTableName"), log, local.client("dynamodb"))

    result = auditor.anchor_all(datetime(2026, 12, 2, 12, tzinfo=UTC), [tenant])

    assert (result.deferred, result.advanced, result.broken) == ([tenant], {}, {})
    assert audit(local).anchor(tenant) is None  # not verified without its anchor, and nothing anchored


# -- read-only passes while emits go on -------------------------------------------------------------------------


def emit_before_the_head_is_read(local: LocalBackend, tenant: str, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Make every check's read of the head come right after an emit of ``tenant`` committed: the check has read
    the log by then, and the head it reads is one ahead. Returns the ids emitted, one per head read."""
    import outbox.log.chain as chain

    original, emitted = chain.read_head, []

    def read_head_after_an_emit(client: Any, table_name: str, name: str) -> Any:
        if name == tenant:
            rival = local.runtime.event_store(unchecked=True)  # no catalog: any type, and nothing else runs
            emitted.append(rival.emit("order.noted", {"note": "busy"}, tenant=tenant, actor="rival").id)
        return original(client, table_name, name)

    monkeypatch.setattr(chain, "read_head", read_head_after_an_emit)
    return emitted


def test_an_emit_between_the_log_read_and_the_head_read_is_no_finding_and_no_alarm(
    local: LocalBackend, tenant: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a tenant anchored once, that keeps emitting while the next hourly pass reads its log
    auditor = Auditor(local.output("EventsTableName"), audit(local), local.client("dynamodb"))
    auditor.anchor_all(datetime(2026, 12, 2, 12, tzinfo=UTC), [tenant])
    order_and_pay(local, tenant)
    emitted = emit_before_the_head_is_read(local, tenant, monkeypatch)

    # When the pass runs (and, on the way, an emit lands between its read of the log and of the head)
    result = auditor.anchor_all(datetime(2026, 12, 2, 13, tzinfo=UTC), [tenant])

    # Then the log is intact and anchored, and nothing is recorded or counted as broken
    assert emitted, "the race was not reached"
    assert (result.broken, result.deferred) == ({}, [])
    assert result.advanced[tenant] >= head_seq(local, tenant) - len(emitted)
    assert [f for f in audit(local).findings(tenant) if f.kind is FindingKind.CHAIN_BROKEN] == []
    # and status, which verifies the same way, sees an intact chain too
    report = operations(local).status()
    (row,) = [t for t in report.tenants if t.tenant == tenant]
    assert (row.chain_intact, row.tamper_findings) == (True, 0)


def test_a_head_the_log_does_not_hold_after_reading_on_is_still_a_break(
    local: LocalBackend, tenant: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a head moved one ahead of the log by hand (no event row behind it), read after the log
    client, table = local.client("dynamodb"), local.output("EventsTableName")
    head = client.get_item(TableName=table, Key=keys.head_key(tenant), ConsistentRead=True)["Item"]
    seq = int(head["last_seq"]["N"]) + 1
    client.put_item(TableName=table, Item={**head, "last_seq": {"N": str(seq)}})

    # When the chain is verified
    report = verify_chain(client, table, tenant)

    # Then reading on finds no row there: a mismatch, named as such
    assert (report.intact, report.reason) == (False, ChainBreak.HEAD_MISMATCH)
    assert f"the head says seq {seq}, the log ends at seq {seq - 1}" in report.detail


# -- after the documented repair ------------------------------------------------------------------------------


def test_after_a_repair_and_its_recorded_reset_status_is_healthy_again_and_history_stays(
    local: LocalBackend, tenant: str
) -> None:
    # Given a rewritten log, its findings recorded and an anchoring pass that saw it broken
    run_anchoring(local)
    rewrite_with_recomputed_hashes(local, tenant, seq=2)
    local.settle()
    run_anchoring(local)
    assert outbox(local, "status", "--json").exit_code == 1
    found_before = list(audit(local).findings(tenant))
    assert {f.kind for f in found_before} >= {FindingKind.MODIFIED, FindingKind.CHAIN_BROKEN}

    # When the operator repairs it as the runbook says and resets the anchor, recorded
    local.runtime.clock.advance(timedelta(seconds=5))
    arguments = ["--tenant", tenant, "--reset", "--reason", "ticket 42", "--by", "ana", "--yes", "--json"]
    as_json(outbox(local, "anchor", *arguments))
    run_anchoring(local)

    # Then status is healthy again, and says when and why the tenant was reset
    status = as_json(outbox(local, "status", "--json"))
    (row,) = [t for t in status["tenants"] if t["tenant"] == tenant]
    assert (row["chain_intact"], row["tamper_findings"]) == (True, 0)
    assert "by ana: ticket 42" in row["last_reset"]
    assert not [p for p in status["problems"] if tenant in p]
    # and the findings stay, each marked as dealt with by the reset; the findings command exits 0
    shown = as_json(outbox(local, "findings", "--tenant", tenant, "--json"))
    assert len(shown) == len(found_before) + 1
    assert all(f["dealt_with"] for f in shown if f["kind"] != FindingKind.ANCHOR_RESET.value)


def test_a_finding_after_the_reset_counts_again(local: LocalBackend, tenant: str) -> None:
    # Given a tenant reset after a repair
    arguments = ["--tenant", tenant, "--reset", "--reason", "ticket 42", "--by", "ana", "--yes", "--json"]
    as_json(outbox(local, "anchor", *arguments))

    # When its log is rewritten again, later
    local.runtime.clock.advance(timedelta(minutes=5))
    rewrite_with_recomputed_hashes(local, tenant, seq=3)
    local.settle()

    # Then the new finding is open: status and findings both exit 1
    assert outbox(local, "status", "--json").exit_code == 1
    assert outbox(local, "findings", "--tenant", tenant, "--json").exit_code == 1
    (row,) = [t for t in operations(local).status().tenants if t.tenant == tenant]
    assert row.tamper_findings >= 1
