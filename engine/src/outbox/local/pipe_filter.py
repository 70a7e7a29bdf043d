"""EventBridge Pipes filter criteria: the operators Pipes supports, and a loud refusal of the rest.

A generic event-pattern matcher would accept patterns that Pipes refuses at creation (``wildcard``,
``anything-but`` combined with ``prefix`` and friends, docs/aws-behaviour.md R3.2), so this one is written
to the Pipes column of the operator table and rejects everything else when it compiles.

Matching follows R3.3: exact characters with no case folding, numbers equal only when written the
same way (``300`` is not ``300.0``), numeric comparisons only on JSON numbers (so never on a DynamoDB
``N``, which is a string), every field a pattern names must be present, ``exists`` only on leaves.

Example
-------
>>> matcher = compile_filter_criteria(['{"eventName": ["INSERT"]}'])
>>> matcher.matches({"eventName": "INSERT"}), matcher.matches({"eventName": "MODIFY"})
(True, False)
"""

from __future__ import annotations

import json
import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

__all__ = ["Matcher", "UnsupportedFilterError", "compile_filter_criteria"]

MAX_FILTERS: Final = 5  # CloudFormation FilterCriteria.Filters (R3.1)
MAX_PATTERN_LENGTH: Final = 4096  # each Pattern (R3.1)
SEMANTICS: Final = "docs/aws-behaviour.md R3.2"

# anything-but takes these as an object in the event-bus matcher; Pipes supports none of them (R3.2).
_ANYTHING_BUT_COMBINATIONS: Final = ("prefix", "suffix", "equals-ignore-case", "wildcard")
_NUMERIC_OPERATORS: Final[dict[str, Callable[[Any, Any], bool]]] = {
    "<": operator.lt,
    "<=": operator.le,
    "=": operator.eq,
    ">=": operator.ge,
    ">": operator.gt,
}


class UnsupportedFilterError(ValueError):
    """A filter pattern that EventBridge Pipes refuses when the pipe is created (R3.1, R3.2)."""


@dataclass(frozen=True)
class _PatternNumber:
    """A number as written in a pattern: equality compares the text, comparisons the value (R3.3)."""

    text: str

    @property
    def value(self) -> float:
        return float(self.text)


LeafTest = Callable[[Any], bool]
FieldRule = Callable[[Mapping[str, Any]], bool]


@dataclass(frozen=True)
class _ValueRule:
    """One entry of a pattern's value list.

    ``test`` sees each leaf value of the field; ``without_leaf`` is the answer when the field holds no
    leaf (absent, or an object): only ``exists: false`` says yes there (R3.3, exists works on leaves).
    """

    test: LeafTest
    without_leaf: bool = False


@dataclass(frozen=True)
class Matcher:
    """Compiled filter criteria: an event passes if any pattern matches; no pattern lets all pass."""

    patterns: tuple[FieldRule, ...]

    def matches(self, event: Mapping[str, Any]) -> bool:
        return not self.patterns or any(pattern(event) for pattern in self.patterns)

    def __call__(self, event: Mapping[str, Any]) -> bool:
        return self.matches(event)


def compile_filter_criteria(patterns: Sequence[str]) -> Matcher:
    """Compile the ``Pattern`` strings of a pipe's ``FilterCriteria``; raise ``UnsupportedFilterError``."""
    if len(patterns) > MAX_FILTERS:
        raise UnsupportedFilterError(
            f"{len(patterns)} filters; a pipe takes at most {MAX_FILTERS} (docs/aws-behaviour.md R3.1)"
        )
    return Matcher(tuple(_compile_pattern_text(text) for text in patterns))


def _compile_pattern_text(text: str) -> FieldRule:
    if len(text) > MAX_PATTERN_LENGTH:
        raise UnsupportedFilterError(
            f"filter pattern longer than {MAX_PATTERN_LENGTH} characters (docs/aws-behaviour.md R3.1)"
        )
    try:
        pattern = json.loads(
            text, parse_int=_PatternNumber, parse_float=_PatternNumber, parse_constant=_reject_constant
        )
    except json.JSONDecodeError as exc:
        raise UnsupportedFilterError(
            f"filter pattern is not JSON ({exc}); Pipes refuses it at creation (docs/aws-behaviour.md R3.1, R3.2)"
        ) from exc
    if not isinstance(pattern, dict):
        raise UnsupportedFilterError(f"a filter pattern must be a JSON object, not {text!r} ({SEMANTICS})")
    return _compile_object(pattern, "")


