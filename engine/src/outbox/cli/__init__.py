"""``outbox``: the operator's command line. Same code paths against AWS (``--stack``) or the local
runtime (``--local``, while ``make demo ARGS="--serve 4566"`` runs). Tables for people; with ``--json``
(before or after the command's name) stdout holds exactly one JSON document, also when the command
fails; prompts, progress and messages go to stderr. Every command that changes something asks first
unless ``--yes``.

The commands by group: ``reading`` (status and verification), ``dead_work`` (dead letters, poison pills),
``repairs``, ``catalog``, ``local``; each is a thin layer over ``outbox.ops``. ``app`` holds the root options
and ``CliContext``; ``output`` the tables, JSON documents, questions and exit codes they share.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import typer
from botocore.exceptions import BotoCoreError, ClientError

# Each command module registers its commands on the app when imported.
from outbox.cli import catalog, dead_work, local, reading, repairs  # noqa: F401
from outbox.cli.app import CliContext, app
from outbox.cli.output import error_document, explain_aws_error, fail, parse_moment
from outbox.exceptions import OutboxError

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
        usage.show()
        fail(args, "usage", usage.format_message(), usage.exit_code)
    except typer.Abort:
        fail(args, "aborted", "nothing was changed", 1, prefix="aborted")
    except (BotoCoreError, ClientError) as exc:
        fail(args, "aws", explain_aws_error(exc), 2, prefix="error")
    except OutboxError as exc:  # refused before anything changed (a stack that is not a pipeline's, say)
        fail(args, "refused", str(exc), 2, prefix="refused")
    raise SystemExit(code if isinstance(code, int) else 0)
