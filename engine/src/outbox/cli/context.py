"""What every command works on (``CliContext``): the operations, built on first use, and the application's
catalog, found the way the command line says (``--catalog``, ``OUTBOX_CATALOG`` or ``[tool.outbox]``)."""

from __future__ import annotations

import os
import re
import sys
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from outbox.catalog import Catalog
from outbox.exceptions import OutboxError, OutboxValidationError
from outbox.local.terminal import is_terminal, terminal_width, wrapped
from outbox.ops import Operations
from outbox.outputs import application_environment
from outbox.settings import load_catalog

CATALOG_ENV = "OUTBOX_CATALOG"
# A command a message suggests: `outbox` and one of its commands (not the package, outbox.local, or a word).
SUGGESTED = re.compile(
    r"(?<![\w.\-/])outbox "
    r"(status|verify-chain|findings|anchor|dead-letters|replay|skip|redrive|reconcile|catalog|emit)\b"
)

# The variables a catalog listed without a stack may read and not find (each one rebuilds it).
MAX_PLACEHOLDERS = 20


@dataclass
class CliContext:
    """What the commands work on. ``connect`` builds the operations on first use, so commands that need
    no AWS (``catalog``) and every ``--help`` work without credentials or a stack."""

    connect: Callable[[], Operations] | None = None
    json: bool = False
    console: Console | None = None  # stdout: the command's result
    err_console: Console | None = None  # stderr: prompts, progress, messages
    catalog_reference: str | None = None
    # How this command was invoked up to its name (``outbox --local``, ``outbox --stack Shop --region eu-west-1``):
    # every command it suggests is said with the same flags, so it can be pasted as printed.
    invocation: str = "outbox"
    # The served app (``--local``: its .local/topology.json: outputs, catalog), read without connecting.
    served: Callable[[], dict[str, Any]] | None = None
    _operations: Operations | None = None

    @classmethod
    def of(cls, operations: Operations, **options: Any) -> CliContext:
        """A context over ready operations (tests and embedding)."""
        return cls(_operations=operations, **options)

    @property
    def operations(self) -> Operations:
        if self._operations is None:
            if self.connect is None:
                raise typer.BadParameter("nothing to operate on", param_hint="--stack/--local")
            self._operations = self.connect()
        return self._operations

    def now(self) -> datetime:
        """The operations' clock (the local runtime's, against --local)."""
        return self.operations.now()

    def catalog(self) -> Catalog:
        if self._operations is not None:
            return self._operations.catalog
        # No stack: what the catalog's builder reads from the environment may be missing (outbox catalog lists
        # and checks a catalog offline): a placeholder stands in for each variable it reads and does not find.
        # With --local, the served app's topology knows them (and its catalog), and nothing is connected to.
        saved = self.served() if self.served is not None else {}
        reference = required_catalog(self.catalog_reference or saved.get("catalog"))
        return load_application_catalog(reference, saved.get("outputs", {}), placeholders=True)

    def hint(self, text: str) -> str:
        """``text`` with each command it suggests (``outbox replay ...``) said as this one was invoked
        (``outbox --local replay ...``)."""
        if self.invocation == "outbox":
            return text
        return SUGGESTED.sub(lambda match: f"{self.invocation} {match[1]}", text)

    @property
    def out(self) -> Console:
        return self.console or Console()

    @property
    def err(self) -> Console:
        return self.err_console or stderr_console()


def stderr_console() -> Console:
    """Where the person's lines go (stderr): wrapped between words at the terminal's width on a terminal, and not
    at all elsewhere (a log or a pipe, where rich would break them at 80 columns): ``outbox.local.terminal``."""
    return Console(stderr=True, soft_wrap=not is_terminal())


def say(message: str) -> None:
    """A plain line on stderr, wrapped as ``stderr_console`` wraps."""
    typer.echo(wrapped(message, terminal_width()), err=True)


def required_catalog(reference: str | None) -> str:
    reference = reference or _configured_catalog(Path("pyproject.toml"))
    if not reference:
        raise typer.BadParameter(
            f"say which catalog: --catalog package.module:function, {CATALOG_ENV}, or catalog = ... under "
            "[tool.outbox] in ./pyproject.toml",
            param_hint="--catalog",
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
        raise typer.BadParameter(f"{pyproject} is not valid TOML: {exc}", param_hint="--catalog") from exc
    code = settings.get("code")
    if isinstance(code, str) and str(Path(code).resolve()) not in sys.path:
        sys.path.insert(0, str(Path(code).resolve()))
    configured = settings.get("catalog")
    return configured if isinstance(configured, str) else None


def load_application_catalog(reference: str, outputs: dict[str, str], *, placeholders: bool = False) -> Catalog:
    """The application's catalog, built in the environment the pipeline's functions have (the stack's
    ApplicationEnvironment output); a variable already set in this shell wins. ``placeholders``: a variable
    the builder reads with ``os.environ[...]`` and does not find is set to ``placeholder-<NAME>`` (said on
    stderr), for a catalog listed without a stack."""
    try:
        variables = application_environment(outputs)
    except OutboxValidationError as exc:
        raise typer.BadParameter(str(exc), param_hint="--stack") from exc
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
                raise typer.BadParameter(
                    f"the catalog {reference} could not be built: KeyError {exc}", param_hint="--catalog"
                ) from exc
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
        say(f"the catalog was built with placeholders for {', '.join(filled)} (no stack named)")
    return catalog
