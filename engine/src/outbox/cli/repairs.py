"""Repairs: ``replay`` (rerun dead work), ``skip`` (let an ordered subscription go on without one event),
``redrive`` (move a DLQ's messages back), ``reconcile`` (re-send what no claim shows was handled). Each asks
first unless ``--yes``, and ``--dry-run`` shows what it would do where it can."""

from __future__ import annotations

import getpass
import itertools
from dataclasses import asdict
from enum import StrEnum
from typing import Annotated, Any

import typer
from rich.table import Table

from outbox.cli.app import app
from outbox.cli.groups import repair_group
from outbox.cli.output import (
    JsonFlag,
    YesFlag,
    command_context,
    confirm,
    example,
    parse_moment,
    print_table,
    progress,
    refuse,
    show,
)
from outbox.exceptions import NothingToDoError, OutboxError
from outbox.ops import OperationRefusedError, RedriveResult
from outbox.ops.wording import plural


@app.command(epilog=example("outbox --local replay --tenant acme --since 24h --dry-run"))
def replay(
    ctx: typer.Context,
    tenant: Annotated[str | None, typer.Option(metavar="TENANT", help="replay this tenant's dead work")] = None,
    event_id: Annotated[
        list[str] | None, typer.Option("--event-id", metavar="EVENT_ID", help="one event (repeatable)")
    ] = None,
    subscription: Annotated[str | None, typer.Option(metavar="SUBSCRIPTION", help="only this subscription")] = None,
    since: Annotated[str | None, typer.Option(metavar="WHEN", help="dead since (ISO time or 24h)")] = None,
    until: Annotated[str | None, typer.Option(metavar="WHEN", help="dead until (ISO time or 24h)")] = None,
    group: Annotated[
        str | None, typer.Option(metavar="GROUP", help="every pair of one failure group (outbox dead-letters groups)")
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="also rerun COMPLETED or unverifiable pairs (may run their effect again)")
    ] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="show what would run, change nothing")] = False,
    yes: YesFlag = False,
    as_json: JsonFlag = False,
) -> None:
    """Rerun the selected dead (event, subscription) pairs: clear their claims and re-send each event from the
    events table to those subscriptions only. With --json: {"dry_run", "plan", "result"}; with --group, the
    group's counts of what was planned, sent, skipped (no longer dead) and refused (exit 1 if any was)."""
    context = command_context(ctx, as_json)
    if group is not None:
        if tenant or event_id or subscription or since or until:
            refuse(context, OperationRefusedError("--group selects the pairs itself: leave out the other selectors"))
        repair_group(
            context,
            lambda dry, report, only: context.operations.replay_group(
                group, force=force, dry_run=dry, only=only, on_progress=report
            ),
            question="clear the claims of {pairs} and re-send their events?",
            dry_run=dry_run,
            yes=yes,
        )
        return
    window = parse_moment(since, context.now), parse_moment(until, context.now, option="--until")
    try:
        plan = context.operations.plan_replay(
            tenant=tenant,
            event_ids=event_id or (),
            subscription=subscription,
            since=window[0],
            until=window[1],
            force=force,
        )
    except NothingToDoError as exc:  # exit 0: nothing was changed, and nothing had to be
        nothing = str(exc)
        show(context, {"dry_run": dry_run, "plan": [], "result": None}, lambda: context.out.print(nothing))
        return
    except OperationRefusedError as exc:
        refuse(context, exc)
    table = Table("tenant", "event", "seq", "subscription", "claim", title="replay")
    for item in plan:
        table.add_row(item.tenant, item.event_id, str(item.event_seq), item.subscription, str(item.claim_status))
    if dry_run:
        show(context, {"dry_run": True, "plan": plan, "result": None}, lambda: print_table(context.out, table))
        return
    # The plan is what the question is about: shown where the person answering it looks.
    print_table(context.err if context.json else context.out, table)
    confirm(context, yes, f"clear {plural(len(plan), 'claim')} and re-send their events?")
    with progress(context, "replaying", len(plan)) as report_progress:
        result = context.operations.replay(plan, on_progress=report_progress)
    summary = (
        f"replayed: cleared {plural(len(result.cleared), 'claim')}, re-sent {plural(len(result.republished), 'event')}"
    )
    if len(result.cleared) < len(plan):
        summary += (
            f"; {len(plan) - len(result.cleared)} of the plan had been picked up again meanwhile and were left to "
            "the inbox (outbox dead-letters list shows what is still open)"
        )
    show(context, {"dry_run": False, "plan": plan, "result": result}, lambda: context.out.print(context.hint(summary)))


