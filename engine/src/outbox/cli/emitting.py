"""``outbox emit``: one event appended to a tenant's chain from the command line, checked against the catalog
as the application's own ``emit()`` is (the same ``EventStore``), on the operations' clock."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from outbox.cli.app import app
from outbox.cli.output import JsonFlag, YesFlag, command_context, confirm, example, refuse, show
from outbox.exceptions import OutboxError
from outbox.log.store import EventStore


@app.command(
    epilog=example(
        'outbox --local emit shop.order_placed --tenant t-1 --payload \'{"order_id": "o-1", "amount": 42}\' --yes'
    )
)
def emit(
    ctx: typer.Context,
    event_type: Annotated[str, typer.Argument(metavar="TYPE", help="a type the catalog declares")],
    tenant: Annotated[str, typer.Option(metavar="TENANT", help="the tenant whose chain it joins")],
    payload: Annotated[str, typer.Option(metavar="JSON", help="the payload, a JSON object")] = "{}",
    actor: Annotated[str, typer.Option(metavar="ACTOR", help="who emits it (the envelope's actor)")] = "outbox-cli",
    yes: YesFlag = False,
    as_json: JsonFlag = False,
) -> None:
    """Emit one event of TYPE for TENANT, as the application's emit() does: its payload checked against the
    catalog's model, appended to the tenant's chain, then relayed and delivered to its subscriptions. With
    --json: the committed envelope."""
    context = command_context(ctx, as_json)
    try:
        body = json.loads(payload)
    except ValueError as exc:
        raise typer.BadParameter(f"not JSON: {exc}", param_hint="--payload") from exc
    if not isinstance(body, dict):
        raise typer.BadParameter("the payload must be a JSON object: {...}", param_hint="--payload")
    operations = context.operations
    confirm(context, yes, f"emit {event_type} for tenant {tenant}?")
    store = EventStore(
        operations.topology.events_table,
        client=operations.dynamodb,
        catalog=operations.catalog,
        clock=lambda: _to_ms(operations.now()),
    )
    try:
        envelope = store.emit(event_type, body, tenant=tenant, actor=actor)
    except OutboxError as exc:
        refuse(context, exc)
    document: dict[str, Any] = envelope.model_dump(mode="json")

    def human() -> None:
        context.out.print(
            f"emitted {envelope.type} {envelope.id}: tenant {envelope.tenant}, seq {envelope.seq}", highlight=False
        )

    show(context, document, human)


def _to_ms(moment: Any) -> Any:
    return moment.replace(microsecond=moment.microsecond - moment.microsecond % 1000)
