"""The tamper recorder may add findings and nothing else: its writes to the audit table are bound to the
findings' partitions, so the role that turns stream records into findings can never move an anchor (what a
rewrite of the log with recomputed hashes would need to pass the hourly check)."""

from __future__ import annotations

from typing import Any

from outbox import keys
from outbox_cdk.audit import AUDIT_RECORD_ACTIONS, AUDIT_RECORD_CONDITIONS, FINDING_PARTITION_PATTERN
from tests.infrastructure.template_queries import listed, role_statements
from tests.infrastructure.test_audit import role_of_function, table_arn


def test_the_recorder_writes_only_the_findings_partitions_of_the_audit_table(stack_template: dict[str, Any]) -> None:
    statements = role_statements(stack_template, role_of_function(stack_template, "AuditorRecorder"))
    on_the_table = [s for s in statements if table_arn(stack_template, "AuditTable") in listed(s["Resource"])]

    assert [listed(s["Action"]) for s in on_the_table] == [AUDIT_RECORD_ACTIONS]
    assert [s.get("Condition") for s in on_the_table] == [AUDIT_RECORD_CONDITIONS]


def test_the_pattern_admits_a_finding_and_refuses_an_anchor() -> None:
    prefix, suffix = FINDING_PARTITION_PATTERN.split("*")
    finding, anchor = keys.finding_partition("acme"), keys.anchor_partition("acme")
    assert finding.startswith(prefix)
    assert finding.endswith(suffix)
    assert not anchor.endswith(suffix)
