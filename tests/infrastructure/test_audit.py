"""Tamper evidence in the template: the tamper pipe keeps exactly the changes and deletions of event rows, only
the auditor's engine-only functions and the operator role may write the audit table, and both detectors are
alarmed at zero. Plus the operator endpoint's reserved concurrency."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from aws_cdk.assertions import Template

from outbox.local.template import load_stack
from outbox_cdk import OperatorAccess, audit
from tests.conftest import Synthesized
from tests.infrastructure.conftest import resources_of_type
from tests.infrastructure.template_queries import (
    assert_fires_on_the_first_one,
    listed,
    only_resource,
)
from tests.infrastructure.test_pipeline import pipeline_stack

WRITE_ACTIONS = ("dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem", "dynamodb:BatchWriteItem")


def table_arn(stack_template: dict[str, Any], prefix: str) -> dict[str, Any]:
    return {"Fn::GetAtt": [only_resource(stack_template, "AWS::DynamoDB::Table", prefix)[0], "Arn"]}


def roles_allowed(stack_template: dict[str, Any], resource: dict[str, Any], actions: tuple[str, ...]) -> set[str]:
    """The roles some policy of which allows any of ``actions`` (or a wildcard) on ``resource``."""
    found = set()
    for policy in resources_of_type(stack_template, "AWS::IAM::Policy").values():
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            if statement["Effect"] != "Allow" or resource not in listed(statement["Resource"]):
                continue
            if any(a in actions or a in ("dynamodb:*", "*") for a in listed(statement["Action"])):
                found.update(role["Ref"] for role in policy["Properties"]["Roles"])
    return found


def role_of_function(stack_template: dict[str, Any], prefix: str) -> str:
    _, function = only_resource(stack_template, "AWS::Lambda::Function", prefix)
    return str(function["Properties"]["Role"]["Fn::GetAtt"][0])


def test_the_tamper_pipe_keeps_changes_and_deletions_of_event_rows_and_sends_them_whole(
    stack_template: dict[str, Any],
) -> None:
    _, pipe = only_resource(stack_template, "AWS::Pipes::Pipe", "AuditorPipe")
    properties = pipe["Properties"]
    events_id, _ = only_resource(stack_template, "AWS::DynamoDB::Table", "EventsTable")
    assert properties["Source"] == {"Fn::GetAtt": [events_id, "StreamArn"]}
    (pattern,) = [json.loads(f["Pattern"]) for f in properties["SourceParameters"]["FilterCriteria"]["Filters"]]
    # An old image exists only for MODIFY and REMOVE; emit() never writes either to an event row.
    assert pattern == {"dynamodb": {"OldImage": {"kind": {"S": ["EVENT"]}}}}
    assert "TargetParameters" not in properties  # the whole record: old and new image, eventName, keys
    findings_id, _ = only_resource(stack_template, "AWS::SQS::Queue", "AuditorFindingsQueue")
    assert properties["Target"] == {"Fn::GetAtt": [findings_id, "Arn"]}
    assert properties["LogConfiguration"].get("IncludeExecutionData") is None


def test_only_the_auditor_and_the_operator_role_may_write_the_audit_table(stack_template: dict[str, Any]) -> None:
    writers = roles_allowed(stack_template, table_arn(stack_template, "AuditTable"), WRITE_ACTIONS)
    assert writers == {
        role_of_function(stack_template, "AuditorRecorder"),
        role_of_function(stack_template, "AuditorAnchoring"),
        only_resource(stack_template, "AWS::IAM::Role", "OutboxEventsOperatorRole")[0],
    }
    # ... and no producer, consumer or pipe role has anything at all on it; the endpoint and the widget read
    readers = roles_allowed(
        stack_template, table_arn(stack_template, "AuditTable"), ("dynamodb:GetItem", "dynamodb:Query", *WRITE_ACTIONS)
    )
    assert readers - writers == {
        role_of_function(stack_template, "OperatorEndpoint"),
        role_of_function(stack_template, "StatusWidget"),
        only_resource(stack_template, "AWS::IAM::Role", "OutboxRunbookRole")[0],
    }


def test_the_auditor_runs_engine_code_only(stack_template: dict[str, Any], synthesized: Synthesized) -> None:
    for prefix, handler in (("AuditorRecorder", audit.RECORDER_HANDLER), ("AuditorAnchoring", audit.ANCHOR_HANDLER)):
        function_id, function = only_resource(stack_template, "AWS::Lambda::Function", prefix)
        assert function["Properties"]["Handler"] == handler
        # No catalog to load, and a code asset without a single application module
        assert "SUBSCRIPTIONS" not in function["Properties"]["Environment"]["Variables"], function_id
        asset_path = load_stack(synthesized.outdir, "OutboxEngine").functions[function_id].asset_path
        assert asset_path is not None
        asset = synthesized.outdir / asset_path
        assert sorted(p.name for p in Path(asset).rglob("*") if p.is_file()) == ["README.md"], function_id


def test_every_tamper_message_and_every_chain_break_fires_an_alarm_at_zero(stack_template: dict[str, Any]) -> None:
    topic_id, _ = only_resource(stack_template, "AWS::SNS::Topic")
    findings_id, _ = only_resource(stack_template, "AWS::SQS::Queue", "AuditorFindingsQueue")
    _, tamper = only_resource(stack_template, "AWS::CloudWatch::Alarm", "AuditorTamperAlarm")
    assert tamper["Properties"]["MetricName"] == "NumberOfMessagesSent"
    assert tamper["Properties"]["Dimensions"] == [
        {"Name": "QueueName", "Value": {"Fn::GetAtt": [findings_id, "QueueName"]}}
    ]
    assert_fires_on_the_first_one(tamper["Properties"], topic_id)
    _, breaks = only_resource(stack_template, "AWS::CloudWatch::Alarm", "AuditorChainBreakAlarm")
    assert breaks["Properties"]["MetricName"] == "ChainBreaks"
    assert breaks["Properties"]["Dimensions"] == [{"Name": "service", "Value": audit.ANCHOR_SERVICE}]
    assert_fires_on_the_first_one(breaks["Properties"], topic_id)


def test_the_anchoring_runs_every_hour_with_its_failures_in_an_alarmed_queue(stack_template: dict[str, Any]) -> None:
    function_id, _ = only_resource(stack_template, "AWS::Lambda::Function", "AuditorAnchoring")
    dlq_id, _ = only_resource(stack_template, "AWS::SQS::Queue", "AuditorAnchoringDeadLetters")
    _, rule = only_resource(stack_template, "AWS::Events::Rule", "AuditorAnchoringSchedule")
    assert rule["Properties"]["ScheduleExpression"] == "rate(1 hour)"
    (target,) = rule["Properties"]["Targets"]
    assert target["Arn"] == {"Fn::GetAtt": [function_id, "Arn"]}
    assert target["DeadLetterConfig"] == {"Arn": {"Fn::GetAtt": [dlq_id, "Arn"]}}
    function = stack_template["Resources"][function_id]["Properties"]
    assert function["DeadLetterConfig"] == {"TargetArn": {"Fn::GetAtt": [dlq_id, "Arn"]}}


def test_the_operator_endpoint_reserves_two_executions_by_default(stack_template: dict[str, Any]) -> None:
    _, function = only_resource(stack_template, "AWS::Lambda::Function", "OperatorEndpoint")
    assert function["Properties"]["ReservedConcurrentExecutions"] == 2


def test_the_reservation_can_be_switched_off_and_is_checked() -> None:
    template = Template.from_stack(pipeline_stack(operator_access=OperatorAccess(endpoint_concurrency=None))).to_json()
    _, function = only_resource(template, "AWS::Lambda::Function", "OutboxOperatorEndpoint")
    assert "ReservedConcurrentExecutions" not in function["Properties"]
    for wrong in (0, 51, True, "2"):
        with pytest.raises(ValueError, match=r"OperatorAccess\(endpoint_concurrency=\.\.\.\) must be 1\.\.50"):
            pipeline_stack(operator_access=OperatorAccess(endpoint_concurrency=wrong))
