"""What the status page says (``outbox.ops.status_html`` lays it out): the facts at its top and its sections, each
row with the command that looks closer or repairs it, made from what ``status`` and the failure groups know.
Words only, no markup: every text here is escaped where it is written into the page.

The facts: healthy, or how many problems need an operator, and when it was read; the tenants, their chains, how
many are anchored and the last anchoring pass (the newest anchor's time: a pass moves the anchor of a tenant that
appended events since the last one, so on a quiet outbox it is older than the last pass; the AnchoringStopped
alarm watches that passes run); the open dead letters and poison pills; every queue's and dead-letter queue's
depth, the pipes' states. The sections, when something needs an operator: the tenants that do (chain, anchor,
open tamper findings, dead letters), the failure groups, the dead-letter queues with messages, and whatever
else status lists (a pipe not running, an ordered subscription whose events wait, poison pills, pairs the
completeness pass found with no outcome past its bound); then the workflows running, oldest first, with how long
each has run (an outcome in progress, as ``outbox status`` lists them: one past its execution's bound is a problem
above too), and the tenants that need nothing, with their chains and anchors.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

from outbox.ops.groups import FailureGroup
from outbox.ops.status import HEALTHY_PIPE_STATES, Concern, Problem, Status, TenantStatus
from outbox.ops.wording import plural
from outbox.ops.workflows import RunningWorkflow, duration

ALL_OF_IT: Final = "outbox status"


@dataclass(frozen=True)
class Cell:
    text: str
    style: str = ""  # "bad", "good" or "muted"


Fact = tuple[Cell, ...]  # a run of text, read as one phrase


@dataclass(frozen=True)
class Row:
    """One thing: ``cells`` in the section's columns, ``brief`` the same said in one line, and ``repair``."""

    cells: tuple[Cell, ...]
    brief: Fact
    repair: str


@dataclass(frozen=True)
class Section:
    """A list with a title, which heads its first column; ``columns`` are the headings of the others (the last
    is the repair's, if ``repairs``), each with its width in percent, as ``width`` is the first's. ``rest`` is
    the command that lists every row, for a list longer than its room."""

    title: str
    width: int
    columns: tuple[tuple[str, int], ...]
    rows: list[Row]
    noun: str
    rest: str = ALL_OF_IT
    repairs: bool = True


@dataclass(frozen=True)
class Facts:
    verdict: Fact
    tenants: Fact
    anchoring: Fact
    dead_work: Fact
    queues: Fact
    dead_letter_queues: Fact
    pipes: Fact


def facts(status: Status, problems: list[Problem], now: datetime) -> Facts:
    return Facts(
        _verdict(problems, now),
        _tenants(status),
        _anchoring(status, now),
        (
            Cell(plural(sum(t.dead_letters for t in status.tenants), "open dead letter")),
            Cell(f" · poison pills today: {status.poison_pills_today}"),
            *([Cell(f" · {plural(len(status.workflows), 'workflow')} running")] if status.workflows else []),
        ),
        (Cell("Queues: " + (", ".join(_lanes(status)) or "none")),),
        _dead_letter_queues(status),
        _pipes(status),
    )


def _verdict(problems: list[Problem], now: datetime) -> Fact:
    read = Cell(f" · read {when(now)}", "muted")
    if not problems:
        return Cell("● Healthy: nothing needs an operator", "good"), read
    count = f"● {plural(len(problems), 'problem')} {'needs' if len(problems) == 1 else 'need'} attention"
    return Cell(count, "bad"), Cell(f" ({ALL_OF_IT} says each with its command)", "muted"), read


def _tenants(status: Status) -> Fact:
    tenants = status.tenants
    if not tenants:
        return (Cell("No tenants yet: no event was emitted", "muted"),)
    broken = [t for t in tenants if not t.chain_intact]
    chains = Cell(f"{plural(len(broken), 'chain')} broken", "bad") if broken else Cell("every chain intact", "good")
    anchored = sum(1 for t in tenants if t.anchor_seq is not None)
    return Cell(f"{plural(len(tenants), 'tenant')}: "), chains, Cell(f" · {anchored} of {len(tenants)} anchored")