def _reject_constant(name: str) -> Any:
    raise UnsupportedFilterError(f"{name} is not a JSON number; filter patterns are JSON ({SEMANTICS})")


def _compile_object(pattern: Mapping[str, Any], path: str) -> FieldRule:
    rules = [_compile_field(name, value, path) for name, value in pattern.items()]

    def match_all(event: Mapping[str, Any]) -> bool:
        return all(rule(event) for rule in rules)

    return match_all


def _compile_field(name: str, value: Any, parent_path: str) -> FieldRule:
    if name == "$or":
        return _compile_or(value, parent_path)
    path = _join(parent_path, name)
    if isinstance(value, dict):
        return _nested_rule(name, _compile_object(value, path))
    if isinstance(value, list):
        if not value:
            raise UnsupportedFilterError(f"{path}: an empty value list matches nothing ({SEMANTICS})")
        return _leaf_rule(name, [_compile_value(entry, path) for entry in value])
    raise UnsupportedFilterError(f"{path}: a pattern value must be a list or an object, not {value!r} ({SEMANTICS})")


def _compile_or(value: Any, path: str) -> FieldRule:
    """``$or`` sits among the fields it joins: each option is a pattern at the same level."""
    if not isinstance(value, list) or not value or not all(isinstance(option, dict) for option in value):
        raise UnsupportedFilterError(f"{_join(path, '$or')}: '$or' takes a list of pattern objects ({SEMANTICS})")
    options = [_compile_object(option, path) for option in value]

    def match_any(event: Mapping[str, Any]) -> bool:
        return any(option(event) for option in options)

    return match_any


def _nested_rule(name: str, inner: FieldRule) -> FieldRule:
    def match_nested(event: Mapping[str, Any]) -> bool:
        value = event.get(name)
        if isinstance(value, Mapping):
            return inner(value)
        if isinstance(value, list) and any(isinstance(item, Mapping) for item in value):
            # An array of objects matches if one element matches the whole sub-pattern.
            return any(inner(item) for item in value if isinstance(item, Mapping))
        # No object here: only a sub-pattern of ``exists: false`` fields can still match.
        return inner({})

    return match_nested


def _leaf_rule(name: str, value_rules: list[_ValueRule]) -> FieldRule:
    def match_leaf(event: Mapping[str, Any]) -> bool:
        leaves = _leaves(event[name]) if name in event else []
        if not leaves:
            return any(rule.without_leaf for rule in value_rules)
        # An array in the event matches if any of its elements does.
        return any(rule.test(leaf) for rule in value_rules for leaf in leaves)

    return match_leaf


def _leaves(value: Any) -> list[Any]:
    items = value if isinstance(value, list) else [value]
    return [item for item in items if not isinstance(item, Mapping | list)]


def _compile_value(entry: Any, path: str) -> _ValueRule:
    if isinstance(entry, dict):
        return _compile_operator(entry, path)
    if entry is None or isinstance(entry, str | bool | _PatternNumber):
        return _ValueRule(_equals(entry))
    raise UnsupportedFilterError(f"{path}: {entry!r} is neither a value nor an operator ({SEMANTICS})")


def _compile_operator(entry: Mapping[str, Any], path: str) -> _ValueRule:
    if len(entry) != 1:
        raise UnsupportedFilterError(f"{path}: an operator object holds exactly one operator, got {list(entry)}")
    [(name, argument)] = entry.items()
    compilers: dict[str, Callable[[Any, str], _ValueRule]] = {
        "prefix": _compile_prefix,
        "suffix": _compile_suffix,
        "equals-ignore-case": _compile_equals_ignore_case,
        "anything-but": _compile_anything_but,
        "exists": _compile_exists,
        "numeric": _compile_numeric,
    }
    if name not in compilers:
        raise _unsupported(name, path)
    return compilers[name](argument, path)


def _unsupported(name: str, path: str, hint: str = "") -> UnsupportedFilterError:
    return UnsupportedFilterError(
        f"filter operator {name!r} at {path or '<root>'} is not supported by EventBridge Pipes ({SEMANTICS}){hint}"
    )


