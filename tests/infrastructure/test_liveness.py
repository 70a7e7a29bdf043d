"""The alarms on what stops silently: a pipe not running, and the hourly anchoring pass not running. Each reads
a metric the anchoring pass publishes (the names are the engine's, ``outbox.audit.auditor.Metric``), from the
anchoring function's service, and treats missing data as breaching: silence is what they are for."""

from __future__ import annotations

from typing import Any

from aws_cdk.assertions import Template

from outbox.audit.auditor import Metric
from outbox_cdk import audit, liveness
from outbox_cdk.lambda_defaults import METRICS_NAMESPACE
from tests.infrastructure.conftest import resources_of_type
from tests.infrastructure.template_queries import actions_on, listed, only_resource, role_statements
from tests.infrastructure.test_pipeline import pipeline_stack

HOUR_SECONDS = 3600
ANCHOR_DIMENSIONS = [{"Name": "service", "Value": audit.ANCHOR_SERVICE}]


def assert_notifies_and_breaches_when_silent(alarm: dict[str, Any], topic_id: str) -> None:
    """Two hourly datapoints in a row breach, a missing one breaches, and the topic hears of ALARM and OK."""
    assert (alarm["EvaluationPeriods"], alarm["DatapointsToAlarm"]) == (2, 2)
    assert alarm["TreatMissingData"] == "breaching"
    assert alarm["AlarmActions"] == alarm["OKActions"] == [{"Ref": topic_id}]


