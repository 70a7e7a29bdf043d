"""The auditor: records tamper findings from the events stream and anchors every tenant's verified head.

It runs engine code only (its function loads no application module) and is the one role besides the operator
role that may write the audit table (``outbox.audit``). Two entry points, one function:

- ``record_findings``: SQS batches from the tamper queue, each message a MODIFY or REMOVE stream record of an
  event row (the tamper pipe forwards nothing else); each becomes a finding, counted as ``TamperFindings``.
- ``anchor_all``: on a schedule, each tenant's log is verified from its anchor (only what was appended since)
  and the anchor moves to the verified head; a chain still broken when it is read again (emits go on while
  the pass reads) is recorded as a finding and counted as ``ChainBreaks``. Both counts are alarmed at zero.
  The oldest anchors go first, and a pass about to run out of time stops and leaves the rest
  (``AnchorsDeferred``) to the next one, which starts with them. A pass that ends counts
  ``AnchoringPasses``: the heartbeat whose absence is alarmed (with the pipes' states, ``outbox.audit.liveness``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from outbox.audit.findings import Finding, FindingKind, finding_from_stream_record, iso_seconds
from outbox.audit.table import AuditLog
from outbox.log.verification import Anchor, ChainReport, verify_chain
from outbox.query import read_tenants

logger = logging.getLogger(__name__)

__all__ = ["PUBLISHED_EVERY_PASS", "AnchorPass", "Auditor", "Metric"]


class Metric(StrEnum):
    """The Powertools counts the auditor publishes."""

    TAMPER_FINDINGS = "TamperFindings"  # an event row was changed or removed (one per new finding)
    CHAIN_BREAKS = "ChainBreaks"  # a scheduled verification found a tenant's chain broken
    ANCHORS_ADVANCED = "AnchorsAdvanced"
    ANCHORS_DEFERRED = "AnchorsDeferred"  # tenants a pass left to the next for lack of time
    # Liveness (outbox.audit.liveness): each pass publishes both, so their alarms treat silence as breaching.
    PIPES_NOT_RUNNING = "PipesNotRunning"  # the stack's pipes not in state RUNNING
    ANCHORING_PASSES = "AnchoringPasses"  # 1 for a pass that ran to its end
    # Completeness (outbox.ops.completeness): pairs with no outcome past the bound, and those the pass re-sent itself.
    MISSING_PAIRS = "MissingPairs"
    PAIRS_RESENT = "MissingPairsResent"


# What every pass publishes, 0 included, traffic or not (billed as custom metrics even at rest).
PUBLISHED_EVERY_PASS = (Metric.PIPES_NOT_RUNNING, Metric.ANCHORING_PASSES, Metric.MISSING_PAIRS)


# A pass stops when less than this is left of its invocation: a tenant's verification (from its anchor, an
# hour's appends) must fit in it. What it leaves, the next pass does first.
PASS_MARGIN_SECONDS = 30.0


@dataclass
class AnchorPass:
    """What one scheduled pass did, per tenant."""

    advanced: dict[str, int] = field(default_factory=dict)  # tenant -> the seq now anchored
    unchanged: list[str] = field(default_factory=list)
    broken: dict[str, ChainReport] = field(default_factory=dict)
    # Not reached in time, or whose anchors could not be read: the next pass starts with them.
    deferred: list[str] = field(default_factory=list)
    events_read: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "advanced": self.advanced,
            "unchanged": self.unchanged,
            "broken": {
                tenant: {"seq": r.first_broken_seq, "reason": str(r.reason)} for tenant, r in self.broken.items()
            },
            "deferred": self.deferred,
            "events_read": self.events_read,
        }


class Auditor:
    def __init__(self, events_table: str, audit: AuditLog, client: Any, metrics: Any | None = None) -> None:
        self.events_table, self.audit, self.client, self.metrics = events_table, audit, client, metrics

    # -- tamper findings ----------------------------------------------------------------------------

    def record_findings(self, event: Mapping[str, Any], context: Any) -> dict[str, Any]:
        processor = BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)
        return dict(
            process_partial_response(
                event=dict(event), record_handler=self._record_one, processor=processor, context=context
            )
        )

    def _record_one(self, record: SQSRecord) -> None:
        # A body that is not a stream record of an event row raises: the message is retried and then moves to
        # the tamper queue's alarmed DLQ, where it stays for an operator. Nothing is dropped silently.
        finding = finding_from_stream_record(json.loads(record.body))
        if self.audit.record(finding):
            logger.error(
                "tamper finding: tenant %s seq %s %s (%s)", finding.tenant, finding.seq, finding.kind, finding.detail
            )
            self._count(Metric.TAMPER_FINDINGS)

    # -- anchors ------------------------------------------------------------------------------------

    def anchor_all(
        self, now: datetime, tenants: Sequence[str] | None = None, *, time_left: Callable[[], float] | None = None
    ) -> AnchorPass:
        """Verify each tenant (default: every tenant) from its anchor and advance it; record what is broken.

        Tenants never anchored go first, then the oldest anchors: a pass cut short (``time_left``, in seconds,
        below ``PASS_MARGIN_SECONDS``) leaves the most recently anchored, and the next pass starts with those.
        """
        result = AnchorPass()
        names = self.tenants() if tenants is None else list(tenants)
        anchors = self.audit.anchors(names)
        unread = [name for name in names if name not in anchors]  # their anchors unknown: not verified now
        order = sorted(anchors, key=lambda name: _age_order(name, anchors[name]))
        for index, tenant in enumerate(order):
            if time_left is not None and time_left() < PASS_MARGIN_SECONDS:
                result.deferred = order[index:]
                logger.warning("anchoring pass out of time: %d tenant(s) left to the next", len(result.deferred))
                break
            report = verify_chain(self.client, self.events_table, tenant, anchor=anchors[tenant], full=False)
            result.events_read += report.events_checked
            if not report.intact:
                confirmed = self._read_again(tenant)
                if confirmed is None:
                    result.deferred.append(tenant)
                    continue
                result.events_read += confirmed.events_checked
                report = confirmed
            if not report.intact:
                self._broken(report, now, result)
            elif (anchor := self.audit.advance(report, now)) is not None:
                result.advanced[tenant] = anchor.seq
                self._count(Metric.ANCHORS_ADVANCED)
            else:
                result.unchanged.append(tenant)
        if unread:
            logger.warning("anchors of %d tenant(s) could not be read: left to the next pass", len(unread))
            result.deferred += unread
        if result.deferred:
            self._count(Metric.ANCHORS_DEFERRED, len(result.deferred))
        self._count(Metric.ANCHORING_PASSES)  # last: a pass that raised did not run (its alarm waits for this)
        return result

    def _read_again(self, tenant: str) -> ChainReport | None:
        """A break is recorded only if a second verification, with the anchor read again, still sees it: an
        operator's reset or another pass between this pass's reads is no break. None: the anchor could not be
        read again, and the tenant is left to the next pass (never verified without its anchor)."""
        anchors = self.audit.anchors([tenant])
        if tenant not in anchors:
            return None
        return verify_chain(self.client, self.events_table, tenant, anchor=anchors[tenant], full=False)

    def tenants(self) -> list[str]:
        return read_tenants(self.client, self.events_table)

    def _broken(self, report: ChainReport, now: datetime, result: AnchorPass) -> None:
        result.broken[report.tenant] = report
        finding = Finding(
            tenant=report.tenant,
            kind=FindingKind.CHAIN_BROKEN,
            # One finding per break, however many passes see it.
            finding_id=f"BREAK#{report.first_broken_seq}#{report.reason}",
            seq=report.first_broken_seq,
            observed_at=iso_seconds(now),
            detail=report.detail,
        )
        if self.audit.record(finding):
            logger.error("chain broken: tenant %s at seq %s: %s", report.tenant, report.first_broken_seq, report.detail)
        # Counted on every pass while it stays broken: the alarm stays in ALARM until it is repaired.
        self._count(Metric.CHAIN_BREAKS)

    def _count(self, metric: Metric, value: int = 1) -> None:
        if self.metrics is not None:
            self.metrics.add_metric(name=metric.value, unit="Count", value=value)


def _age_order(tenant: str, anchor: Anchor | None) -> tuple[bool, str, str]:
    # Never anchored first, then by the anchor's time (ISO, UTC, to the second), ties by name.
    return (anchor is not None, anchor.anchored_at if anchor else "", tenant)
