"""The events table and its append-only policy, read from the synthesized template."""

from __future__ import annotations

from typing import Any

from aws_cdk.assertions import Match, Template

from outbox_cdk.events_table import EVENT_ROW_MUTATIONS, EVENT_ROW_PARTITION_PATTERN
from tests.infrastructure.conftest import resources_of_type
from tests.infrastructure.template_queries import named

WRITE_ACTIONS = {
    "dynamodb:PutItem",
    "dynamodb:UpdateItem",
    "dynamodb:DeleteItem",
    "dynamodb:BatchWriteItem",
    "dynamodb:PartiQLInsert",
    "dynamodb:PartiQLUpdate",
    "dynamodb:PartiQLDelete",
    "dynamodb:*",
}


def events_table_id(stack_template: dict[str, Any]) -> str:
    tables = [
        logical_id
        for logical_id, table in resources_of_type(stack_template, "AWS::DynamoDB::Table").items()
        if named(logical_id, "EventsTable")
    ]
    assert len(tables) == 1, f"expected one events table, found {tables}"
    return tables[0]


def test_events_table_has_the_keys_stream_and_protection_the_engine_relies_on(template: Template) -> None:
    template.has_resource(
        "AWS::DynamoDB::Table",
        {
            "Properties": {
                "KeySchema": [
                    {"AttributeName": "pk", "KeyType": "HASH"},
                    {"AttributeName": "sk", "KeyType": "RANGE"},
                ],
                "AttributeDefinitions": Match.array_with(
                    [
                        {"AttributeName": "pk", "AttributeType": "S"},
                        {"AttributeName": "sk", "AttributeType": "S"},
                    ]
                ),
                "BillingMode": "PAY_PER_REQUEST",
                "StreamSpecification": {"StreamViewType": "NEW_AND_OLD_IMAGES"},
                "PointInTimeRecoverySpecification": {"PointInTimeRecoveryEnabled": True},
                "SSESpecification": {"SSEEnabled": True},
                "DeletionProtectionEnabled": True,
            },
            "DeletionPolicy": "Retain",
            "UpdateReplacePolicy": "Retain",
        },
    )


def _statements_by_role(stack_template: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    statements: dict[str, list[dict[str, Any]]] = {}
    for policy in resources_of_type(stack_template, "AWS::IAM::Policy").values():
        for role in policy["Properties"].get("Roles", []):
            statements.setdefault(role["Ref"], []).extend(policy["Properties"]["PolicyDocument"]["Statement"])
    for logical_id, role in resources_of_type(stack_template, "AWS::IAM::Role").items():
        for inline in role["Properties"].get("Policies", []):
            statements.setdefault(logical_id, []).extend(inline["PolicyDocument"]["Statement"])
    return statements


def _mentions(statement: dict[str, Any], table_id: str) -> bool:
    return f"'{table_id}'" in repr(statement["Resource"])


def _actions(statement: dict[str, Any]) -> set[str]:
    actions = statement["Action"]
    return {actions} if isinstance(actions, str) else set(actions)


def test_only_the_operator_role_may_mutate_event_rows(stack_template: dict[str, Any]) -> None:
    table_id = events_table_id(stack_template)
    operator_roles = [rid for rid in resources_of_type(stack_template, "AWS::IAM::Role") if "OperatorRole" in rid]
    assert len(operator_roles) == 1

    writers = set()
    for role_id, statements in _statements_by_role(stack_template).items():
        grants_writes = any(
            s["Effect"] == "Allow" and _mentions(s, table_id) and _actions(s) & WRITE_ACTIONS for s in statements
        )
        if not grants_writes:
            continue
        writers.add(role_id)
        denies = [s for s in statements if s["Effect"] == "Deny" and _mentions(s, table_id)]
        if role_id in operator_roles:
            assert denies == [], "the operator role is the one role exempt from the deny"
            continue
        assert denies, f"{role_id} can write the events table without the event-row deny"
        deny = denies[0]
        assert set(EVENT_ROW_MUTATIONS) <= _actions(deny)
        assert deny["Condition"] == {
            "ForAnyValue:StringLike": {"dynamodb:LeadingKeys": [EVENT_ROW_PARTITION_PATTERN]},
            "Null": {"dynamodb:LeadingKeys": "false"},
        }
    # The check is not vacuous: the operator role and the durable consumer (which may emit follow-up
    # events) are both writers, and only the operator passed without the deny.
    consumer_roles = {rid for rid in writers if named(rid, "DurableConsumer")}
    assert len(consumer_roles) == 1, f"the durable consumer's role should write the events table: {sorted(writers)}"
    assert set(operator_roles) < writers


def test_emit_and_read_grants_carry_the_event_row_deny() -> None:
    # A throwaway stack: the main app gains emitters and readers in later constructs, but the grants
    # themselves must be safe for any role a user wires up.
    from aws_cdk import App, Stack
    from aws_cdk import aws_iam as iam

    from outbox_cdk.events_table import EMIT_ACTIONS, EventsTable

    stack = Stack(App(), "GrantProbe")
    events = EventsTable(stack, "Events", operators=[iam.AccountRootPrincipal()])
    emitter = iam.Role(stack, "Emitter", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))
    reader = iam.Role(stack, "Reader", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))
    events.grant_emit(emitter)
    events.grant_read(reader)
    stack_template = Template.from_stack(stack).to_json()

    statements = _statements_by_role(stack_template)
    table_id = events_table_id(stack_template)
    for role_prefix in ("Emitter", "Reader"):
        role_id = next(rid for rid in statements if named(rid, role_prefix))
        denies = [s for s in statements[role_id] if s["Effect"] == "Deny" and _mentions(s, table_id)]
        assert len(denies) == 1, f"{role_prefix} must carry exactly one event-row deny"
    emitter_id = next(rid for rid in statements if rid.startswith("Emitter"))
    allowed = set().union(*(_actions(s) for s in statements[emitter_id] if s["Effect"] == "Allow"))
    assert allowed == set(EMIT_ACTIONS), "emit needs exactly GetItem and the transaction's item actions"


