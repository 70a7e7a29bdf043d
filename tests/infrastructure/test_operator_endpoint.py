"""The operator endpoint: an IAM-signed function URL that reads the chains, the dead work and the DLQs,
and may change none of them. Read from the synthesized template.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from outbox_cdk import operator_endpoint
from stacks import outbox_stack
from tests.infrastructure.conftest import assert_handler_in_layer, resources_of_type
from tests.infrastructure.template_queries import (
    actions_on,
    assert_fires_on_the_first_one,
    listed,
    only_resource,
    role_statements,
)

# The handler's settings model reads exactly these; each is (resource type, logical-id prefix) of
# what it must name. A queue's Ref is its URL, a pipe's its name, a table's its name.
REFERENCED_VARIABLES = {
    "EVENTS_TABLE_NAME": ("AWS::DynamoDB::Table", "EventsTable"),
    "INBOX_TABLE_NAME": ("AWS::DynamoDB::Table", "InboxTable"),
    "DATA_TABLE_NAME": ("AWS::DynamoDB::Table", "DataTable"),
    "DURABLE_QUEUE_URL": ("AWS::SQS::Queue", "DurableQueue"),
    "DURABLE_DLQ_URL": ("AWS::SQS::Queue", "DurableDeadLetters"),
    "RELAY_DLQ_URL": ("AWS::SQS::Queue", "RelayDeadLetters"),
    "RECORD_CHANGE_QUEUE_URL": ("AWS::SQS::Queue", "RecordChangesQueue"),
    "RECORD_CHANGE_DLQ_URL": ("AWS::SQS::Queue", "RecordChangesDeadLetters"),
    "RECORD_CHANGE_PIPE_DLQ_URL": ("AWS::SQS::Queue", "RecordChangePipeDeadLetters"),
    "RELAY_PIPE_NAME": ("AWS::Pipes::Pipe", "RelayPipe"),
    "RECORD_CHANGE_PIPE_NAME": ("AWS::Pipes::Pipe", "RecordChangePipe"),
    "AUDIT_TABLE_NAME": ("AWS::DynamoDB::Table", "AuditTable"),
    "TAMPER_QUEUE_URL": ("AWS::SQS::Queue", "AuditorFindingsQueue"),
    "TAMPER_DLQ_URL": ("AWS::SQS::Queue", "AuditorFindingsDeadLetters"),
    "TAMPER_PIPE_DLQ_URL": ("AWS::SQS::Queue", "AuditorPipeDeadLetters"),
    "ANCHORING_DLQ_URL": ("AWS::SQS::Queue", "AuditorAnchoringDeadLetters"),
    "TAMPER_PIPE_NAME": ("AWS::Pipes::Pipe", "AuditorPipe"),
    "WORKFLOW_SETTLE_DLQ_URL": ("AWS::SQS::Queue", "WorkflowsSettlerDeadLetters"),  # the example has a WORKFLOW
}
LITERAL_VARIABLES = {
    "SUBSCRIPTIONS": "modules:build_catalog",
    "POWERTOOLS_SERVICE_NAME": "operator-api",
    "POWERTOOLS_METRICS_NAMESPACE": "OutboxEngine",
    "COMMERCE_SERVICES": "fake",  # the example's own, as the tests synthesize it (a trial)
}
QUEUE_PREFIXES = [
    prefix for resource_type, prefix in REFERENCED_VARIABLES.values() if resource_type == "AWS::SQS::Queue"
]
PIPE_PREFIXES = ["RelayPipe", "RecordChangePipe", "AuditorPipe"]

# What the endpoint's code calls (tests/e2e/test_least_privilege.py records it): the head and a tenant's rows,
# the inbox's partitions, the queues' depths, the pipes' states and the queues' age.
READ_ACTIONS = {
    "dynamodb:GetItem",
    "dynamodb:Query",
    "sqs:GetQueueAttributes",
    "pipes:DescribePipe",
    "cloudwatch:GetMetricData",
}
# What every engine function has: its own log group and X-Ray.
FUNCTION_DEFAULT_ACTIONS = {
    "logs:CreateLogStream",
    "logs:PutLogEvents",
    "xray:PutTraceSegments",
    "xray:PutTelemetryRecords",
}
WRITE_VERBS = ("Put", "Update", "Delete", "BatchWrite", "PartiQL", "Send", "Purge", "Set", "Change", "Start", "Stop")


@pytest.fixture(scope="module")
def function_id(stack_template: dict[str, Any]) -> str:
    return only_resource(stack_template, "AWS::Lambda::Function", "OperatorEndpoint")[0]


@pytest.fixture(scope="module")
def function(stack_template: dict[str, Any], function_id: str) -> dict[str, Any]:
    return stack_template["Resources"][function_id]["Properties"]  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def statements(stack_template: dict[str, Any], function: dict[str, Any]) -> list[dict[str, Any]]:
    return role_statements(stack_template, function["Role"]["Fn::GetAtt"][0])


def _arn(stack_template: dict[str, Any], resource_type: str, prefix: str) -> dict[str, Any]:
    return {"Fn::GetAtt": [only_resource(stack_template, resource_type, prefix)[0], "Arn"]}


def _resources_allowed(statements: list[dict[str, Any]], action: str) -> list[Any]:
    return [
        resource
        for s in statements
        if s["Effect"] == "Allow" and action in listed(s["Action"])
        for resource in listed(s["Resource"])
    ]


# --- the URL and the function ---------------------------------------------------------------------


def test_the_function_url_takes_only_signed_requests_and_no_browser_origins(
    stack_template: dict[str, Any], function_id: str
) -> None:
    # Given the one function URL of the stack
    _, url = only_resource(stack_template, "AWS::Lambda::Url")
    # Then it fronts the operator function, authenticates with IAM, and has no CORS configuration
    assert url["Properties"]["TargetFunctionArn"] == {"Fn::GetAtt": [function_id, "Arn"]}
    assert url["Properties"]["AuthType"] == "AWS_IAM"
    assert "Cors" not in url["Properties"]
    # ... and no resource policy opens the function to anyone (a NONE URL would need one): the stack's two
    # permissions let the schedules invoke the anchoring function and the WORKFLOW lane's settle pass
    permissions = resources_of_type(stack_template, "AWS::Lambda::Permission")
    scheduled = [
        only_resource(stack_template, "AWS::Lambda::Function", prefix)[0]
        for prefix in ("AuditorAnchoring", "WorkflowsSettler")
    ]
    assert sorted(json.dumps(p["Properties"]["FunctionName"]) for p in permissions.values()) == sorted(
        json.dumps({"Fn::GetAtt": [function, "Arn"]}) for function in scheduled
    )
    assert [p["Properties"]["Principal"] for p in permissions.values()] == ["events.amazonaws.com"] * 2


def test_the_stack_outputs_the_url(stack_template: dict[str, Any]) -> None:
    url_id, _ = only_resource(stack_template, "AWS::Lambda::Url")
    assert stack_template["Outputs"]["OperatorEndpointUrl"]["Value"] == {"Fn::GetAtt": [url_id, "FunctionUrl"]}


def test_the_function_runs_the_operator_handler_for_up_to_a_minute(
    stack_template: dict[str, Any], function: dict[str, Any]
) -> None:
    layer_id, _ = only_resource(stack_template, "AWS::Lambda::LayerVersion", "EngineLayer")
    assert function["Handler"] == operator_endpoint.HANDLER == "outbox.handlers.operator_api.handler"
    assert function["Timeout"] == 60
    assert function["Layers"] == [{"Ref": layer_id}]
    assert (function["Runtime"], function["Architectures"]) == ("python3.13", ["arm64"])
    assert function["TracingConfig"] == {"Mode": "Active"}
    assert function["LoggingConfig"]["LogFormat"] == "JSON"


def test_the_handler_module_is_in_the_layer(function: dict[str, Any]) -> None:
    # The handler is the engine's, and the layer carries the engine's files
    assert_handler_in_layer(function["Handler"])


# --- the environment ------------------------------------------------------------------------------


def test_the_environment_names_exactly_what_the_handler_reads(function: dict[str, Any]) -> None:
    assert set(function["Environment"]["Variables"]) == set(REFERENCED_VARIABLES) | set(LITERAL_VARIABLES)


@pytest.mark.parametrize(("variable", "referenced"), REFERENCED_VARIABLES.items(), ids=list(REFERENCED_VARIABLES))
def test_each_variable_names_its_own_queue_pipe_or_table(
    stack_template: dict[str, Any], function: dict[str, Any], variable: str, referenced: tuple[str, str]
) -> None:
    resource_type, prefix = referenced
    resource_id, _ = only_resource(stack_template, resource_type, prefix)
    assert function["Environment"]["Variables"][variable] == {"Ref": resource_id}


def test_the_literal_variables_match_the_consumers(stack_template: dict[str, Any], function: dict[str, Any]) -> None:
    variables = function["Environment"]["Variables"]
    assert {name: variables[name] for name in LITERAL_VARIABLES} == LITERAL_VARIABLES
    # build_catalog is loaded from the same reference the consumers load it from.
    for consumer in ("DurableConsumer", "RecordChangeConsumer"):
        _, other = only_resource(stack_template, "AWS::Lambda::Function", consumer)
        assert other["Properties"]["Environment"]["Variables"]["SUBSCRIPTIONS"] == variables["SUBSCRIPTIONS"]
    assert variables["SUBSCRIPTIONS"] == outbox_stack.CATALOG


# --- the role: read only --------------------------------------------------------------------------


def test_the_role_may_only_read(statements: list[dict[str, Any]]) -> None:
    allowed = {action for s in statements if s["Effect"] == "Allow" for action in listed(s["Action"])}
    assert allowed == READ_ACTIONS | FUNCTION_DEFAULT_ACTIONS
    on_data = [a for a in allowed if a.split(":")[0] in ("dynamodb", "sqs", "pipes", "cloudwatch")]
    assert [a for a in on_data if a.split(":")[1].startswith(WRITE_VERBS) or "*" in a] == []


def test_the_role_reads_the_events_and_inbox_tables_and_no_other_item_or_stream(
    stack_template: dict[str, Any], statements: list[dict[str, Any]]
) -> None:
    dynamodb_resources = {
        json.dumps(resource, sort_keys=True)
        for s in statements
        if s["Effect"] == "Allow" and any(a.startswith("dynamodb:") for a in listed(s["Action"]))
        for resource in listed(s["Resource"])
    }
    assert dynamodb_resources == {
        json.dumps(_arn(stack_template, "AWS::DynamoDB::Table", prefix), sort_keys=True)
        for prefix in ("EventsTable", "InboxTable", "AuditTable")
    }


def test_the_events_table_read_carries_the_event_row_deny(
    stack_template: dict[str, Any], statements: list[dict[str, Any]]
) -> None:
    from outbox_cdk.events_table import EVENT_ROW_MUTATIONS, EVENT_ROW_PARTITION_PATTERN

    events_arn = _arn(stack_template, "AWS::DynamoDB::Table", "EventsTable")
    denies = [s for s in statements if s["Effect"] == "Deny"]
    assert len(denies) == 1
    assert denies[0]["Resource"] == events_arn
    assert set(listed(denies[0]["Action"])) == set(EVENT_ROW_MUTATIONS)
    assert denies[0]["Condition"] == {
        "ForAnyValue:StringLike": {"dynamodb:LeadingKeys": [EVENT_ROW_PARTITION_PATTERN]},
        "Null": {"dynamodb:LeadingKeys": "false"},
    }


def test_get_queue_attributes_is_allowed_on_every_queue_of_the_stack(
    stack_template: dict[str, Any], statements: list[dict[str, Any]]
) -> None:
    resources = _resources_allowed(statements, "sqs:GetQueueAttributes")
    expected = [_arn(stack_template, "AWS::SQS::Queue", prefix) for prefix in QUEUE_PREFIXES]
    assert len(resources) == len(expected) == 11
    assert sorted(map(json.dumps, resources)) == sorted(map(json.dumps, expected))
    # Eleven queues: every queue of the stack but the control-plane watch's DLQ (whose alarm and the dashboard report
    # it: it holds CloudTrail events, no work of the pipeline), so none is missed.
    watch_dlq, _ = only_resource(stack_template, "AWS::SQS::Queue", "ControlPlaneDeadLetters")
    assert len(set(resources_of_type(stack_template, "AWS::SQS::Queue")) - {watch_dlq}) == 11


def test_describe_pipe_is_allowed_on_exactly_the_two_pipes(
    stack_template: dict[str, Any], statements: list[dict[str, Any]]
) -> None:
    resources = _resources_allowed(statements, "pipes:DescribePipe")
    expected = [_arn(stack_template, "AWS::Pipes::Pipe", prefix) for prefix in PIPE_PREFIXES]
    assert sorted(map(json.dumps, resources)) == sorted(map(json.dumps, expected))


def test_the_only_wildcards_are_x_ray_and_get_metric_data_alone_in_its_policy(
    stack_template: dict[str, Any], function: dict[str, Any], statements: list[dict[str, Any]]
) -> None:
    # The two AwsSolutions-IAM5 acknowledgements (the role's default policy, the metric-read policy) rest on this.
    assert actions_on(statements, "Allow", "*") == {
        "xray:PutTraceSegments",
        "xray:PutTelemetryRecords",
        "cloudwatch:GetMetricData",
    }
    _, metric_read = only_resource(stack_template, "AWS::IAM::Policy", "OperatorEndpointMetricRead")
    assert metric_read["Properties"]["Roles"] == [{"Ref": function["Role"]["Fn::GetAtt"][0]}]
    assert metric_read["Properties"]["PolicyDocument"]["Statement"] == [
        {"Action": "cloudwatch:GetMetricData", "Effect": "Allow", "Resource": "*"}
    ]


# --- who may call it ------------------------------------------------------------------------------


def test_the_operator_role_and_no_other_may_invoke_the_url(stack_template: dict[str, Any], function_id: str) -> None:
    # Given every role of the stack
    function_arn = {"Fn::GetAtt": [function_id, "Arn"]}
    invokers = {
        role_id: [
            s
            for s in role_statements(stack_template, role_id)
            if s["Effect"] == "Allow"
            and function_arn in listed(s["Resource"])
            and any(a.startswith("lambda:Invoke") for a in listed(s["Action"]))
        ]
        for role_id in resources_of_type(stack_template, "AWS::IAM::Role")
    }
    invokers = {role_id: found for role_id, found in invokers.items() if found}
    # Then the operator role is the one that may call the URL: InvokeFunctionUrl for an IAM-authenticated
    # URL, and the InvokeFunction that Lambda requires of new URLs since October 2025, via the URL only.
    (role_id,) = invokers
    assert "OperatorRole" in role_id
    assert sorted(invokers[role_id], key=lambda s: str(s["Action"])) == [
        {
            "Action": "lambda:InvokeFunction",
            "Condition": {"Bool": {"lambda:InvokedViaFunctionUrl": True}},
            "Effect": "Allow",
            "Resource": function_arn,
        },
        {
            "Action": "lambda:InvokeFunctionUrl",
            "Condition": {"StringEquals": {"lambda:FunctionUrlAuthType": "AWS_IAM"}},
            "Effect": "Allow",
            "Resource": function_arn,
        },
    ]


# --- the Errors alarm -----------------------------------------------------------------------------


def test_a_failed_invocation_alarms_at_the_first_one(stack_template: dict[str, Any], function_id: str) -> None:
    topic_id, _ = only_resource(stack_template, "AWS::SNS::Topic")
    alarms = [
        alarm["Properties"]
        for alarm in resources_of_type(stack_template, "AWS::CloudWatch::Alarm").values()
        if alarm["Properties"].get("Namespace") == "AWS/Lambda"
        and alarm["Properties"].get("MetricName") == "Errors"
        and alarm["Properties"]["Dimensions"] == [{"Name": "FunctionName", "Value": {"Ref": function_id}}]
    ]
    assert len(alarms) == 1
    assert_fires_on_the_first_one(alarms[0], topic_id)
