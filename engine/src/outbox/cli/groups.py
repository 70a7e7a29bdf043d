"""Failure groups: ``outbox dead-letters groups``, and the repair of a whole group that ``replay --group`` and
``skip --group`` run: the plan shown first, a question, then counts of what was sent, skipped and refused."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from outbox.cli.app import dead_letters_app
from outbox.cli.context import CliContext
from outbox.cli.output import JsonFlag, command_context, confirm, example, progress, refuse, show
from outbox.ops import FailureGroup, GroupRepair, OperationRefusedError
from outbox.ops.context import ProgressCallback
from outbox.ops.groups import GroupPair
from outbox.ops.wording import plural

TENANTS_SHOWN = 3


@dead_letters_app.command("groups", epilog=example("outbox --local dead-letters groups --json"))
def dead_letters_groups(
    ctx: typer.Context,
    tenant: Annotated[str | None, typer.Option(metavar="TENANT", help="one tenant (default: all)")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Open dead letters grouped by subscription, failure and where it was raised, across tenants: each
    group's count, first and last seen, tenants affected, one example, and its id for replay --group and
    skip --group. Then the pairs the completeness pass found missing (no outcome past its bound), a group of
    their own kind per subscription, with the command that repairs them. Exit code 1 when there is any."""
    context = command_context(ctx, as_json)
    try:
        groups = context.operations.failure_groups(tenant=tenant)
    except OperationRefusedError as exc:
        refuse(context, exc)
    show(context, [group.as_dict() for group in groups], lambda: _print_groups(context, groups))
    if groups:
        raise typer.Exit(code=1)


def _print_groups(context: CliContext, groups: list[FailureGroup]) -> None:
    table = Table("group", "subscription", "failure", "count", "tenants", "first seen", "last seen", "example")
    for group in groups:
        tenants = ", ".join(group.tenants[:TENANTS_SHOWN])
        if len(group.tenants) > TENANTS_SHOWN:
            tenants += f" and {len(group.tenants) - TENANTS_SHOWN} more"
        table.add_row(
            group.id,
            group.subscription,
            escape(f"{group.reason}: {group.where}"),
            str(group.count),
            tenants,
            group.first_seen,
            group.last_seen,
            f"{group.example.event_id} ({group.example.tenant})" if group.example else group.sample,
        )
    context.out.print(table)
    letters = sum(group.count for group in groups if group.example is not None)
    summary = f"{plural(len(groups), 'failure group')}, {plural(letters, 'dead letter')}"
    missing = sum(group.count for group in groups if group.example is None)
    context.out.print(summary + (f", {plural(missing, 'missing pair')}" if missing else ""))
    for group in groups:
        context.out.print(f"{group.id}: {group.repair}", highlight=False)


def repair_group(
    context: CliContext,
    run: Callable[[bool, ProgressCallback, list[GroupPair] | None], GroupRepair],
    *,
    question: str,
    dry_run: bool,
    yes: bool,
) -> None:
    """Plan (a dry run), show it, ask, repair the pairs shown, and say what happened: ``run(dry_run,
    on_progress, only)``. A dead letter that joins the group after the question waits for the next run, it is
    not repaired unseen. Exit code 0 when every pair planned was dealt with, or there was nothing to do; 1
    when some were refused."""
    try:
        plan = run(True, lambda *_: None, None)
    except OperationRefusedError as exc:
        refuse(context, exc)
    if plan.nothing_to_do:
        show(
            context,
            plan.as_dict(),
            lambda: context.out.print(f"group {plan.group} has no open dead letters: nothing to do"),
        )
        return
    if dry_run:
        show(context, plan.as_dict(), lambda: _print_repair(context, plan))
        return
    _print_repair(context, plan, to_stderr=context.json)
    if not plan.planned:  # every pair refused: nothing to ask about
        outcome = plan
        outcome.dry_run = False
    else:
        confirm(context, yes, question.format(pairs=plural(len(plan.planned), "pair")))
        try:
            with progress(context, f"{plan.action} {plan.group}", len(plan.planned)) as report_progress:
                outcome = run(False, report_progress, plan.planned)
        except OperationRefusedError as exc:
            refuse(context, exc)
    known = {(refusal.pair, refusal.why) for refusal in plan.refused}
    for refusal in outcome.refused:  # what the repair itself found, that the plan could not foresee
        if (refusal.pair, refusal.why) not in known:
            pair = refusal.pair
            context.err.print(
                f"refused {pair.tenant} seq {pair.event_seq} {pair.subscription}: {refusal.why}", highlight=False
            )
    show(context, outcome.as_dict(), lambda: _print_counts(context, outcome))
    if outcome.refused:
        context.err.print(
            f"[bold red]not done:[/] {plural(len(outcome.refused), 'pair')} refused (each listed with why)",
            highlight=False,
        )
        raise typer.Exit(code=1)


def _print_repair(context: CliContext, repair: GroupRepair, *, to_stderr: bool = False) -> None:
    console = context.err if to_stderr else context.out
    verb = "would " + repair.action if repair.dry_run else repair.action
    table = Table("tenant", "event", "seq", "subscription", title=f"{verb}: group {repair.group}")
    for pair in repair.planned:
        table.add_row(pair.tenant, pair.event_id, str(pair.event_seq), pair.subscription)
    console.print(table)
    for refusal in repair.refused:
        pair = refusal.pair
        console.print(f"refused {pair.tenant} seq {pair.event_seq} {pair.subscription}: {refusal.why}", highlight=False)


def _print_counts(context: CliContext, outcome: GroupRepair) -> None:
    counts = outcome.counts()
    context.out.print(
        f"{outcome.action} group {outcome.group}: {counts['planned']} planned, {counts['sent']} sent, "
        f"{counts['skipped']} skipped, {counts['refused']} refused",
        highlight=False,
    )
