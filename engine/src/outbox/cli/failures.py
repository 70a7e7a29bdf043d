"""How a command that failed says so: one line on stderr, one JSON document on stdout with --json, exit 2.
Never a traceback, unless ``OUTBOX_DEBUG=1`` asks for it (a bug report wants one; a tired operator does not)."""

from __future__ import annotations

import os
import traceback
from typing import NoReturn

import typer
from botocore.exceptions import BotoCoreError, ClientError
from rich.markup import escape

from outbox.cli.context import CliContext, stderr_console
from outbox.cli.output import emit_json, error_document, explain_aws_error
from outbox.exceptions import OutboxError

DEBUG_ENV = "OUTBOX_DEBUG"


def report_failure(context: CliContext | None, exc: Exception, *, as_json: bool = False) -> NoReturn:
    """``exc`` escaped a command: what AWS refused, what the engine refused, or something nobody expected."""
    kind, prefix, message = describe_failure(exc)
    message = context.hint(message) if context is not None else message
    err = context.err if context is not None else stderr_console()
    err.print(f"[bold red]{prefix}:[/] {escape(message)}", highlight=False)
    if os.environ.get(DEBUG_ENV):
        err.print(traceback.format_exc(), highlight=False, markup=False)
    if context is not None and context.json:
        emit_json(context, error_document(kind, message, 2))
    elif context is None and as_json:
        print(error_document(kind, message, 2))
    raise typer.Exit(code=2)


def describe_failure(exc: Exception) -> tuple[str, str, str]:
    """The failure's kind (the JSON document's), the word that starts its line, and the line."""
    if isinstance(exc, BotoCoreError | ClientError):
        return "aws", "error", explain_aws_error(exc)
    if isinstance(exc, OutboxError):  # refused before anything changed (a stack that is not a pipeline's, say)
        return "refused", "refused", str(exc)
    what = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return (
        "crash",
        "error",
        f"unexpected {what}. A bug in outbox or in the application's catalog code; what ran before it stays "
        f"done (outbox status shows the state). {DEBUG_ENV}=1 prints the traceback for a report",
    )
