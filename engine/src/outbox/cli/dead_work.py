"""``outbox dead-letters``: what failed, for whom and why (``list``, ``show``), and what was never an event
(``poison``)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from outbox.cli.app import CliContext, dead_letters_app
from outbox.cli.output import JsonFlag, command_context, parse_day, print_records, refuse, show
from outbox.ops import DeadLetter, OperationRefusedError


@dead_letters_app.command("list")
def dead_letters_list(
    ctx: typer.Context,
    tenant: Annotated[str | None, typer.Option(help="one tenant (default: all)")] = None,
    subscription: Annotated[str | None, typer.Option()] = None,
    include_resolved: Annotated[bool, typer.Option(help="also rows already replayed or redriven")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Dead letters per tenant and subscription, with error, attempts and time."""
    context = command_context(ctx, as_json)
    try:
        tenants = [context.operations.require_tenant(tenant)] if tenant else context.operations.tenants()
    except OperationRefusedError as exc:
        refuse(context, exc)
    rows = [
        row
        for name in tenants
        for row in context.operations.dead_letters(name, subscription=subscription, include_resolved=include_resolved)
    ]
    show(context, rows, lambda: _print_dead_letters(context, rows))


def _print_dead_letters(context: CliContext, rows: list[DeadLetter]) -> None:
    table = Table("tenant", "event", "seq", "subscription", "reason", "attempts", "dead at", "error")
    for row in rows:
        table.add_row(
            row.tenant,
            row.event_id,
            str(row.event_seq),
            row.subscription,
            row.reason,
            str(row.attempts or "-"),
            row.dead_at,
            row.error[:80],
        )
    context.out.print(table)
    pills = context.operations.poison_pills()
    context.out.print(f"{len(rows)} dead letters; {len(pills)} poison pills today (outbox dead-letters poison)")


@dead_letters_app.command("show")
def dead_letters_show(
    ctx: typer.Context, event_id: str, tenant: Annotated[str, typer.Option()], as_json: JsonFlag = False
) -> None:
    """Every dead letter of one event, with the full error."""
    context = command_context(ctx, as_json)
    try:
        context.operations.require_tenant(tenant)
        rows = context.operations.dead_letters(tenant, event_id=event_id, include_resolved=True)
        if not rows:
            raise OperationRefusedError(f"no dead letter for event {event_id} of tenant {tenant!r}")
    except OperationRefusedError as exc:
        refuse(context, exc)
    show(context, rows, lambda: print_records(context, rows))


@dead_letters_app.command("poison")
def poison(
    ctx: typer.Context,
    day: Annotated[str | None, typer.Option(help="YYYY-MM-DD, default today")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Poison pills: messages that were not events at all (kept under a global partition per day)."""
    context = command_context(ctx, as_json)
    moment = parse_day(day) if day else None
    pills = context.operations.poison_pills(moment)

    def human() -> None:
        table = Table("message", "recorded at", "group", "error", "body")
        for pill in pills:
            body = pill.body[:60] + ("…" if pill.body_truncated or len(pill.body) > 60 else "")
            table.add_row(
                pill.message_id, pill.recorded_at, pill.attributes.get("MessageGroupId", "-"), pill.error, body
            )
        context.out.print(table)
        context.out.print(f"{len(pills)} poison pills (the whole body: --json)")

    show(context, pills, human)