def _put_exemptions(stack: Any) -> list[Any]:
    from outbox_cdk.events_table import PUT_DENY_SID

    stack_template = Template.from_stack(stack).to_json()  # the same template each time: synthesis is pure
    policy = stack_template["Resources"][events_table_id(stack_template)]["Properties"]["ResourcePolicy"]
    [put_deny] = [s for s in policy["PolicyDocument"]["Statement"] if s["Sid"] == PUT_DENY_SID]
    exempt: list[Any] = put_deny["Condition"]["ArnNotEquals"]["aws:PrincipalArn"]
    return exempt


def test_grant_emit_admits_each_role_or_user_once_by_the_arn_its_requests_carry() -> None:
    from aws_cdk import App, Stack
    from aws_cdk import aws_iam as iam

    from outbox_cdk.events_table import EventsTable

    stack = Stack(App(), "EmitterProbe")
    events = EventsTable(stack, "Events", operators=[iam.AccountRootPrincipal()])
    emitter = iam.Role(stack, "Emitter", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))
    imported = iam.Role.from_role_arn(stack, "Imported", "arn:aws:iam::123456789012:role/ci-emitter")
    user = iam.User(stack, "Batch")
    for grantee in (emitter, imported, emitter, user):
        events.grant_emit(grantee)
    stack_template = Template.from_stack(stack).to_json()
    logical = {
        prefix: next(rid for rid in stack_template["Resources"] if rid.startswith(prefix))
        for prefix in ("EventsOperatorRole", "Emitter", "Batch")
    }
    # The operator role first, then each emitter once, in the order granted.
    assert _put_exemptions(stack) == [
        {"Fn::GetAtt": [logical["EventsOperatorRole"], "Arn"]},
        {"Fn::GetAtt": [logical["Emitter"], "Arn"]},
        "arn:aws:iam::123456789012:role/ci-emitter",
        {"Fn::GetAtt": [logical["Batch"], "Arn"]},
    ]


def test_grant_emit_refuses_what_it_cannot_name_by_arn_and_a_role_of_another_stack() -> None:
    import pytest
    from aws_cdk import App, Stack
    from aws_cdk import aws_iam as iam

    from outbox_cdk.events_table import EventsTable

    app = App()
    stack = Stack(app, "Pipeline")
    events = EventsTable(stack, "Events", operators=[iam.AccountRootPrincipal()])
    with pytest.raises(ValueError, match="grant_emit needs a role or a user"):
        events.grant_emit(iam.ServicePrincipal("lambda.amazonaws.com"))
    elsewhere = iam.Role(Stack(app, "Api"), "Producer", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))
    with pytest.raises(ValueError, match=r"Api/Producer is in stack Api, the events table in Pipeline.*from_role_arn"):
        events.grant_emit(elsewhere)
