"""The operator's side of tamper evidence: list findings, run an anchoring pass, re-anchor after a repair."""

from __future__ import annotations

from collections.abc import Sequence

from outbox.audit.auditor import Auditor
from outbox.audit.findings import Finding
from outbox.audit.table import AuditLog
from outbox.exceptions import OperationRefusedError
from outbox.log.verification import Anchor
from outbox.ops.anchoring import AnchoringPass, anchoring_pass, completeness_pass
from outbox.ops.completeness_data import CompletenessLog
from outbox.ops.context import OperatorContext
from outbox.ops.status import verify


def findings(context: OperatorContext, tenants: Sequence[str] | None = None) -> list[Finding]:
    """Every recorded finding of ``tenants`` (default: all), oldest id first per tenant."""
    audit = _audit(context)
    return [finding for tenant in tenants or context.tenants() for finding in audit.findings(tenant)]


def anchor(context: OperatorContext, tenants: Sequence[str] | None = None) -> AnchoringPass:
    """What the hourly pass does, now (``outbox.ops.anchoring``): verify each tenant from its anchor, advance it,
    record what is broken; then the completeness pass, as the deployed function last ran it (its catalog made
    into data at synth, its bound), which reports and re-sends nothing itself: the repairs are the operator's,
    each named with its pair. None of it without a scheduled pass that recorded what it runs with."""
    audit = _audit(context)
    auditor = Auditor(context.topology.events_table, audit, context.dynamodb)
    assert context.topology.audit_table is not None  # _audit refused a stack without it
    settings = CompletenessLog(context.topology.audit_table, context.dynamodb).remembered()
    check = None
    if settings is not None:
        check = completeness_pass(
            context.topology, settings, dynamodb=context.dynamodb, sqs=None, clock=context.now, repairs=0
        )
    return anchoring_pass(auditor, check, context.now(), tenants)


def reset_anchor(context: OperatorContext, tenant: str, *, who: str, reason: str) -> Anchor:
    """After a documented repair of the log: verify it in full (without the old anchor, which the repair
    contradicts) and anchor its head, recording who and why as a finding. The reset deals with the findings
    there are when the command starts, and with no finding recorded later, whatever that finding's time."""
    if not reason.strip():
        raise OperationRefusedError("say why the anchor is reset (--reason): it is recorded with the new anchor")
    audit = _audit(context)
    # Read before the verification, not after: a rewrite whose finding lands while the log is read was not
    # before the operator when they decided the reset, and the verification may have read past its row.
    present = audit.findings_to_deal_with(tenant)
    report = verify(context, tenant, full=True, use_anchor=False)
    if not report.intact:
        raise OperationRefusedError(
            f"tenant {tenant}'s chain is broken at seq {report.first_broken_seq} ({report.detail}): repair the log "
            "first; an anchor is only ever set on an intact chain"
        )
    try:
        return audit.reset(report, context.now(), who=who, reason=reason, dealing_with=present)
    except ValueError as exc:
        raise OperationRefusedError(str(exc)) from exc


def _audit(context: OperatorContext) -> AuditLog:
    audit = context.audit
    if audit is None:
        raise OperationRefusedError(
            "the stack has no audit table (AuditTableName output): deploy this version of the pipeline first"
        )
    return audit
