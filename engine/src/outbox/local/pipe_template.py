"""EventBridge Pipes input templates and dynamic target parameters, rendered as the project decided.

AWS documents three template forms (docs/aws-behaviour.md R1.1): free text, a single JSON path, and
JSON with inline paths. Where the documentation is silent this module takes the project's decisions
("Decisions where the sources disagree" in docs/aws-behaviour.md):

- a template that is one placeholder renders the value's JSON text (an object becomes its JSON
  object text), which is what the durable consumer parses;
- a placeholder that does not resolve raises ``UnresolvedPathError``; AWS silently delivers nothing
  (R1.5, the seed), and the pipe emulator turns the error into a logged target failure.

Example
-------
>>> event = {"dynamodb": {"NewImage": {"tenant": {"S": "acme"}}}}
>>> render_input_template('{"t": "<$.dynamodb.NewImage.tenant.S>"}', event)
'{"t": "acme"}'
>>> resolve_dynamic_parameter("$.dynamodb.NewImage.tenant.S", event)
'acme'
"""

from __future__ import annotations

import functools
import json
import re
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

__all__ = [
    "InputTemplateError",
    "InvalidDynamicValueError",
    "PipeVariables",
    "UnresolvedPathError",
    "UnsupportedPathError",
    "iso8601",
    "render_input_template",
    "resolve_dynamic_parameter",
    "resolve_path",
]

# A placeholder is a JSON path or a reserved variable; any other angle bracket is literal text.
_PLACEHOLDER: Final = re.compile(r"<(\$[^<>\s]*|aws\.pipes\.[A-Za-z0-9.\-]+)>")
# The documented path subset (R1.2): dot names of alphanumerics, dashes and underscores; [n] indices.
_PATH_STEP: Final = re.compile(r"\.([A-Za-z0-9_\-]+)|\[(\d+)\]")


class InputTemplateError(ValueError):
    """The input template or a dynamic parameter cannot be rendered for this event."""


def __getattr__(name: str) -> Any:
    """``TemplateError``, this error's name until 0.7 (the stack template loader's error has it too)."""
    if name == "TemplateError":
        warnings.warn(
            "outbox.local.pipe_template.TemplateError is InputTemplateError now (the old name goes in 0.9.0)",
            DeprecationWarning,
            stacklevel=2,
        )
        return InputTemplateError
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class UnresolvedPathError(InputTemplateError, LookupError):
    """A JSON path that names nothing in the event (AWS would deliver nothing, silently: R1.5, R2.3)."""


class UnsupportedPathError(UnresolvedPathError):
    """A JSON path outside the documented subset (R1.2); Pipes does not validate it at creation either."""


class InvalidDynamicValueError(InputTemplateError):
    """A dynamic target parameter whose path resolves to an object, an array or null, not a string."""


@dataclass(frozen=True)
class PipeVariables:
    """The values behind the reserved ``<aws.pipes.*>`` variables for one event (R1.1)."""

    pipe_name: str
    pipe_arn: str
    source_arn: str
    target_arn: str
    ingestion_time: datetime
    enrichment_arn: str = ""  # this pipe has no enrichment

    def scalars(self) -> dict[str, str]:
        return {
            "aws.pipes.pipe-name": self.pipe_name,
            "aws.pipes.pipe-arn": self.pipe_arn,
            "aws.pipes.source-arn": self.source_arn,
            "aws.pipes.target-arn": self.target_arn,
            "aws.pipes.enrichment-arn": self.enrichment_arn,
            "aws.pipes.event.ingestion-time": iso8601(self.ingestion_time),
        }


def resolve_path(path: str, event: Any) -> Any:
    """The value at ``path`` (``$.a.b``, ``$.a[0].b-c``) in ``event``; raise ``UnresolvedPathError``."""
    value = event
    walked = "$"
    for step in _parse_path(path):
        if isinstance(step, int):
            if not isinstance(value, list) or step >= len(value):
                raise UnresolvedPathError(f"JSON path {path!r} does not resolve: {walked} has no element [{step}]")
            value = value[step]
            walked += f"[{step}]"
        else:
            if not isinstance(value, Mapping) or step not in value:
                raise UnresolvedPathError(f"JSON path {path!r} does not resolve: {walked} has no field {step!r}")
            value = value[step]
            walked += f".{step}"
    return value


@functools.lru_cache(maxsize=256)
def _parse_path(path: str) -> tuple[str | int, ...]:
    if not path.startswith("$"):
        raise UnsupportedPathError(f"JSON path {path!r} must start with '$' (docs/aws-behaviour.md R1.2)")
    steps: list[str | int] = []
    position = 1
    while position < len(path):
        match = _PATH_STEP.match(path, position)
        if match is None:
            raise UnsupportedPathError(
                f"JSON path {path!r}: {path[position:]!r} is outside the supported syntax (dot names of "
                "alphanumerics, '-' and '_', and [n] indices; docs/aws-behaviour.md R1.2)"
            )
        name, index = match.groups()
        steps.append(name if name is not None else int(index))
        position = match.end()
    return tuple(steps)


