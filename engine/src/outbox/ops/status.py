"""What the operator looks at first: queue and DLQ depths, pipe states, and per tenant its chain and its
open dead letters."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from datetime import timedelta
from enum import StrEnum
from typing import Any

from botocore.exceptions import ClientError

from outbox.audit.liveness import pipe_states as read_pipe_states
from outbox.log.verification import ChainReport, verify_chain
from outbox.ops.completeness import MissingPair, completeness_state
from outbox.ops.context import OperatorContext
from outbox.ops.order_status import Blocked, blocked
from outbox.ops.wording import plural
from outbox.ops.workflows import RunningWorkflow, running_workflows


@dataclass(frozen=True)
class QueueDepth:
    visible: int
    in_flight: int
    oldest_age_seconds: float | None  # from CloudWatch; None where no metric is available


# "unknown": the caller has no Pipes client (the local CLI); not a finding.
HEALTHY_PIPE_STATES = frozenset({"RUNNING", "unknown"})


@dataclass(frozen=True)
class TenantStatus:
    tenant: str
    chain_intact: bool
    head_seq: int
    first_broken_seq: int | None
    dead_letters: int
    # Verified from here (the seq after the tenant's anchor; 1 without one) to the head.
    verified_from_seq: int = 1
    anchor_seq: int | None = None
    # Changes and deletions of its event rows seen on the stream, and chain breaks the hourly pass found, but
    # those its latest anchor reset dealt with (they stay in the audit table: outbox findings).
    tamper_findings: int = 0
    break_reason: str | None = None
    # The latest anchor reset: when, by whom and why ("<when>: re-anchored at seq N by WHO: WHY").
    last_reset: str | None = None
    # When its anchor was set (by the hourly anchoring pass, or a reset); None without one.
    anchored_at: str | None = None
    # Pairs the last completeness pass found with no outcome past the bound (outbox.ops.completeness).
    missing_pairs: int = 0


class Concern(StrEnum):
    """What a problem is about: its ``Problem.subject`` is a queue, a pipe or a tenant's name."""

    QUEUE = "queue"
    PIPE = "pipe"
    TENANT = "tenant"
    ORDER = "order"  # an ordered subscription whose events wait (subject: the tenant)
    POISON = "poison"
    WORKFLOW = "workflow"  # a pair handed to a workflow, unsettled past its execution's timeout (subject: the event)
    MISSING = "missing"  # a pair with no outcome past the completeness bound (subject: the tenant)


@dataclass(frozen=True)
class Problem:
    """One thing that needs an operator: what it is, and what to do about it, ending with the command that looks
    closer or repairs it. ``line`` says both in one sentence, as ``outbox status`` prints it."""

    concern: Concern
    subject: str
    what: str
    repair: str
    separator: str = ": "

    @property
    def line(self) -> str:
        return f"{self.what}{self.separator}{self.repair}"


