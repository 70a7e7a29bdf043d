"""A small evaluator of CloudWatch metric math alarms, to ask a synthesized alarm "would this fire?" on datapoints
a test writes, one a minute.

Limited on purpose, like ``policy_evaluation``: what it does not model it refuses (``NotModelledError``), so a
test cannot pass because an unfamiliar part of an expression was ignored. What it models (docs/aws-behaviour.md
R9.6, R9.8):

- Expressions of metric ids (a lower-case letter first), ``+``, ``-``, parentheses and ``DIFF(...)``. Between
  two series, ``+`` and ``-`` give a datapoint where either has one, the other's missing value counted as 0.
  ``DIFF`` gives each datapoint minus the series' preceding one; its first datapoint has none, so no output.
- An alarm on one metric, or whose ``Metrics`` are ``MetricStat`` queries and one expression with ``ReturnData``,
  each metric read from the datapoints the test gives for its name; ``GreaterThanThreshold``;
  ``DatapointsToAlarm`` of ``EvaluationPeriods`` datapoints. CloudWatch reads a range longer than the evaluation
  periods, and computes the expression on what it read: a ``DIFF`` whose preceding datapoint lies before the
  range has none. When the range holds at least ``EvaluationPeriods`` datapoints, the most recent of them decide
  and missing ones are not filled; otherwise ``TreatMissingData`` (``notBreaching`` or ``breaching``) fills the
  gaps. The range's length is not documented: a test names it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from itertools import pairwise
from typing import Any, Final

# Minute -> value: one datapoint a period.
Series = dict[int, float]

TOKEN: Final = re.compile(r"\s*(?:(?P<name>[A-Za-z_][A-Za-z0-9_]*)|(?P<symbol>[-+()]))")
FUNCTIONS: Final = {"DIFF"}


class NotModelledError(ValueError):
    """A part of an expression or alarm this evaluator does not model: extend it (carefully), do not skip it."""


def evaluate(expression: str, series: Mapping[str, Series]) -> Series:
    """The series ``expression`` gives, the metrics it names taken from ``series`` (by id)."""
    tokens = _tokens(expression)
    result, rest = _sum(tokens, series)
    if rest:
        raise NotModelledError(f"{expression!r}: unexpected {rest[0]!r}")
    return result


def alarm_state(alarm: Mapping[str, Any], samples: Mapping[str, Series], at: int, *, evaluation_range: int) -> str:
    """``"ALARM"`` or ``"OK"``: what ``alarm`` (a template's AWS::CloudWatch::Alarm properties: one metric, or
    metric math) decides at minute ``at``, each metric it reads taken from ``samples`` by metric name, over the
    ``evaluation_range`` minutes up to ``at``: all it reads, its expression's input included."""
    if alarm.get("ComparisonOperator") != "GreaterThanThreshold":
        raise NotModelledError(f"ComparisonOperator {alarm.get('ComparisonOperator')!r}")

    def read(metric_name: str) -> Series:
        return {
            minute: value
            for minute, value in samples.get(metric_name, {}).items()
            if at - evaluation_range < minute <= at
        }

    if "MetricName" in alarm:
        values = read(alarm["MetricName"])
    else:
        returning = [query for query in alarm["Metrics"] if query.get("ReturnData", True)]
        if len(returning) != 1:
            raise NotModelledError(f"{len(returning)} queries with ReturnData (an alarm has one)")
        [returned] = returning
        by_id: dict[str, Series] = {}
        for query in alarm["Metrics"]:
            if "MetricStat" in query:
                by_id[query["Id"]] = read(query["MetricStat"]["Metric"]["MetricName"])
            elif query is not returned:
                raise NotModelledError(f"an intermediate expression {query['Id']}")
        if "Expression" not in returned:
            raise NotModelledError("an alarm that returns a metric, not an expression")
        values = evaluate(returned["Expression"], by_id)
    periods, to_alarm = int(alarm["EvaluationPeriods"]), int(alarm.get("DatapointsToAlarm", alarm["EvaluationPeriods"]))
    window = [values[minute] for minute in sorted(values)]
    threshold = float(alarm["Threshold"])
    if len(window) >= periods:
        breaching = sum(value > threshold for value in window[-periods:])
    else:
        missing = alarm.get("TreatMissingData", "missing")
        if missing not in ("notBreaching", "breaching"):
            raise NotModelledError(f"TreatMissingData {missing!r}")
        filled = periods - len(window) if missing == "breaching" else 0
        breaching = sum(value > threshold for value in window) + filled
    return "ALARM" if breaching >= to_alarm else "OK"


def _tokens(expression: str) -> list[str]:
    tokens, position = [], 0
    while position < len(expression.rstrip()):
        match = TOKEN.match(expression, position)
        if match is None:
            raise NotModelledError(f"{expression!r} at {position}")
        tokens.append(match.group("name") or match.group("symbol"))
        position = match.end()
    return tokens


def _sum(tokens: list[str], series: Mapping[str, Series]) -> tuple[Series, list[str]]:
    result, rest = _term(tokens, series)
    while rest and rest[0] in "+-":
        operator, (right, rest) = rest[0], _term(rest[1:], series)
        sign = 1 if operator == "+" else -1
        result = {m: result.get(m, 0.0) + sign * right.get(m, 0.0) for m in sorted(set(result) | set(right))}
    return result, rest


def _term(tokens: list[str], series: Mapping[str, Series]) -> tuple[Series, list[str]]:
    if not tokens:
        raise NotModelledError("an expression that ends early")
    head, rest = tokens[0], tokens[1:]
    if head == "(":
        inner, rest = _sum(rest, series)
        return inner, _closed(rest)
    if head in FUNCTIONS:
        if not rest or rest[0] != "(":
            raise NotModelledError(f"{head} without its argument")
        argument, rest = _sum(rest[1:], series)
        return _diff(argument), _closed(rest)
    if head[0].isupper() or head in "+-)":
        raise NotModelledError(f"{head!r}")
    if head not in series:
        raise NotModelledError(f"the metric id {head}, which the alarm does not query")
    return dict(series[head]), rest


def _closed(rest: list[str]) -> list[str]:
    if not rest or rest[0] != ")":
        raise NotModelledError("an unclosed parenthesis")
    return rest[1:]


def _diff(series: Series) -> Series:
    minutes = sorted(series)
    return {later: series[later] - series[earlier] for earlier, later in pairwise(minutes)}
