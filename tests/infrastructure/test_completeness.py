"""The completeness pass's part of the stack: the anchoring function is given the deployed catalog as data and a
bound derived from the durable lane's settings as deployed (checked at synth), may read the inbox, and
``MissingPairsAlarm`` fires on the first pass that counts a missing pair. Self-repair is off unless asked for,
and then bounded and granted only what it needs."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aws_cdk import Duration
from aws_cdk.assertions import Template

from outbox.audit.auditor import Metric
from outbox.ops.completeness import catalog_from_data
from outbox_cdk import ConsumerOptions, audit, timing
from outbox_cdk.lambda_defaults import METRICS_NAMESPACE
from tests.infrastructure.template_queries import actions_on, only_resource, role_statements
from tests.infrastructure.test_liveness import ANCHOR_DIMENSIONS, anchoring_function
from tests.infrastructure.test_pipeline import pipeline_stack


def environment(stack_template: dict[str, Any]) -> dict[str, Any]:
    _, function = anchoring_function(stack_template)
    variables: dict[str, Any] = function["Properties"]["Environment"]["Variables"]
    return variables


def test_the_bound_is_derived_from_the_durable_lane_as_deployed(stack_template: dict[str, Any]) -> None:
    _, queue = only_resource(stack_template, "AWS::SQS::Queue", "OutboxDurableQueue")
    _, consumer = only_resource(stack_template, "AWS::Lambda::Function", "OutboxDurableConsumer")
    properties = queue["Properties"]
    expected = timing.completeness_bound_seconds(
        record_age_seconds=timing.RELAY_MAXIMUM_RECORD_AGE_HOURS * 3600,
        pipe_batching_window_seconds=0,
        visibility_timeout_seconds=properties["VisibilityTimeout"],
        max_receive_count=properties["RedrivePolicy"]["maxReceiveCount"],
        consumer_batching_window_seconds=0,
        max_attempts=timing.MAX_ATTEMPTS,
        lease_seconds=consumer["Properties"]["Timeout"],
    )
    assert int(environment(stack_template)["COMPLETENESS_BOUND_SECONDS"]) == expected
    # The relay pipe's record age, as deployed, is the one the bound counts
    _, pipe = only_resource(stack_template, "AWS::Pipes::Pipe", "OutboxRelay")
    parameters = pipe["Properties"]["SourceParameters"]["DynamoDBStreamParameters"]
    assert parameters["MaximumRecordAgeInSeconds"] == timing.RELAY_MAXIMUM_RECORD_AGE_HOURS * 3600
    assert "MaximumBatchingWindowInSeconds" not in parameters


def test_the_pass_is_given_the_durable_catalog_as_data_and_no_repairs_by_default(
    stack_template: dict[str, Any],
) -> None:
    variables = environment(stack_template)
    catalog = catalog_from_data(variables["COMPLETENESS_CATALOG"])
    assert "sales.journal_order" in {s.name for s in catalog.registry.subscriptions}
    assert "COMPLETENESS_REPAIRS" not in variables
    assert "DURABLE_QUEUE_URL" not in variables
    role_id = anchoring_function(stack_template)[1]["Properties"]["Role"]["Fn::GetAtt"][0]
    statements = role_statements(stack_template, role_id)
    queue_id, _ = only_resource(stack_template, "AWS::SQS::Queue", "OutboxDurableQueue")
    assert actions_on(statements, "Allow", {"Fn::GetAtt": [queue_id, "Arn"]}) == set()
    inbox_id, _ = only_resource(stack_template, "AWS::DynamoDB::Table", "OutboxInboxTable")
    assert actions_on(statements, "Allow", {"Fn::GetAtt": [inbox_id, "Arn"]}) == {"dynamodb:GetItem", "dynamodb:Query"}


def test_a_missing_pair_fires_the_alarm_on_the_first_pass(stack_template: dict[str, Any]) -> None:
    topic_id, _ = only_resource(stack_template, "AWS::SNS::Topic")
    _, alarm = only_resource(stack_template, "AWS::CloudWatch::Alarm", "OutboxAuditorMissingPairsAlarm")
    properties = alarm["Properties"]
    assert (properties["Namespace"], properties["MetricName"]) == (METRICS_NAMESPACE, Metric.MISSING_PAIRS.value)
    assert properties["Dimensions"] == ANCHOR_DIMENSIONS
    assert (properties["Period"], properties["Statistic"]) == (audit.ANCHOR_SCHEDULE.to_seconds(), "Maximum")
    assert (properties["Threshold"], properties["ComparisonOperator"]) == (0, "GreaterThanThreshold")
    assert (properties["EvaluationPeriods"], properties["DatapointsToAlarm"]) == (1, 1)
    assert properties["TreatMissingData"] == "notBreaching"  # a pass that stops: AnchoringStoppedAlarm
    assert properties["AlarmActions"] == properties["OKActions"] == [{"Ref": topic_id}]
    assert "runbook (MissingPairsAlarm)" in properties["AlarmDescription"]


@pytest.mark.parametrize("timeout", [10, 60, 900])
def test_every_allowed_consumer_timeout_gives_a_bound_reconcile_can_still_repair(timeout: int) -> None:
    visibility = timing.visibility_timeout_seconds(timeout, 0)
    bound = timing.completeness_bound_seconds(
        record_age_seconds=timing.RELAY_MAXIMUM_RECORD_AGE_HOURS * 3600,
        pipe_batching_window_seconds=0,
        visibility_timeout_seconds=visibility,
        max_receive_count=timing.DURABLE_MAX_RECEIVE_COUNT,
        consumer_batching_window_seconds=0,
        max_attempts=timing.MAX_ATTEMPTS,
        lease_seconds=timeout,
    )
    # Past every receive SQS allows (the durable DLQ's alarm covers what goes further) and the pipe's record age
    assert bound > timing.DURABLE_MAX_RECEIVE_COUNT * visibility + timing.RELAY_MAXIMUM_RECORD_AGE_HOURS * 3600
    timing.check_completeness_bound(bound, 30, 3600)


def test_a_bound_the_repair_cannot_keep_or_a_queue_that_gives_up_first_is_refused_at_synth() -> None:
    with pytest.raises(ValueError, match="raise inbox_retention_days"):
        timing.check_completeness_bound(30 * 24 * 3600, 30, 3600)
    with pytest.raises(ValueError, match="maxReceiveCount"):
        timing.completeness_bound_seconds(
            record_age_seconds=0,
            pipe_batching_window_seconds=0,
            visibility_timeout_seconds=360,
            max_receive_count=4,
            consumer_batching_window_seconds=0,
            max_attempts=5,
            lease_seconds=60,
        )


@pytest.mark.parametrize("value", [-1, 101, True, 2.5])
def test_completeness_repairs_outside_its_range_is_refused(value: Any) -> None:
    with pytest.raises(ValueError, match="completeness_repairs must be"):
        pipeline_stack(completeness_repairs=value)


def test_self_repair_is_bounded_and_granted_the_send_and_the_vouching_row_only() -> None:
    template = Template.from_stack(
        pipeline_stack(completeness_repairs=3, durable_consumer=ConsumerOptions(timeout=Duration.seconds(120)))
    )
    stack_template = template.to_json()
    variables = environment(stack_template)
    assert variables["COMPLETENESS_REPAIRS"] == "3"
    queue_id, queue = only_resource(stack_template, "AWS::SQS::Queue", "OutboxDurableQueue")
    assert variables["DURABLE_QUEUE_URL"] == {"Ref": queue_id}
    assert queue["Properties"]["VisibilityTimeout"] == 720
    assert int(variables["COMPLETENESS_BOUND_SECONDS"]) == timing.completeness_bound_seconds(
        record_age_seconds=timing.RELAY_MAXIMUM_RECORD_AGE_HOURS * 3600,
        pipe_batching_window_seconds=0,
        visibility_timeout_seconds=720,
        max_receive_count=timing.DURABLE_MAX_RECEIVE_COUNT,
        consumer_batching_window_seconds=0,
        max_attempts=timing.MAX_ATTEMPTS,
        lease_seconds=120,
    )
    role_id = anchoring_function(stack_template)[1]["Properties"]["Role"]["Fn::GetAtt"][0]
    statements = role_statements(stack_template, role_id)
    assert "sqs:SendMessage" in actions_on(statements, "Allow", {"Fn::GetAtt": [queue_id, "Arn"]})
    inbox_id, _ = only_resource(stack_template, "AWS::DynamoDB::Table", "OutboxInboxTable")
    assert actions_on(statements, "Allow", {"Fn::GetAtt": [inbox_id, "Arn"]}) == {
        "dynamodb:GetItem",
        "dynamodb:Query",
        "dynamodb:PutItem",
    }
    # The queue's policy, which denies every other sender, admits the anchoring role
    policy = json.dumps(only_resource(stack_template, "AWS::SQS::QueuePolicy", "OutboxDurableQueuePolicy")[1])
    assert role_id in policy


def test_the_operator_role_reads_the_claims_outbox_anchor_judges_and_no_more(stack_template: dict[str, Any]) -> None:
    # outbox anchor runs the pass as the operator role (outbox.ops.anchoring): the claims, read only
    operator_id, _ = only_resource(stack_template, "AWS::IAM::Role", "OutboxEventsOperatorRole")
    inbox_id, _ = only_resource(stack_template, "AWS::DynamoDB::Table", "OutboxInboxTable")
    statements = role_statements(stack_template, operator_id)
    assert actions_on(statements, "Allow", {"Fn::GetAtt": [inbox_id, "Arn"]}) == {"dynamodb:GetItem", "dynamodb:Query"}