@dataclass(frozen=True)
class Status:
    queues: dict[str, QueueDepth]
    pipes: dict[str, str]
    tenants: list[TenantStatus]
    poison_pills_today: int
    # What the application's functions run with (its tables, which services it calls): shown, not judged.
    application: dict[str, str] = field(default_factory=dict)
    # Ordered subscriptions with events waiting, per tenant, and what they wait for.
    blocked: list[Blocked] = field(default_factory=list)
    # Pairs handed to a durable execution that has not ended (or whose end is not settled yet), oldest first.
    workflows: list[RunningWorkflow] = field(default_factory=list)
    # The pairs the last completeness pass found missing, each with the command that repairs it (the first
    # ``outbox.ops.completeness.MISSING_LISTED`` of each tenant; ``TenantStatus.missing_pairs`` counts them all).
    missing: list[MissingPair] = field(default_factory=list)

    def problems(self) -> list[str]:
        """What needs an operator, one line each, ending with the command that looks closer or repairs it:
        messages in a dead-letter queue, a broken chain, dead letters, poison pills today, a pipe that is not
        running, an ordered subscription whose events wait. Empty: healthy."""
        return [problem.line for problem in self.needs_attention()]

    def needs_attention(self) -> list[Problem]:
        """``problems()``, each as what it is and what to do about it."""
        found = [
            Problem(
                Concern.QUEUE,
                name,
                f"{name}: {plural(depth.visible + depth.in_flight, 'message')}",
                DLQ_NEXT.get(name, DLQ_NEXT_DEFAULT),
                separator=". ",
            )
            for name, depth in self.queues.items()
            if name.endswith("dlq") and depth.visible + depth.in_flight
        ]
        found += [
            Problem(
                Concern.PIPE,
                name,
                f"pipe {name} is {state}",
                f"start it (aws pipes start-pipe --name {name}); events the stream trimmed meanwhile: outbox "
                "reconcile --since <when it stopped> --dry-run",
            )
            for name, state in self.pipes.items()
            if state not in HEALTHY_PIPE_STATES
        ]
        for tenant in self.tenants:
            found += _tenant_problems(tenant)
        found += [
            Problem(Concern.ORDER, waiting.tenant, waiting.what, waiting.hint, separator=" ")
            for waiting in self.blocked
        ]
        found += [
            Problem(
                Concern.WORKFLOW,
                workflow.event_id,
                workflow.problem,
                "is the settle pass running? Its errors alarm and log (docs/workflows.md); "
                f"aws lambda get-durable-execution --durable-execution-arn {workflow.execution_arn}",
            )
            for workflow in self.workflows
            if workflow.overdue
        ]
        found += [Problem(Concern.MISSING, m.tenant, m.line, m.repair, separator=". ") for m in self.missing]
        for tenant in self.tenants:
            unlisted = tenant.missing_pairs - sum(1 for pair in self.missing if pair.tenant == tenant.tenant)
            if unlisted > 0:
                found.append(
                    Problem(
                        Concern.MISSING,
                        tenant.tenant,
                        f"tenant {tenant.tenant}: {plural(unlisted, 'more pair')} with no outcome past the bound",
                        f"outbox reconcile --tenant {tenant.tenant} --since <the oldest's time> --dry-run",
                        separator=". ",
                    )
                )
        if self.poison_pills_today:
            found.append(
                Problem(
                    Concern.POISON,
                    "today",
                    f"{plural(self.poison_pills_today, 'poison pill')} today (not events: recorded and acknowledged)",
                    "outbox dead-letters poison",
                )
            )
        return found

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "problems": self.problems()}


# What to do about a dead-letter queue's messages (docs/operating.md, the runbook, says more).
DLQ_NEXT = {
    "durable-dlq": "The consumer could not process them: fix it, then outbox redrive",
    "record-change-dlq": "Row changes failed every receive: fix the handler, then outbox redrive --dlq "
    "record-change-dlq",
    "record-change-pipe-dlq": "Row changes the record-change pipe could not deliver: no command re-sends them; "
    "rebuild the affected projections from the source table",
    "tamper-dlq": "Findings the recorder could not write: outbox redrive --dlq tamper-dlq",
    "relay-pipe-dlq": "Batches the relay pipe could not deliver (metadata, not events): outbox reconcile --since "
    "<when it broke> --dry-run",
    "tamper-pipe-dlq": "Row changes the tamper pipe could not deliver: outbox verify-chain --all",
    "anchoring-dlq": "The anchoring pass failed (its log says why): outbox anchor",
}
DLQ_NEXT_DEFAULT = "See the runbook (docs/operating.md) for this queue"


def _tenant_problems(tenant: TenantStatus) -> list[Problem]:
    found = []
    name = tenant.tenant
    if not tenant.chain_intact:
        found.append(
            Problem(
                Concern.TENANT,
                name,
                f"tenant {name}: chain broken at seq {tenant.first_broken_seq} ({tenant.break_reason})",
                f"outbox verify-chain --tenant {name}; outbox findings --tenant {name}",
            )
        )
    if tenant.tamper_findings:
        found.append(
            Problem(
                Concern.TENANT,
                name,
                f"tenant {name}: {plural(tenant.tamper_findings, 'tamper finding')}",
                f"outbox findings --tenant {name}",
            )
        )
    if tenant.dead_letters:
        found.append(
            Problem(
                Concern.TENANT,
                name,
                f"tenant {name}: {plural(tenant.dead_letters, 'dead letter')}",
                f"outbox dead-letters list --tenant {name}; after the fix, outbox replay --tenant {name}",
            )
        )
    return found