def _compile_prefix(argument: Any, path: str) -> _ValueRule:
    text, fold = _affix_argument("prefix", argument, path)
    if fold:
        return _ValueRule(lambda value: isinstance(value, str) and value.lower().startswith(text))
    return _ValueRule(lambda value: isinstance(value, str) and value.startswith(text))


def _compile_suffix(argument: Any, path: str) -> _ValueRule:
    text, fold = _affix_argument("suffix", argument, path)
    if fold:
        return _ValueRule(lambda value: isinstance(value, str) and value.lower().endswith(text))
    return _ValueRule(lambda value: isinstance(value, str) and value.endswith(text))


def _affix_argument(name: str, argument: Any, path: str) -> tuple[str, bool]:
    """A prefix/suffix string, or ``{"equals-ignore-case": "..."}`` (both supported, R3.2)."""
    if isinstance(argument, str):
        return argument, False
    if isinstance(argument, dict) and list(argument) == ["equals-ignore-case"]:
        folded = argument["equals-ignore-case"]
        if isinstance(folded, str):
            return folded.lower(), True
    if isinstance(argument, dict) and argument:
        raise _unsupported(f"{name} + {next(iter(argument))}", path)
    raise UnsupportedFilterError(f"{path}: {name!r} takes a string or {{'equals-ignore-case': string}}")


def _compile_equals_ignore_case(argument: Any, path: str) -> _ValueRule:
    if not isinstance(argument, str):
        raise UnsupportedFilterError(f"{path}: 'equals-ignore-case' takes a string, not {argument!r}")
    folded = argument.lower()
    return _ValueRule(lambda value: isinstance(value, str) and value.lower() == folded)


def _compile_anything_but(argument: Any, path: str) -> _ValueRule:
    if isinstance(argument, dict):
        combined = next(iter(argument), "")
        if combined in _ANYTHING_BUT_COMBINATIONS:
            raise _unsupported(
                f"anything-but + {combined}", path, "; use a plain anything-but list or filter in the consumer"
            )
        raise _unsupported(f"anything-but + {combined}", path)
    excluded = argument if isinstance(argument, list) else [argument]
    if not excluded or not all(isinstance(item, str | _PatternNumber) for item in excluded):
        raise UnsupportedFilterError(f"{path}: 'anything-but' takes a string, a number or a list of them")
    tests = [_equals(item) for item in excluded]
    # Only a present leaf can be "anything but": a missing field never matches (R3.3).
    return _ValueRule(lambda value: not any(test(value) for test in tests))


def _compile_exists(argument: Any, path: str) -> _ValueRule:
    if not isinstance(argument, bool):
        raise UnsupportedFilterError(f"{path}: 'exists' takes true or false, not {argument!r}")
    return _ValueRule(lambda _value: argument, without_leaf=not argument)


def _compile_numeric(argument: Any, path: str) -> _ValueRule:
    if not isinstance(argument, list) or not argument or len(argument) % 2 or len(argument) > 4:
        raise UnsupportedFilterError(f"{path}: 'numeric' takes one or two (operator, number) pairs")
    bounds: list[tuple[Callable[[Any, Any], bool], float]] = []
    for symbol, bound in zip(argument[::2], argument[1::2], strict=True):
        if symbol not in _NUMERIC_OPERATORS or not isinstance(bound, _PatternNumber):
            raise UnsupportedFilterError(f"{path}: 'numeric' pair ({symbol!r}, {bound!r}) is not (operator, number)")
        bounds.append((_NUMERIC_OPERATORS[symbol], bound.value))
    # Only JSON numbers: a DynamoDB N is a string, so numeric rules never match it (R3.3).
    return _ValueRule(lambda value: _is_number(value) and all(compare(value, limit) for compare, limit in bounds))


def _equals(expected: Any) -> LeafTest:
    if isinstance(expected, _PatternNumber):
        return lambda value: _is_number(value) and _number_text(value) == expected.text
    if expected is None:
        return lambda value: value is None
    if isinstance(expected, bool):
        return lambda value: isinstance(value, bool) and value is expected
    return lambda value: isinstance(value, str) and value == expected


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _number_text(value: Any) -> str:
    """The JSON text of an event number: equality compares representations, not values (R3.3)."""
    return json.dumps(value)


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name
