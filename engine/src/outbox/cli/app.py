"""The ``outbox`` command's root: its options (where the pipeline is, which catalog), and what every command
works on (``CliContext``). The commands live beside it, one module per group."""

from __future__ import annotations

import json
import logging
import os
import sys
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Annotated, Any

import boto3
import typer
from rich.console import Console

from outbox.catalog import Catalog
from outbox.exceptions import OutboxError, OutboxValidationError
from outbox.local.clients import local_client
from outbox.ops import Operations, Topology
from outbox.outputs import LOCAL_TOPOLOGY, application_environment
from outbox.settings import load_catalog

CATALOG_ENV = "OUTBOX_CATALOG"

# The variables a catalog listed without a stack may read and not find (each one rebuilds it).
MAX_PLACEHOLDERS = 20

HELP = (
    "The operator's command line for an outbox pipeline: --stack NAME (AWS) or --local (the local runtime). "
    "Tables for people; with --json (before or after the command) stdout holds exactly one JSON document, also "
    "when the command fails; prompts, progress and messages go to stderr. Commands that change something ask "
    "first unless --yes. Exit codes: 0 done (status: healthy), 1 needs attention or declined, 2 could not run."
)
app = typer.Typer(help=HELP, no_args_is_help=True)
dead_letters_app = typer.Typer(help="Dead-letter rows: what failed, for whom, and why.", no_args_is_help=True)
app.add_typer(dead_letters_app, name="dead-letters")
local_app = typer.Typer(help="Your CDK app on the local runtime (the [local] extra).", no_args_is_help=True)
app.add_typer(local_app, name="local")


@dataclass
class CliContext:
    """What the commands work on. ``connect`` builds the operations on first use, so commands that need
    no AWS (``catalog``) and every ``--help`` work without credentials or a stack."""

    connect: Callable[[], Operations] | None = None
    json: bool = False
    console: Console | None = None  # stdout: the command's result
    err_console: Console | None = None  # stderr: prompts, progress, messages
    catalog_reference: str | None = None
    _operations: Operations | None = None

    @classmethod
    def of(cls, operations: Operations, **options: Any) -> CliContext:
        """A context over ready operations (tests and embedding)."""
        return cls(_operations=operations, **options)

    @property
    def operations(self) -> Operations:
        if self._operations is None:
            if self.connect is None:
                raise typer.BadParameter("nothing to operate on")
            self._operations = self.connect()
        return self._operations

    def catalog(self) -> Catalog:
        if self._operations is not None:
            return self._operations.catalog
        # No stack: what the catalog's builder reads from the environment may be missing (outbox catalog lists
        # and checks a catalog offline): a placeholder stands in for each variable it reads and does not find.
        return _load_catalog(_required_catalog(self.catalog_reference), {}, placeholders=True)

    @property
    def out(self) -> Console:
        return self.console or Console()

    @property
    def err(self) -> Console:
        return self.err_console or Console(stderr=True)


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
    stack: Annotated[str | None, typer.Option(help="CloudFormation stack to operate on")] = None,
    local: Annotated[bool, typer.Option(help="operate on the local runtime (make demo ARGS='--serve 4566')")] = False,
    region: Annotated[str | None, typer.Option(help="AWS region")] = None,
    profile: Annotated[str | None, typer.Option(help="AWS profile")] = None,
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
        connect=lambda: _operations(stack, local, region, profile, catalog), json=as_json, catalog_reference=catalog
    )


def _required_catalog(reference: str | None) -> str:
    reference = reference or _configured_catalog(Path("pyproject.toml"))
    if not reference:
        raise typer.BadParameter(
            f"say which catalog: --catalog package.module:function, {CATALOG_ENV}, or catalog = ... under "
            "[tool.outbox] in ./pyproject.toml"
        )
    return reference