def read_status(context: OperatorContext) -> Status:
    names = context.tenants()
    found = {name: completeness_state(context, name) for name in names}
    tenants = [replace(tenant_status(context, name), missing_pairs=found[name].missing_count) for name in names]
    queues, pipes = queue_depths(context), pipe_states(context)
    pills = len(context.inbox.poison_pills(context.now()))
    waiting = blocked(context, names)
    missing = [pair for name in names for pair in found[name].missing]
    return Status(
        queues,
        pipes,
        tenants,
        pills,
        application=dict(context.topology.application),
        blocked=waiting,
        workflows=running_workflows(context),
        missing=missing,
    )


def tenant_status(context: OperatorContext, tenant: str) -> TenantStatus:
    """Incremental: the chain is verified from the tenant's anchor, so the reads follow what was appended
    since the last anchoring pass, not the length of the log (``verify(full=True)`` re-reads it all)."""
    report = verify(context, tenant, full=False)
    dead_letters = len(context.inbox.dead_letters(tenant))
    audit = context.audit
    reset = audit.last_reset(tenant) if audit else None
    return TenantStatus(
        tenant,
        report.intact,
        report.head_seq,
        report.first_broken_seq,
        dead_letters,
        verified_from_seq=report.verified_from_seq,
        anchor_seq=report.anchor_seq,
        tamper_findings=audit.finding_count(tenant, after=reset) if audit else 0,
        break_reason=report.reason.value if report.reason else None,
        last_reset=f"{reset.observed_at}: {reset.detail}" if reset else None,
        anchored_at=report.anchored_at,
    )


def verify(context: OperatorContext, tenant: str, full: bool = True, use_anchor: bool = True) -> ChainReport:
    """The tenant's chain against its anchor: in full from genesis (the default), or ``full=False`` only
    from the anchor on. Without an audit table (an older stack) or ``use_anchor``, in full without one."""
    audit = context.audit if use_anchor else None
    anchor = audit.anchor(tenant) if audit else None
    report = verify_chain(context.dynamodb, context.topology.events_table, tenant, anchor=anchor, full=full)
    if report.intact or audit is None:
        return report
    # Read the anchor again before reporting a break: a reset (or an anchoring pass) between the two reads
    # above moves the anchor onto a log this check read before or after it.
    return verify_chain(context.dynamodb, context.topology.events_table, tenant, anchor=audit.anchor(tenant), full=full)


def queue_depths(context: OperatorContext) -> dict[str, QueueDepth]:
    depths = {}
    for name, url in context.topology.queues().items():
        visible, in_flight = context.message_counts(url)
        depths[name] = QueueDepth(visible, in_flight, oldest_age(context, url))
    return depths


def oldest_age(context: OperatorContext, queue_url: str) -> float | None:
    """SQS has no attribute for it: CloudWatch's ApproximateAgeOfOldestMessage, last 5 minutes."""
    if context.cloudwatch is None:
        return None
    now = context.now()
    try:
        result = context.cloudwatch.get_metric_data(
            MetricDataQueries=[_oldest_age_query(queue_url)], StartTime=now - timedelta(minutes=5), EndTime=now
        )
    except ClientError:
        return None
    values = result["MetricDataResults"][0].get("Values", [])
    return float(values[0]) if values else None


def _oldest_age_query(queue_url: str) -> dict[str, Any]:
    return {
        "Id": "age",
        "MetricStat": {
            "Metric": {
                "Namespace": "AWS/SQS",
                "MetricName": "ApproximateAgeOfOldestMessage",
                "Dimensions": [{"Name": "QueueName", "Value": queue_url.rsplit("/", 1)[1]}],
            },
            "Period": 60,
            "Stat": "Maximum",
        },
    }


def pipe_states(context: OperatorContext) -> dict[str, str]:
    topology = context.topology
    pipes = (topology.relay_pipe_name, topology.record_change_pipe_name, topology.tamper_pipe_name)
    names = [name for name in pipes if name]
    if context.pipes is None:
        return dict.fromkeys(names, "unknown")
    return read_pipe_states(context.pipes, names)  # as the hourly liveness check reads them
