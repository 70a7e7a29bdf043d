"""The WORKFLOW lane as the operator sees it: the pairs handed to a durable execution and not settled yet, oldest
first, with how long each has run (``outbox status``). A running execution is an outcome in progress, not a
problem: its end settles it (docs/workflows.md)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from outbox.ops.context import OperatorContext
from outbox.workflows.handoffs import handed_since, running_pairs

# How long past its execution's timeout a handed pair may stay unsettled before status names it: Lambda ends the
# execution at its timeout, and the settle pass runs every minute; this is room for both.
SETTLE_MARGIN = timedelta(minutes=15)


@dataclass(frozen=True)
class RunningWorkflow:
    tenant: str
    subscription: str
    event_id: str
    execution_arn: str
    handed_at: str
    age_seconds: float
    # Past its execution's timeout (and the margin), still not settled: the settle pass is not doing its work.
    overdue: bool = False

    @property
    def problem(self) -> str:
        return (
            f"workflow {self.subscription} of event {self.event_id} (tenant {self.tenant}), handed "
            f"{duration(self.age_seconds)} ago, is past its execution timeout and not settled"
        )


def running_workflows(context: OperatorContext) -> list[RunningWorkflow]:
    """Every pair handed to a workflow whose end has not been settled, oldest first."""
    now = context.now()
    found = [
        RunningWorkflow(
            running.tenant,
            running.subscription,
            running.event_id,
            running.execution_arn,
            running.handed_at,
            handed_since(running, now),
            overdue=running.ends_by is not None and now > datetime.fromisoformat(running.ends_by) + SETTLE_MARGIN,
        )
        for running in running_pairs(context.dynamodb, context.topology.inbox_table)
    ]
    return sorted(found, key=lambda workflow: (workflow.handed_at, workflow.event_id, workflow.subscription))


def duration(seconds: float) -> str:
    """``12s``, ``4m 10s``, ``2h 0m``, ``3d 4h``: how long a workflow has run, in its largest unit and the next."""
    whole = max(0, int(seconds))
    units = (("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1))
    first = next(index for index, (_, size) in enumerate(units) if whole >= size or size == 1)
    name, size = units[first]
    if size == 1:
        return f"{whole}s"
    rest, rest_size = units[first + 1]
    return f"{whole // size}{name} {whole % size // rest_size}{rest}"