def resolve_dynamic_parameter(value: str, event: Mapping[str, Any]) -> str:
    """A target parameter (MessageGroupId, MessageDeduplicationId): a literal, or a whole ``$.`` path.

    The path is resolved against the original stream record, never the rendered template (R2.2). A
    value that is only partly a path (``"t-$.x"``) is a literal, as the whole value must be the path.
    """
    if not value.startswith("$."):
        return value
    resolved = resolve_path(value, event)
    if isinstance(resolved, str):
        return resolved
    if isinstance(resolved, int | float):
        return _json_text(resolved)
    # An object here is usually a path one level short (".tenant" instead of ".tenant.S").
    raise InvalidDynamicValueError(
        f"dynamic parameter {value!r} resolves to {_json_text(resolved)[:80]}, not a string "
        "(docs/aws-behaviour.md R2.2)"
    )


def render_input_template(
    template: str | None, event: Mapping[str, Any], variables: PipeVariables | None = None
) -> str:
    """The target's input for ``event``: the event as JSON without a template, else the template filled in.

    Raises ``UnresolvedPathError`` for a placeholder that names nothing (no silent default).
    """
    if not template:  # an empty string removes the template (R1.1)
        return _json_text(event)
    placeholders = list(_PLACEHOLDER.finditer(template))
    values = [_lookup(match.group(1), event, variables) for match in placeholders]
    if len(placeholders) == 1 and placeholders[0].group(0) == template.strip():
        return _whole_template_text(values[0])
    quoted = _inside_json_string(template, placeholders)
    if _is_json_template(template, placeholders, quoted):
        pieces = [_json_piece(value, in_string) for value, in_string in zip(values, quoted, strict=True)]
    else:
        pieces = [_free_text_piece(value) for value in values]
    return _splice(template, placeholders, pieces)


def _lookup(name: str, event: Mapping[str, Any], variables: PipeVariables | None) -> Any:
    if name.startswith("$"):
        return resolve_path(name, event)
    if name == "aws.pipes.event.json":
        return event  # inserted as raw JSON: only usable as a JSON field value (R1.1)
    if name == "aws.pipes.event":
        return _json_text(event)  # the event as text, escaped like any string
    scalars = variables.scalars() if variables is not None else {}
    if name not in scalars:
        known = "" if variables is not None else " (no pipe variables were given)"
        raise UnresolvedPathError(
            f"reserved variable <{name}> is not one Pipes defines{known} (docs/aws-behaviour.md R1.1)"
        )
    return scalars[name]


def _whole_template_text(value: Any) -> str:
    """The project decision for a one-placeholder template (R1.4 is ambiguous): the value's JSON text.

    A string renders as itself, as the free-text form ``<$.path>`` does in the docs (R1.1).
    """
    return value if isinstance(value, str) else _json_text(value)


def _inside_json_string(template: str, placeholders: list[re.Match[str]]) -> list[bool]:
    """For each placeholder, whether it sits inside a quoted JSON string of the template."""
    flags: list[bool] = []
    in_string = escaped = False
    position = 0
    for match in placeholders:
        for character in template[position : match.start()]:
            if escaped:
                escaped = False
            elif character == "\\" and in_string:
                escaped = True
            elif character == '"':
                in_string = not in_string
        flags.append(in_string)
        position = match.end()
    return flags


def _is_json_template(template: str, placeholders: list[re.Match[str]], quoted: list[bool]) -> bool:
    """A template is JSON if it parses once every placeholder stands in for a value of the right kind."""
    stand_ins = ["x" if in_string else "null" for in_string in quoted]
    try:
        json.loads(_splice(template, placeholders, stand_ins))
    except json.JSONDecodeError:
        return False
    return True


def _json_piece(value: Any, in_string: bool) -> str:
    """R1.3: objects and arrays go in raw; strings become JSON strings; inside quotes, escaped text."""
    text = value if isinstance(value, str) else _json_text(value)
    if in_string:
        # Pipes guarantees valid JSON output (R1.3), so quotes and backslashes in the value are escaped.
        return json.dumps(text, ensure_ascii=False)[1:-1]
    return _json_text(value)


def _free_text_piece(value: Any) -> str:
    return value if isinstance(value, str) else _json_text(value)


def _splice(template: str, placeholders: list[re.Match[str]], pieces: list[str]) -> str:
    parts: list[str] = []
    position = 0
    for match, piece in zip(placeholders, pieces, strict=True):
        parts.extend((template[position : match.start()], piece))
        position = match.end()
    parts.append(template[position:])
    return "".join(parts)


def _json_text(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def iso8601(moment: datetime) -> str:
    """UTC with milliseconds, the form of ``<aws.pipes.event.ingestion-time>``."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
