"""The runbook role (``outbox_cdk.runbook_role``), read from the template: who may assume it, that it is an
output, and that it changes no event row. What it may call is proven against the CLI's recorded calls in
``tests/e2e/test_least_privilege.py``."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aws_cdk import aws_iam as iam
from aws_cdk.assertions import Template

from outbox.outputs import StackOutput
from outbox_cdk import OperatorAccess, OperatorTrust
from outbox_cdk.events_table import EVENT_ROW_MUTATIONS
from tests.infrastructure.template_queries import actions_on, listed, only_resource, role_statements
from tests.infrastructure.test_pipeline import pipeline_stack


def trust(template: dict[str, Any], prefix: str) -> Any:
    _, role = only_resource(template, "AWS::IAM::Role", prefix)
    return role["Properties"]["AssumeRolePolicyDocument"]


def test_the_operators_who_may_assume_the_operator_role_and_no_one_else_may_assume_it() -> None:
    oncall, deputy = "arn:aws:iam::123456789012:role/oncall", "arn:aws:iam::123456789012:role/deputy"
    for operators in ([oncall], [oncall, deputy]):
        template = Template.from_stack(pipeline_stack(operators=[iam.ArnPrincipal(a) for a in operators])).to_json()
        assert trust(template, "OutboxRunbookRole") == trust(template, "OutboxEventsOperatorRole")
        assert oncall in json.dumps(trust(template, "OutboxRunbookRole"))


@pytest.mark.parametrize(
    ("trust_options", "conditions"),
    [
        ({"require_mfa": True}, {"Bool": {"aws:MultiFactorAuthPresent": "true"}}),
        ({"principal_tag": ("team", "oncall")}, {"StringEquals": {"aws:PrincipalTag/team": "oncall"}}),
        (
            {"require_mfa": True, "principal_tag": ("team", "oncall")},
            {"Bool": {"aws:MultiFactorAuthPresent": "true"}, "StringEquals": {"aws:PrincipalTag/team": "oncall"}},
        ),
    ],
)
def test_operator_trust_conditions_bind_every_operator_of_both_roles(
    trust_options: dict[str, Any], conditions: dict[str, Any]
) -> None:
    oncall, deputy = "arn:aws:iam::123456789012:role/oncall", "arn:aws:iam::123456789012:role/deputy"
    stack = pipeline_stack(
        operators=[iam.ArnPrincipal(oncall), iam.ArnPrincipal(deputy)],
        operator_access=OperatorAccess(trust=OperatorTrust(**trust_options)),
    )
    template = Template.from_stack(stack).to_json()
    for prefix in ("OutboxRunbookRole", "OutboxEventsOperatorRole"):
        statements = trust(template, prefix)["Statement"]
        assert sorted(s["Principal"]["AWS"] for s in statements) == [deputy, oncall]
        assert [s["Condition"] for s in statements] == [conditions, conditions], prefix


def test_without_operator_trust_the_operators_alone_decide() -> None:
    template = Template.from_stack(pipeline_stack()).to_json()
    assert all("Condition" not in s for s in trust(template, "OutboxEventsOperatorRole")["Statement"])


@pytest.mark.parametrize("tag", [("", "oncall"), ("team", ""), ("bad*key", "x")])
def test_a_principal_tag_that_is_not_a_tag_is_refused(tag: tuple[str, str]) -> None:
    with pytest.raises(ValueError, match=r"principal_tag must be \(key, value\)"):
        OperatorTrust(principal_tag=tag)


def test_the_stack_outputs_the_runbook_role(stack_template: dict[str, Any]) -> None:
    role_id, _ = only_resource(stack_template, "AWS::IAM::Role", "OutboxRunbookRole")
    assert stack_template["Outputs"][StackOutput.RUNBOOK_ROLE]["Value"] == {"Fn::GetAtt": [role_id, "Arn"]}


def test_on_the_events_table_the_runbook_role_reads_and_may_change_no_event_row(stack_template: dict[str, Any]) -> None:
    role_id, _ = only_resource(stack_template, "AWS::IAM::Role", "OutboxRunbookRole")
    events_id, _ = only_resource(stack_template, "AWS::DynamoDB::Table", "EventsTable")
    statements = role_statements(stack_template, role_id)
    events = {"Fn::GetAtt": [events_id, "Arn"]}
    assert actions_on(statements, "Allow", events) == {"dynamodb:GetItem", "dynamodb:Query"}
    assert actions_on(statements, "Deny", events) == set(EVENT_ROW_MUTATIONS)


def test_without_the_record_change_lane_the_runbook_role_reaches_the_durable_lane_only() -> None:
    template = Template.from_stack(pipeline_stack()).to_json()
    role_id, _ = only_resource(template, "AWS::IAM::Role", "OutboxRunbookRole")
    sqs_resources = {
        resource["Fn::GetAtt"][0]
        for statement in role_statements(template, role_id)
        if any(action.startswith("sqs:") for action in listed(statement["Action"]))
        for resource in listed(statement["Resource"])
    }
    assert sqs_resources == {
        only_resource(template, "AWS::SQS::Queue", prefix)[0]
        for prefix in (
            "DurableQueue",
            "DurableDeadLetters",
            "RelayDeadLetters",
            "AuditorFindingsQueue",
            "AuditorFindingsDeadLetters",
            "AuditorPipeDeadLetters",
            "AuditorAnchoringDeadLetters",
            "WorkflowsSettlerDeadLetters",  # the example's WORKFLOW lane: its settle pass's DLQ (status reads it)
        )
    }
