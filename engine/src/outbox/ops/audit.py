"""The operator's side of tamper evidence: list findings, run an anchoring pass, re-anchor after a repair."""

from __future__ import annotations

from collections.abc import Sequence

from outbox.audit import AuditLog, Finding
from outbox.auditor import AnchorPass, Auditor
from outbox.exceptions import OperationRefusedError
from outbox.ops.context import OperatorContext
from outbox.ops.status import verify
from outbox.verification import Anchor


def findings(context: OperatorContext, tenants: Sequence[str] | None = None) -> list[Finding]:
    """Every recorded finding of ``tenants`` (default: all), oldest id first per tenant."""
    audit = _audit(context)
    return [finding for tenant in tenants or context.tenants() for finding in audit.findings(tenant)]


def anchor(context: OperatorContext, tenants: Sequence[str] | None = None) -> AnchorPass:
    """What the hourly pass does, now: verify each tenant from its anchor, advance it, record what is broken."""
    auditor = Auditor(context.topology.events_table, _audit(context), context.dynamodb)
    return auditor.anchor_all(context.now(), tenants)


def reset_anchor(context: OperatorContext, tenant: str, *, who: str, reason: str) -> Anchor:
    """After a documented repair of the log: verify it in full (without the old anchor, which the repair
    contradicts) and anchor its head, recording who and why as a finding."""
    if not reason.strip():
        raise OperationRefusedError("say why the anchor is reset (--reason): it is recorded with the new anchor")
    report = verify(context, tenant, full=True, use_anchor=False)
    if not report.intact:
        raise OperationRefusedError(
            f"tenant {tenant}'s chain is broken at seq {report.first_broken_seq} ({report.detail}): repair the log "
            "first; an anchor is only ever set on an intact chain"
        )
    try:
        return _audit(context).reset(report, context.now(), who=who, reason=reason)
    except ValueError as exc:
        raise OperationRefusedError(str(exc)) from exc


def _audit(context: OperatorContext) -> AuditLog:
    audit = context.audit
    if audit is None:
        raise OperationRefusedError(
            "the stack has no audit table (AuditTableName output): deploy this version of the pipeline first"
        )
    return audit