class RedriveMethod(StrEnum):
    """SQS's move task where the DLQ allows it (a standard queue's), else receive-send-delete (a FIFO DLQ)."""

    AUTO = "auto"
    MOVE_TASK = "move-task"
    RECEIVE_SEND_DELETE = "receive-send-delete"


@app.command(
    epilog=example('outbox --local skip --tenant acme --subscription ledger.journal --seq 42 --reason "booked by hand"')
)
def skip(
    ctx: typer.Context,
    reason: Annotated[str, typer.Option(metavar="TEXT", help="why it may go on without this event (recorded)")],
    tenant: Annotated[str | None, typer.Option(metavar="TENANT", help="the tenant of the pair")] = None,
    subscription: Annotated[
        str | None, typer.Option(metavar="SUBSCRIPTION", help="the subscription of the pair")
    ] = None,
    seq: Annotated[
        int | None, typer.Option(metavar="SEQ", help="the event's seq (outbox status shows the one an order waits for)")
    ] = None,
    group: Annotated[
        str | None, typer.Option(metavar="GROUP", help="every pair of one failure group (outbox dead-letters groups)")
    ] = None,
    by: Annotated[
        str | None, typer.Option(metavar="WHO", help="who decides (recorded; default: your login name)")
    ] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="with --group: show what would be skipped")] = False,
    yes: YesFlag = False,
    as_json: JsonFlag = False,
) -> None:
    """Let a pair go without running it (--tenant, --subscription, --seq), recorded and final: a replay never
    runs a skipped pair. In an ordered subscription's order: the next event, not applied and not running (a dead
    one, typically); the event that waited for it goes back to the queue, and running it again for the same seq
    only sends that again. Outside any order: acknowledges dead work (of an unordered subscription, from before
    ordered_since, or one the deployed catalog no longer runs) and an event a deploy took out of its order. With
    --group: every dead pair of one failure group, each the same way (an ordered pair only when it is next in
    its order: run it again for the rest); exit 1 if any was refused."""
    context = command_context(ctx, as_json)
    decided_by = by or getpass.getuser()
    if group is not None:
        if tenant or subscription or seq is not None:
            refuse(
                context,
                OperationRefusedError("--group selects the pairs itself: leave out --tenant, --subscription and --seq"),
            )
        repair_group(
            context,
            lambda dry, report, only: context.operations.skip_group(
                group, by=decided_by, reason=reason, dry_run=dry, only=only, on_progress=report
            ),
            question="skip {pairs}? They will never run.",
            dry_run=dry_run,
            yes=yes,
        )
        return
    if tenant is None or subscription is None or seq is None:
        refuse(context, OperationRefusedError("say what to skip: --tenant, --subscription and --seq, or --group"))
    confirm(context, yes, f"skip seq {seq} of {tenant} for {subscription}? It will never run there.")
    try:
        result = context.operations.skip(tenant, subscription, seq, by=decided_by, reason=reason)
    except OperationRefusedError as exc:
        refuse(context, exc)
    woke = f"; sent seq {result.woke_seq} back to the queue" if result.woke_seq is not None else ""
    done = "was already skipped" if result.already else f"skipped (by {decided_by})"
    show(context, result.as_dict(), lambda: context.out.print(f"seq {seq} of {tenant} for {subscription} {done}{woke}"))


