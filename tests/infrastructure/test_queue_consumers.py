"""What both queue-driven consumers share (function, mapping, role hygiene, Errors and persistent-failure
alarms, concurrency),
read from the synthesized template.

Each test runs once for the durable consumer (durable FIFO queue) and once for the record-change
consumer (record-change queue); what differs is in test_durable_consumer and test_record_change_consumer.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from outbox_cdk import timing
from outbox_cdk.queue_consumer import CONSUME_ACTIONS, DATA_TABLE_ACTIONS
from stacks import outbox_stack
from tests.conftest import Synthesized
from tests.example_app import settings_from
from tests.infrastructure.conftest import assert_handler_in_layer, resources_of_type
from tests.infrastructure.template_queries import (
    actions_on,
    assert_fires_on_persistent_failure,
    assert_fires_on_the_first_one,
    listed,
    only_resource,
    persistent_failure_alarm,
    role_statements,
)

POWERTOOLS_VARIABLES = {"POWERTOOLS_SERVICE_NAME", "POWERTOOLS_METRICS_NAMESPACE"}


@dataclass(frozen=True)
class ConsumerCase:
    """One consumer: logical-id prefixes, what it runs, and where its settings come from."""

    prefix: str
    queue: str
    handler: str
    timeout_seconds: int
    settings_model: str  # the class in outbox.settings that reads the function's environment
    concurrency_context: str
    settings_field: str  # the ExampleSettings field that context key fills
    output: str
    service: str  # its Powertools service, the dimension of its counts
    failure_metric: str  # the count of failures that will run again
    failures_before_giving_up: int  # counted failures of one message before it is a dead letter or in the DLQ


DURABLE = ConsumerCase(
    prefix="DurableConsumer",
    queue="DurableQueue",
    handler="outbox.handlers.durable_consumer.handler",
    timeout_seconds=60,
    settings_model="ConsumerSettings",
    concurrency_context="consumerMaxConcurrency",
    settings_field="consumer_max_concurrency",
    output="DurableConsumerFunctionName",
    service="durable-consumer",
    failure_metric="Retries",
    # Attempts 1 to MAX_ATTEMPTS - 1 are Retries; the last one is a DeadLetters.
    failures_before_giving_up=timing.MAX_ATTEMPTS - 1,
)
RECORD_CHANGE = ConsumerCase(
    prefix="RecordChangeConsumer",
    queue="RecordChangesQueue",
    handler="outbox.handlers.record_change_consumer.handler",
    timeout_seconds=30,
    settings_model="RecordChangeSettings",
    concurrency_context="recordChangeMaxConcurrency",
    settings_field="record_change_max_concurrency",
    output="RecordChangeConsumerFunctionName",
    service="record-change-consumer",
    failure_metric="RowChangeFailures",
    failures_before_giving_up=timing.RECORD_CHANGE_MAX_RECEIVE_COUNT,
)
CASES = pytest.mark.parametrize("case", [DURABLE, RECORD_CHANGE], ids=["durable", "record-change"])


def _function(stack_template: dict[str, Any], case: ConsumerCase) -> tuple[str, dict[str, Any]]:
    function_id, resource = only_resource(stack_template, "AWS::Lambda::Function", case.prefix)
    return function_id, resource["Properties"]


def _mapping(stack_template: dict[str, Any], case: ConsumerCase) -> dict[str, Any]:
    return only_resource(stack_template, "AWS::Lambda::EventSourceMapping", case.prefix)[1]["Properties"]  # type: ignore[no-any-return]


def _statements(stack_template: dict[str, Any], case: ConsumerCase) -> list[dict[str, Any]]:
    _, function = _function(stack_template, case)
    return role_statements(stack_template, function["Role"]["Fn::GetAtt"][0])


# --- the function ---------------------------------------------------------------------------------


@CASES
def test_the_function_runs_its_handler_on_the_engine_layers_platform(
    stack_template: dict[str, Any], case: ConsumerCase
) -> None:
    layer_id, layer = only_resource(stack_template, "AWS::Lambda::LayerVersion", "EngineLayer")
    _, function = _function(stack_template, case)
    assert function["Handler"] == case.handler
    assert function["Layers"] == [{"Ref": layer_id}]
    # The layer's wheels are built for one runtime and architecture; the function must match both.
    assert function["Runtime"] == "python3.13"
    assert function["Architectures"] == ["arm64"]
    assert [function["Runtime"]] == layer["Properties"]["CompatibleRuntimes"]
    assert function["Architectures"] == layer["Properties"]["CompatibleArchitectures"]
    assert "FunctionName" not in function, "CloudFormation generates the name"


@CASES
def test_the_function_traces_and_logs_json_to_a_log_group_with_retention(
    stack_template: dict[str, Any], case: ConsumerCase
) -> None:
    _, function = _function(stack_template, case)
    assert function["TracingConfig"] == {"Mode": "Active"}
    log_group_id = function["LoggingConfig"]["LogGroup"]["Ref"]
    assert function["LoggingConfig"]["LogFormat"] == "JSON"
    assert stack_template["Resources"][log_group_id]["Properties"]["RetentionInDays"] > 0
    assert function["MemorySize"] == 256
    assert function["Timeout"] == case.timeout_seconds


# The example app's own variables (OutboxStack's environment=...), read by modules.build_catalog.
APPLICATION_VARIABLES = {"DATA_TABLE_NAME", "COMMERCE_SERVICES"}
# Read when set, set only when the app has what they describe: the durable functions of WORKFLOW subscriptions
# (the example app has none).
SET_WHEN_USED = {"WORKFLOW_FUNCTIONS"}


@CASES
def test_the_environment_is_exactly_what_the_settings_model_reads(
    stack_template: dict[str, Any], case: ConsumerCase
) -> None:
    # Given the runtime's typed settings model for this function
    from outbox import settings

    model: type[BaseModel] = getattr(settings, case.settings_model)
    # Then the function sets every variable it reads, and nothing it does not (besides Powertools' and the
    # application's own, which its catalog reads)
    _, function = _function(stack_template, case)
    read = {field.alias for field in model.model_fields.values()}
    assert set(function["Environment"]["Variables"]) - POWERTOOLS_VARIABLES - APPLICATION_VARIABLES == read - (
        SET_WHEN_USED - set(function["Environment"]["Variables"])
    )


@CASES
def test_the_code_asset_holds_only_the_modules_and_the_handler_is_in_the_layer(
    synthesized: Synthesized, stack_template: dict[str, Any], case: ConsumerCase
) -> None:
    # Given the staged asset the function's S3 key names
    _, function = _function(stack_template, case)
    asset_hash = function["Code"]["S3Key"].removesuffix(".zip")
    asset = synthesized.outdir / f"asset.{asset_hash}"
    files = sorted(path.relative_to(asset).as_posix() for path in asset.rglob("*") if path.is_file())
    # Then it holds the modules and nothing else (no tests, no .venv, no byte code) ...
    assert "modules/__init__.py" in files
    assert [name for name in files if name.split("/")[0] not in outbox_stack.CODE_PACKAGES] == []
    assert [name for name in files if "__pycache__" in name or name.endswith(".pyc")] == []
    # ... and the handler path resolves inside the engine's files the layer is built from
    assert_handler_in_layer(case.handler)


@CASES
def test_the_subscriptions_reference_names_a_function_in_the_code_asset(
    synthesized: Synthesized, stack_template: dict[str, Any], case: ConsumerCase
) -> None:
    # The consumer loads SUBSCRIPTIONS ("package.module:function") at cold start; a name that is not in
    # the asset fails every invocation, and nothing before deploy would say so.
    _, function = _function(stack_template, case)
    module, _, attribute = function["Environment"]["Variables"]["SUBSCRIPTIONS"].partition(":")
    asset = synthesized.outdir / f"asset.{function['Code']['S3Key'].removesuffix('.zip')}"
    package = asset / Path(*module.split("."))
    source = (package / "__init__.py" if package.is_dir() else package.with_suffix(".py")).read_text()
    assert f"def {attribute}(" in source, f"{module} defines no {attribute}"


# --- the visibility timeout and the queue mapping -------------------------------------------------


@CASES
def test_the_visibility_timeout_is_at_least_six_function_timeouts(
    stack_template: dict[str, Any], case: ConsumerCase
) -> None:
    # A message must not reappear while a live handler still works on it (docs/aws-behaviour.md R6.4).
    _, queue = only_resource(stack_template, "AWS::SQS::Queue", case.queue)
    _, function = _function(stack_template, case)
    assert queue["Properties"]["VisibilityTimeout"] >= 6 * function["Timeout"]


@CASES
def test_the_mapping_feeds_the_function_from_its_queue_with_partial_failures(
    stack_template: dict[str, Any], case: ConsumerCase
) -> None:
    queue_id, _ = only_resource(stack_template, "AWS::SQS::Queue", case.queue)
    function_id, _ = _function(stack_template, case)
    mapping = _mapping(stack_template, case)
    assert mapping["EventSourceArn"] == {"Fn::GetAtt": [queue_id, "Arn"]}
    assert mapping["FunctionName"] == {"Ref": function_id}
    # Without it one failed message would make SQS retry the whole batch, already-handled ones too.
    assert mapping["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert mapping["BatchSize"] == 10
    assert mapping["ScalingConfig"] == {"MaximumConcurrency": 10}
    # No batching window (see timing), and SQS mappings take no on-failure destination (the DLQ is the queue's).
    assert "MaximumBatchingWindowInSeconds" not in mapping
    assert "DestinationConfig" not in mapping


@CASES
def test_the_mapping_waits_for_the_permission_to_read_the_queue(
    stack_template: dict[str, Any], case: ConsumerCase
) -> None:
    # The mapping references the function, and the function depends on its role's policy.
    function_id, _ = _function(stack_template, case)
    policy_id, _ = only_resource(stack_template, "AWS::IAM::Policy", case.prefix)
    assert policy_id in stack_template["Resources"][function_id]["DependsOn"]


# --- the role -------------------------------------------------------------------------------------


@CASES
def test_the_role_has_no_managed_policy(stack_template: dict[str, Any], case: ConsumerCase) -> None:
    _, function = _function(stack_template, case)
    role = stack_template["Resources"][function["Role"]["Fn::GetAtt"][0]]["Properties"]
    assert "ManagedPolicyArns" not in role
    assert "Policies" not in role
    assert role["AssumeRolePolicyDocument"]["Statement"] == [
        {"Action": "sts:AssumeRole", "Effect": "Allow", "Principal": {"Service": "lambda.amazonaws.com"}}
    ]


@CASES
def test_the_role_may_read_and_write_the_data_table(stack_template: dict[str, Any], case: ConsumerCase) -> None:
    # Durable handlers commit projection writes with their completion; best-effort ones update projections.
    data_id, _ = only_resource(stack_template, "AWS::DynamoDB::Table", "DataTable")
    statements = _statements(stack_template, case)
    allowed = actions_on(statements, "Allow", {"Fn::GetAtt": [data_id, "Arn"]})
    # What a handler may ask of the application's tables, and no more (no Scan, no batches, no stream).
    assert allowed == set(DATA_TABLE_ACTIONS)
    assert actions_on(statements, "Deny", {"Fn::GetAtt": [data_id, "Arn"]}) == set()
    # Items only: the stream is the record-change pipe's business.
    assert all({"Fn::GetAtt": [data_id, "StreamArn"]} not in listed(s["Resource"]) for s in statements)


@CASES
def test_the_role_may_consume_its_queue_and_nothing_else_on_sqs(
    stack_template: dict[str, Any], case: ConsumerCase
) -> None:
    queue_id, _ = only_resource(stack_template, "AWS::SQS::Queue", case.queue)
    sqs_statements = [
        s for s in _statements(stack_template, case) if any(a.startswith("sqs:") for a in listed(s["Action"]))
    ]
    assert [s["Resource"] for s in sqs_statements] == [{"Fn::GetAtt": [queue_id, "Arn"]}]
    # What Lambda's poller needs with the function's role: no visibility change, no URL lookup; and no send,
    # but for the durable consumer of a pipeline with ordered subscriptions (the example's), which sends a
    # deferred event back to its own queue when it may run.
    sends = {"sqs:SendMessage"} if case.prefix == "DurableConsumer" else set()
    assert set(listed(sqs_statements[0]["Action"])) == set(CONSUME_ACTIONS) | sends


@CASES
def test_the_only_wildcard_resource_is_x_ray_which_has_no_resource_level_permissions(
    stack_template: dict[str, Any], case: ConsumerCase
) -> None:
    # The AwsSolutions-IAM5 acknowledgement on this policy rests on this.
    statements = _statements(stack_template, case)
    assert actions_on(statements, "Allow", "*") == {"xray:PutTraceSegments", "xray:PutTelemetryRecords"}
    assert all(not action.endswith("*") for s in statements for action in listed(s["Action"]))


# --- the Errors alarm -----------------------------------------------------------------------------


@CASES
def test_a_failed_invocation_alarms_at_the_first_one(stack_template: dict[str, Any], case: ConsumerCase) -> None:
    topic_id, _ = only_resource(stack_template, "AWS::SNS::Topic")
    function_id, _ = _function(stack_template, case)
    alarms = [
        alarm["Properties"]
        for alarm in resources_of_type(stack_template, "AWS::CloudWatch::Alarm").values()
        if alarm["Properties"].get("Namespace") == "AWS/Lambda"
        and alarm["Properties"].get("MetricName") == "Errors"
        and alarm["Properties"]["Dimensions"] == [{"Name": "FunctionName", "Value": {"Ref": function_id}}]
    ]
    assert len(alarms) == 1
    assert_fires_on_the_first_one(alarms[0], topic_id)


@CASES
def test_failures_that_persist_alarm_after_three_periods_of_a_visibility_timeout_and_a_minute(
    stack_template: dict[str, Any], case: ConsumerCase
) -> None:
    # Given the queue's visibility timeout: a message failing on every receive comes back once per timeout
    topic_id, _ = only_resource(stack_template, "AWS::SNS::Topic")
    _, queue = only_resource(stack_template, "AWS::SQS::Queue", case.queue)
    visibility = queue["Properties"]["VisibilityTimeout"]
    period = (-(-visibility // 60) + 1) * 60

    # Then the alarm's period (that timeout in whole minutes, plus one) holds one of its failures each
    alarm = persistent_failure_alarm(stack_template, case.failure_metric, case.service)
    assert_fires_on_persistent_failure(alarm, topic_id, period_seconds=period)
    assert visibility < period <= visibility + 120
    # And its failures fill three periods before the consumer or SQS gives up on it
    assert (case.failures_before_giving_up - 1) * visibility >= (3 - 1) * period
    # And the description says why the queue-age alarm cannot see this
    assert "3+ times" in alarm["AlarmDescription"]


# --- context: each consumer's max concurrency (throwaway apps, no main-app synth) ----------------


@CASES
def test_max_concurrency_defaults_to_ten_and_is_read_from_the_context(case: ConsumerCase) -> None:
    assert getattr(settings_from({}), case.settings_field) == 10
    assert getattr(settings_from({case.concurrency_context: "50"}), case.settings_field) == 50
    assert getattr(settings_from({case.concurrency_context: 2}), case.settings_field) == 2


def test_the_two_lanes_concurrency_settings_are_independent() -> None:
    settings = settings_from({"consumerMaxConcurrency": 5, "recordChangeMaxConcurrency": 200})
    assert (settings.consumer_max_concurrency, settings.record_change_max_concurrency) == (5, 200)


@CASES
@pytest.mark.parametrize("value", [1, 1001, "0", "ten", False])
def test_a_max_concurrency_lambda_would_reject_fails_the_synth(case: ConsumerCase, value: Any) -> None:
    with pytest.raises(ValueError, match=case.concurrency_context):
        settings_from({case.concurrency_context: value})


@CASES
def test_the_stack_outputs_the_consumer_function(stack_template: dict[str, Any], case: ConsumerCase) -> None:
    function_id, _ = _function(stack_template, case)
    assert stack_template["Outputs"][case.output]["Value"] == {"Ref": function_id}
