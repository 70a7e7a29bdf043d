"""What every command shares: its output (a table for people, one JSON document with --json, messages on
stderr), its questions, its progress bars, its exit codes, and how a failure is said in one line."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, is_dataclass
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, NoReturn

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
from rich.text import Text

from outbox.cli.context import CliContext, stderr_console
from outbox.ops.context import ProgressCallback

# Every command takes --json after its name too (`outbox status --json`), as well as before it.
JsonFlag = Annotated[bool, typer.Option("--json", help="exactly one JSON document on stdout")]
YesFlag = Annotated[bool, typer.Option("--yes", help="do not ask: go ahead (for scripts)")]


def example(command: str) -> str:
    """A command's --help epilog: one example, printed as written (click rewraps other paragraphs)."""
    return f"\b\nExample:\n  {command}"


def command_context(ctx: typer.Context, as_json: bool = False) -> CliContext:
    context: CliContext = ctx.obj
    context.json = context.json or as_json
    return context


def emit_json(context: CliContext, value: Any) -> None:
    context.out.print_json(json.dumps(value, default=plain))


def plain(item: Any) -> Any:
    return asdict(item) if is_dataclass(item) and not isinstance(item, type) else str(item)


def show(context: CliContext, document: Any, human: Callable[[], None]) -> None:
    """The command's result: ``document`` as JSON with --json, else what ``human`` prints."""
    if context.json:
        emit_json(context, document)
    else:
        human()


def note(context: CliContext, message: str) -> None:
    """A message for the person at the terminal (stderr): never mixed into a table or a JSON document."""
    context.err.print(context.hint(message), highlight=False)


def refuse(context: CliContext, error: Exception) -> NoReturn:
    message = context.hint(str(error))
    context.err.print(f"[bold red]refused:[/] {escape(message)}", highlight=False)
    if context.json:
        emit_json(context, error_document("refused", message))
    raise typer.Exit(code=2)


def error_document(kind: str, message: str, exit_code: int = 2) -> dict[str, Any]:
    """What stdout holds under --json when a command could not run."""
    return {"error": {"kind": kind, "message": message}, "exit_code": exit_code}


def decline(context: CliContext, message: str) -> NoReturn:
    """The operator said no (or nobody could answer): nothing was changed, exit 1."""
    message = context.hint(message)
    context.err.print(f"[bold]declined:[/] {escape(message)}", highlight=False)
    if context.json:
        emit_json(context, error_document("declined", message, 1))
    raise typer.Exit(code=1)


def confirm(context: CliContext, yes: bool, question: str) -> None:
    """Ask on stderr and read the answer from stdin; anything but yes changes nothing. Not ``typer.confirm``:
    click's prompt writes a space to stdout after the question, which breaks --json's one document."""
    if yes:
        return
    context.err.print(f"{question} [y/N]: ", end="", highlight=False, markup=False)
    answer = sys.stdin.readline()
    if not answer:  # end of input: a script or a pipe with nobody to answer
        context.err.print()
        decline(context, "no answer (standard input is closed): nothing was changed; pass --yes to run without asking")
    if answer.strip().lower() not in ("y", "yes"):
        decline(context, "nothing was changed")


@contextmanager
def progress(context: CliContext, description: str, total: int | None = None) -> Iterator[ProgressCallback]:
    """A progress bar on stderr (drawn only on a terminal, gone when done), fed by an action's callback."""
    with Progress(console=context.err, transient=True) as progress:
        task = progress.add_task(description, total=total)

        def report(step: str, done: int, of: int | None) -> None:
            progress.update(task, description=step, completed=done, total=of)

        yield report


def parse_moment(
    value: str | None, now: Callable[[], datetime] | None = None, *, option: str = "--since"
) -> datetime | None:
    """An ISO 8601 time, or a duration back from ``now()`` (the operations' clock, asked only for a duration):
    30m, 24h, 7d. ``option``: the option it was given to, named in the error."""
    if value is None:
        return None
    match = re.fullmatch(r"(\d+)([mhd])", value)
    if match:
        amount, unit = int(match[1]), match[2]
        delta = {"m": timedelta(minutes=amount), "h": timedelta(hours=amount), "d": timedelta(days=amount)}[unit]
        return (now() if now else datetime.now(UTC)) - delta
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise typer.BadParameter(
            f"{value!r} is neither an ISO 8601 time nor a duration like 24h", param_hint=option
        ) from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


# What separates the words of a rendered table: spaces and the box's lines.
BETWEEN_WORDS = re.compile(r"[\s\u2500-\u257f]+")


def print_table(console: Console, *tables: Table) -> None:
    """Each table as it is where rich lays it out with every word whole at the console's width (80 columns when
    not a terminal); else each row as lines of ``column: value``, so no cell is broken in the middle of a word
    (an event id, a subscription's name, a command to paste) nor cut short with an ellipsis."""
    for table in tables:
        with console.capture() as captured:
            console.print(table)
        laid_out = Text.from_ansi(captured.get())
        if _words(table) <= set(BETWEEN_WORDS.split(laid_out.plain)):
            console.print(laid_out, end="", soft_wrap=True)
            continue
        if table.title:
            console.print(table.title, highlight=False)
        headers = [str(column.header) for column in table.columns]
        for row in zip(*(column.cells for column in table.columns), strict=True):
            for header, cell in zip(headers, row, strict=True):
                console.print(f"{escape(header)}:", cell, highlight=False, soft_wrap=True)
            console.print()


def _words(table: Table) -> set[str]:
    """Every word of the table's headers (when shown) and cells, as printed (markup taken out)."""
    headers = [column.header for column in table.columns] if table.show_header else []
    texts = [*headers, *(cell for column in table.columns for cell in column.cells)]
    plain = (text.plain if isinstance(text, Text) else Text.from_markup(str(text)).plain for text in texts)
    return {word for text in plain for word in BETWEEN_WORDS.split(text) if word}


def print_records(context: CliContext, rows: Sequence[Any]) -> None:
    """Each dataclass row as a two-column table of its fields, nothing cut."""
    for row in rows:
        table = Table("field", "value", show_header=False)
        for name, value in asdict(row).items():
            table.add_row(name, "-" if value is None else str(value))
        print_table(context.out, table)


def parse_day(value: str) -> datetime:
    """``YYYY-MM-DD`` as midnight UTC; anything else is a usage error (exit 2), never a traceback."""
    try:
        return datetime.strptime(value, "%Y-%m-%d").replace(tzinfo=UTC)
    except ValueError:
        raise typer.BadParameter(f"{value!r} is not a day: give it as YYYY-MM-DD", param_hint="--day") from None


def fail(args: Sequence[str], kind: str, message: str, code: int, prefix: str | None = None) -> NoReturn:
    if prefix:
        stderr_console().print(f"[bold red]{prefix}:[/] {escape(message)}", highlight=False)
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
            f"cannot reach {exc.kwargs.get('endpoint_url', 'the endpoint')}: for --local, serve your app "
            "(outbox local serve, in its folder); a stopped one leaves a stale .local/topology.json behind"
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
