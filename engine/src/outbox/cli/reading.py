"""Status and verification: ``status``, ``verify-chain``, ``findings``, ``anchor``. Each exits 1 when what it
read needs an operator."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from outbox.audit.findings import Finding
from outbox.cli.app import app
from outbox.cli.context import CliContext
from outbox.cli.output import (
    JsonFlag,
    YesFlag,
    command_context,
    confirm,
    example,
    note,
    print_table,
    progress,
    refuse,
    show,
)
from outbox.log.verification import ChainReport
from outbox.ops import OperationRefusedError, Status
from outbox.ops.anchoring import AnchoringPass
from outbox.ops.order_status import UNREADABLE
from outbox.ops.status_html import Box, document, render
from outbox.ops.wording import plural
from outbox.ops.workflows import duration

HEALTHY = "healthy: nothing needs an operator (no DLQ message, dead letter, finding or poison pill; pipes running)"


@app.command(epilog=example("outbox --stack OutboxEngine status --html status.html --json"))
def status(
    ctx: typer.Context,
    html: Annotated[
        Path | None,
        typer.Option(
            "--html",
            metavar="FILE",
            help="also write the dashboard's status widget, as a page of its own, to FILE",
            dir_okay=False,
        ),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Queue and DLQ depths, pipe states, and per tenant: chain intact, dead letters, ordered subscriptions waiting.

    Exit code 0: healthy; 1: something needs an operator (a DLQ message, a broken chain, a dead letter, a
    poison pill today, a pipe not running, an ordered subscription whose events wait), listed under
    "problems"; 2: the command could not run."""
    context = command_context(ctx, as_json)
    report = context.operations.status()
    if html is not None:
        box = Box()
        page = render(report, context.operations.failure_groups(), now=context.now(), box=box)
        html.write_text(document(page), encoding="utf-8")
        note(context, f"wrote {html}: the dashboard's status widget, {box.width}x{box.height} pixels")
    show(context, report.as_dict(), lambda: _print_status(context, report))
    if report.problems():
        raise typer.Exit(code=1)


def _print_status(context: CliContext, report: Status) -> None:
    queues = Table("queue", "visible", "in flight", "oldest (s)", title="queues")
    for name, depth in report.queues.items():
        style = "red" if name.endswith("dlq") and depth.visible + depth.in_flight else ""
        age = "-" if depth.oldest_age_seconds is None else f"{depth.oldest_age_seconds:.0f}"
        queues.add_row(name, str(depth.visible), str(depth.in_flight), age, style=style)
    tenants = Table("tenant", "chain", "head seq", "verified from", "findings", "dead letters", title="tenants")
    for tenant in report.tenants:
        chain = "intact" if tenant.chain_intact else f"[red]BROKEN at {tenant.first_broken_seq}[/]"
        findings = f"[red]{tenant.tamper_findings}[/]" if tenant.tamper_findings else "0"
        verified = f"{tenant.verified_from_seq} (anchor)" if tenant.anchor_seq else str(tenant.verified_from_seq)
        tenants.add_row(tenant.tenant, chain, str(tenant.head_seq), verified, findings, str(tenant.dead_letters))
    print_table(context.out, queues, tenants)
    for tenant in report.tenants:
        if tenant.last_reset:
            context.out.print(f"{tenant.tenant}: last anchor reset {tenant.last_reset}", highlight=False)
    pipes = ", ".join(f"{name} {state}" for name, state in report.pipes.items()) or "none"
    context.out.print(f"pipes: {pipes}   poison pills today: {report.poison_pills_today}")
    if report.application:
        settings = "  ".join(f"{name}={value}" for name, value in sorted(report.application.items()))
        context.out.print(f"application: {settings}", highlight=False)
    if report.blocked:
        waiting = Table("tenant", "ordered subscription", "applied to", "waits for", "its state", "deferred")
        waiting.title = "ordered subscriptions waiting"
        for row in report.blocked:
            alarming = row.waits_for_state in ("DEAD", UNREADABLE)
            state = f"[red]{row.waits_for_state}[/]" if alarming else row.waits_for_state
            waiting.add_row(
                row.tenant, row.subscription, str(row.applied_seq), str(row.waits_for_seq), state, str(row.waiting)
            )
        print_table(context.out, waiting)
    if report.workflows:
        print_table(context.out, _running_workflows(report))
    for problem in report.problems():
        context.out.print(f"[bold red]needs attention:[/] {escape(context.hint(problem))}")
    if not report.problems():
        context.out.print(HEALTHY, highlight=False)


def _running_workflows(report: Status, shown: int = 20) -> Table:
    """The oldest ``shown`` running workflows (outbox.ops.workflows), with how many more there are."""
    table = Table("tenant", "subscription", "event", "running for", title="workflows running, oldest first")
    for workflow in report.workflows[:shown]:
        table.add_row(workflow.tenant, workflow.subscription, workflow.event_id, duration(workflow.age_seconds))
    if len(report.workflows) > shown:
        table.add_row("", f"and {len(report.workflows) - shown} more", "", "")
    return table


