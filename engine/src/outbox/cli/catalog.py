"""``outbox catalog``: the application's event types and subscriptions, and its contract problems (offline)."""

from __future__ import annotations

import typer
from rich.markup import escape
from rich.table import Table

from outbox.cli.app import app
from outbox.cli.output import JsonFlag, command_context, example, print_table, show


@app.command(epilog=example("outbox --catalog shop.catalog:build catalog --json"))
def catalog(ctx: typer.Context, as_json: JsonFlag = False) -> None:
    """Every event type, its owner and producers, and every subscription with its lane and glob; then the
    catalog's contract problems (exit 1 when there are any). Works offline: without --stack, a variable the
    catalog reads and does not find gets a placeholder. With --json: the catalog's document and "problems"."""
    context = command_context(ctx, as_json)
    built = context.catalog()
    document, problems = built.document(), built.problems()

    def human() -> None:
        types = Table("event type", "owner", "producers", title="event types")
        for entry in document["event_types"]:
            types.add_row(entry["type"], entry["owner"], ", ".join(entry["producers"]))
        subs = Table("subscription", "glob", "lane", "dispatcher", title="subscriptions")
        for entry in document["subscriptions"]:
            subs.add_row(entry["name"], entry["glob"], entry["lane"], entry["dispatcher"])
        print_table(context.out, types, subs)
        for problem in problems:
            context.out.print(f"[red]problem:[/] {escape(problem)}")

    show(context, {**document, "problems": problems}, human)
    if problems:
        raise typer.Exit(code=1)
