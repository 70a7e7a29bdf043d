"""What a failure may say in logs and dead-letter rows: by default its type and where it was raised, never
its text, which can hold the personal data a handler was working on (a pydantic error repeats the input:
``buyer_email``, ``shipping_address``; the engine's own InvalidEventError repeats the offending value). A
validation error keeps each field's location and error type; a ``TerminalError`` keeps its message, which
the handler's author wrote for the operator (put no personal data in it), as does a contract violation.
``ErrorDetail.FULL`` (the pipeline's ``error_detail`` prop) keeps every message, for stacks that hold no
real people's data."""

from __future__ import annotations

import traceback
from enum import StrEnum
from pathlib import Path
from typing import Final

from botocore.exceptions import ClientError
from pydantic import ValidationError

from outbox.exceptions import ContractViolationError, TerminalError

# Messages meant for the operator and free of input: the handler author's TerminalError, and the engine's
# contract check, which names the subscription and the type it returned, never the value.
WRITTEN_FOR_OPERATORS: Final = (TerminalError, ContractViolationError)
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
    fields = [f"{'.'.join(str(part) for part in error['loc']) or '(root)'}: {error['type']}" for error in errors]
    shown = "; ".join(fields[:MAX_FIELDS])
    return f"{len(fields)} invalid: {shown}" + ("; ..." if len(fields) > MAX_FIELDS else "")


def raised_at(exc: BaseException) -> str:
    """``file.py:line in function`` of the frame that raised ``exc`` (its innermost)."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return "(no traceback)"
    frame = frames[-1]
    return f"{Path(frame.filename).name}:{frame.lineno} in {frame.name}"
