"""The alarm topic, the pipe and queue alarms of both lanes, and the pipeline dashboard."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aws_cdk import App, Stack
from aws_cdk.assertions import Template

from outbox_cdk.alarm_topic import NO_SUBSCRIBER_METADATA, AlarmTopic
from outbox_cdk.durable_consumer import CLAIM_METRICS, DEAD_WORK_METRICS
from outbox_cdk.lambda_defaults import METRICS_NAMESPACE
from outbox_cdk.monitoring import (
    QUEUE_AGE_ALARM_THRESHOLD_SECONDS,
    RECORD_CHANGE_QUEUE_AGE_ALARM_THRESHOLD_SECONDS,
)
from outbox_cdk.record_change_consumer import ROW_CHANGE_METRICS
from outbox_cdk.timing import QUEUE_VISIBILITY_TIMEOUT_SECONDS, RECORD_CHANGE_QUEUE_VISIBILITY_TIMEOUT_SECONDS
from tests.example_app import TRIAL_CONTEXT
from tests.infrastructure.conftest import resources_of_type
from tests.infrastructure.template_queries import only_resource


def _alarms_on(stack_template: dict[str, Any], metric_name: str) -> list[dict[str, Any]]:
    return [
        alarm["Properties"]
        for alarm in resources_of_type(stack_template, "AWS::CloudWatch::Alarm").values()
        if alarm["Properties"].get("MetricName") == metric_name
    ]


@pytest.fixture(scope="module")
def topic_id(stack_template: dict[str, Any]) -> str:
    return only_resource(stack_template, "AWS::SNS::Topic")[0]


def test_the_alarm_topic_is_encrypted_with_a_rotating_key_cloudwatch_may_use(
    stack_template: dict[str, Any], topic_id: str
) -> None:
    key_id, key = only_resource(stack_template, "AWS::KMS::Key", "Alarms")
    topic = stack_template["Resources"][topic_id]["Properties"]
    assert topic["KmsMasterKeyId"] == {"Fn::GetAtt": [key_id, "Arn"]}
    assert key["Properties"]["EnableKeyRotation"] is True
    # The AWS-managed alias/aws/sns key would silently drop every alarm notification: its policy
    # cannot admit CloudWatch. This key's policy does, for this account's alarms only.
    cloudwatch_grants = [
        statement
        for statement in key["Properties"]["KeyPolicy"]["Statement"]
        if statement.get("Principal") == {"Service": "cloudwatch.amazonaws.com"}
    ]
    assert len(cloudwatch_grants) == 1
    assert set(cloudwatch_grants[0]["Action"]) == {"kms:Decrypt", "kms:GenerateDataKey*"}
    assert cloudwatch_grants[0]["Condition"]["StringEquals"] == {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}
    assert "aws:SourceArn" in cloudwatch_grants[0]["Condition"]["ArnLike"]


def test_the_alarm_topic_admits_the_alarms_of_the_stack_it_is_deployed_as(
    stack_template: dict[str, Any], topic_id: str
) -> None:
    # Under whatever name the template is deployed (a construct user's stack, a second copy), CloudFormation
    # names the alarms "<that name>-...": the pattern must be built from AWS::StackName, not a literal.
    _, key = only_resource(stack_template, "AWS::KMS::Key", "Alarms")
    _, policy = only_resource(stack_template, "AWS::SNS::TopicPolicy")
    statements = [
        *key["Properties"]["KeyPolicy"]["Statement"],
        *policy["Properties"]["PolicyDocument"]["Statement"],
    ]
    patterns = [
        json.dumps(s["Condition"]["ArnLike"]["aws:SourceArn"])
        for s in statements
        if s.get("Principal") == {"Service": "cloudwatch.amazonaws.com"}
    ]
    assert len(patterns) == 2
    for pattern in patterns:
        assert '{"Ref": "AWS::StackName"}' in pattern
        assert "OutboxEngine" not in pattern


def test_the_alarm_topic_admits_cloudwatch_and_only_tls(stack_template: dict[str, Any], topic_id: str) -> None:
    _, policy = only_resource(stack_template, "AWS::SNS::TopicPolicy")
    statements = policy["Properties"]["PolicyDocument"]["Statement"]
    assert any(
        s["Effect"] == "Deny" and s["Condition"] == {"Bool": {"aws:SecureTransport": "false"}} for s in statements
    )
    assert any(
        s["Effect"] == "Allow"
        and s["Principal"] == {"Service": "cloudwatch.amazonaws.com"}
        and s["Action"] == "sns:Publish"
        and "aws:SourceAccount" in s["Condition"]["StringEquals"]
        for s in statements
    )


def test_without_an_email_the_topic_records_why_nobody_subscribes(stack_template: dict[str, Any]) -> None:
    assert resources_of_type(stack_template, "AWS::SNS::Subscription") == {}
    [topic] = resources_of_type(stack_template, "AWS::SNS::Topic").values()
    assert topic["Metadata"][NO_SUBSCRIBER_METADATA] == TRIAL_CONTEXT["noAlarmSubscriber"]


def test_the_alarm_email_subscribes_to_the_topic() -> None:
    stack = Stack(App(), "TopicProbe")
    AlarmTopic(stack, "Alarms", email="ops@example.com")
    Template.from_stack(stack).has_resource_properties(
        "AWS::SNS::Subscription", {"Protocol": "email", "Endpoint": "ops@example.com"}
    )


@pytest.mark.parametrize("pipe_prefix", ["RelayPipe", "RecordChangePipe", "AuditorPipe"])
@pytest.mark.parametrize(
    "metric_name", ["ExecutionFailed", "TargetStageFailed", "ExecutionPartiallyFailed", "TargetStagePartiallyFailed"]
)
def test_pipe_failures_alarm_at_the_first_one(
    stack_template: dict[str, Any], topic_id: str, pipe_prefix: str, metric_name: str
) -> None:
    pipe_id, _ = only_resource(stack_template, "AWS::Pipes::Pipe", pipe_prefix)
    alarms = [
        alarm
        for alarm in _alarms_on(stack_template, metric_name)
        if alarm["Dimensions"] == [{"Name": "PipeName", "Value": {"Ref": pipe_id}}]
    ]
    assert len(alarms) == 1
    alarm = alarms[0]
    assert alarm["Namespace"] == "AWS/EventBridge/Pipes"
    assert alarm["Statistic"] == "Sum"
    assert (alarm["Threshold"], alarm["ComparisonOperator"]) == (0, "GreaterThanThreshold")
    assert alarm["TreatMissingData"] == "notBreaching"
    assert alarm["AlarmActions"] == [{"Ref": topic_id}]
    assert metric_name in alarm["AlarmDescription"]


@pytest.mark.parametrize(
    ("queue_prefix", "threshold", "visibility_timeout"),
    [
        ("DurableQueue", QUEUE_AGE_ALARM_THRESHOLD_SECONDS, QUEUE_VISIBILITY_TIMEOUT_SECONDS),
        (
            "RecordChangesQueue",
            RECORD_CHANGE_QUEUE_AGE_ALARM_THRESHOLD_SECONDS,
            RECORD_CHANGE_QUEUE_VISIBILITY_TIMEOUT_SECONDS,
        ),
    ],
)
def test_each_lanes_queue_alarms_on_the_age_of_its_oldest_message(
    stack_template: dict[str, Any], topic_id: str, queue_prefix: str, threshold: int, visibility_timeout: int
) -> None:
    queue_id, _ = only_resource(stack_template, "AWS::SQS::Queue", queue_prefix)
    assert len(_alarms_on(stack_template, "ApproximateAgeOfOldestMessage")) == 2
    alarms = [
        alarm
        for alarm in _alarms_on(stack_template, "ApproximateAgeOfOldestMessage")
        if alarm["Dimensions"] == [{"Name": "QueueName", "Value": {"Fn::GetAtt": [queue_id, "QueueName"]}}]
    ]
    assert len(alarms) == 1
    alarm = alarms[0]
    assert alarm["Statistic"] == "Maximum"
    # Older than two visibility timeouts and received fewer than three times: nobody is receiving it.
    assert alarm["Threshold"] == threshold == 2 * visibility_timeout
    assert alarm["ComparisonOperator"] == "GreaterThanThreshold"
    assert alarm["AlarmActions"] == [{"Ref": topic_id}]
    # What it cannot see, and which alarm does: a message that fails on every receive (R9.1).
    assert "Blind to a message that fails on every receive" in alarm["AlarmDescription"]
    assert "3+ times" in alarm["AlarmDescription"]


def test_the_dashboard_shows_the_whole_pipeline(stack_template: dict[str, Any]) -> None:
    _, dashboard = only_resource(stack_template, "AWS::CloudWatch::Dashboard")
    assert "DashboardName" not in dashboard["Properties"], "CloudFormation generates the name"
    body = json.dumps(dashboard["Properties"]["DashboardBody"])
    pipe_id, _ = only_resource(stack_template, "AWS::Pipes::Pipe", "RelayPipe")
    expected_mentions = [
        METRICS_NAMESPACE,
        # What the relay carried to the durable queue (nothing counts emits: test_metrics_exist).
        "Events relayed to the durable queue",
        "NumberOfMessagesSent",
        "AWS/EventBridge/Pipes",
        pipe_id,
        "EventCount",
        "ExecutionFailed",
        "TargetStageFailed",
        "ExecutionPartiallyFailed",
        "TargetStagePartiallyFailed",
        "ApproximateNumberOfMessagesVisible",
        "ApproximateAgeOfOldestMessage",
        only_resource(stack_template, "AWS::SQS::Queue", "DurableQueue")[0],
        only_resource(stack_template, "AWS::SQS::Queue", "DurableDeadLetters")[0],
        only_resource(stack_template, "AWS::SQS::Queue", "RelayDeadLetters")[0],
        # The durable consumer and its inbox.
        only_resource(stack_template, "AWS::Lambda::Function", "DurableConsumer")[0],
        "AWS/Lambda",
        "Invocations",
        "Errors",
        "Throttles",
        "Duration",
        *CLAIM_METRICS,
        *DEAD_WORK_METRICS,
        only_resource(stack_template, "AWS::DynamoDB::Table", "InboxTable")[0],
        "ConditionalCheckFailedRequests",
        "ThrottledRequests",
        "ConsumedWriteCapacityUnits",
        # The record-change lane: its pipe, queue depth and age, both its DLQs, its consumer.
        only_resource(stack_template, "AWS::Pipes::Pipe", "RecordChangePipe")[0],
        only_resource(stack_template, "AWS::SQS::Queue", "RecordChangesQueue")[0],
        only_resource(stack_template, "AWS::SQS::Queue", "RecordChangesDeadLetters")[0],
        only_resource(stack_template, "AWS::SQS::Queue", "RecordChangePipeDeadLetters")[0],
        only_resource(stack_template, "AWS::Lambda::Function", "RecordChangeConsumer")[0],
        "ApproximateNumberOfMessagesNotVisible",
        *ROW_CHANGE_METRICS,
    ]
    assert [mention for mention in expected_mentions if mention not in body] == []
    # Every alarm of the stack is on the dashboard's status widget.
    for alarm_id in resources_of_type(stack_template, "AWS::CloudWatch::Alarm"):
        assert json.dumps({"Fn::GetAtt": [alarm_id, "Arn"]}) in body
