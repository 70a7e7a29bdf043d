"""What both pipes share (source settings, DLQ, logs, role), read from the synthesized template.

Each test runs once for the relay (events stream -> durable FIFO queue) and once for the record-change
pipe (data stream -> record-change queue); what differs between them is in test_relay_pipe and
test_record_change_pipe.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from aws_cdk import App, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from aws_cdk.assertions import Template
from constructs import Construct

from outbox_cdk.events_table import EventsTable
from outbox_cdk.record_change_pipe import RecordChangePipe
from outbox_cdk.relay_pipe import RelayPipe
from outbox_cdk.stream_pipe import PIPE_NAME_MAX_LENGTH
from stacks.data_table import DataTable
from tests.infrastructure.conftest import resources_of_type
from tests.infrastructure.template_queries import allowed_pairs, arn_of, only_resource, role_statements

TWENTY_FOUR_HOURS = 24 * 60 * 60


@dataclass(frozen=True)
class PipeCase:
    """Logical-id prefixes of one pipe and the resources it connects."""

    pipe: str
    table: str
    target: str
    dead_letters: str
    logs: str
    role_policy: str


RELAY = PipeCase(
    pipe="RelayPipe",
    table="EventsTable",
    target="DurableQueue",
    dead_letters="RelayDeadLetters",
    logs="RelayLogs",
    role_policy="RelayRole",
)
RECORD_CHANGE = PipeCase(
    pipe="RecordChangePipe",
    table="DataTable",
    target="RecordChangesQueue",
    dead_letters="RecordChangePipeDeadLetters",
    logs="RecordChangePipeLogs",
    role_policy="RecordChangePipeRole",
)


@pytest.fixture(params=[RELAY, RECORD_CHANGE], ids=["relay", "record-change"])
def case(request: pytest.FixtureRequest) -> PipeCase:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
def pipe(stack_template: dict[str, Any], case: PipeCase) -> dict[str, Any]:
    return only_resource(stack_template, "AWS::Pipes::Pipe", case.pipe)[1]["Properties"]  # type: ignore[no-any-return]


@pytest.fixture
def stream_parameters(pipe: dict[str, Any]) -> dict[str, Any]:
    return pipe["SourceParameters"]["DynamoDBStreamParameters"]  # type: ignore[no-any-return]


def test_the_pipe_reads_its_tables_stream_and_writes_its_queue(
    stack_template: dict[str, Any], case: PipeCase, pipe: dict[str, Any]
) -> None:
    table_id, _ = only_resource(stack_template, "AWS::DynamoDB::Table", case.table)
    queue_id, _ = only_resource(stack_template, "AWS::SQS::Queue", case.target)
    assert pipe["Source"] == {"Fn::GetAtt": [table_id, "StreamArn"]}
    assert pipe["Target"] == {"Fn::GetAtt": [queue_id, "Arn"]}


def test_the_stream_source_starts_at_the_trim_horizon(stream_parameters: dict[str, Any]) -> None:
    # LATEST would skip whatever was written before the pipe existed (or was replaced).
    assert stream_parameters["StartingPosition"] == "TRIM_HORIZON"


def test_failures_are_bounded_and_end_in_the_pipe_dlq(
    stack_template: dict[str, Any], case: PipeCase, stream_parameters: dict[str, Any]
) -> None:
    dlq_id, dlq = only_resource(stack_template, "AWS::SQS::Queue", case.dead_letters)
    assert stream_parameters["BatchSize"] == 10, "SQS takes at most 10 messages per batch"
    assert 0 <= stream_parameters["MaximumRetryAttempts"] <= 10_000, "-1 would retry for 24 h"
    assert 60 <= stream_parameters["MaximumRecordAgeInSeconds"] < TWENTY_FOUR_HOURS
    assert stream_parameters["OnPartialBatchItemFailure"] == "AUTOMATIC_BISECT"
    assert stream_parameters["DeadLetterConfig"] == {"Arn": {"Fn::GetAtt": [dlq_id, "Arn"]}}
    # A stream source's DLQ receives batch metadata: a standard queue, kept as long as SQS allows.
    assert "FifoQueue" not in dlq["Properties"]
    assert dlq["Properties"]["MessageRetentionPeriod"] == 14 * TWENTY_FOUR_HOURS


def pipe_arn(name: str) -> dict[str, Any]:
    """A pipe's ARN as the template builds it from its name (R10.10)."""
    parts = ["arn:", {"Ref": "AWS::Partition"}, ":pipes:", {"Ref": "AWS::Region"}, ":", {"Ref": "AWS::AccountId"}]
    return {"Fn::Join": ["", [*parts, f":pipe/{name}"]]}


def test_the_pipe_has_a_name_its_role_can_trust(case: PipeCase, pipe: dict[str, Any]) -> None:
    # A literal name of the stack and the construct path, in Pipes' alphabet: an ARN the role's trust can name.
    assert re.fullmatch(r"OutboxEngine-Outbox-[\w.-]+", pipe["Name"]), pipe["Name"]
    assert len(pipe["Name"]) <= PIPE_NAME_MAX_LENGTH


def test_the_pipes_names_differ(stack_template: dict[str, Any]) -> None:
    names = [p["Properties"]["Name"] for p in resources_of_type(stack_template, "AWS::Pipes::Pipe").values()]
    assert len(names) == len(set(names)) == 3, names


