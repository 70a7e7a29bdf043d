"""The dashboard's status widget: a custom widget at the top of the dashboard, over a function that reads what
the operator endpoint reads (but the queues' age metric) and may change none of it. Read from the synthesized
template; tests/e2e/test_dashboard_widget.py looks at what it shows."""

from __future__ import annotations

import json
from typing import Any

import pytest

from outbox_cdk import status_widget
from tests.infrastructure.conftest import assert_handler_in_layer, resources_of_type
from tests.infrastructure.template_queries import assert_fires_on_the_first_one, listed, only_resource, role_statements
from tests.infrastructure.test_operator_endpoint import (
    FUNCTION_DEFAULT_ACTIONS,
    LITERAL_VARIABLES,
    READ_ACTIONS,
    REFERENCED_VARIABLES,
    WRITE_VERBS,
)


@pytest.fixture(scope="module")
def function_id(stack_template: dict[str, Any]) -> str:
    return only_resource(stack_template, "AWS::Lambda::Function", "OutboxStatusWidget")[0]


@pytest.fixture(scope="module")
def function(stack_template: dict[str, Any], function_id: str) -> dict[str, Any]:
    return stack_template["Resources"][function_id]["Properties"]  # type: ignore[no-any-return]


def test_the_function_runs_the_widget_handler_from_the_layer_two_at_a_time(function: dict[str, Any]) -> None:
    assert function["Handler"] == status_widget.HANDLER == "outbox.handlers.status_widget.handler"
    assert_handler_in_layer(function["Handler"])
    assert function["ReservedConcurrentExecutions"] == 2
    assert function["Timeout"] == 60


def test_its_environment_is_the_operator_endpoints(stack_template: dict[str, Any], function: dict[str, Any]) -> None:
    _, endpoint = only_resource(stack_template, "AWS::Lambda::Function", "OutboxOperatorEndpoint")
    variables = function["Environment"]["Variables"]
    assert set(variables) == set(REFERENCED_VARIABLES) | set(LITERAL_VARIABLES)
    assert {**variables, "POWERTOOLS_SERVICE_NAME": "operator-api"} == endpoint["Properties"]["Environment"][
        "Variables"
    ]
    assert variables["POWERTOOLS_SERVICE_NAME"] == status_widget.SERVICE_NAME


def test_its_role_may_only_read_and_not_even_metrics(stack_template: dict[str, Any], function: dict[str, Any]) -> None:
    statements = role_statements(stack_template, function["Role"]["Fn::GetAtt"][0])
    allowed = {action for s in statements if s["Effect"] == "Allow" for action in listed(s["Action"])}
    assert allowed == (READ_ACTIONS - {"cloudwatch:GetMetricData"}) | FUNCTION_DEFAULT_ACTIONS
    assert [
        a for a in allowed if a.split(":")[1].startswith(WRITE_VERBS) and not a.startswith(("logs:", "xray:"))
    ] == []
    # ... and the events table's read carries the event-row deny, as every read of it but the operator role's
    assert [s["Resource"] for s in statements if s["Effect"] == "Deny"] == [
        {"Fn::GetAtt": [only_resource(stack_template, "AWS::DynamoDB::Table", "EventsTable")[0], "Arn"]}
    ]


def test_the_operator_role_may_view_it_and_nothing_opens_it_to_anyone(
    stack_template: dict[str, Any], function_id: str
) -> None:
    function_arn = {"Fn::GetAtt": [function_id, "Arn"]}
    viewers = {
        role_id
        for role_id in resources_of_type(stack_template, "AWS::IAM::Role")
        for s in role_statements(stack_template, role_id)
        if s["Effect"] == "Allow" and function_arn in listed(s["Resource"])
    }
    assert [role_id for role_id in viewers if "OperatorRole" not in role_id] == []
    (operator_role,) = viewers
    assert {
        "Action": "lambda:InvokeFunction",
        "Effect": "Allow",
        "Resource": function_arn,
    } in role_statements(stack_template, operator_role)
    permissions = resources_of_type(stack_template, "AWS::Lambda::Permission").values()
    assert function_arn not in [p["Properties"]["FunctionName"] for p in permissions]
    urls = resources_of_type(stack_template, "AWS::Lambda::Url").values()
    assert function_arn not in [u["Properties"]["TargetFunctionArn"] for u in urls]


def dashboard_body(stack_template: dict[str, Any]) -> dict[str, Any]:
    """The dashboard's JSON document, each reference in it written as the logical id (and attribute) it names."""
    _, dashboard = only_resource(stack_template, "AWS::CloudWatch::Dashboard")
    parts = dashboard["Properties"]["DashboardBody"]["Fn::Join"][1]
    text = "".join(part if isinstance(part, str) else ".".join(listed(next(iter(part.values())))) for part in parts)
    return json.loads(text)  # type: ignore[no-any-return]


def test_the_widget_is_the_whole_width_of_the_dashboard_right_under_the_alarms(
    stack_template: dict[str, Any], function_id: str
) -> None:
    alarms, status, *_ = dashboard_body(stack_template)["widgets"]
    assert alarms["type"] == "alarm"
    assert status["type"] == "custom"
    assert status["properties"]["endpoint"] == f"{function_id}.Arn"
    assert (status["width"], status["height"], status["x"], status["y"]) == (24, 8, 0, alarms["height"])
    assert (status_widget.WIDTH, status_widget.HEIGHT) == (24, 8)
    assert status["properties"]["title"] == status_widget.TITLE


def test_a_failed_rendering_alarms_at_the_first_one(stack_template: dict[str, Any], function_id: str) -> None:
    topic_id, _ = only_resource(stack_template, "AWS::SNS::Topic")
    [alarm] = [
        alarm["Properties"]
        for alarm in resources_of_type(stack_template, "AWS::CloudWatch::Alarm").values()
        if alarm["Properties"].get("MetricName") == "Errors"
        and alarm["Properties"]["Dimensions"] == [{"Name": "FunctionName", "Value": {"Ref": function_id}}]
    ]
    assert_fires_on_the_first_one(alarm, topic_id)