def _anchoring(status: Status, now: datetime) -> Fact:
    times = [t.anchored_at for t in status.tenants if t.anchored_at]
    if not times:
        return (Cell("last anchoring pass: none has anchored a tenant yet (the hourly pass, or outbox anchor)"),)
    newest = max(times)
    return (Cell(f"last anchoring pass: {when(newest)} ({ago(newest, now)}, the newest anchor)"),)


def _lanes(status: Status) -> list[str]:
    return [f"{name} {d.visible + d.in_flight}" for name, d in status.queues.items() if not name.endswith("dlq")]


def _dead_letter_queues(status: Status) -> Fact:
    depths = {name: d.visible + d.in_flight for name, d in status.queues.items() if name.endswith("dlq")}
    full = [f"{name} {count}" for name, count in depths.items() if count]
    if not full:
        return Cell("Dead-letter queues: "), Cell(f"all {len(depths)} empty", "good")
    empty = len(depths) - len(full)
    return Cell("Dead-letter queues: "), Cell(", ".join(full), "bad"), Cell(f"; {empty} empty" if empty else "")


def _pipes(status: Status) -> Fact:
    stopped = [f"{name} {state}" for name, state in status.pipes.items() if state not in HEALTHY_PIPE_STATES]
    if stopped:
        return (Cell("pipes not running: " + ", ".join(stopped), "bad"),)
    if status.pipes and all(state == "RUNNING" for state in status.pipes.values()):
        return (Cell(f"pipes: all {len(status.pipes)} RUNNING"),)
    return (Cell("pipes: " + (", ".join(f"{name} {state}" for name, state in status.pipes.items()) or "none")),)


# -- the sections -----------------------------------------------------------------------------------------


def sections(status: Status, problems: list[Problem], groups: Sequence[FailureGroup]) -> tuple[list[Section], Section]:
    """The lists of what needs an operator that have something in them, and the tenants that need nothing."""
    by_tenant: dict[str, list[Problem]] = {}
    for problem in problems:
        if problem.concern is Concern.TENANT:
            by_tenant.setdefault(problem.subject, []).append(problem)
    troubled = [t for t in status.tenants if t.tenant in by_tenant]
    calm = [t for t in status.tenants if t.tenant not in by_tenant]
    depths = {name: depth.visible + depth.in_flight for name, depth in status.queues.items()}
    needing = [
        Section(
            f"Tenants needing attention ({len(troubled)} of {len(status.tenants)})",
            20,
            (("chain", 11), ("anchor", 16), ("problem", 19), ("repair", 34)),
            [row for t in troubled for row in _troubled(t, by_tenant[t.tenant])],
            "problem",
        ),
        Section(
            f"Failure groups ({len(groups)})",
            18,
            (("dead letters", 8), ("failure", 31), ("tenants", 13), ("repair", 30)),
            [_group(g) for g in groups],
            "failure group",
            "outbox dead-letters groups",
        ),
        Section(
            "Dead-letter queues with messages",
            22,
            (("messages", 8), ("what they are, and what to do", 70)),
            [
                Row((Cell(p.subject), Cell(str(depths.get(p.subject, "?")), "bad")), (Cell(p.what, "bad"),), p.repair)
                for p in problems
                if p.concern is Concern.QUEUE
            ],
            "dead-letter queue",
        ),
        Section(
            "Also needing attention",
            45,
            (("what to do", 55),),
            [
                Row((Cell(p.what),), (Cell(p.what, "bad"),), p.repair)
                for p in problems
                if p.concern not in (Concern.TENANT, Concern.QUEUE)  # each has its section above
            ],
            "problem",
        ),
    ]
    others = Section(
        f"Other tenants ({len(calm)})" if troubled else f"Tenants ({len(calm)})",
        22,
        (("chain", 16), ("anchor", 25), ("head seq", 8), ("last anchor reset", 29)),
        [_calm(t) for t in calm],
        "tenant",
        repairs=False,
    )
    return [section for section in needing if section.rows], others