def test_the_pipe_logs_errors_without_execution_data_to_a_retained_log_group(
    stack_template: dict[str, Any], case: PipeCase, pipe: dict[str, Any]
) -> None:
    log_group_id, log_group = only_resource(stack_template, "AWS::Logs::LogGroup", case.logs)
    assert pipe["LogConfiguration"] == {
        "CloudwatchLogsLogDestination": {"LogGroupArn": {"Fn::GetAtt": [log_group_id, "Arn"]}},
        "Level": "ERROR",
    }
    assert log_group["Properties"]["RetentionInDays"] > 0


def test_the_pipe_role_may_read_its_stream_send_to_its_queue_and_dlq_and_write_its_logs(
    stack_template: dict[str, Any], case: PipeCase, pipe: dict[str, Any]
) -> None:
    role_id = pipe["RoleArn"]["Fn::GetAtt"][0]
    role = stack_template["Resources"][role_id]["Properties"]
    assert role["AssumeRolePolicyDocument"]["Statement"] == [
        {
            "Action": "sts:AssumeRole",
            "Condition": {
                "StringEquals": {"aws:SourceAccount": {"Ref": "AWS::AccountId"}},
                "ArnEquals": {"aws:SourceArn": pipe_arn(pipe["Name"])},
            },
            "Effect": "Allow",
            "Principal": {"Service": "pipes.amazonaws.com"},
        }
    ]
    assert "Policies" not in role
    assert "ManagedPolicyArns" not in role

    table_id, _ = only_resource(stack_template, "AWS::DynamoDB::Table", case.table)
    queue_id, _ = only_resource(stack_template, "AWS::SQS::Queue", case.target)
    dlq_id, _ = only_resource(stack_template, "AWS::SQS::Queue", case.dead_letters)
    log_group_id, _ = only_resource(stack_template, "AWS::Logs::LogGroup", case.logs)
    send = ("sqs:SendMessage", "sqs:GetQueueAttributes", "sqs:GetQueueUrl")
    expected = {
        # ListStreams has no resource-level permissions; the rest is this stream only.
        ("dynamodb:ListStreams", '"*"'),
        *{
            (action, arn_of(table_id, "StreamArn"))
            for action in ("dynamodb:DescribeStream", "dynamodb:GetRecords", "dynamodb:GetShardIterator")
        },
        *{(action, arn_of(queue_id)) for action in send},
        *{(action, arn_of(dlq_id)) for action in send},
        *{(action, arn_of(log_group_id)) for action in ("logs:CreateLogStream", "logs:PutLogEvents")},
    }
    # Nothing else: no table items, no other stream or queue, no KMS (no customer key), no wildcard actions.
    assert allowed_pairs(role_statements(stack_template, role_id)) == expected


def test_the_pipe_waits_for_its_policy(stack_template: dict[str, Any], case: PipeCase) -> None:
    _, resource = only_resource(stack_template, "AWS::Pipes::Pipe", case.pipe)
    policy_id, _ = only_resource(stack_template, "AWS::IAM::Policy", case.role_policy)
    assert policy_id in resource["DependsOn"]


def test_each_pipe_has_its_own_role_dlq_and_log_group(stack_template: dict[str, Any]) -> None:
    # Given both pipes
    relay = only_resource(stack_template, "AWS::Pipes::Pipe", RELAY.pipe)[1]["Properties"]
    record_change = only_resource(stack_template, "AWS::Pipes::Pipe", RECORD_CHANGE.pipe)[1]["Properties"]
    # Then they share nothing: a failure or a grant of one lane never reaches the other
    assert relay["RoleArn"] != record_change["RoleArn"]
    for path in (("SourceParameters", "DynamoDBStreamParameters", "DeadLetterConfig"), ("LogConfiguration",)):
        relay_value, record_change_value = relay, record_change
        for key in path:
            relay_value, record_change_value = relay_value[key], record_change_value[key]
        assert relay_value != record_change_value


# --- the log switch (context pipeLogLevel / pipeLogExecutionData), applied by each pipe construct -----
# Throwaway stacks, no main-app synth; OutboxStack hands both pipes the same ExampleSettings values.


def _relay(stack: Stack, **options: Any) -> Construct:
    target = sqs.Queue(stack, "Target", fifo=True)
    return RelayPipe(
        stack,
        "Pipe",
        events=EventsTable(stack, "Events", operators=[iam.AccountRootPrincipal()]),
        target=target,
        alarm_topic=sns.Topic(stack, "Topic"),
        **options,
    )


def _record_change(stack: Stack, **options: Any) -> Construct:
    target = sqs.Queue(stack, "Target")
    return RecordChangePipe(
        stack,
        "Pipe",
        table=DataTable(stack, "Data").table,
        target=target,
        alarm_topic=sns.Topic(stack, "Topic"),
        **options,
    )


PIPE_BUILDERS = pytest.mark.parametrize("build", [_relay, _record_change], ids=["relay", "record-change"])


@PIPE_BUILDERS
def test_the_log_level_and_execution_data_follow_the_settings(build: Callable[..., Construct]) -> None:
    stack = Stack(App(), "PipeProbe")
    build(stack, log_level="TRACE", log_execution_data=True)
    _, resource = only_resource(Template.from_stack(stack).to_json(), "AWS::Pipes::Pipe")
    assert resource["Properties"]["LogConfiguration"]["Level"] == "TRACE"
    assert resource["Properties"]["LogConfiguration"]["IncludeExecutionData"] == ["ALL"]


@PIPE_BUILDERS
def test_an_unknown_log_level_fails_the_synth(build: Callable[..., Construct]) -> None:
    with pytest.raises(ValueError, match="log level"):
        build(Stack(App(), "PipeProbe"), log_level="VERBOSE")
