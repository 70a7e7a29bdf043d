"""Nothing fails silently: every dead-letter target in the app has an alarm at > 0 on the alarm topic."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from aws_cdk import App, Stack
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from aws_cdk.assertions import Template

from outbox_cdk.alarmed_dlq import AlarmedDeadLetterQueue
from outbox_cdk.control_plane import WATCHED_CALLS
from tests.infrastructure.conftest import resources_of_type
from tests.infrastructure.dead_letters import dead_letter_targets, unalarmed_dead_letter_targets
from tests.infrastructure.template_queries import only_resource


def test_every_dead_letter_target_in_the_app_is_alarmed(stack_template: dict[str, Any]) -> None:
    # Given the synthesized app
    # When every dead-letter target is collected from the template
    targets = dead_letter_targets(stack_template)

    # Then they are exactly the known ones, each lane's and the tamper queue's redrive, each pipe's DLQ, the
    # anchoring function's and its schedule's (one queue), and the control-plane watch's rules' (one queue) (the
    # checker is not vacuous) ...
    def logical_id(resource_type: str, prefix: str) -> str:
        return only_resource(stack_template, resource_type, prefix)[0]

    redrive, pipe_dlq = (
        "RedrivePolicy.deadLetterTargetArn",
        "SourceParameters.DynamoDBStreamParameters.DeadLetterConfig.Arn",
    )
    expected = {
        (logical_id("AWS::SQS::Queue", "DurableQueue"), redrive, logical_id("AWS::SQS::Queue", "DurableDeadLetters")),
        (logical_id("AWS::Pipes::Pipe", "RelayPipe"), pipe_dlq, logical_id("AWS::SQS::Queue", "RelayDeadLetters")),
        (
            logical_id("AWS::SQS::Queue", "RecordChangesQueue"),
            redrive,
            logical_id("AWS::SQS::Queue", "RecordChangesDeadLetters"),
        ),
        (
            logical_id("AWS::Pipes::Pipe", "RecordChangePipe"),
            pipe_dlq,
            logical_id("AWS::SQS::Queue", "RecordChangePipeDeadLetters"),
        ),
        (
            logical_id("AWS::SQS::Queue", "AuditorFindingsQueue"),
            redrive,
            logical_id("AWS::SQS::Queue", "AuditorFindingsDeadLetters"),
        ),
        (
            logical_id("AWS::Pipes::Pipe", "AuditorPipe"),
            pipe_dlq,
            logical_id("AWS::SQS::Queue", "AuditorPipeDeadLetters"),
        ),
        (
            logical_id("AWS::Lambda::Function", "AuditorAnchoring"),
            "DeadLetterConfig.TargetArn",
            logical_id("AWS::SQS::Queue", "AuditorAnchoringDeadLetters"),
        ),
        (
            logical_id("AWS::Events::Rule", "AuditorAnchoringSchedule"),
            "Targets.0.DeadLetterConfig.Arn",
            logical_id("AWS::SQS::Queue", "AuditorAnchoringDeadLetters"),
        ),
    } | {
        # Each rule of the control-plane watch, into its one DLQ.
        (rule_id, "Targets.0.DeadLetterConfig.Arn", logical_id("AWS::SQS::Queue", "ControlPlaneDeadLetters"))
        for rule_id in resources_of_type(stack_template, "AWS::Events::Rule")
        if rule_id.startswith("OutboxControlPlane")
    }
    assert len(targets) == 8 + len(WATCHED_CALLS)
    assert {(target.owner, target.path, target.target["Fn::GetAtt"][0]) for target in targets} == expected
    # ... and each one has its alarm
    assert unalarmed_dead_letter_targets(stack_template) == []


def test_dead_letter_alarms_notify_the_encrypted_alarm_topic(stack_template: dict[str, Any]) -> None:
    topics = resources_of_type(stack_template, "AWS::SNS::Topic")
    assert len(topics) == 1
    (topic_id, topic), *_ = topics.items()
    assert "KmsMasterKeyId" in topic["Properties"]
    dlq_alarms = [
        alarm["Properties"]
        for alarm in resources_of_type(stack_template, "AWS::CloudWatch::Alarm").values()
        if alarm["Properties"].get("MetricName") == "ApproximateNumberOfMessagesVisible"
    ]
    assert len(dlq_alarms) == 8  # the seven of the pipeline's DLQs, and the control-plane watch's
    for alarm in dlq_alarms:
        assert alarm["AlarmActions"] == [{"Ref": topic_id}]
        assert alarm["TreatMissingData"] == "notBreaching"


# --- the checker itself can fail ---------------------------------------------------------------------


def _queue_with_plain_dlq(stack: Stack, topic: sns.Topic) -> None:
    dlq = sqs.Queue(stack, "PlainDlq")
    sqs.Queue(stack, "Work", dead_letter_queue=sqs.DeadLetterQueue(queue=dlq, max_receive_count=3))


def _dlq_alarm_without_action(stack: Stack, topic: sns.Topic) -> None:
    dlq = sqs.Queue(stack, "PlainDlq")
    sqs.Queue(stack, "Work", dead_letter_queue=sqs.DeadLetterQueue(queue=dlq, max_receive_count=3))
    dlq.metric_approximate_number_of_messages_visible().create_alarm(
        stack,
        "Silent",
        threshold=0,
        evaluation_periods=1,
        comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
    )


def _dlq_alarm_at_the_wrong_threshold(stack: Stack, topic: sns.Topic) -> None:
    from aws_cdk import aws_cloudwatch_actions as actions

    dlq = sqs.Queue(stack, "PlainDlq")
    sqs.Queue(stack, "Work", dead_letter_queue=sqs.DeadLetterQueue(queue=dlq, max_receive_count=3))
    alarm = dlq.metric_approximate_number_of_messages_visible().create_alarm(
        stack,
        "Lenient",
        threshold=10,
        evaluation_periods=1,
        comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
    )
    alarm.add_alarm_action(actions.SnsAction(topic))


def _foreign_dlq(stack: Stack, topic: sns.Topic) -> None:
    foreign = sqs.Queue.from_queue_arn(stack, "Foreign", "arn:aws:sqs:us-east-1:123456789012:elsewhere")
    sqs.Queue(stack, "Work", dead_letter_queue=sqs.DeadLetterQueue(queue=foreign, max_receive_count=3))


def _mapping_on_failure_to_plain_queue(stack: Stack, topic: sns.Topic) -> None:
    from aws_cdk import aws_lambda as lambda_

    dlq = sqs.Queue(stack, "PlainDlq")
    lambda_.CfnEventSourceMapping(
        stack,
        "Work",
        function_name="consumer",
        event_source_arn="arn:aws:dynamodb:us-east-1:123456789012:table/t/stream/2026-01-01T00:00:00.000",
        starting_position="TRIM_HORIZON",
        destination_config=lambda_.CfnEventSourceMapping.DestinationConfigProperty(
            on_failure=lambda_.CfnEventSourceMapping.OnFailureProperty(destination=dlq.queue_arn)
        ),
    )


@pytest.mark.parametrize(
    ("build", "reported"),
    [
        (_queue_with_plain_dlq, "PlainDlq"),
        (_dlq_alarm_without_action, "PlainDlq"),
        (_dlq_alarm_at_the_wrong_threshold, "PlainDlq"),
        (_foreign_dlq, "elsewhere"),
        (_mapping_on_failure_to_plain_queue, "PlainDlq"),
    ],
    ids=["no alarm", "alarm without action", "alarm at 10", "DLQ outside the template", "mapping on-failure"],
)
def test_the_checker_reports_a_dead_letter_queue_made_without_the_construct(
    build: Callable[[Stack, sns.Topic], None], reported: str
) -> None:
    # Given a throwaway stack where something gets a DLQ without AlarmedDeadLetterQueue
    stack = Stack(App(), "Unalarmed")
    build(stack, sns.Topic(stack, "Topic"))
    # When the checker reads its template
    findings = unalarmed_dead_letter_targets(Template.from_stack(stack).to_json())
    # Then it reports that DLQ, and only that one
    assert len(findings) == 1, findings
    assert findings[0].startswith("Work")
    assert reported in findings[0]


def test_the_checker_accepts_the_construct() -> None:
    stack = Stack(App(), "Alarmed")
    topic = sns.Topic(stack, "Topic")
    dlq = AlarmedDeadLetterQueue(stack, "Dlq", alarm_topic=topic, fifo=False, description="probe")
    sqs.Queue(stack, "Work", dead_letter_queue=sqs.DeadLetterQueue(queue=dlq.queue, max_receive_count=3))
    assert unalarmed_dead_letter_targets(Template.from_stack(stack).to_json()) == []