def running(status: Status) -> Section:
    """The workflows running, oldest first (``outbox.ops.workflows``): not a problem, so no repair; one past its
    execution's bound has its age in red (and is a problem in "Also needing attention")."""
    return Section(
        f"Workflows running, oldest first ({len(status.workflows)})",
        30,
        (("tenant", 16), ("event", 32), ("running for", 22)),
        [_running(workflow) for workflow in status.workflows],
        "running workflow",
        repairs=False,
    )


def _running(workflow: RunningWorkflow) -> Row:
    age = Cell(duration(workflow.age_seconds), "bad" if workflow.overdue else "")
    cells = (Cell(workflow.subscription), Cell(workflow.tenant), Cell(workflow.event_id), age)
    brief = (Cell(f"{workflow.subscription} of {workflow.event_id} ({workflow.tenant}): running for "), age)
    return Row(cells, brief, "")


def _troubled(tenant: TenantStatus, problems: list[Problem]) -> list[Row]:
    """A row for each of the tenant's problems, its chain and anchor on the first."""
    rows = []
    for index, problem in enumerate(problems):
        what = Cell(problem.what.removeprefix(f"tenant {tenant.tenant}: "), "bad")
        if index == 0:
            cells = (Cell(tenant.tenant), _chain(tenant), _anchor(tenant), what)
            brief: Fact = (Cell(f"{tenant.tenant}: "), what, Cell(f" · anchor {_anchor(tenant).text}"))
        else:
            cells, brief = (Cell(""), Cell(""), Cell(""), what), (Cell(f"{tenant.tenant}: "), what)
        rows.append(Row(cells, brief, problem.repair))
    return rows


def _group(group: FailureGroup) -> Row:
    failure = f"{group.reason}: {group.where}"  # where it was raised, which starts with the error's type
    tenants = ", ".join(group.tenants)
    return Row(
        (Cell(group.subscription), Cell(str(group.count), "bad"), Cell(failure), Cell(tenants)),
        (Cell(f"{group.subscription}: "), Cell(plural(group.count, "dead letter"), "bad"), Cell(f" · {failure}")),
        group.repair,
    )


def _calm(tenant: TenantStatus) -> Row:
    reset = Cell(tenant.last_reset or "none", "muted")
    cells = (Cell(tenant.tenant), _chain(tenant), _anchor(tenant), Cell(str(tenant.head_seq)), reset)
    brief = (Cell(f"{tenant.tenant}: "), _chain(tenant), Cell(f" · anchor {_anchor(tenant).text}"))
    return Row(cells, brief, "")


def _chain(tenant: TenantStatus) -> Cell:
    if tenant.chain_intact:
        return Cell("intact", "good")
    return Cell(f"broken at seq {tenant.first_broken_seq}", "bad")  # why: in its problem


def _anchor(tenant: TenantStatus) -> Cell:
    if tenant.anchor_seq is None:
        return Cell("none yet", "muted")
    return Cell(f"seq {tenant.anchor_seq}" + (f", {when(tenant.anchored_at)}" if tenant.anchored_at else ""))


# -- times ------------------------------------------------------------------------------------------------


def _moment(value: datetime | str) -> datetime | None:
    if isinstance(value, datetime):
        return value
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def when(value: datetime | str | None) -> str:
    """A moment as the page says it: UTC, to the second (what is not a time, as it was written)."""
    moment = _moment(value) if value is not None else None
    if moment is None:
        return str(value)
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def ago(value: str, now: datetime) -> str:
    moment = _moment(value)
    if moment is None:
        return "when unknown"
    minutes = max(0, int((now - moment).total_seconds() // 60))
    if minutes < 120:
        return f"{plural(minutes, 'minute')} ago"
    if minutes < 48 * 60:
        return f"{plural(minutes // 60, 'hour')} ago"
    return f"{plural(minutes // (24 * 60), 'day')} ago"