@app.command(epilog=example("outbox --local redrive --dlq durable-dlq --method receive-send-delete"))
def redrive(
    ctx: typer.Context,
    dlq: Annotated[
        str, typer.Option(metavar="DLQ", help="durable-dlq, record-change-dlq or tamper-dlq")
    ] = "durable-dlq",
    max_messages: Annotated[int | None, typer.Option("--max", metavar="N", help="stop after this many")] = None,
    method: Annotated[RedriveMethod, typer.Option(help="how the messages move")] = RedriveMethod.AUTO,
    yes: YesFlag = False,
    as_json: JsonFlag = False,
) -> None:
    """Move a DLQ's messages back to their queue. Nothing is cleared: each subscription runs, is skipped as
    completed, or stays dead with its dead letter (see status; rerun those with replay)."""
    context = command_context(ctx, as_json)
    try:
        context.operations.redrive_route(dlq)
    except OperationRefusedError as exc:
        refuse(context, exc)
    depth = context.operations.queue_depths()[dlq]
    if depth.visible + depth.in_flight == 0:  # a rerun of a redrive that moved everything: nothing to do
        result = RedriveResult(method="none", status="NOTHING_TO_DO")
        show(context, _redrive_document(result, None), lambda: context.out.print(f"{dlq} is empty: nothing to redrive"))
        return
    if depth.visible == 0:
        refuse(
            context,
            OperationRefusedError(
                f"{dlq}'s {plural(depth.in_flight, 'message')} in flight (an interrupted redrive?); they become "
                "visible again within a minute: run this again then"
            ),
        )
    confirm(context, yes, f"redrive {plural(depth.visible, 'message')} from {dlq}?")
    try:
        with progress(context, f"redriving {dlq}", depth.visible) as report_progress:
            moved = itertools.count(1)
            result = context.operations.redrive(
                dlq,
                max_messages=max_messages,
                method=method.value,
                on_message=lambda _id: report_progress(f"redriving {dlq}", next(moved), depth.visible),
            )
    except (OperationRefusedError, OutboxError) as exc:
        refuse(context, exc)
    shortfall = result.shortfall(dlq)

    def human() -> None:
        context.out.print(
            f"redrive ({result.method}, {result.status}): moved {plural(result.moved, 'message')}, "
            f"{plural(result.remaining, 'message')} left in {dlq}",
            highlight=False,
        )
        if result.failure and not shortfall:
            context.out.print(f"the move task failed ({result.failure}): the rest moved one by one", highlight=False)

    show(context, _redrive_document(result, shortfall), human)
    if shortfall:
        context.err.print(f"[bold red]not done:[/] {shortfall}", highlight=False)
        raise typer.Exit(code=1)


def _redrive_document(result: RedriveResult, shortfall: str | None) -> dict[str, Any]:
    """The result, whether it did what was asked, and if not why and what to try next."""
    return {**asdict(result), "done": shortfall is None, "shortfall": shortfall}


@app.command(epilog=example("outbox --local reconcile --since 7d --dry-run"))
def reconcile(
    ctx: typer.Context,
    since: Annotated[
        str | None,
        typer.Option(
            metavar="WHEN", help="from this time (ISO, or a duration back like 7d); not for an ordered --subscription"
        ),
    ] = None,
    tenant: Annotated[str | None, typer.Option(metavar="TENANT", help="one tenant (default: all)")] = None,
    subscription: Annotated[
        str | None,
        typer.Option(
            metavar="SUBSCRIPTION",
            help="this durable subscription only; an ordered one is sent what lies above its watermark",
        ),
    ] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="show what would be re-published")] = False,
    yes: YesFlag = False,
    as_json: JsonFlag = False,
) -> None:
    """Re-send events whose durable subscriptions have no claim, to those subscriptions only (beyond the stream's
    24 h, within the inbox's retention). With an ordered --subscription and no --since: every event of its
    order it has not applied, at any age (its watermark remembers what it applied): the backfill of a new
    ordered subscription over an existing log."""
    context = command_context(ctx, as_json)
    moment = parse_moment(since, context.now)
    scope = f"since {moment.isoformat()}" if moment else f"of {subscription} above its watermark"
    if not dry_run and (moment or subscription):  # without either, the operations refuse: nothing to confirm
        confirm(context, yes, f"re-publish unhandled events {scope}?")
    try:
        with progress(context, "reconciling") as report_progress:
            result = context.operations.reconcile(
                moment, tenant=tenant, subscription=subscription, dry_run=dry_run, on_progress=report_progress
            )
    except OperationRefusedError as exc:
        refuse(context, exc)

    def human() -> None:
        table = Table("event", "subscriptions", title="would re-publish" if dry_run else "re-published")
        for event, subscriptions in result.subscriptions.items():
            table.add_row(event, ", ".join(subscriptions))
        print_table(context.out, table)
        verb = "would re-publish" if dry_run else "re-published"
        context.out.print(
            f"reconcile: scanned {plural(result.scanned, 'event')}, {verb} {len(result.republished)}, "
            f"{result.already_handled} already handled"
        )

    show(context, {"dry_run": dry_run, **asdict(result)}, human)
