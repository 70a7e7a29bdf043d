"""The durable consumer (function, queue mapping, role, alarms), read from the synthesized template."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import App, Stack
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from aws_cdk.assertions import Template

from stacks.constructs import durable_consumer, lambda_defaults
from stacks.constructs.durable_consumer import DurableConsumer
from stacks.constructs.durable_queue import DurableQueue
from stacks.constructs.events_table import EMIT_ACTIONS, EVENT_ROW_MUTATIONS, EventsTable
from stacks.constructs.inbox_table import InboxTable
from stacks.constructs.monitoring import EMITS_NAMESPACE
from stacks.outbox_stack import OutboxSettings
from tests.conftest import Synthesized
from tests.infrastructure.conftest import resources_of_type
from tests.infrastructure.template_queries import only_resource

POWERTOOLS_VARIABLES = {"POWERTOOLS_SERVICE_NAME", "POWERTOOLS_METRICS_NAMESPACE"}


@pytest.fixture(scope="module")
def function_id(stack_template: dict[str, Any]) -> str:
    return only_resource(stack_template, "AWS::Lambda::Function", "DurableConsumer")[0]


@pytest.fixture(scope="module")
def function(stack_template: dict[str, Any], function_id: str) -> dict[str, Any]:
    return stack_template["Resources"][function_id]["Properties"]  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def environment(function: dict[str, Any]) -> dict[str, Any]:
    return function["Environment"]["Variables"]  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def mapping(stack_template: dict[str, Any]) -> dict[str, Any]:
    _, resource = only_resource(stack_template, "AWS::Lambda::EventSourceMapping")
    return resource["Properties"]  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def role_statements(stack_template: dict[str, Any], function: dict[str, Any]) -> list[dict[str, Any]]:
    role_id = function["Role"]["Fn::GetAtt"][0]
    return [
        statement
        for policy in resources_of_type(stack_template, "AWS::IAM::Policy").values()
        if {"Ref": role_id} in policy["Properties"]["Roles"]
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
    ]


def _listed(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _pairs(statements: list[dict[str, Any]], effect: str, resource: Any) -> set[str]:
    """The actions the statements of this effect allow or deny on exactly this resource."""
    return {
        action
        for statement in statements
        if statement["Effect"] == effect and resource in _listed(statement["Resource"])
        for action in _listed(statement["Action"])
    }


# --- the function ---------------------------------------------------------------------------------


def test_the_function_runs_the_durable_handler_on_the_engine_layers_platform(
    stack_template: dict[str, Any], function: dict[str, Any]
) -> None:
    layer_id, layer = only_resource(stack_template, "AWS::Lambda::LayerVersion", "EngineLayer")
    assert function["Handler"] == "lambdas.durable_consumer.handler.handler"
    assert function["Layers"] == [{"Ref": layer_id}]
    # The layer's wheels are built for one runtime and architecture; the function must match both.
    assert function["Runtime"] == "python3.13"
    assert function["Architectures"] == ["arm64"]
    assert [function["Runtime"]] == layer["Properties"]["CompatibleRuntimes"]
    assert function["Architectures"] == layer["Properties"]["CompatibleArchitectures"]
    assert "FunctionName" not in function, "CloudFormation generates the name"


def test_the_function_traces_and_logs_json_to_a_log_group_with_retention(
    stack_template: dict[str, Any], function: dict[str, Any]
) -> None:
    assert function["TracingConfig"] == {"Mode": "Active"}
    log_group_id = function["LoggingConfig"]["LogGroup"]["Ref"]
    assert function["LoggingConfig"]["LogFormat"] == "JSON"
    assert stack_template["Resources"][log_group_id]["Properties"]["RetentionInDays"] > 0
    assert function["MemorySize"] == 256
    assert function["Timeout"] == durable_consumer.CONSUMER_TIMEOUT_SECONDS == 60


def test_the_environment_is_exactly_what_the_consumer_settings_read(environment: dict[str, Any]) -> None:
    # Given the runtime's typed settings model
    from outbox.settings import ConsumerSettings

    # Then the function sets every variable it reads, and nothing it does not (besides Powertools')
    read = {field.alias for field in ConsumerSettings.model_fields.values()}
    assert set(environment) - POWERTOOLS_VARIABLES == read


def test_the_environment_points_at_this_stacks_tables_and_modules(
    stack_template: dict[str, Any], environment: dict[str, Any]
) -> None:
    events_id, _ = only_resource(stack_template, "AWS::DynamoDB::Table", "EventsTable")
    inbox_id, _ = only_resource(stack_template, "AWS::DynamoDB::Table", "InboxTable")
    assert environment["EVENTS_TABLE_NAME"] == {"Ref": events_id}
    assert environment["INBOX_TABLE_NAME"] == {"Ref": inbox_id}
    assert environment["INBOX_RETENTION_DAYS"] == "7"
    assert environment["SUBSCRIPTIONS"] == "modules:build_registry"
    assert environment["POWERTOOLS_SERVICE_NAME"] == "durable-consumer"
    assert environment["POWERTOOLS_METRICS_NAMESPACE"] == "OutboxEngine"


def test_max_receive_count_is_the_queues_redrive_count(
    stack_template: dict[str, Any], environment: dict[str, Any]
) -> None:
    # The consumer marks a claim dead on the last receive; it must count to the same number as SQS.
    _, queue = only_resource(stack_template, "AWS::SQS::Queue", "DurableQueue")
    assert int(environment["MAX_RECEIVE_COUNT"]) == queue["Properties"]["RedrivePolicy"]["maxReceiveCount"]


def test_the_metrics_namespace_is_the_one_the_dashboard_searches(
    stack_template: dict[str, Any], environment: dict[str, Any]
) -> None:
    _, dashboard = only_resource(stack_template, "AWS::CloudWatch::Dashboard")
    assert environment["POWERTOOLS_METRICS_NAMESPACE"] == EMITS_NAMESPACE
    assert EMITS_NAMESPACE in json.dumps(dashboard["Properties"]["DashboardBody"])


def test_the_code_asset_holds_only_the_handlers_and_the_modules(
    synthesized: Synthesized, function: dict[str, Any]
) -> None:
    # Given the staged asset the function's S3 key names
    asset_hash = function["Code"]["S3Key"].removesuffix(".zip")
    asset = synthesized.outdir / f"asset.{asset_hash}"
    files = sorted(path.relative_to(asset).as_posix() for path in asset.rglob("*") if path.is_file())
    # Then it holds the handler and the modules, and nothing else (no tests, no .venv, no byte code)
    assert "lambdas/durable_consumer/handler.py" in files
    assert "modules/__init__.py" in files
    assert [name for name in files if name.split("/")[0] not in lambda_defaults.CODE_PACKAGES] == []
    assert [name for name in files if "__pycache__" in name or name.endswith(".pyc")] == []
    # And the handler path resolves inside it
    module, _, attribute = durable_consumer.HANDLER.rpartition(".")
    source = (asset / Path(*module.split("."))).with_suffix(".py").read_text()
    assert f"def {attribute}(" in source


# --- the visibility timeout and the queue mapping -------------------------------------------------


def test_the_visibility_timeout_is_at_least_six_function_timeouts(
    stack_template: dict[str, Any], function: dict[str, Any]
) -> None:
    # A message must not reappear while a live handler still holds its inbox lease (AWS-SEMANTICS R6.4).
    _, queue = only_resource(stack_template, "AWS::SQS::Queue", "DurableQueue")
    assert queue["Properties"]["VisibilityTimeout"] >= 6 * function["Timeout"]


def test_the_mapping_feeds_the_function_from_the_durable_queue_with_partial_failures(
    stack_template: dict[str, Any], function_id: str, mapping: dict[str, Any]
) -> None:
    queue_id, _ = only_resource(stack_template, "AWS::SQS::Queue", "DurableQueue")
    assert mapping["EventSourceArn"] == {"Fn::GetAtt": [queue_id, "Arn"]}
    assert mapping["FunctionName"] == {"Ref": function_id}
    # Without it one failed message would make SQS retry the whole batch, already-completed ones too.
    assert mapping["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert 1 <= mapping["BatchSize"] <= 10
    assert 2 <= mapping["ScalingConfig"]["MaximumConcurrency"] <= 1000
    # FIFO queues take no batching window, and SQS mappings no on-failure destination (the DLQ is the queue's).
    assert "MaximumBatchingWindowInSeconds" not in mapping
    assert "DestinationConfig" not in mapping


def test_the_mapping_waits_for_the_permission_to_read_the_queue(
    stack_template: dict[str, Any], function_id: str
) -> None:
    # The mapping references the function, and the function depends on its role's policy.
    policy_id, _ = only_resource(stack_template, "AWS::IAM::Policy", "DurableConsumer")
    assert policy_id in stack_template["Resources"][function_id]["DependsOn"]


# --- the role -------------------------------------------------------------------------------------


def test_the_role_has_no_managed_policy(stack_template: dict[str, Any], function: dict[str, Any]) -> None:
    role = stack_template["Resources"][function["Role"]["Fn::GetAtt"][0]]["Properties"]
    assert "ManagedPolicyArns" not in role
    assert "Policies" not in role
    assert role["AssumeRolePolicyDocument"]["Statement"] == [
        {"Action": "sts:AssumeRole", "Effect": "Allow", "Principal": {"Service": "lambda.amazonaws.com"}}
    ]


def test_the_role_may_read_and_write_the_inbox(
    stack_template: dict[str, Any], role_statements: list[dict[str, Any]]
) -> None:
    inbox_id, _ = only_resource(stack_template, "AWS::DynamoDB::Table", "InboxTable")
    allowed = _pairs(role_statements, "Allow", {"Fn::GetAtt": [inbox_id, "Arn"]})
    # What the engine's Inbox calls (a transaction is authorised per item as Put/Update/ConditionCheck).
    assert {
        "dynamodb:GetItem",
        "dynamodb:PutItem",
        "dynamodb:UpdateItem",
        "dynamodb:ConditionCheckItem",
        "dynamodb:Query",
    } <= allowed
    assert _pairs(role_statements, "Deny", {"Fn::GetAtt": [inbox_id, "Arn"]}) == set()


def test_on_the_events_table_the_role_may_only_emit_and_never_mutate_event_rows(
    stack_template: dict[str, Any], role_statements: list[dict[str, Any]]
) -> None:
    events_id, _ = only_resource(stack_template, "AWS::DynamoDB::Table", "EventsTable")
    table_arn = {"Fn::GetAtt": [events_id, "Arn"]}
    assert _pairs(role_statements, "Allow", table_arn) == set(EMIT_ACTIONS)
    assert _pairs(role_statements, "Deny", table_arn) == set(EVENT_ROW_MUTATIONS)
    # Nothing else anywhere on the events table: no stream, no index, no wildcard.
    mentions = [s for s in role_statements if events_id in json.dumps(s["Resource"])]
    assert all(_listed(s["Resource"]) == [table_arn] for s in mentions)


def test_the_role_may_consume_the_durable_queue_and_nothing_else_on_sqs(
    stack_template: dict[str, Any], role_statements: list[dict[str, Any]]
) -> None:
    queue_id, _ = only_resource(stack_template, "AWS::SQS::Queue", "DurableQueue")
    sqs_statements = [s for s in role_statements if any(a.startswith("sqs:") for a in _listed(s["Action"]))]
    assert [s["Resource"] for s in sqs_statements] == [{"Fn::GetAtt": [queue_id, "Arn"]}]
    assert "sqs:SendMessage" not in _listed(sqs_statements[0]["Action"])


def test_the_only_wildcard_resource_is_x_ray_which_has_no_resource_level_permissions(
    role_statements: list[dict[str, Any]],
) -> None:
    # The AwsSolutions-IAM5 acknowledgement on this policy rests on this.
    wildcard_actions = _pairs(role_statements, "Allow", "*")
    assert wildcard_actions == {"xray:PutTraceSegments", "xray:PutTelemetryRecords"}
    assert all(not action.endswith("*") for s in role_statements for action in _listed(s["Action"]))


# --- alarms ---------------------------------------------------------------------------------------


def _alarms(stack_template: dict[str, Any], namespace: str, metric_name: str) -> list[dict[str, Any]]:
    return [
        alarm["Properties"]
        for alarm in resources_of_type(stack_template, "AWS::CloudWatch::Alarm").values()
        if alarm["Properties"].get("Namespace") == namespace and alarm["Properties"].get("MetricName") == metric_name
    ]


def _assert_fires_on_the_first_one(alarm: dict[str, Any], topic_id: str) -> None:
    assert alarm["Statistic"] == "Sum"
    assert (alarm["Threshold"], alarm["ComparisonOperator"]) == (0, "GreaterThanThreshold")
    assert (alarm["EvaluationPeriods"], alarm["DatapointsToAlarm"]) == (1, 1)
    assert alarm["TreatMissingData"] == "notBreaching"
    assert alarm["AlarmActions"] == [{"Ref": topic_id}]


def test_a_failed_invocation_alarms_at_the_first_one(stack_template: dict[str, Any], function_id: str) -> None:
    topic_id, _ = only_resource(stack_template, "AWS::SNS::Topic")
    alarms = _alarms(stack_template, "AWS/Lambda", "Errors")
    assert len(alarms) == 1
    assert alarms[0]["Dimensions"] == [{"Name": "FunctionName", "Value": {"Ref": function_id}}]
    _assert_fires_on_the_first_one(alarms[0], topic_id)


@pytest.mark.parametrize("metric_name", ["DeadLetters", "Conflicts", "PoisonPills"])
def test_dead_work_in_the_inbox_alarms_at_the_first_one(
    stack_template: dict[str, Any], environment: dict[str, Any], metric_name: str
) -> None:
    # A terminal error becomes a dead-letter row, not an SQS dead letter: without these, it would be silent.
    topic_id, _ = only_resource(stack_template, "AWS::SNS::Topic")
    alarms = _alarms(stack_template, environment["POWERTOOLS_METRICS_NAMESPACE"], metric_name)
    assert len(alarms) == 1
    # Powertools publishes every metric with the service as its one default dimension.
    assert alarms[0]["Dimensions"] == [{"Name": "service", "Value": environment["POWERTOOLS_SERVICE_NAME"]}]
    _assert_fires_on_the_first_one(alarms[0], topic_id)


def test_the_alarmed_and_graphed_metric_names_are_the_ones_the_consumer_publishes() -> None:
    from outbox.consumer import Metric

    published = {metric.value for metric in Metric}
    assert set(durable_consumer.DEAD_WORK_METRICS) | set(durable_consumer.CLAIM_METRICS) == published


# --- context: consumerMaxConcurrency (throwaway apps, no main-app synth) --------------------------


def _settings(context: dict[str, Any]) -> OutboxSettings:
    return OutboxSettings.from_context(App(context=context).node)


def test_max_concurrency_defaults_to_ten_and_is_read_from_the_context() -> None:
    assert _settings({}).consumer_max_concurrency == 10
    assert _settings({"consumerMaxConcurrency": "50"}).consumer_max_concurrency == 50
    assert _settings({"consumerMaxConcurrency": 2}).consumer_max_concurrency == 2


@pytest.mark.parametrize("value", [1, 1001, "0", "ten", False])
def test_a_max_concurrency_lambda_would_reject_fails_the_synth(value: Any) -> None:
    with pytest.raises(ValueError, match="consumerMaxConcurrency"):
        _settings({"consumerMaxConcurrency": value})


def _probe(**options: Any) -> dict[str, Any]:
    stack = Stack(App(), "ConsumerProbe")
    topic = sns.Topic(stack, "Topic")
    DurableConsumer(
        stack,
        "DurableConsumer",
        queue=DurableQueue(stack, "Durable", alarm_topic=topic),
        events=EventsTable(stack, "Events"),
        inbox=InboxTable(stack, "Inbox", retention_days=options.pop("retention_days", 7)),
        # An imported layer: the real one would run pip in this throwaway app.
        layer=lambda_.LayerVersion.from_layer_version_arn(
            stack, "Layer", "arn:aws:lambda:us-east-1:123456789012:layer:engine:1"
        ),
        alarm_topic=topic,
        **options,
    )
    return Template.from_stack(stack).to_json()


def test_the_construct_applies_its_concurrency_and_the_inbox_retention() -> None:
    probe = _probe(max_concurrency=50, retention_days=30)
    _, mapping = only_resource(probe, "AWS::Lambda::EventSourceMapping")
    _, function = only_resource(probe, "AWS::Lambda::Function")
    assert mapping["Properties"]["ScalingConfig"] == {"MaximumConcurrency": 50}
    assert function["Properties"]["Environment"]["Variables"]["INBOX_RETENTION_DAYS"] == "30"


def test_the_construct_rejects_a_concurrency_lambda_would() -> None:
    with pytest.raises(ValueError, match="concurrency"):
        _probe(max_concurrency=1)


def test_the_stack_outputs_the_inbox_table_and_the_consumer_function(
    stack_template: dict[str, Any], function_id: str
) -> None:
    inbox_id, _ = only_resource(stack_template, "AWS::DynamoDB::Table", "InboxTable")
    outputs = stack_template["Outputs"]
    assert outputs["InboxTableName"]["Value"] == {"Ref": inbox_id}
    assert outputs["DurableConsumerFunctionName"]["Value"] == {"Ref": function_id}
