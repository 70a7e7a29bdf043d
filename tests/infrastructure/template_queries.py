"""Small lookups over a synthesized template dict, shared by the infrastructure tests."""

from __future__ import annotations

import json
from typing import Any

from tests.infrastructure.conftest import resources_of_type

# The example stack's OutboxPipeline construct id: its resources' logical ids start with it.
PIPELINE_ID = "Outbox"


def named(logical_id: str, prefix: str) -> bool:
    """Whether ``logical_id`` is a resource named ``prefix``..., in the stack or inside the pipeline."""
    return logical_id.startswith(prefix) or logical_id.startswith(PIPELINE_ID + prefix)


def only_resource(stack_template: dict[str, Any], resource_type: str, prefix: str = "") -> tuple[str, dict[str, Any]]:
    """The one resource of this type whose logical id starts with ``prefix`` (in the stack or the pipeline):
    (logical id, resource)."""
    matches = {
        logical_id: resource
        for logical_id, resource in resources_of_type(stack_template, resource_type).items()
        if named(logical_id, prefix)
    }
    assert len(matches) == 1, f"expected one {resource_type} {prefix}*, found {sorted(matches)}"
    return next(iter(matches.items()))


def listed(value: Any) -> list[Any]:
    """A policy's Action or Resource as a list, whether it was written as one value or several."""
    return value if isinstance(value, list) else [value]


def role_statements(stack_template: dict[str, Any], role_id: str) -> list[dict[str, Any]]:
    """Every statement of every policy attached to this role."""
    return [
        statement
        for policy in resources_of_type(stack_template, "AWS::IAM::Policy").values()
        if {"Ref": role_id} in policy["Properties"]["Roles"]
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
    ]


def actions_on(statements: list[dict[str, Any]], effect: str, resource: Any) -> set[str]:
    """The actions the statements of this effect allow or deny on exactly this resource."""
    return {
        action
        for statement in statements
        if statement["Effect"] == effect and resource in listed(statement["Resource"])
        for action in listed(statement["Action"])
    }


def allowed_pairs(statements: list[dict[str, Any]]) -> set[tuple[str, str]]:
    """(action, resource) pairs of unconditional Allow statements, so that merged and split statements
    compare equal. Any Deny or condition fails the assertion: callers expect plain grants."""
    pairs = set()
    for statement in statements:
        assert statement["Effect"] == "Allow"
        assert "Condition" not in statement
        pairs |= {
            (action, json.dumps(resource, sort_keys=True))
            for action in listed(statement["Action"])
            for resource in listed(statement["Resource"])
        }
    return pairs


def arn_of(logical_id: str, attribute: str = "Arn") -> str:
    """``{"Fn::GetAtt": [logical_id, attribute]}`` as ``allowed_pairs`` writes a resource."""
    return json.dumps({"Fn::GetAtt": [logical_id, attribute]}, sort_keys=True)


def assert_fires_on_the_first_one(alarm: dict[str, Any], topic_id: str) -> None:
    """A count alarm that notifies the topic on the first datapoint above zero, and treats silence as health."""
    assert alarm["Statistic"] == "Sum"
    assert (alarm["Threshold"], alarm["ComparisonOperator"]) == (0, "GreaterThanThreshold")
    assert (alarm["EvaluationPeriods"], alarm["DatapointsToAlarm"]) == (1, 1)
    assert alarm["TreatMissingData"] == "notBreaching"
    assert alarm["AlarmActions"] == [{"Ref": topic_id}]


def persistent_failure_alarm(stack_template: dict[str, Any], metric_name: str, service: str) -> dict[str, Any]:
    """The one math alarm that reads this Powertools count of this service (its ``Metrics``)."""
    dimensions = [{"Name": "service", "Value": service}]
    alarms = [
        alarm["Properties"]
        for alarm in resources_of_type(stack_template, "AWS::CloudWatch::Alarm").values()
        if any(
            query.get("MetricStat", {}).get("Metric", {}).get("MetricName") == metric_name
            and query["MetricStat"]["Metric"].get("Dimensions") == dimensions
            for query in alarm["Properties"].get("Metrics", [])
        )
    ]
    assert len(alarms) == 1, f"expected one alarm on {service} {metric_name}, found {len(alarms)}"
    return alarms[0]


def assert_fires_on_persistent_failure(alarm: dict[str, Any], topic_id: str, *, period_seconds: int) -> None:
    """A count alarm that notifies the topic when the count is above zero in three periods in a row: quiet
    periods are zeros (FILL), so they break a run instead of being skipped (docs/aws-behaviour.md R9.6)."""
    [expression] = [query for query in alarm["Metrics"] if "Expression" in query]
    [counted] = [query for query in alarm["Metrics"] if "MetricStat" in query]
    assert expression["Expression"] == f"FILL({counted['Id']}, 0)"
    assert (expression["ReturnData"], counted["ReturnData"]) == (True, False)
    assert (counted["MetricStat"]["Stat"], counted["MetricStat"]["Period"]) == ("Sum", period_seconds)
    assert (alarm["Threshold"], alarm["ComparisonOperator"]) == (0, "GreaterThanThreshold")
    assert (alarm["EvaluationPeriods"], alarm["DatapointsToAlarm"]) == (3, 3)
    assert alarm["TreatMissingData"] == "notBreaching"
    assert alarm["AlarmActions"] == alarm["OKActions"] == [{"Ref": topic_id}]
