"""One anchoring pass, as the scheduled anchoring function runs it and as ``outbox anchor`` runs it by hand: each
tenant's chain verified from its anchor and the anchor advanced (``outbox.audit.auditor``), then the completeness pass
(``outbox.ops.completeness``) over the same tenants, with what the deployed function runs it with
(``PassSettings``: the catalog made into data at synth, the bound). One code path for both: the command does what
the schedule does, and says what it found."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from outbox import clock as engine_clock
from outbox.audit.auditor import AnchorPass, Auditor
from outbox.ops.completeness import CompletenessLog, CompletenessPass, PassResult, catalog_from_data
from outbox.ops.completeness_data import PassSettings
from outbox.ops.context import OperatorContext
from outbox.ops.topology import Topology

__all__ = ["AnchoringPass", "PassSettings", "anchoring_pass", "completeness_pass"]


@dataclass
class AnchoringPass:
    """What one pass did: the anchors, and what the completeness pass found (None: the stack runs no such pass,
    or, by hand, no scheduled pass has recorded what it runs with yet)."""

    anchors: AnchorPass
    completeness: PassResult | None = None

    def as_dict(self) -> dict[str, Any]:
        result = self.anchors.as_dict()
        if self.completeness is not None:
            result["completeness"] = self.completeness.as_dict()
        return result


def anchoring_pass(
    auditor: Auditor,
    check: CompletenessPass | None,
    now: datetime,
    tenants: Sequence[str] | None = None,
    *,
    time_left: Callable[[], float] | None = None,
) -> AnchoringPass:
    """Anchor ``tenants`` (default: every tenant), then check their completeness with ``check`` (when there is
    one); ``time_left`` (seconds) bounds both, each leaving what it did not reach to the next pass."""
    anchors = auditor.anchor_all(now, tenants, time_left=time_left)
    found = check.run(tenants, time_left=time_left) if check is not None else None
    return AnchoringPass(anchors, found)


def completeness_pass(
    topology: Topology,
    settings: PassSettings,
    *,
    dynamodb: Any,
    sqs: Any | None,
    clock: Callable[[], datetime] = engine_clock.now,
    repairs: int | None = None,
    metrics: Any | None = None,
) -> CompletenessPass:
    """The completeness pass of ``settings`` on ``topology``'s tables, with its watermarks in the audit table;
    ``repairs``: the re-sends a pass may make instead of the settings' (``sqs`` sends them)."""
    if topology.audit_table is None:
        raise ValueError("the completeness pass keeps its watermarks in the audit table: the topology has none")
    context = OperatorContext(
        topology, dynamodb=dynamodb, sqs=sqs, catalog=catalog_from_data(settings.catalog), clock=clock
    )
    return CompletenessPass(
        context,
        CompletenessLog(topology.audit_table, dynamodb),
        bound=timedelta(seconds=settings.bound_seconds),
        repairs=settings.repairs if repairs is None else repairs,
        metrics=metrics,
    )