def _configured_catalog(pyproject: Path) -> str | None:
    """``[tool.outbox] catalog`` of the project the command runs in; ``[tool.outbox] code`` (the folder of the
    functions' code asset, ``src`` say) goes on the import path, as Lambda puts the asset."""
    if not pyproject.is_file():
        return None
    try:
        settings = tomllib.loads(pyproject.read_text()).get("tool", {}).get("outbox", {})
    except tomllib.TOMLDecodeError as exc:
        raise typer.BadParameter(f"{pyproject} is not valid TOML: {exc}") from exc
    code = settings.get("code")
    if isinstance(code, str) and str(Path(code).resolve()) not in sys.path:
        sys.path.insert(0, str(Path(code).resolve()))
    configured = settings.get("catalog")
    return configured if isinstance(configured, str) else None


def _operations(
    stack: str | None, local: bool, region: str | None, profile: str | None, catalog: str | None
) -> Operations:
    if local == bool(stack):
        raise typer.BadParameter("say where: --stack NAME (AWS) or --local (the local runtime)")
    if local:
        if not LOCAL_TOPOLOGY.exists():
            raise typer.BadParameter(
                f"no {LOCAL_TOPOLOGY} here: serve your app with `outbox local serve` (this repository's example: "
                "make demo ARGS='--serve 4566')"
            )
        saved = json.loads(LOCAL_TOPOLOGY.read_text())
        outputs = saved["outputs"]
        # The served app's catalog, and the folder of its code, as its functions load them.
        if saved.get("code") and saved["code"] not in sys.path:
            sys.path.insert(0, saved["code"])
        reference = _required_catalog(catalog or saved.get("catalog"))
        client: Callable[[str], Any] = partial(local_client, endpoint_url=saved["endpoint_url"])
    else:
        reference = _required_catalog(catalog)
        client = boto3.Session(profile_name=profile, region_name=region).client
        described = client("cloudformation").describe_stacks(StackName=stack)["Stacks"][0]
        outputs = {o["OutputKey"]: o["OutputValue"] for o in described.get("Outputs", [])}
    return Operations(
        Topology.from_outputs(outputs),
        dynamodb=client("dynamodb"),
        sqs=client("sqs"),
        pipes=client("pipes"),
        cloudwatch=None if local else client("cloudwatch"),
        catalog=_load_catalog(reference, outputs),
    )


def _load_catalog(reference: str, outputs: dict[str, str], *, placeholders: bool = False) -> Catalog:
    """The application's catalog, built in the environment the pipeline's functions have (the stack's
    ApplicationEnvironment output); a variable already set in this shell wins. ``placeholders``: a variable
    the builder reads with ``os.environ[...]`` and does not find is set to ``placeholder-<NAME>`` (said on
    stderr), for a catalog listed without a stack."""
    try:
        variables = application_environment(outputs)
    except OutboxValidationError as exc:
        raise typer.BadParameter(str(exc)) from exc
    for name, value in variables.items():
        os.environ.setdefault(name, value)
    # As `python -m` does: the application's package is found from the directory the command runs in.
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    filled: list[str] = []
    while True:
        try:
            catalog = load_catalog(reference)
            break
        except KeyError as exc:
            missing = exc.args[0] if exc.args else None
            if not isinstance(missing, str) or missing in os.environ:
                raise typer.BadParameter(f"the catalog {reference} could not be built: KeyError {exc}") from exc
            if not placeholders or len(filled) >= MAX_PLACEHOLDERS:
                raise typer.BadParameter(
                    f"the catalog {reference} reads {missing} from the environment, which is not set: set it, or "
                    "name the stack (--stack) whose functions' environment it is",
                    param_hint="--catalog",
                ) from exc
            os.environ[missing] = f"placeholder-{missing}"
            filled.append(missing)
        except (ImportError, AttributeError, ValueError, TypeError, OutboxError) as exc:
            raise typer.BadParameter(
                f"the catalog {reference} could not be built: {exc}", param_hint="--catalog"
            ) from exc
    if filled:
        typer.echo(f"the catalog was built with placeholders for {', '.join(filled)} (no stack named)", err=True)
    return catalog
