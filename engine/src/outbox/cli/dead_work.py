"""``outbox dead-letters``: what failed, for whom and why (``list``, ``show``), and what was never an event
(``poison``)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from outbox.cli.app import dead_letters_app
from outbox.cli.context import CliContext
from outbox.cli.output import JsonFlag, command_context, example, parse_day, print_records, print_table, refuse, show
from outbox.ops import DeadLetter, OperationRefusedError
from outbox.ops.wording import plural


@dead_letters_app.command("list", epilog=example("outbox --local dead-letters list --tenant acme --include-resolved"))
def dead_letters_list(
    ctx: typer.Context,
    tenant: Annotated[str | None, typer.Option(metavar="TENANT", help="one tenant (default: all)")] = None,
    subscription: Annotated[
        str | None,
        typer.Option(metavar="SUBSCRIPTION", help="one subscription (default: all)"),
    ] = None,
    include_resolved: Annotated[
        bool, typer.Option("--include-resolved", help="also rows already replayed or redriven")
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """Dead letters per tenant and subscription, with error, attempts and time. Exit code 1 when one is open."""
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
    show(context, rows, lambda: _print_dead_letters(context, rows, resolved_column=include_resolved))
    if any(row.resolved is None for row in rows):
        raise typer.Exit(code=1)


def _print_dead_letters(context: CliContext, rows: list[DeadLetter], *, resolved_column: bool) -> None:
    columns = ["tenant", "event", "seq", "subscription", "reason", "attempts", "dead at", "error"]
    table = Table(*columns, *(["resolved"] if resolved_column else []))
    for row in rows:
        cells = [
            row.tenant,
            row.event_id,
            str(row.event_seq),
            row.subscription,
            row.reason,
            str(row.attempts or "-"),
            row.dead_at,
            row.error[:80],
        ]
        table.add_row(*cells, *([row.resolved or "open"] if resolved_column else []))
    print_table(context.out, table)
    pills = context.operations.poison_pills()
    still_open = f" ({sum(row.resolved is None for row in rows)} open)" if resolved_column else ""
    context.out.print(
        context.hint(
            f"{plural(len(rows), 'dead letter')}{still_open}; {plural(len(pills), 'poison pill')} today "
            "(outbox dead-letters poison)"
        )
    )


@dead_letters_app.command(
    "show", epilog=example("outbox --stack OutboxEngine dead-letters show 01JB8Z3Q4K5M6N7P8R9S0T1V2W --tenant acme")
)
def dead_letters_show(
    ctx: typer.Context,
    event_id: Annotated[str, typer.Argument(metavar="EVENT_ID", help="the event's id (a ULID)")],
    tenant: Annotated[str, typer.Option(metavar="TENANT", help="the event's tenant")],
    as_json: JsonFlag = False,
) -> None:
    """Every dead letter of one event, with the full error. Exit code 1 when one is open."""
    context = command_context(ctx, as_json)
    try:
        context.operations.require_tenant(tenant)
        rows = context.operations.dead_letters(tenant, event_id=event_id, include_resolved=True)
        if not rows:
            raise OperationRefusedError(f"no dead letter for event {event_id} of tenant {tenant!r}")
    except OperationRefusedError as exc:
        refuse(context, exc)
    show(context, rows, lambda: print_records(context, rows))
    if any(row.resolved is None for row in rows):
        raise typer.Exit(code=1)


@dead_letters_app.command("poison", epilog=example("outbox --local dead-letters poison --day 2026-12-01 --json"))
def poison(
    ctx: typer.Context,
    day: Annotated[str | None, typer.Option(metavar="YYYY-MM-DD", help="YYYY-MM-DD, default today")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Poison pills: messages that were not events at all (kept under a global partition per day). Exit code 1
    when the day has any."""
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
        print_table(context.out, table)
        context.out.print(f"{plural(len(pills), 'poison pill')} (the whole body: --json)")

    show(context, pills, human)
    if pills:
        raise typer.Exit(code=1)
