"""``outbox local serve``: your CDK app on the local runtime, for ``outbox --local`` (the [local] extra)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from outbox.cli.app import local_app
from outbox.cli.context import say
from outbox.cli.output import JsonFlag, command_context, example, refuse, show


@local_app.command("serve", epilog=example("outbox local serve --port 4566 -c alarmEmail=ops@example.com"))
def local_serve(
    ctx: typer.Context,
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
    fresh: Annotated[
        bool, typer.Option("--fresh", help="start from empty tables and queues (replaces the saved .local/state)")
    ] = False,
    watch: Annotated[
        bool, typer.Option("--watch/--no-watch", help="reload the app's code when a file of its folder changes")
    ] = True,
    as_json: JsonFlag = False,
) -> None:
    """Synthesize your app, boot it on the local runtime served at 127.0.0.1:PORT, and keep its pipes and
    consumers running (what `outbox --local replay`, `reconcile` and `redrive` send is processed) until Ctrl-C.
    Its state (tables, queues and their messages, the pipes' checkpoints, the virtual clock) is kept in
    .local/state and picked up by the next start (--fresh: start over). A change to the app's code is reloaded
    without a restart, its state kept. It writes .local/topology.json, which `outbox --local ...` reads from the
    same folder."""
    cli = command_context(ctx, as_json)
    try:
        from outbox.local.serve import PortTakenError, ServeError, StateRefusedError, serve
        from outbox.local.setup import PipelineSetupError
    except ImportError as exc:  # the [local] extra is missing
        raise typer.BadParameter(
            f'the local runtime needs the [local] extra: pip install "chained-outbox[local]" ({exc})',
            param_hint="local serve",
        ) from exc
    command = app_command or _cdk_json_app(Path("cdk.json"))
    values = dict(_key_value(pair) for pair in context or [])

    started: dict[str, Any] = {}

    def ready(served: Any) -> None:
        runtime = served.runtime
        where = _shown(served.state)
        started.update(
            stack=runtime.stack.name,
            endpoint_url=runtime.endpoint_url,
            state=where,
            resumed=served.resumed,
            clock=runtime.clock().isoformat(),
        )
        kept = f"resumed the state kept in {where}" if served.resumed else f"a fresh state, kept in {where}"
        say(f"{kept} (--fresh starts over); virtual clock at {runtime.clock():%Y-%m-%d %H:%M:%S} UTC")
        say(
            f"serving {runtime.stack.name} on {runtime.endpoint_url}: outbox --local status; "
            f"{'code reloads when a file of this folder changes; ' if watch else ''}Ctrl-C to stop (the state is kept)"
        )

    try:
        serve(command, port, stack=stack, context=values, ready=ready, fresh=fresh, watch=watch)
    except PortTakenError as exc:
        raise typer.BadParameter(str(exc), param_hint="--port") from exc
    except (StateRefusedError, PipelineSetupError) as exc:  # what is there, or the app, cannot be served as it is
        refuse(cli, exc)
    except ServeError as exc:
        raise typer.BadParameter(str(exc), param_hint="--app") from exc
    except KeyboardInterrupt:
        pass
    say(f"stopped; the state is kept in {started.get('state', '.local/state')}")
    show(cli, {"stopped": True, **started}, lambda: None)


def _shown(path: Path) -> str:
    """``path`` relative to this folder when it is inside it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


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
