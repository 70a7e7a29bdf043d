"""Nothing fails silently: every dead-letter target in the app has an alarm at > 0 on the alarm topic, and an
alarm on every arrival after the first, which the depth alarm, already in ALARM, does not report."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from aws_cdk import App, Duration, Stack
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from aws_cdk.assertions import Template

from outbox_cdk.alarmed_dlq import ARRIVAL_EXPRESSION, AlarmedDeadLetterQueue
from outbox_cdk.control_plane import WATCHED_CALLS
from tests.infrastructure.conftest import resources_of_type
from tests.infrastructure.dead_letters import (
    DLQ_METRIC,
    dead_letter_queues_without_arrival_alarm,
    dead_letter_targets,
    probe,
    unalarmed_dead_letter_targets,
)
from tests.infrastructure.metric_math import alarm_state
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
        # The example's WORKFLOW subscription's settle pass: its function and its schedule, into one DLQ
        (
            logical_id("AWS::Lambda::Function", "WorkflowsSettlerLambda"),
            "DeadLetterConfig.TargetArn",
            logical_id("AWS::SQS::Queue", "WorkflowsSettlerDeadLetters"),
        ),
        (
            logical_id("AWS::Events::Rule", "WorkflowsSettlerSchedule"),
            "Targets.0.DeadLetterConfig.Arn",
            logical_id("AWS::SQS::Queue", "WorkflowsSettlerDeadLetters"),
        ),
    } | {
        # Each rule of the control-plane watch, into its one DLQ.
        (rule_id, "Targets.0.DeadLetterConfig.Arn", logical_id("AWS::SQS::Queue", "ControlPlaneDeadLetters"))
        for rule_id in resources_of_type(stack_template, "AWS::Events::Rule")
        if rule_id.startswith("OutboxControlPlane")
    }
    # a rule per service (Lambda's: the functions' calls, over as many rules as their names need, and the roles
    # given), and the one watching the rules rule
    watch_rules = [rule for rule in resources_of_type(stack_template, "AWS::Events::Rule") if "ControlPlane" in rule]
    assert len(watch_rules) >= len(WATCHED_CALLS) + 2
    assert len(targets) == 10 + len(watch_rules)
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
    assert len(dlq_alarms) == 9  # the eight of the pipeline's DLQs (the settle pass's too), and the watch's
    for alarm in dlq_alarms:
        assert alarm["AlarmActions"] == [{"Ref": topic_id}]
        assert alarm["TreatMissingData"] == "notBreaching"


def arrival_alarms(stack_template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        logical_id: alarm["Properties"]
        for logical_id, alarm in resources_of_type(stack_template, "AWS::CloudWatch::Alarm").items()
        if any(query.get("Expression") == ARRIVAL_EXPRESSION for query in alarm["Properties"].get("Metrics", []))
    }


def depth_alarms(stack_template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        logical_id: alarm["Properties"]
        for logical_id, alarm in resources_of_type(stack_template, "AWS::CloudWatch::Alarm").items()
        if alarm["Properties"].get("MetricName") == DLQ_METRIC
    }


def test_every_dead_letter_queue_alarms_on_each_arrival(stack_template: dict[str, Any]) -> None:
    # Eight queues (the anchoring function's and its schedule's targets are one, the control-plane watch's six
    # rules share one), eight arrival alarms, each telling a second dead letter from an operator's receive (the
    # checker evaluates it: dead_letters.py).
    assert dead_letter_queues_without_arrival_alarm(stack_template) == []
    alarms = arrival_alarms(stack_template)
    assert len(alarms) == len({target.target["Fn::GetAtt"][0] for target in dead_letter_targets(stack_template)}) == 9
    [topic_id] = resources_of_type(stack_template, "AWS::SNS::Topic")
    for alarm in alarms.values():
        assert alarm["AlarmActions"] == alarm["OKActions"] == [{"Ref": topic_id}]


def test_every_dead_letter_alarm_is_on_the_dashboard(stack_template: dict[str, Any]) -> None:
    [dashboard] = resources_of_type(stack_template, "AWS::CloudWatch::Dashboard").values()
    body = json.dumps(dashboard["Properties"]["DashboardBody"])
    for logical_id in [*arrival_alarms(stack_template), *depth_alarms(stack_template)]:
        assert logical_id in body, logical_id


# Minute by minute, a DLQ's (visible, in flight) messages, the minute evaluated, and what the arrival alarm says.
ARRIVALS: dict[str, tuple[dict[int, tuple[int, int]], int, str]] = {
    "the first dead letter": ({0: (0, 0), 1: (1, 0)}, 1, "ALARM"),
    "a second one, while NotEmpty is in ALARM": ({0: (1, 0), 1: (1, 0), 2: (2, 0)}, 2, "ALARM"),
    "the minute after it": ({0: (1, 0), 1: (2, 0), 2: (2, 0)}, 2, "OK"),
    "one arriving while another is received": ({0: (1, 0), 1: (0, 1), 2: (1, 1)}, 2, "ALARM"),
    "an operator receives both": ({0: (2, 0), 1: (0, 2)}, 1, "OK"),
    "their visibility timeout": ({0: (2, 0), 1: (0, 2), 2: (2, 0)}, 2, "OK"),
    "a redrive empties the queue": ({0: (2, 0), 1: (0, 0)}, 1, "OK"),
    "a redriven message fails again": ({0: (1, 0), 1: (0, 0), 2: (1, 0)}, 2, "ALARM"),
    "SQS reports nothing (an idle queue)": ({}, 5, "OK"),
}


@pytest.mark.parametrize("evaluation_range", [3, 5, 15], ids=lambda minutes: f"range {minutes} min")
@pytest.mark.parametrize("case", ARRIVALS, ids=str)
def test_the_arrival_alarm_on_sample_datapoints(
    stack_template: dict[str, Any], case: str, evaluation_range: int
) -> None:
    datapoints, at, expected = ARRIVALS[case]
    for logical_id, alarm in arrival_alarms(stack_template).items():
        assert alarm_state(alarm, probe(datapoints), at, evaluation_range=evaluation_range) == expected, logical_id


@pytest.mark.parametrize("quiet_minutes", [1, 2, 6 * 60])
@pytest.mark.parametrize("evaluation_range", [3, 5, 15], ids=lambda minutes: f"range {minutes} min")
def test_a_dead_letter_after_a_silence_notifies_through_one_alarm_or_the_other(
    stack_template: dict[str, Any], quiet_minutes: int, evaluation_range: int
) -> None:
    # The DLQ held one dead letter, SQS reported nothing for a while (it stops reporting a queue it considers idle,
    # and reports again up to 15 minutes after it is touched: R9.7), then a second arrived. Within CloudWatch's
    # range (its length is not documented) the arrival alarm sees the rise; long after it, the arrival alarm has
    # no preceding datapoint, but the silence has returned the depth alarm to OK, and it fires again.
    for arrival in arrival_alarms(stack_template).values():
        [dimensions] = {
            json.dumps(query["MetricStat"]["Metric"]["Dimensions"])
            for query in arrival["Metrics"]
            if "MetricStat" in query
        }
        [depth] = [
            alarm for alarm in depth_alarms(stack_template).values() if json.dumps(alarm["Dimensions"]) == dimensions
        ]
        before, after = {0: (1, 0)}, {0: (1, 0), quiet_minutes: (2, 0)}

        def state(alarm: dict[str, Any], datapoints: dict[int, tuple[int, int]], at: int) -> str:
            return alarm_state(alarm, probe(datapoints), at, evaluation_range=evaluation_range)

        if quiet_minutes < evaluation_range:
            assert state(arrival, after, quiet_minutes) == "ALARM"
        else:
            assert state(depth, before, quiet_minutes - 1) == "OK"
            assert state(depth, after, quiet_minutes) == "ALARM"


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
    dlq = AlarmedDeadLetterQueue(stack, "Dlq", alarm_topic=topic, fifo=False, description="probe", of_queue=True)
    sqs.Queue(stack, "Work", dead_letter_queue=sqs.DeadLetterQueue(queue=dlq.queue, max_receive_count=3))
    template = Template.from_stack(stack).to_json()
    assert unalarmed_dead_letter_targets(template) == []
    assert dead_letter_queues_without_arrival_alarm(template) == []


def _no_arrival_alarm(stack: Stack, dlq: sqs.Queue) -> None:
    pass


def _sent_messages(stack: Stack, dlq: sqs.Queue) -> None:
    # NumberOfMessagesSent does not count what a redrive policy moves (R9.7): blind to a queue's dead letters.
    _arrival_alarm(stack, dlq.metric_number_of_messages_sent(period=Duration.minutes(1), statistic="Sum"))


def _visible_only(stack: Stack, dlq: sqs.Queue) -> None:
    # Fires when an operator's receive runs out its visibility timeout: the messages come back visible.
    visible = dlq.metric_approximate_number_of_messages_visible(period=Duration.minutes(1), statistic="Maximum")
    _arrival_alarm(stack, cloudwatch.MathExpression(expression="DIFF(visible)", using_metrics={"visible": visible}))


def _depth_above_zero(stack: Stack, dlq: sqs.Queue) -> None:
    # Visible plus in flight above zero: in ALARM while the queue holds anything, silent on the second arrival.
    metrics = {
        "visible": dlq.metric_approximate_number_of_messages_visible(period=Duration.minutes(1), statistic="Maximum"),
        "inflight": dlq.metric_approximate_number_of_messages_not_visible(
            period=Duration.minutes(1), statistic="Maximum"
        ),
    }
    _arrival_alarm(stack, cloudwatch.MathExpression(expression="visible + inflight", using_metrics=metrics))


def _arrival_alarm(stack: Stack, metric: cloudwatch.IMetric) -> None:
    from outbox_cdk.alarms import alarm_above

    topic = stack.node.find_child("Topic")
    assert isinstance(topic, sns.Topic)
    alarm_above(stack, "Arrivals", metric, threshold=0, description="probe", alarm_topic=topic)


@pytest.mark.parametrize(
    "build",
    [_no_arrival_alarm, _sent_messages, _visible_only, _depth_above_zero],
    ids=["none", "NumberOfMessagesSent", "DIFF of the visible count", "depth above zero"],
)
def test_the_arrival_checker_reports_an_alarm_that_misses_arrivals_or_fires_on_a_receive(
    build: Callable[[Stack, sqs.Queue], None],
) -> None:
    # Given a queue's DLQ whose arrival alarm is missing, or watches the wrong thing
    stack = Stack(App(), "Unalarmed")
    sns.Topic(stack, "Topic")
    dlq = sqs.Queue(stack, "PlainDlq")
    sqs.Queue(stack, "Work", dead_letter_queue=sqs.DeadLetterQueue(queue=dlq, max_receive_count=3))
    build(stack, dlq)
    # When the checker reads the template, then it reports that DLQ
    findings = dead_letter_queues_without_arrival_alarm(Template.from_stack(stack).to_json())
    assert len(findings) == 1, findings
    assert "PlainDlq" in findings[0]
