"""What a failure may say in logs and dead-letter rows: by default its type and where it was raised, never
its text, which can hold the personal data a handler was working on (a pydantic error repeats the input:
``buyer_email``, ``shipping_address``). The engine's own validation errors (an event's payload against its
schema, a delivered row against the envelope) are said with ``validation_summary`` for the same reason. A
validation error keeps each field's location and error type; a ``TerminalError`` keeps its message, which
the handler's author wrote for the operator (put no personal data in it), as does a contract violation.
``ErrorDetail.FULL`` (the pipeline's ``error_detail`` prop) keeps every message, for stacks that hold no
real people's data."""

from __future__ import annotations

import re
import sysconfig
import traceback
from enum import StrEnum
from functools import cache
from pathlib import Path
from typing import Final

from botocore.exceptions import ClientError
from pydantic import ValidationError

from outbox.exceptions import ContractViolationError, TerminalError

# Messages meant for the operator and free of input: the handler author's TerminalError, and the engine's
# contract check, which names the subscription and the type it returned, never the value.
WRITTEN_FOR_OPERATORS: Final = (TerminalError, ContractViolationError)
# What a field name looks like; any other location part is shown as <key> (it came from the input).
FIELD_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
ENGINE_PACKAGE: Final = Path(__file__).resolve().parent
# A validation error lists at most this many fields; the count says how many there were.
MAX_FIELDS: Final = 10


class ErrorDetail(StrEnum):
    REDACTED = "redacted"
    FULL = "full"


def describe_failure(exc: BaseException, detail: ErrorDetail = ErrorDetail.REDACTED) -> str:
    """One line for the log and the dead letter: ``Type: text`` in full, else what carries no input."""
    name = type(exc).__name__
    if detail is ErrorDetail.FULL or isinstance(exc, WRITTEN_FOR_OPERATORS):
        return f"{name}: {exc}"
    if isinstance(exc, ValidationError):
        return f"{name}: {validation_summary(exc)}"
    if isinstance(exc, ClientError):
        code = exc.response.get("Error", {}).get("Code", "?")
        return f"{name} ({code}, {exc.operation_name}) at {raised_at(exc)}"
    return f"{name} at {raised_at(exc)} (text withheld: error_detail=full shows it)"


def validation_summary(exc: ValidationError) -> str:
    """Each failing field's location and error type (``items.0.sku: missing``), never its input or message."""
    errors = exc.errors(include_input=False, include_url=False, include_context=False)
    fields = [
        f"{'.'.join(_location_part(part) for part in error['loc']) or '(root)'}: {error['type']}" for error in errors
    ]
    shown = "; ".join(fields[:MAX_FIELDS])
    return f"{len(fields)} invalid: {shown}" + ("; ..." if len(fields) > MAX_FIELDS else "")


def _location_part(part: object) -> str:
    """A field name or list index as it is; any other key is input (a dict keyed by e-mail address, an
    unexpected key an extra="forbid" model names) and shows as ``<key>``."""
    text = str(part)
    return text if isinstance(part, int) or FIELD_NAME.fullmatch(text) else "<key>"


def raised_at(exc: BaseException) -> str:
    """``file.py:line in function`` where ``exc`` left the application's code: the innermost frame outside the
    standard library and third-party packages (a ``TimeoutError`` is placed at the handler's call, not in
    socket.py), else the innermost frame."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return "(no traceback)"
    own = [frame for frame in frames if _is_application_code(frame.filename)]
    frame = (own or frames)[-1]
    return f"{Path(frame.filename).name}:{frame.lineno} in {frame.name}"


@cache
def library_folders() -> tuple[Path, ...]:
    """Where library code lives: the interpreter's own and its packages', and a Lambda layer's (/opt/python).
    Found at the first failure described, not at import: a cold start that describes none never asks."""
    paths = sysconfig.get_paths()
    return tuple(
        {Path(paths[name]).resolve() for name in ("stdlib", "platstdlib", "purelib", "platlib")} | {Path("/opt/python")}
    )


def _is_application_code(filename: str) -> bool:
    """The engine or the application: not under the interpreter's library folders nor a Lambda layer's, unless
    it is the engine's own package (installed there too)."""
    path = Path(filename).resolve()
    if path.is_relative_to(ENGINE_PACKAGE):
        return True
    return not any(path.is_relative_to(folder) for folder in library_folders())