def anchoring_function(stack_template: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    return only_resource(stack_template, "AWS::Lambda::Function", "AuditorAnchoring")


def test_the_anchoring_schedule_is_what_the_alarm_periods_are_sized_to() -> None:
    assert audit.ANCHOR_SCHEDULE.to_seconds() == HOUR_SECONDS


def test_a_pipe_not_running_at_two_passes_in_a_row_or_no_report_alarms(stack_template: dict[str, Any]) -> None:
    topic_id, _ = only_resource(stack_template, "AWS::SNS::Topic")
    _, alarm = only_resource(stack_template, "AWS::CloudWatch::Alarm", "AuditorPipesNotRunningAlarm")
    properties = alarm["Properties"]

    assert (properties["Namespace"], properties["MetricName"]) == (METRICS_NAMESPACE, Metric.PIPES_NOT_RUNNING.value)
    assert properties["Dimensions"] == ANCHOR_DIMENSIONS
    # The worst state of the period's passes, not their sum: one pass that saw a pipe stopped is one pipe.
    assert (properties["Statistic"], properties["Period"]) == ("Maximum", HOUR_SECONDS)
    assert (properties["Threshold"], properties["ComparisonOperator"]) == (0, "GreaterThanThreshold")
    assert_notifies_and_breaches_when_silent(properties, topic_id)
    assert "outbox reconcile --since" in properties["AlarmDescription"]


def test_two_hours_without_an_anchoring_pass_alarm(stack_template: dict[str, Any]) -> None:
    topic_id, _ = only_resource(stack_template, "AWS::SNS::Topic")
    _, alarm = only_resource(stack_template, "AWS::CloudWatch::Alarm", "AuditorAnchoringStoppedAlarm")
    properties = alarm["Properties"]

    [expression] = [query for query in properties["Metrics"] if "Expression" in query]
    [passes] = [query for query in properties["Metrics"] if "MetricStat" in query]
    metric = passes["MetricStat"]["Metric"]
    assert (metric["Namespace"], metric["MetricName"]) == (METRICS_NAMESPACE, Metric.ANCHORING_PASSES.value)
    assert metric["Dimensions"] == ANCHOR_DIMENSIONS
    assert (passes["MetricStat"]["Stat"], passes["MetricStat"]["Period"]) == ("Sum", HOUR_SECONDS)
    # Each hour without a pass is a 0, however many passes came before it (R9.6), and breaches "< 1".
    assert expression["Expression"] == f"FILL({passes['Id']}, 0)"
    assert (expression["ReturnData"], passes["ReturnData"]) == (True, False)
    assert (properties["Threshold"], properties["ComparisonOperator"]) == (1, "LessThanThreshold")
    assert_notifies_and_breaches_when_silent(properties, topic_id)
    assert "outbox anchor" in properties["AlarmDescription"]


def test_the_anchoring_watches_every_pipe_of_the_stack_and_may_describe_only_those(
    stack_template: dict[str, Any],
) -> None:
    function_id, function = anchoring_function(stack_template)
    pipes = sorted(resources_of_type(stack_template, "AWS::Pipes::Pipe"))
    assert len(pipes) == 3  # relay, tamper, record-change

    watched = function["Properties"]["Environment"]["Variables"][liveness.WATCHED_PIPES_VARIABLE]
    separator, names = watched["Fn::Join"]
    assert separator == ","
    assert sorted(name["Ref"] for name in names) == pipes

    role_id = function["Properties"]["Role"]["Fn::GetAtt"][0]
    statements = role_statements(stack_template, role_id)
    described = [s for s in statements if "pipes:DescribePipe" in listed(s["Action"])]
    assert [listed(s["Action"]) for s in described] == [["pipes:DescribePipe"]], function_id
    assert sorted(resource["Fn::GetAtt"][0] for resource in listed(described[0]["Resource"])) == pipes
    assert "pipes:DescribePipe" not in actions_on(statements, "Allow", "*")


def test_without_a_record_change_lane_the_anchoring_watches_the_two_pipes_there_are() -> None:
    template = Template.from_stack(pipeline_stack()).to_json()
    _, function = anchoring_function(template)
    pipes = sorted(resources_of_type(template, "AWS::Pipes::Pipe"))
    assert len(pipes) == 2

    _, names = function["Properties"]["Environment"]["Variables"][liveness.WATCHED_PIPES_VARIABLE]["Fn::Join"]
    assert sorted(name["Ref"] for name in names) == pipes


# --- what no one can publish, and what falls behind: found by what the anchoring schedule targets ------------------

# EventBridge's rate expression for the anchoring schedule: the alarms below are sized to its period.
SCHEDULE_PERIODS = {"rate(1 hour)": HOUR_SECONDS}


def scheduled_function(stack_template: dict[str, Any]) -> tuple[str, int]:
    """The function the anchoring's scheduled rule targets (the one hourly; the WORKFLOW lane's settle pass runs
    every minute, its liveness is its own), and the schedule's period in seconds."""
    scheduled = [
        rule["Properties"]
        for rule in resources_of_type(stack_template, "AWS::Events::Rule").values()
        if rule["Properties"].get("ScheduleExpression") in SCHEDULE_PERIODS
    ]
    [rule] = scheduled
    [target] = rule["Targets"]
    function_id, _ = target["Arn"]["Fn::GetAtt"]
    assert stack_template["Resources"][function_id]["Type"] == "AWS::Lambda::Function"
    return function_id, SCHEDULE_PERIODS[rule["ScheduleExpression"]]


def alarms_reading(stack_template: dict[str, Any], namespace: str, name: str, dimensions: Any) -> list[dict[str, Any]]:
    """The alarms whose metric math reads this metric (with exactly these dimensions)."""
    return [
        alarm["Properties"]
        for alarm in resources_of_type(stack_template, "AWS::CloudWatch::Alarm").values()
        for query in alarm["Properties"].get("Metrics", [])
        if "MetricStat" in query
        and (query["MetricStat"]["Metric"]["Namespace"], query["MetricStat"]["Metric"]["MetricName"])
        == (namespace, name)
        and query["MetricStat"]["Metric"].get("Dimensions") == dimensions
    ]


def assert_zero_filled_sum(alarm: dict[str, Any], period: int) -> None:
    """The alarm reads the metric's Sum over ``period``, each period without a datapoint as 0 (R9.6)."""
    [expression] = [query for query in alarm["Metrics"] if "Expression" in query]
    [counted] = [query for query in alarm["Metrics"] if "MetricStat" in query]
    assert (counted["MetricStat"]["Stat"], counted["MetricStat"]["Period"]) == ("Sum", period)
    assert expression["Expression"] == f"FILL({counted['Id']}, 0)"
    assert (expression["ReturnData"], counted["ReturnData"]) == (True, False)


def test_the_scheduled_function_not_invoked_for_two_periods_alarms_on_what_lambda_counts(
    stack_template: dict[str, Any],
) -> None:
    # AnchoringPasses and PipesNotRunning are custom metrics anyone allowed cloudwatch:PutMetricData can publish;
    # AWS/Lambda's Invocations no one can: a disabled schedule rule fires this whatever is published by hand.
    topic_id, _ = only_resource(stack_template, "AWS::SNS::Topic")
    function_id, period = scheduled_function(stack_template)
    [alarm] = alarms_reading(
        stack_template, "AWS/Lambda", "Invocations", [{"Name": "FunctionName", "Value": {"Ref": function_id}}]
    )

    assert_zero_filled_sum(alarm, period)
    assert (alarm["Threshold"], alarm["ComparisonOperator"]) == (1, "LessThanThreshold")
    assert_notifies_and_breaches_when_silent(alarm, topic_id)
    assert "outbox anchor" in alarm["AlarmDescription"]


def test_passes_that_defer_tenants_three_periods_in_a_row_alarm(stack_template: dict[str, Any]) -> None:
    topic_id, _ = only_resource(stack_template, "AWS::SNS::Topic")
    function_id, period = scheduled_function(stack_template)
    service = stack_template["Resources"][function_id]["Properties"]["Environment"]["Variables"][
        "POWERTOOLS_SERVICE_NAME"
    ]
    [alarm] = alarms_reading(
        stack_template, METRICS_NAMESPACE, Metric.ANCHORS_DEFERRED.value, [{"Name": "service", "Value": service}]
    )

    # Counted only by a pass that defers: an hour without one is a 0, so only three deferring passes in a row fire.
    assert_zero_filled_sum(alarm, period)
    assert (alarm["Threshold"], alarm["ComparisonOperator"]) == (0, "GreaterThanThreshold")
    assert (alarm["EvaluationPeriods"], alarm["DatapointsToAlarm"]) == (3, 3)
    assert alarm["AlarmActions"] == alarm["OKActions"] == [{"Ref": topic_id}]
    assert "outbox anchor" in alarm["AlarmDescription"]
