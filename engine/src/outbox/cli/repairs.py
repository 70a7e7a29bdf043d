"""Repairs: ``replay`` (rerun dead work), ``skip`` (let an ordered subscription go on without one event),
``redrive`` (move a DLQ's messages back), ``reconcile`` (re-send what no claim shows was handled). Each asks
first unless ``--yes``, and ``--dry-run`` shows what it would do where it can."""

from __future__ import annotations

import getpass
import itertools
from dataclasses import asdict
from enum import StrEnum
from typing import Annotated

import typer
from rich.table import Table

from outbox.cli.app import app
from outbox.cli.output import JsonFlag, command_context, confirm, parse_moment, progress, refuse, show
from outbox.exceptions import OutboxError
from outbox.ops import OperationRefusedError


@app.command()
def replay(
    ctx: typer.Context,
    tenant: Annotated[str | None, typer.Option(help="replay this tenant's dead work")] = None,
    event_id: Annotated[list[str] | None, typer.Option("--event-id", help="one event (repeatable)")] = None,
    subscription: Annotated[str | None, typer.Option(help="only this subscription")] = None,
    since: Annotated[str | None, typer.Option(help="dead since (ISO time or 24h)")] = None,
    until: Annotated[str | None, typer.Option(help="dead until (ISO time or 24h)")] = None,
    force: Annotated[
        bool, typer.Option(help="also rerun COMPLETED or unverifiable pairs (may run their effect again)")
    ] = False,
    dry_run: Annotated[bool, typer.Option(help="show what would run, change nothing")] = False,
    yes: Annotated[bool, typer.Option("--yes", help="do not ask")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Rerun the selected dead (event, subscription) pairs: clear their claims and re-send each event from the
    events table to those subscriptions only. With --json: {"dry_run", "plan", "result"}."""
    context = command_context(ctx, as_json)
    try:
        plan = context.operations.plan_replay(
            tenant=tenant,
            event_ids=event_id or (),
            subscription=subscription,
            since=parse_moment(since, context.operations.now()),
            until=parse_moment(until, context.operations.now()),
            force=force,
        )
    except OperationRefusedError as exc:
        refuse(context, exc)
    table = Table("tenant", "event", "seq", "subscription", "claim", title="replay")
    for item in plan:
        table.add_row(item.tenant, item.event_id, str(item.event_seq), item.subscription, str(item.claim_status))
    if dry_run:
        show(context, {"dry_run": True, "plan": plan, "result": None}, lambda: context.out.print(table))
        return
    # The plan is what the question is about: shown where the person answering it looks.
    (context.err if context.json else context.out).print(table)
    confirm(yes, f"clear {len(plan)} claims and re-send their events?")
    with progress(context, "replaying", len(plan)) as report_progress:
        result = context.operations.replay(plan, on_progress=report_progress)
    summary = f"replayed: cleared {len(result.cleared)} claims, re-sent {len(result.republished)} events"
    show(context, {"dry_run": False, "plan": plan, "result": result}, lambda: context.out.print(summary))


class RedriveMethod(StrEnum):
    """SQS's move task where the DLQ allows it (a standard queue's), else receive-send-delete (a FIFO DLQ)."""

    AUTO = "auto"
    MOVE_TASK = "move-task"
    RECEIVE_SEND_DELETE = "receive-send-delete"


@app.command()
def skip(
    ctx: typer.Context,
    tenant: Annotated[str, typer.Option(help="the tenant whose ordered subscription is blocked")],
    subscription: Annotated[str, typer.Option(help="the ordered subscription")],
    seq: Annotated[int, typer.Option(help="the seq it waits for (outbox status shows it)")],
    reason: Annotated[str, typer.Option(help="why it may go on without this event (recorded)")],
    by: Annotated[str | None, typer.Option(help="who decides (recorded; default: your login name)")] = None,
    yes: Annotated[bool, typer.Option("--yes", help="do not ask")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Let an ordered subscription go on without one event: the next in its order, not applied and not
    running (a dead one, typically). Final: a replay never runs a skipped event. Sends the event that waited
    for it back to the queue. Running it again for the same seq only sends that again."""
    context = command_context(ctx, as_json)
    decided_by = by or getpass.getuser()
    confirm(yes, f"skip seq {seq} of {tenant} for {subscription}? It will never run there.")
    try:
        result = context.operations.skip(tenant, subscription, seq, by=decided_by, reason=reason)
    except OperationRefusedError as exc:
        refuse(context, exc)
    woke = f"; sent seq {result.woke_seq} back to the queue" if result.woke_seq is not None else ""
    done = "was already skipped" if result.already else f"skipped (by {decided_by})"
    show(context, result.as_dict(), lambda: context.out.print(f"seq {seq} of {tenant} for {subscription} {done}{woke}"))


@app.command()
def redrive(
    ctx: typer.Context,
    dlq: Annotated[str, typer.Option(help="durable-dlq, record-change-dlq or tamper-dlq")] = "durable-dlq",
    max_messages: Annotated[int | None, typer.Option("--max", help="stop after this many")] = None,
    method: Annotated[RedriveMethod, typer.Option(help="how the messages move")] = RedriveMethod.AUTO,
    yes: Annotated[bool, typer.Option("--yes", help="do not ask")] = False,
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
    if depth.visible + depth.in_flight == 0:
        refuse(context, OperationRefusedError(f"{dlq} is empty: nothing to redrive"))
    if depth.visible == 0:
        refuse(
            context,
            OperationRefusedError(
                f"{dlq}'s {depth.in_flight} messages are in flight (an interrupted redrive?); they become "
                "visible again within a minute: run this again then"
            ),
        )
    confirm(yes, f"redrive {depth.visible} messages from {dlq}?")
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
    summary = (
        f"redrive ({result.method}, {result.status}): moved {result.moved} messages, {result.remaining} left in {dlq}"
    )
    show(context, result, lambda: context.out.print(summary, highlight=False))


@app.command()
def reconcile(
    ctx: typer.Context,
    since: Annotated[
        str | None,
        typer.Option(help="from this time (ISO, or a duration back like 7d); not for an ordered --subscription"),
    ] = None,
    tenant: Annotated[str | None, typer.Option(help="one tenant (default: all)")] = None,
    subscription: Annotated[
        str | None,
        typer.Option(help="this durable subscription only; an ordered one is sent what lies above its watermark"),
    ] = None,
    dry_run: Annotated[bool, typer.Option(help="show what would be re-published")] = False,
    yes: Annotated[bool, typer.Option("--yes", help="do not ask")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Re-send events whose durable subscriptions have no claim, to those subscriptions only (beyond the stream's
    24 h, within the inbox's retention). With an ordered --subscription and no --since: every event of its
    order it has not applied, at any age (its watermark remembers what it applied): the backfill of a new
    ordered subscription over an existing log."""
    context = command_context(ctx, as_json)
    moment = parse_moment(since, context.operations.now())
    scope = f"since {moment.isoformat()}" if moment else f"of {subscription} above its watermark"
    if not dry_run and (moment or subscription):  # without either, the operations refuse: nothing to confirm
        confirm(yes, f"re-publish unhandled events {scope}?")
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
        context.out.print(table)
        verb = "would re-publish" if dry_run else "re-published"
        context.out.print(
            f"reconcile: scanned {result.scanned} events, {verb} {len(result.republished)}, "
            f"{result.already_handled} already handled"
        )

    show(context, {"dry_run": dry_run, **asdict(result)}, human)