@app.command("verify-chain", epilog=example("outbox --local verify-chain --tenant acme"))
def verify_chain_command(
    ctx: typer.Context,
    tenant: Annotated[str | None, typer.Option(metavar="TENANT", help="one tenant")] = None,
    all_tenants: Annotated[bool, typer.Option("--all", help="every tenant")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Recompute the hash chain from genesis, checked against the tenant's anchor (a rewrite with recomputed
    hashes at or before it is caught); report the first broken sequence number and why. Exit code 1 if broken.
    (status verifies only what was appended since the anchor; this reads the whole log.)"""
    context = command_context(ctx, as_json)
    try:
        if tenant is None and not all_tenants:
            raise OperationRefusedError("name a tenant (--tenant T) or check them all (--all)")
        names = [context.operations.require_tenant(tenant)] if tenant else context.operations.tenants()
    except OperationRefusedError as exc:
        refuse(context, exc)
    reports = []
    with progress(context, "verifying chains", len(names)) as report_progress:
        for done, name in enumerate(names, start=1):
            reports.append(context.operations.verify(name))
            report_progress(f"verified {name}", done, len(names))
    show(context, reports, lambda: _print_chain_reports(context, reports))
    if not all(r.intact for r in reports):
        raise typer.Exit(code=1)


@app.command(epilog=example("outbox --local findings --tenant acme"))
def findings(
    ctx: typer.Context,
    tenant: Annotated[str | None, typer.Option(metavar="TENANT", help="one tenant (default: all)")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Tamper findings: every change or deletion of an event row the stream showed, every broken chain the
    hourly anchoring found, every anchor reset. A finding that was recorded when an anchor reset ran is marked
    dealt with by it (the repair the reset records); one recorded later stays open. Exit code 1 if any finding
    is open."""
    context = command_context(ctx, as_json)
    try:
        tenants = [context.operations.require_tenant(tenant)] if tenant else None
        found = context.operations.findings(tenants)
    except OperationRefusedError as exc:
        refuse(context, exc)
    show(context, [f.as_dict() for f in found], lambda: _print_findings(context, found))
    if any(f.is_open for f in found):
        raise typer.Exit(code=1)


def _print_findings(context: CliContext, found: list[Finding]) -> None:
    table = Table("tenant", "kind", "seq", "observed", "what", "dealt with", title="tamper findings")
    for f in found:
        style = "red" if f.is_open else ""
        table.add_row(
            f.tenant, f.kind.value, str(f.seq or "-"), f.observed_at, f.detail, f.dealt_with or "-", style=style
        )
    if found:
        print_table(context.out, table)
    else:
        context.out.print("no findings")


@app.command(
    epilog=example('outbox --local anchor --tenant acme --reset --reason "restored from backup, ticket 42" --by alice')
)
def anchor(
    ctx: typer.Context,
    tenant: Annotated[str | None, typer.Option(metavar="TENANT", help="one tenant (default: all)")] = None,
    reset: Annotated[
        bool, typer.Option("--reset", help="after a documented repair: verify in full and anchor the repaired head")
    ] = False,
    reason: Annotated[str | None, typer.Option(metavar="TEXT", help="why the anchor is reset (recorded)")] = None,
    by: Annotated[str | None, typer.Option(metavar="WHO", help="who resets it: a name or a ticket (recorded)")] = None,
    yes: YesFlag = False,
    as_json: JsonFlag = False,
) -> None:
    """Run the hourly anchoring pass now: verify each tenant since its anchor and advance it, then the completeness
    pass as the scheduled function runs it (each durable pair past the bound without an outcome, listed with the
    command that repairs it; it re-sends nothing itself). Or --reset one tenant's anchor after a repair of its log.
    Needs write access to the audit table (the operator role).

    Exit code 0: nothing found; 1: a broken chain, or a pair missing; 2: the command could not run."""
    context = command_context(ctx, as_json)
    try:
        if reset:
            if tenant is None or not reason or not by:
                raise OperationRefusedError("--reset needs --tenant T, --reason '...' and --by NAME (all recorded)")
            name = context.operations.require_tenant(tenant)
            confirm(context, yes, f"re-anchor tenant {name} at its current head?")
            new = context.operations.reset_anchor(name, who=by, reason=reason)
            show(context, asdict(new), lambda: context.out.print(f"{name}: anchored at seq {new.seq}"))
            return
        result = context.operations.anchor([context.operations.require_tenant(tenant)] if tenant else None)
    except OperationRefusedError as exc:
        refuse(context, exc)
    show(context, result.as_dict(), lambda: _print_anchor_pass(context, result))
    if result.anchors.broken or (result.completeness is not None and result.completeness.missing_count):
        raise typer.Exit(code=1)


def _print_anchor_pass(context: CliContext, result: AnchoringPass) -> None:
    anchors, found = result.anchors, result.completeness
    for tenant, seq in anchors.advanced.items():
        context.out.print(f"{tenant}: anchored at seq {seq}")
    for tenant, report in anchors.broken.items():
        context.out.print(f"[bold red]{tenant}: BROKEN at seq {report.first_broken_seq}[/] ({report.detail})")
    context.out.print(f"{len(anchors.unchanged)} unchanged, {plural(anchors.events_read, 'event')} read")
    if found is None:
        context.out.print(
            "completeness: not checked (no scheduled anchoring pass has recorded what it checks with yet: the "
            "stack's first hourly pass does, and a stack whose catalog the synth could not load has no such pass)"
        )
        return
    style = "bold red" if found.missing_count else "green"
    context.out.print(
        f"[{style}]completeness: {plural(found.missing_count, 'pair')} with no outcome past the bound[/] "
        f"({plural(found.events_read, 'event')} read, {plural(found.open_pairs, 'pair')} held open)"
    )
    for pairs in found.missing.values():
        for pair in pairs:
            context.out.print(f"  {escape(pair.line)}")
            context.out.print(f"    repair: {escape(context.hint(pair.repair))}")


def _print_chain_reports(context: CliContext, reports: list[ChainReport]) -> None:
    table = Table("tenant", "intact", "events", "first broken", "why")
    for r in reports:
        table.add_row(
            r.tenant,
            "yes" if r.intact else "[red]NO[/]",
            str(r.events_checked),
            str(r.first_broken_seq or "-"),
            r.detail or "-",
        )
    print_table(context.out, table)
