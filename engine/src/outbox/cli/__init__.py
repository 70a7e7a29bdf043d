"""``outbox``: the operator's command line. Same code paths against AWS (``--stack``) or the local
runtime (``--local``, in the folder of an app ``outbox local serve`` serves). Tables for people; with ``--json``
(before or after the command's name) stdout holds exactly one JSON document, also when the command
fails; prompts, progress and messages go to stderr. Every command that changes something asks first
unless ``--yes``.

The commands by group: ``reading`` (status and verification), ``dead_work`` (dead letters, poison pills),
``repairs``, ``catalog``, ``local``; each is a thin layer over ``outbox.ops``. ``app`` holds the root options;
``context`` what the commands work on (``CliContext``: the operations and the catalog); ``output`` the tables,
JSON documents, questions and exit codes they share; ``failures`` how a failure is said.
"""

from __future__ import annotations

import io
import sys
from collections.abc import Sequence
from typing import Any

import typer

# Each command module registers its commands on the app when imported.
from outbox.cli import catalog, dead_work, emitting, groups, local, reading, repairs  # noqa: F401
from outbox.cli.app import app
from outbox.cli.context import CliContext
from outbox.cli.failures import describe_failure
from outbox.cli.output import error_document, explain_aws_error, fail, parse_moment
from outbox.local.terminal import terminal_width, wrapped

INTERRUPTED = (
    "interrupted: what ran before it stays done, and a repair run again goes on from there (outbox status shows "
    "the state)"
)

__all__ = ["CliContext", "app", "error_document", "explain_aws_error", "parse_moment", "run"]


def run(argv: Sequence[str] | None = None) -> None:
    """The ``outbox`` console script. What AWS or the network refused is one line and exit code 2, never a
    botocore traceback; nothing was changed by the call that failed. With ``--json``, stdout holds one JSON
    document whatever happens: the result, or ``error_document`` for a usage error or a refusal."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        code = app(args=args, prog_name="outbox", standalone_mode=False)
    except typer.TyperException as exc:  # a usage error: its own message, then the document
        usage: Any = exc  # typer's (vendored) click ClickException, whose type typer does not export
        shown = io.StringIO()
        usage.show(file=shown)
        sys.stderr.write(wrapped(shown.getvalue(), terminal_width()))
        fail(args, "usage", usage.format_message(), usage.exit_code)
    except typer.Abort:  # Ctrl-C: at a question nothing changed; during a repair, what it did stays done
        fail(args, "aborted", INTERRUPTED, 1, prefix="aborted")
    except Exception as exc:
        kind, prefix, message = describe_failure(exc)
        fail(args, kind, message, 2, prefix=prefix)
    raise SystemExit(code if isinstance(code, int) else 0)
