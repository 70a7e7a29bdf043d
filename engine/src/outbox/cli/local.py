"""``outbox local serve``: your CDK app on the local runtime, for ``outbox --local`` (the [local] extra)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from outbox.cli.app import local_app
from outbox.cli.output import example


@local_app.command("serve", epilog=example("outbox local serve --port 4566 -c alarmEmail=ops@example.com"))
def local_serve(
    app_command: Annotated[
        str | None,
        typer.Option(
            "--app", metavar="COMMAND", help='the app\'s command (default: "app" of ./cdk.json), e.g. "python app.py"'
        ),
    ] = None,
    port: Annotated[int, typer.Option(metavar="PORT", help="serve the AWS APIs (moto) on 127.0.0.1:PORT")] = 4566,
    stack: Annotated[
        str | None, typer.Option("--stack", metavar="STACK", help="the stack to boot (default: the app's only one)")
    ] = None,
    context: Annotated[
        list[str] | None,
        typer.Option("--context", "-c", metavar="KEY=VALUE", help="KEY=VALUE, as cdk synth -c (repeatable)"),
    ] = None,
) -> None:
    """Synthesize your app, boot it on the local runtime served at 127.0.0.1:PORT, and keep its pipes and
    consumers running (what `outbox --local replay`, `reconcile` and `redrive` send is processed) until Ctrl-C.
    It writes .local/topology.json, which `outbox --local ...` reads from the same folder."""
    try:
        from outbox.local.serve import ServeError, serve
    except ImportError as exc:  # the [local] extra is missing
        raise typer.BadParameter(
            f'the local runtime needs the [local] extra: pip install "chained-outbox[local]" ({exc})',
            param_hint="local serve",
        ) from exc
    command = app_command or _cdk_json_app(Path("cdk.json"))
    values = dict(_key_value(pair) for pair in context or [])

    def ready(served: Any) -> None:
        typer.echo(
            f"serving {served.runtime.stack.name} on {served.runtime.endpoint_url}: outbox --local status; Ctrl-C "
            "to stop",
            err=True,
        )

    try:
        serve(command, port, stack=stack, context=values, ready=ready)
    except ServeError as exc:
        raise typer.BadParameter(str(exc), param_hint="--app") from exc
    except KeyboardInterrupt:
        return


def _cdk_json_app(path: Path) -> str:
    try:
        command = json.loads(path.read_text()).get("app")
    except (OSError, json.JSONDecodeError):
        command = None
    if not isinstance(command, str):
        raise typer.BadParameter(f'no "app" in ./{path}: pass --app "python app.py"', param_hint="--app")
    return command


def _key_value(pair: str) -> tuple[str, str]:
    key, sep, value = pair.partition("=")
    if not sep or not key:
        raise typer.BadParameter(f"{pair!r} is not KEY=VALUE", param_hint="--context")
    return key, value
