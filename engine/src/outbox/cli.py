"""``outbox``: the operator's command line. Same code paths against AWS (``--stack``) or the local
runtime (``--local``, while ``make demo ARGS="--serve 4566"`` runs). Tables for people; with ``--json``
(before or after the command's name) stdout holds exactly one JSON document, also when the command
fails; prompts, progress and messages go to stderr. Every command that changes something asks first
unless ``--yes``."""

from __future__ import annotations

import getpass
import itertools
import json
import logging
import os
import re
import sys
import tomllib
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, is_dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from functools import partial
from pathlib import Path
from typing import Annotated, Any, NoReturn

import boto3
import typer
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    EndpointConnectionError,
    NoCredentialsError,
    NoRegionError,
    PartialCredentialsError,
    ProfileNotFound,
)
from rich.console import Console
from rich.markup import escape
from rich.progress import Progress
from rich.table import Table

from outbox.audit import Finding
from outbox.auditor import AnchorPass
from outbox.catalog import Catalog
from outbox.chain import ChainReport
from outbox.exceptions import OutboxError, OutboxValidationError
from outbox.local.clients import local_client
from outbox.ops import DeadLetter, OperationRefusedError, Operations, Status, Topology
from outbox.ops.context import ProgressCallback
from outbox.outputs import application_environment
from outbox.settings import load_catalog

# Where a serving local runtime writes its outputs and endpoint (the example's `make demo ARGS="--serve 4566"`).
LOCAL_TOPOLOGY = Path(".local") / "topology.json"
CATALOG_ENV = "OUTBOX_CATALOG"

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


# -- the local runtime ------------------------------------------------------------------------------


