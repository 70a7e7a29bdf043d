"""The relay pipe (events stream -> durable FIFO queue), read from the synthesized template."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aws_cdk import App, Stack
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from aws_cdk.assertions import Template

from stacks.constructs import relay_pipe
from stacks.constructs.events_table import EventsTable
from stacks.constructs.relay_pipe import RelayPipe
from stacks.outbox_stack import OutboxSettings
from tests.infrastructure.conftest import resources_of_type
from tests.infrastructure.template_queries import only_resource

TWENTY_FOUR_HOURS = 24 * 60 * 60


@pytest.fixture(scope="module")
def pipe(stack_template: dict[str, Any]) -> dict[str, Any]:
    _, resource = only_resource(stack_template, "AWS::Pipes::Pipe")
    return resource["Properties"]  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def stream_parameters(pipe: dict[str, Any]) -> dict[str, Any]:
    return pipe["SourceParameters"]["DynamoDBStreamParameters"]  # type: ignore[no-any-return]


def test_the_pipe_reads_the_events_stream_and_writes_the_durable_queue(
    stack_template: dict[str, Any], pipe: dict[str, Any]
) -> None:
    table_id, _ = only_resource(stack_template, "AWS::DynamoDB::Table", "EventsTable")
    queue_id, _ = only_resource(stack_template, "AWS::SQS::Queue", "DurableQueue")
    assert pipe["Source"] == {"Fn::GetAtt": [table_id, "StreamArn"]}
    assert pipe["Target"] == {"Fn::GetAtt": [queue_id, "Arn"]}
    assert "Name" not in pipe, "CloudFormation generates the name"


def test_only_inserted_event_rows_pass_the_filter(pipe: dict[str, Any]) -> None:
    filters = pipe["SourceParameters"]["FilterCriteria"]["Filters"]
    assert len(filters) == 1
    assert json.loads(filters[0]["Pattern"]) == {
        "eventName": ["INSERT"],
        "dynamodb": {"NewImage": {"kind": {"S": ["EVENT"]}}},
    }


def test_the_filter_uses_only_exact_matches_which_pipes_supports(pipe: dict[str, Any]) -> None:
    # Pipes rejects anything-but with prefix/suffix/ignore-case/wildcard and wildcard (AWS-SEMANTICS R3.2);
    # exact string matches are supported everywhere, so the pattern's leaves must all be plain strings.
    def leaves(node: Any) -> list[Any]:
        if isinstance(node, dict):
            return [leaf for value in node.values() for leaf in leaves(value)]
        if isinstance(node, list):
            return list(node)
        return [node]

    pattern = json.loads(pipe["SourceParameters"]["FilterCriteria"]["Filters"][0]["Pattern"])
    assert all(isinstance(leaf, str) for leaf in leaves(pattern))


def test_the_target_gets_the_raw_image_grouped_by_tenant_and_deduplicated_by_event_id(
    pipe: dict[str, Any],
) -> None:
    assert pipe["TargetParameters"] == {
        "InputTemplate": "<$.dynamodb.NewImage>",
        "SqsQueueParameters": {
            "MessageGroupId": "$.dynamodb.NewImage.tenant.S",
            "MessageDeduplicationId": "$.dynamodb.NewImage.event_id.S",
        },
    }


def test_the_relay_constants_match_the_engines_event_rows() -> None:
    # The engine writes kind = KIND_EVENT; if it ever renames the marker the filter would drop every event.
    from outbox import keys

    assert keys.KIND_EVENT == relay_pipe.EVENT_KIND
    assert keys.KIND_HEAD != relay_pipe.EVENT_KIND


def test_the_stream_source_starts_at_the_trim_horizon(stream_parameters: dict[str, Any]) -> None:
    assert stream_parameters["StartingPosition"] == "TRIM_HORIZON"


def test_failures_are_bounded_and_end_in_the_pipe_dlq(
    stack_template: dict[str, Any], stream_parameters: dict[str, Any]
) -> None:
    dlq_id, dlq = only_resource(stack_template, "AWS::SQS::Queue", "RelayDeadLetters")
    assert 1 <= stream_parameters["BatchSize"] <= 10, "SQS takes at most 10 messages per batch"
    assert 0 <= stream_parameters["MaximumRetryAttempts"] <= 10_000, "-1 would retry for 24 h"
    assert 60 <= stream_parameters["MaximumRecordAgeInSeconds"] < TWENTY_FOUR_HOURS
    assert stream_parameters["OnPartialBatchItemFailure"] == "AUTOMATIC_BISECT"
    assert stream_parameters["DeadLetterConfig"] == {"Arn": {"Fn::GetAtt": [dlq_id, "Arn"]}}
    # A stream source's DLQ receives batch metadata: a standard queue, kept as long as SQS allows.
    assert "FifoQueue" not in dlq["Properties"]
    assert dlq["Properties"]["MessageRetentionPeriod"] == 14 * TWENTY_FOUR_HOURS


def test_the_pipe_logs_errors_without_execution_data_to_a_retained_log_group(
    stack_template: dict[str, Any], pipe: dict[str, Any]
) -> None:
    log_group_id, log_group = only_resource(stack_template, "AWS::Logs::LogGroup", "RelayLogs")
    assert pipe["LogConfiguration"] == {
        "CloudwatchLogsLogDestination": {"LogGroupArn": {"Fn::GetAtt": [log_group_id, "Arn"]}},
        "Level": "ERROR",
    }
    assert log_group["Properties"]["RetentionInDays"] > 0


def _statement_pairs(statements: list[dict[str, Any]]) -> set[tuple[str, str]]:
    """(action, resource) pairs, so that merged and split statements compare equal."""
    pairs = set()
    for statement in statements:
        assert statement["Effect"] == "Allow"
        assert "Condition" not in statement
        actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        resources = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
        pairs |= {(action, json.dumps(resource, sort_keys=True)) for action in actions for resource in resources}
    return pairs


def test_the_pipe_role_may_do_exactly_what_the_relay_needs(
    stack_template: dict[str, Any], pipe: dict[str, Any]
) -> None:
    role_id = pipe["RoleArn"]["Fn::GetAtt"][0]
    role = stack_template["Resources"][role_id]["Properties"]
    assert role["AssumeRolePolicyDocument"]["Statement"] == [
        {
            "Action": "sts:AssumeRole",
            "Condition": {"StringEquals": {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}},
            "Effect": "Allow",
            "Principal": {"Service": "pipes.amazonaws.com"},
        }
    ]
    assert "Policies" not in role
    assert "ManagedPolicyArns" not in role
    statements = [
        statement
        for policy in resources_of_type(stack_template, "AWS::IAM::Policy").values()
        if {"Ref": role_id} in policy["Properties"]["Roles"]
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
    ]

    table_id, _ = only_resource(stack_template, "AWS::DynamoDB::Table", "EventsTable")
    queue_id, _ = only_resource(stack_template, "AWS::SQS::Queue", "DurableQueue")
    dlq_id, _ = only_resource(stack_template, "AWS::SQS::Queue", "RelayDeadLetters")
    log_group_id, _ = only_resource(stack_template, "AWS::Logs::LogGroup", "RelayLogs")
    stream = json.dumps({"Fn::GetAtt": [table_id, "StreamArn"]}, sort_keys=True)
    send = ("sqs:SendMessage", "sqs:GetQueueAttributes", "sqs:GetQueueUrl")
    expected = {
        # ListStreams has no resource-level permissions; the rest is this stream only.
        ("dynamodb:ListStreams", '"*"'),
        *{
            (action, stream)
            for action in ("dynamodb:DescribeStream", "dynamodb:GetRecords", "dynamodb:GetShardIterator")
        },
        *{(action, json.dumps({"Fn::GetAtt": [queue_id, "Arn"]}, sort_keys=True)) for action in send},
        *{(action, json.dumps({"Fn::GetAtt": [dlq_id, "Arn"]}, sort_keys=True)) for action in send},
        *{
            (action, json.dumps({"Fn::GetAtt": [log_group_id, "Arn"]}, sort_keys=True))
            for action in ("logs:CreateLogStream", "logs:PutLogEvents")
        },
    }
    # Nothing else: no KMS (no customer key on the stream or the queues), no wildcard actions.
    assert _statement_pairs(statements) == expected


def test_the_pipe_waits_for_its_policy(stack_template: dict[str, Any]) -> None:
    _, resource = only_resource(stack_template, "AWS::Pipes::Pipe")
    policy_id, _ = only_resource(stack_template, "AWS::IAM::Policy", "RelayRole")
    assert policy_id in resource["DependsOn"]


# --- context switches: read by OutboxSettings, applied by RelayPipe (throwaway stacks, no main-app synth) ---


def _settings(context: dict[str, Any]) -> OutboxSettings:
    return OutboxSettings.from_context(App(context=context).node)


def test_settings_default_to_error_logs_without_execution_data_and_no_email() -> None:
    assert _settings({}) == OutboxSettings(alarm_email=None, pipe_log_level="ERROR", pipe_log_execution_data=False)


def test_settings_read_the_context_keys() -> None:
    settings = _settings({"pipeLogLevel": "TRACE", "pipeLogExecutionData": "true", "alarmEmail": "ops@example.com"})
    assert settings == OutboxSettings(
        alarm_email="ops@example.com", pipe_log_level="TRACE", pipe_log_execution_data=True
    )


@pytest.mark.parametrize(
    "context",
    [{"pipeLogLevel": "DEBUG"}, {"pipeLogExecutionData": "yes"}, {"alarmEmail": "not-an-address"}],
)
def test_settings_reject_a_wrong_value_instead_of_falling_back(context: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="context"):
        _settings(context)


def _probe_pipe(**options: Any) -> dict[str, Any]:
    stack = Stack(App(), "PipeProbe")
    topic = sns.Topic(stack, "Topic")
    target = sqs.Queue(stack, "Target", fifo=True)
    RelayPipe(stack, "Relay", events=EventsTable(stack, "Events"), target=target, alarm_topic=topic, **options)
    _, resource = only_resource(Template.from_stack(stack).to_json(), "AWS::Pipes::Pipe")
    return resource["Properties"]["LogConfiguration"]  # type: ignore[no-any-return]


def test_the_log_level_and_execution_data_follow_the_settings() -> None:
    log_configuration = _probe_pipe(log_level="TRACE", log_execution_data=True)
    assert log_configuration["Level"] == "TRACE"
    assert log_configuration["IncludeExecutionData"] == ["ALL"]


def test_an_unknown_log_level_fails_the_synth() -> None:
    with pytest.raises(ValueError, match="log level"):
        _probe_pipe(log_level="VERBOSE")
