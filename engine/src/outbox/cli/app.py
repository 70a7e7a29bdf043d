"""The ``outbox`` command's root: its options (where the pipeline is, which catalog), how it connects to the
pipeline, and how a command's unexpected failure is said (``OutboxGroup``). What every command works on is
``CliContext`` (``context``); the commands live beside it, one module per group."""

from __future__ import annotations

import json
import logging
import shlex
import sys
from collections.abc import Callable
from functools import partial
from typing import Annotated, Any

import boto3
import typer
from typer.core import TyperGroup

from outbox import clock as engine_clock
from outbox.cli.context import CATALOG_ENV, CliContext, load_application_catalog, required_catalog
from outbox.cli.failures import report_failure
from outbox.cli.served import served_clock
from outbox.local.clients import local_client
from outbox.ops import Operations, Topology
from outbox.outputs import LOCAL_TOPOLOGY

HELP = (
    "The operator's command line for an outbox pipeline: --stack NAME (AWS) or --local (the local runtime). "
    "Tables for people; with --json (before or after the command) stdout holds exactly one JSON document, also "
    "when the command fails; prompts, progress and messages go to stderr. Commands that change something ask "
    "first unless --yes. Exit codes: 0 done or nothing to do (status: healthy), 1 needs attention, a repair that "
    "did not do all it was asked, or declined, 2 could not run (OUTBOX_DEBUG=1: the traceback of an unexpected error)."
)


class OutboxGroup(TyperGroup):
    """The root command: whatever a command raises that is not click's own (a usage error, an exit) ends as
    one line on stderr, one JSON document on stdout with --json, and exit code 2, never a traceback. Here
    rather than only in ``run``, so a test's ``CliRunner`` sees the same as a person at the terminal."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except (typer.TyperException, typer.Exit, typer.Abort):  # typer's own: usage errors, exits, Ctrl-C
            raise
        except Exception as exc:
            report_failure(ctx.find_object(CliContext), exc, as_json=bool(ctx.params.get("as_json")))


app = typer.Typer(
    help=HELP, no_args_is_help=True, cls=OutboxGroup, pretty_exceptions_enable=False, rich_markup_mode=None
)
dead_letters_app = typer.Typer(
    help="Dead-letter rows: what failed, for whom, and why.", no_args_is_help=True, rich_markup_mode=None
)
app.add_typer(dead_letters_app, name="dead-letters")
local_app = typer.Typer(
    help="Your CDK app on the local runtime (the [local] extra).", no_args_is_help=True, rich_markup_mode=None
)
app.add_typer(local_app, name="local")


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"outbox {_installed_version()}")
        raise typer.Exit()


def _installed_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("chained-outbox")
    except PackageNotFoundError:
        return "(not installed: run from a source tree)"


@app.callback()
def main(
    ctx: typer.Context,
    stack: Annotated[str | None, typer.Option(metavar="STACK", help="CloudFormation stack to operate on")] = None,
    local: Annotated[
        bool, typer.Option("--local", help="operate on your app served here by `outbox local serve`")
    ] = False,
    region: Annotated[str | None, typer.Option(metavar="REGION", help="AWS region")] = None,
    profile: Annotated[str | None, typer.Option(metavar="PROFILE", help="AWS profile")] = None,
    catalog: Annotated[
        str | None,
        typer.Option(
            envvar=CATALOG_ENV,
            help="the application's catalog, 'package.module:function' (the pipeline's SUBSCRIPTIONS)",
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="exactly one JSON document on stdout")] = False,
    version: Annotated[
        bool, typer.Option("--version", is_eager=True, callback=_print_version, help="print the version and exit")
    ] = False,
) -> None:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if isinstance(ctx.obj, CliContext):  # tests and embedding pass a ready context
        ctx.obj.json = ctx.obj.json or as_json
        return
    if ctx.resilient_parsing:
        return
    ctx.obj = CliContext(
        connect=lambda: _operations(stack, local, region, profile, catalog),
        json=as_json,
        catalog_reference=catalog,
        invocation=_invocation(ctx, stack=stack, local=local, region=region, profile=profile, catalog=catalog),
        served=_served if local and not stack else None,
    )


def _invocation(ctx: typer.Context, **given: str | bool | None) -> str:
    """``outbox`` with the root options this command was given on its command line (not from the
    environment), as a suggested command must carry them to work when pasted."""
    words = ["outbox"]
    for name, value in given.items():
        source = ctx.get_parameter_source(name)
        if value in (None, False) or (source is not None and source.name != "COMMANDLINE"):
            continue
        words += [f"--{name}"] if value is True else [f"--{name}", shlex.quote(str(value))]
    return " ".join(words)


def _served() -> dict[str, Any]:
    """The served app's .local/topology.json; its code folder goes on the import path, as its functions load it."""
    if not LOCAL_TOPOLOGY.exists():
        raise typer.BadParameter(
            f"no {LOCAL_TOPOLOGY} here: serve your app with `outbox local serve` in this folder, then run this "
            "in the same folder",
            param_hint="--local",
        )
    saved: dict[str, Any] = json.loads(LOCAL_TOPOLOGY.read_text())
    if saved.get("code") and saved["code"] not in sys.path:
        sys.path.insert(0, saved["code"])
    return saved


def _operations(
    stack: str | None, local: bool, region: str | None, profile: str | None, catalog: str | None
) -> Operations:
    if local and stack:
        raise typer.BadParameter(
            f"--stack {stack} and --local both given: name one, the deployed stack or the local runtime",
            param_hint="--stack/--local",
        )
    if not local and not stack:
        raise typer.BadParameter(
            "say where: --stack NAME (AWS) or --local (the local runtime)", param_hint="--stack/--local"
        )
    if local:
        saved = _served()
        outputs = saved["outputs"]
        # The served app's catalog, and the folder of its code, as its functions load them.
        reference = required_catalog(catalog or saved.get("catalog"))
        client: Callable[[str], Any] = partial(local_client, endpoint_url=saved["endpoint_url"])
        topology = Topology.from_outputs(outputs)
        clock = served_clock(saved["endpoint_url"])
    else:
        reference = required_catalog(catalog)
        client = boto3.Session(profile_name=profile, region_name=region).client
        clock = engine_clock.now
        described = client("cloudformation").describe_stacks(StackName=stack)["Stacks"][0]
        outputs = {o["OutputKey"]: o["OutputValue"] for o in described.get("Outputs", [])}
        topology = Topology.from_outputs(outputs)
    return Operations(
        topology,
        dynamodb=client("dynamodb"),
        sqs=client("sqs"),
        pipes=client("pipes"),
        cloudwatch=None if local else client("cloudwatch"),
        catalog=load_application_catalog(reference, outputs),
        clock=clock,
    )