@local_app.command("serve")
def local_serve(
    app_command: Annotated[
        str | None,
        typer.Option("--app", help='the app\'s command (default: "app" of ./cdk.json), e.g. "python app.py"'),
    ] = None,
    port: Annotated[int, typer.Option(help="serve the AWS APIs (moto) on 127.0.0.1:PORT")] = 4566,
    stack: Annotated[
        str | None, typer.Option("--stack", help="the stack to boot (default: the app's only one)")
    ] = None,
    context: Annotated[
        list[str] | None, typer.Option("--context", "-c", help="KEY=VALUE, as cdk synth -c (repeatable)")
    ] = None,
) -> None:
    """Synthesize your app, boot it on the local runtime served at 127.0.0.1:PORT, and keep its pipes and
    consumers running (what `outbox --local replay`, `reconcile` and `redrive` send is processed) until Ctrl-C.
    It writes .local/topology.json, which `outbox --local ...` reads from the same folder."""
    try:
        from outbox.local.serve import ServeError, serve
    except ImportError as exc:  # the [local] extra is missing
        raise typer.BadParameter(
            f'the local runtime needs the [local] extra: pip install "chained-outbox[local]" ({exc})'
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


# -- helpers ----------------------------------------------------------------------------------------

# The variables a catalog listed without a stack may read and not find (each one rebuilds it).
MAX_PLACEHOLDERS = 20

# Every command takes --json after its name too (`outbox status --json`), as well as before it.
JsonFlag = Annotated[bool, typer.Option("--json", help="exactly one JSON document on stdout")]


def _context(ctx: typer.Context, as_json: bool = False) -> CliContext:
    context: CliContext = ctx.obj
    context.json = context.json or as_json
    return context


def _emit_json(context: CliContext, value: Any) -> None:
    context.out.print_json(json.dumps(value, default=_plain))


def _plain(item: Any) -> Any:
    return asdict(item) if is_dataclass(item) and not isinstance(item, type) else str(item)


def _show(context: CliContext, document: Any, human: Callable[[], None]) -> None:
    """The command's result: ``document`` as JSON with --json, else what ``human`` prints."""
    if context.json:
        _emit_json(context, document)
    else:
        human()


def _note(context: CliContext, message: str) -> None:
    """A message for the person at the terminal (stderr): never mixed into a table or a JSON document."""
    context.err.print(message, highlight=False)


def _refuse(context: CliContext, error: Exception) -> NoReturn:
    context.err.print(f"[bold red]refused:[/] {error}", highlight=False)
    if context.json:
        _emit_json(context, error_document("refused", str(error)))
    raise typer.Exit(code=2)


def error_document(kind: str, message: str, exit_code: int = 2) -> dict[str, Any]:
    """What stdout holds under --json when a command could not run."""
    return {"error": {"kind": kind, "message": message}, "exit_code": exit_code}


def _confirm(yes: bool, question: str) -> None:
    # The question goes to stderr, so that stdout holds only the command's result.
    if not yes and not typer.confirm(question, default=False, err=True):
        raise typer.Exit(code=1)


@contextmanager
def _progress(context: CliContext, description: str, total: int | None = None) -> Iterator[ProgressCallback]:
    """A progress bar on stderr (drawn only on a terminal, gone when done), fed by an action's callback."""
    with Progress(console=context.err, transient=True) as progress:
        task = progress.add_task(description, total=total)

        def report(step: str, done: int, of: int | None) -> None:
            progress.update(task, description=step, completed=done, total=of)

        yield report


def parse_moment(value: str | None, now: datetime | None = None) -> datetime | None:
    """An ISO 8601 time, or a duration back from ``now`` (the operations' clock): 30m, 24h, 7d."""
    if value is None:
        return None
    match = re.fullmatch(r"(\d+)([mhd])", value)
    if match:
        amount, unit = int(match[1]), match[2]
        delta = {"m": timedelta(minutes=amount), "h": timedelta(hours=amount), "d": timedelta(days=amount)}[unit]
        return (now or datetime.now(UTC)) - delta
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise typer.BadParameter(f"{value!r} is neither an ISO 8601 time nor a duration like 24h") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


# -- reading ----------------------------------------------------------------------------------------


@app.command()
def status(ctx: typer.Context, as_json: JsonFlag = False) -> None:
    """Queue and DLQ depths, pipe states, and per tenant: chain intact, dead letters, ordered subscriptions waiting.

    Exit code 0: healthy; 1: something needs an operator (a DLQ message, a broken chain, a dead letter, a
    poison pill today, a pipe not running, an ordered subscription whose events wait), listed under
    "problems"; 2: the command could not run."""
    context = _context(ctx, as_json)
    report = context.operations.status()
    _show(context, report.as_dict(), lambda: _print_status(context, report))
    if report.problems():
        raise typer.Exit(code=1)


def _print_status(context: CliContext, report: Status) -> None:
    queues = Table("queue", "visible", "in flight", "oldest (s)", title="queues")
    for name, depth in report.queues.items():
        style = "red" if name.endswith("dlq") and depth.visible + depth.in_flight else ""
        age = "-" if depth.oldest_age_seconds is None else f"{depth.oldest_age_seconds:.0f}"
        queues.add_row(name, str(depth.visible), str(depth.in_flight), age, style=style)
    tenants = Table("tenant", "chain", "head seq", "verified from", "findings", "dead letters", title="tenants")
    for tenant in report.tenants:
        chain = "intact" if tenant.chain_intact else f"[red]BROKEN at {tenant.first_broken_seq}[/]"
        findings = f"[red]{tenant.tamper_findings}[/]" if tenant.tamper_findings else "0"
        verified = f"{tenant.verified_from_seq} (anchor)" if tenant.anchor_seq else str(tenant.verified_from_seq)
        tenants.add_row(tenant.tenant, chain, str(tenant.head_seq), verified, findings, str(tenant.dead_letters))
    context.out.print(queues, tenants)
    for tenant in report.tenants:
        if tenant.last_reset:
            context.out.print(f"{tenant.tenant}: last anchor reset {tenant.last_reset}", highlight=False)
    pipes = ", ".join(f"{name} {state}" for name, state in report.pipes.items()) or "none"
    context.out.print(f"pipes: {pipes}   poison pills today: {report.poison_pills_today}")
    if report.application:
        settings = "  ".join(f"{name}={value}" for name, value in sorted(report.application.items()))
        context.out.print(f"application: {settings}", highlight=False)
    if report.blocked:
        waiting = Table("tenant", "ordered subscription", "applied to", "waits for", "its state", "deferred")
        waiting.title = "ordered subscriptions waiting"
        for row in report.blocked:
            state = f"[red]{row.waits_for_state}[/]" if row.waits_for_state == "DEAD" else row.waits_for_state
            waiting.add_row(
                row.tenant, row.subscription, str(row.applied_seq), str(row.waits_for_seq), state, str(row.waiting)
            )
        context.out.print(waiting)
    for problem in report.problems():
        context.out.print(f"[bold red]needs attention:[/] {problem}")


@app.command("verify-chain")
def verify_chain_command(
    ctx: typer.Context,
    tenant: Annotated[str | None, typer.Option(help="one tenant")] = None,
    all_tenants: Annotated[bool, typer.Option("--all", help="every tenant")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Recompute the hash chain from genesis, checked against the tenant's anchor (a rewrite with recomputed
    hashes at or before it is caught); report the first broken sequence number and why. Exit code 1 if broken.
    (status verifies only what was appended since the anchor; this reads the whole log.)"""
    context = _context(ctx, as_json)
    try:
        if tenant is None and not all_tenants:
            raise OperationRefusedError("name a tenant (--tenant T) or check them all (--all)")
        names = [context.operations.require_tenant(tenant)] if tenant else context.operations.tenants()
    except OperationRefusedError as exc:
        _refuse(context, exc)
    reports = []
    with _progress(context, "verifying chains", len(names)) as report_progress:
        for done, name in enumerate(names, start=1):
            reports.append(context.operations.verify(name))
            report_progress(f"verified {name}", done, len(names))
    _show(context, reports, lambda: _print_chain_reports(context, reports))
    if not all(r.intact for r in reports):
        raise typer.Exit(code=1)


@app.command()
def findings(
    ctx: typer.Context,
    tenant: Annotated[str | None, typer.Option(help="one tenant (default: all)")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Tamper findings: every change or deletion of an event row the stream showed, every broken chain the
    hourly anchoring found, every anchor reset. A finding observed before the tenant's latest reset is marked
    dealt with (the repair the reset records). Exit code 1 if any finding is open."""
    context = _context(ctx, as_json)
    try:
        tenants = [context.operations.require_tenant(tenant)] if tenant else None
        found = context.operations.findings(tenants)
    except OperationRefusedError as exc:
        _refuse(context, exc)
    _show(context, [f.as_dict() for f in found], lambda: _print_findings(context, found))
    if any(f.is_open for f in found):
        raise typer.Exit(code=1)


def _print_findings(context: CliContext, found: list[Finding]) -> None:
    table = Table("tenant", "kind", "seq", "observed", "what", "dealt with", title="tamper findings")
    for f in found:
        style = "red" if f.is_open else ""
        table.add_row(
            f.tenant, f.kind.value, str(f.seq or "-"), f.observed_at, f.detail, f.dealt_with or "-", style=style
        )
    context.out.print(table if found else "no findings")


@app.command()
def anchor(
    ctx: typer.Context,
    tenant: Annotated[str | None, typer.Option(help="one tenant (default: all)")] = None,
    reset: Annotated[
        bool, typer.Option(help="after a documented repair: verify in full and anchor the repaired head")
    ] = False,
    reason: Annotated[str | None, typer.Option(help="why the anchor is reset (recorded)")] = None,
    by: Annotated[str | None, typer.Option(help="who resets it: a name or a ticket (recorded)")] = None,
    yes: Annotated[bool, typer.Option("--yes", help="do not ask")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Run the hourly anchoring pass now (verify each tenant since its anchor and advance it), or --reset one
    tenant's anchor after a repair of its log. Needs write access to the audit table (the operator role)."""
    context = _context(ctx, as_json)
    try:
        if reset:
            if tenant is None or not reason or not by:
                raise OperationRefusedError("--reset needs --tenant T, --reason '...' and --by NAME (all recorded)")
            name = context.operations.require_tenant(tenant)
            _confirm(yes, f"re-anchor tenant {name} at its current head?")
            new = context.operations.reset_anchor(name, who=by, reason=reason)
            _show(context, asdict(new), lambda: context.out.print(f"{name}: anchored at seq {new.seq}"))
            return
        result = context.operations.anchor([context.operations.require_tenant(tenant)] if tenant else None)
    except OperationRefusedError as exc:
        _refuse(context, exc)
    _show(context, result.as_dict(), lambda: _print_anchor_pass(context, result))
    if result.broken:
        raise typer.Exit(code=1)


def _print_anchor_pass(context: CliContext, result: AnchorPass) -> None:
    for tenant, seq in result.advanced.items():
        context.out.print(f"{tenant}: anchored at seq {seq}")
    for tenant, report in result.broken.items():
        context.out.print(f"[bold red]{tenant}: BROKEN at seq {report.first_broken_seq}[/] ({report.detail})")
    context.out.print(f"{len(result.unchanged)} unchanged, {result.events_read} events read")


def _print_chain_reports(context: CliContext, reports: list[ChainReport]) -> None:
    table = Table("tenant", "intact", "events", "first broken", "why")
    for r in reports:
        table.add_row(
            r.tenant,
            "yes" if r.intact else "[red]NO[/]",
            str(r.events_checked),
            str(r.first_broken_seq or "-"),
            r.detail or "-",
        )
    context.out.print(table)


@dead_letters_app.command("list")
def dead_letters_list(
    ctx: typer.Context,
    tenant: Annotated[str | None, typer.Option(help="one tenant (default: all)")] = None,
    subscription: Annotated[str | None, typer.Option()] = None,
    include_resolved: Annotated[bool, typer.Option(help="also rows already replayed or redriven")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Dead letters per tenant and subscription, with error, attempts and time."""
    context = _context(ctx, as_json)
    try:
        tenants = [context.operations.require_tenant(tenant)] if tenant else context.operations.tenants()
    except OperationRefusedError as exc:
        _refuse(context, exc)
    rows = [
        row
        for name in tenants
        for row in context.operations.dead_letters(name, subscription=subscription, include_resolved=include_resolved)
    ]
    _show(context, rows, lambda: _print_dead_letters(context, rows))


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
    context = _context(ctx, as_json)
    try:
        context.operations.require_tenant(tenant)
        rows = context.operations.dead_letters(tenant, event_id=event_id, include_resolved=True)
        if not rows:
            raise OperationRefusedError(f"no dead letter for event {event_id} of tenant {tenant!r}")
    except OperationRefusedError as exc:
        _refuse(context, exc)
    _show(context, rows, lambda: _print_records(context, rows))


def _print_records(context: CliContext, rows: Sequence[Any]) -> None:
    """Each dataclass row as a two-column table of its fields, nothing cut."""
    for row in rows:
        table = Table("field", "value", show_header=False)
        for name, value in asdict(row).items():
            table.add_row(name, "-" if value is None else str(value))
        context.out.print(table)


def _day(value: str) -> datetime:
    """``YYYY-MM-DD`` as midnight UTC; anything else is a usage error (exit 2), never a traceback."""
    try:
        return datetime.strptime(value, "%Y-%m-%d").replace(tzinfo=UTC)
    except ValueError:
        raise typer.BadParameter(f"{value!r} is not a day: give it as YYYY-MM-DD", param_hint="--day") from None


@dead_letters_app.command("poison")
def poison(
    ctx: typer.Context,
    day: Annotated[str | None, typer.Option(help="YYYY-MM-DD, default today")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Poison pills: messages that were not events at all (kept under a global partition per day)."""
    context = _context(ctx, as_json)
    moment = _day(day) if day else None
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

    _show(context, pills, human)


@app.command()
def catalog(ctx: typer.Context, as_json: JsonFlag = False) -> None:
    """Every event type, its owner and producers, and every subscription with its lane and glob; then the
    catalog's contract problems (exit 1 when there are any). Works offline: without --stack, a variable the
    catalog reads and does not find gets a placeholder. With --json: the catalog's document and "problems"."""
    context = _context(ctx, as_json)
    built = context.catalog()
    document, problems = built.document(), built.problems()

    def human() -> None:
        types = Table("event type", "owner", "producers", title="event types")
        for entry in document["event_types"]:
            types.add_row(entry["type"], entry["owner"], ", ".join(entry["producers"]))
        subs = Table("subscription", "glob", "lane", "dispatcher", title="subscriptions")
        for entry in document["subscriptions"]:
            subs.add_row(entry["name"], entry["glob"], entry["lane"], entry["dispatcher"])
        context.out.print(types, subs)
        for problem in problems:
            context.out.print(f"[red]problem:[/] {escape(problem)}")

    _show(context, {**document, "problems": problems}, human)
    if problems:
        raise typer.Exit(code=1)


# -- repairing --------------------------------------------------------------------------------------


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
    context = _context(ctx, as_json)
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
        _refuse(context, exc)
    table = Table("tenant", "event", "seq", "subscription", "claim", title="replay")
    for item in plan:
        table.add_row(item.tenant, item.event_id, str(item.event_seq), item.subscription, str(item.claim_status))
    if dry_run:
        _show(context, {"dry_run": True, "plan": plan, "result": None}, lambda: context.out.print(table))
        return
    # The plan is what the question is about: shown where the person answering it looks.
    (context.err if context.json else context.out).print(table)
    _confirm(yes, f"clear {len(plan)} claims and re-send their events?")
    with _progress(context, "replaying", len(plan)) as report_progress:
        result = context.operations.replay(plan, on_progress=report_progress)
    summary = f"replayed: cleared {len(result.cleared)} claims, re-sent {len(result.republished)} events"
    _show(context, {"dry_run": False, "plan": plan, "result": result}, lambda: context.out.print(summary))


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
    context = _context(ctx, as_json)
    decided_by = by or getpass.getuser()
    _confirm(yes, f"skip seq {seq} of {tenant} for {subscription}? It will never run there.")
    try:
        result = context.operations.skip(tenant, subscription, seq, by=decided_by, reason=reason)
    except OperationRefusedError as exc:
        _refuse(context, exc)
    woke = f"; sent seq {result.woke_seq} back to the queue" if result.woke_seq is not None else ""
    done = "was already skipped" if result.already else f"skipped (by {decided_by})"
    _show(
        context, result.as_dict(), lambda: context.out.print(f"seq {seq} of {tenant} for {subscription} {done}{woke}")
    )


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
    context = _context(ctx, as_json)
    try:
        context.operations.redrive_route(dlq)
    except OperationRefusedError as exc:
        _refuse(context, exc)
    depth = context.operations.queue_depths()[dlq]
    if depth.visible + depth.in_flight == 0:
        _refuse(context, OperationRefusedError(f"{dlq} is empty: nothing to redrive"))
    if depth.visible == 0:
        _refuse(
            context,
            OperationRefusedError(
                f"{dlq}'s {depth.in_flight} messages are in flight (an interrupted redrive?); they become "
                "visible again within a minute: run this again then"
            ),
        )
    _confirm(yes, f"redrive {depth.visible} messages from {dlq}?")
    try:
        with _progress(context, f"redriving {dlq}", depth.visible) as report_progress:
            moved = itertools.count(1)
            result = context.operations.redrive(
                dlq,
                max_messages=max_messages,
                method=method.value,
                on_message=lambda _id: report_progress(f"redriving {dlq}", next(moved), depth.visible),
            )
    except (OperationRefusedError, OutboxError) as exc:
        _refuse(context, exc)
    summary = (
        f"redrive ({result.method}, {result.status}): moved {result.moved} messages, {result.remaining} left in {dlq}"
    )
    _show(context, result, lambda: context.out.print(summary, highlight=False))


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
    context = _context(ctx, as_json)
    moment = parse_moment(since, context.operations.now())
    scope = f"since {moment.isoformat()}" if moment else f"of {subscription} above its watermark"
    if not dry_run and (moment or subscription):  # without either, the operations refuse: nothing to confirm
        _confirm(yes, f"re-publish unhandled events {scope}?")
    try:
        with _progress(context, "reconciling") as report_progress:
            result = context.operations.reconcile(
                moment, tenant=tenant, subscription=subscription, dry_run=dry_run, on_progress=report_progress
            )
    except OperationRefusedError as exc:
        _refuse(context, exc)

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

    _show(context, {"dry_run": dry_run, **asdict(result)}, human)


def run(argv: Sequence[str] | None = None) -> None:
    """The ``outbox`` console script. What AWS or the network refused is one line and exit code 2, never a
    botocore traceback; nothing was changed by the call that failed. With ``--json``, stdout holds one JSON
    document whatever happens: the result, or ``error_document`` for a usage error or a refusal."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        code = app(args=args, prog_name="outbox", standalone_mode=False)
    except typer.TyperException as exc:  # a usage error: its own message, then the document
        usage: Any = exc  # typer's (vendored) click ClickException, whose type typer does not export
        usage.show()
        _fail(args, "usage", usage.format_message(), usage.exit_code)
    except typer.Abort:
        _fail(args, "aborted", "nothing was changed", 1, prefix="aborted")
    except (BotoCoreError, ClientError) as exc:
        _fail(args, "aws", explain_aws_error(exc), 2, prefix="error")
    except OutboxError as exc:  # refused before anything changed (a stack that is not a pipeline's, say)
        _fail(args, "refused", str(exc), 2, prefix="refused")
    raise SystemExit(code if isinstance(code, int) else 0)


def _fail(args: Sequence[str], kind: str, message: str, code: int, prefix: str | None = None) -> NoReturn:
    if prefix:
        Console(stderr=True, soft_wrap=True).print(f"[bold red]{prefix}:[/] {message}", highlight=False)
    if "--json" in args:
        print(json.dumps(error_document(kind, message, code)))
    raise SystemExit(code) from None


def explain_aws_error(exc: BotoCoreError | ClientError) -> str:
    """What went wrong, and what to do about it, in one line."""
    if isinstance(exc, NoRegionError):
        return "no AWS region: pass --region, or set AWS_REGION (or use a --profile that has one)"
    if isinstance(exc, NoCredentialsError | PartialCredentialsError):
        return "no AWS credentials: pass --profile, or set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
    if isinstance(exc, ProfileNotFound):
        return f"{exc}: check --profile against ~/.aws/config"
    if isinstance(exc, EndpointConnectionError):
        return (
            f"cannot reach {exc.kwargs.get('endpoint_url', 'the endpoint')}: for --local, start the local runtime "
            "(make demo ARGS='--serve 4566'); a stopped demo leaves a stale .local/topology.json behind"
        )
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        code, message = error.get("Code", "?"), error.get("Message", "")
        operation = exc.operation_name
        if code == "ValidationError" and "does not exist" in message:
            return f"{message}: check --stack and --region"
        if "AccessDenied" in code or code in ("UnauthorizedOperation", "UnrecognizedClientException"):
            return f"access denied to {operation}: {message} (use credentials that may operate the stack)"
        return f"AWS refused {operation}: {code}: {message}"
    return str(exc)


if __name__ == "__main__":
    run()
