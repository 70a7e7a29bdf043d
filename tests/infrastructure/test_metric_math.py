"""The metric math evaluator's own rules, on hand-written series and alarms (docs/aws-behaviour.md R9.6, R9.8),
and what it refuses."""

from __future__ import annotations

from typing import Any

import pytest

from tests.infrastructure.metric_math import NotModelledError, alarm_state, evaluate


def test_a_sum_counts_a_missing_value_as_zero_where_the_other_series_has_one() -> None:
    assert evaluate("a + b", {"a": {0: 1.0, 1: 2.0}, "b": {1: 3.0, 2: 4.0}}) == {0: 1.0, 1: 5.0, 2: 4.0}
    assert evaluate("a - (b)", {"a": {0: 1.0}, "b": {0: 3.0}}) == {0: -2.0}


def test_diff_is_each_value_minus_the_preceding_one_across_gaps_and_none_for_the_first() -> None:
    assert evaluate("DIFF(a)", {"a": {0: 1.0, 1: 1.0, 4: 3.0, 5: 2.0}}) == {1: 0.0, 4: 2.0, 5: -1.0}
    assert evaluate("DIFF(a + b)", {"a": {0: 1.0, 1: 0.0}, "b": {0: 0.0, 1: 1.0}}) == {1: 0.0}


@pytest.mark.parametrize("expression", ["FILL(a, 0)", "RATE(a)", "a * 2", "SUM(METRICS())", "DIFF(c)", "DIFF(a"])
def test_what_it_does_not_model_it_refuses(expression: str) -> None:
    with pytest.raises(NotModelledError):
        evaluate(expression, {"a": {0: 1.0}})


def _alarm(missing: str = "notBreaching", periods: int = 1) -> dict[str, Any]:
    return {
        "ComparisonOperator": "GreaterThanThreshold",
        "Threshold": 0,
        "EvaluationPeriods": periods,
        "DatapointsToAlarm": periods,
        "TreatMissingData": missing,
        "Metrics": [
            {"Id": "e", "Expression": "DIFF(m)", "ReturnData": True},
            {
                "Id": "m",
                "MetricStat": {"Metric": {"MetricName": "Depth"}, "Period": 60, "Stat": "Maximum"},
                "ReturnData": False,
            },
        ],
    }


def test_the_most_recent_datapoints_of_the_range_decide_and_missing_ones_are_filled_only_when_too_few() -> None:
    rising = {"Depth": {0: 1.0, 1: 2.0}}
    assert alarm_state(_alarm(), rising, 1, evaluation_range=5) == "ALARM"
    # A minute later nothing new: the range still holds the rise, and it decides (R9.6) ...
    assert alarm_state(_alarm(), rising, 3, evaluation_range=5) == "ALARM"
    # ... until the range no longer holds both points DIFF needs: then missing data decides.
    assert alarm_state(_alarm(), rising, 6, evaluation_range=5) == "OK"
    assert alarm_state(_alarm("breaching"), rising, 6, evaluation_range=5) == "ALARM"
    assert alarm_state(_alarm(periods=2), {"Depth": {0: 1.0, 1: 2.0, 2: 3.0}}, 2, evaluation_range=5) == "ALARM"
    assert alarm_state(_alarm(periods=2), {"Depth": {0: 1.0, 1: 2.0, 2: 2.0}}, 2, evaluation_range=5) == "OK"


def test_an_alarm_on_one_metric() -> None:
    alarm = {**_alarm(), "MetricName": "Depth"}
    del alarm["Metrics"]
    assert alarm_state(alarm, {"Depth": {0: 1.0}}, 0, evaluation_range=3) == "ALARM"
    assert alarm_state(alarm, {"Depth": {0: 0.0}}, 0, evaluation_range=3) == "OK"
    with pytest.raises(NotModelledError):
        alarm_state({**alarm, "ComparisonOperator": "LessThanThreshold"}, {}, 0, evaluation_range=3)
