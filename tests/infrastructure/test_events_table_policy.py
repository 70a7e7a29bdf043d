"""The events table's resource policy: the event-row Deny binds every principal of the account but the operator
role (admins, CI and the root user included), read from the synthesized template and evaluated on requests.

moto enforces no resource policy (docs/aws-behaviour.md M23): AWS's decision is asked of the synthesized
policies with ``policy_evaluation``, a deliberately small evaluator."""

from __future__ import annotations

import json
from typing import Any

import pytest

from outbox_cdk.events_table import (
    CHAIN_ROW_CONDITIONS,
    EVENT_ROW_CONDITIONS,
    EVENT_ROW_MUTATIONS,
    PUT_DENY_SID,
    REMOVAL_DENY_SID,
    RESOURCE_DENY_SID,
    TLS_DENY_SID,
)
from tests.infrastructure.conftest import resources_of_type
from tests.infrastructure.policy_evaluation import (
    EVERYTHING,
    Account,
    Decision,
    resolve,
    role_arn,
    template_arns,
)
from tests.infrastructure.template_queries import only_resource

# DynamoDB's limit for a resource policy, whitespace counted (docs/aws-behaviour.md R10.6).
RESOURCE_POLICY_MAX_BYTES = 20 * 1024
EVENT_ROW = "TENANT#acme#EVENT"
HEAD_ROW = "TENANT#acme#HEAD"
# A tenant index row's partition (outbox.keys.tenant_index_partition): what the hourly pass and status enumerate.
INDEX_ROW = "TENANTS#07"
# What CloudFormation (and an operator at the console) calls on the table itself, which no LeadingKeys name.
TABLE_ACTIONS = [
    "dynamodb:UpdateTable",
    "dynamodb:PutResourcePolicy",
    "dynamodb:DeleteResourcePolicy",
    "dynamodb:GetResourcePolicy",
    "dynamodb:UpdateTimeToLive",
    "dynamodb:UpdateContinuousBackups",
    "dynamodb:TagResource",
    "dynamodb:DescribeTable",
    "dynamodb:Scan",
]


def table_policy(stack_template: dict[str, Any], prefix: str) -> dict[str, Any] | None:
    _, table = only_resource(stack_template, "AWS::DynamoDB::Table", prefix)
    policy: dict[str, Any] | None = table["Properties"].get("ResourcePolicy", {}).get("PolicyDocument")
    return policy


def test_the_events_table_denies_event_row_mutations_to_all_but_the_operator_role(
    stack_template: dict[str, Any],
) -> None:
    operator_id, _ = only_resource(stack_template, "AWS::IAM::Role", "EventsOperatorRole")
    policy = table_policy(stack_template, "EventsTable")
    assert policy is not None
    assert policy["Statement"][0] == (
        {
            "Sid": RESOURCE_DENY_SID,
            "Effect": "Deny",
            "Principal": {"AWS": "*"},
            "Action": sorted(EVENT_ROW_MUTATIONS),
            # The table itself: a policy cannot name the ARN of the table it is created with (R10.6).
            "Resource": "*",
            "Condition": {
                **EVENT_ROW_CONDITIONS,
                "ArnNotEquals": {"aws:PrincipalArn": [{"Fn::GetAtt": [operator_id, "Arn"]}]},
            },
        }
    )
    assert "dynamodb:PutItem" not in EVENT_ROW_MUTATIONS, "every emitter appends with PutItem"


def test_the_events_table_denies_putting_event_rows_to_all_but_the_operator_role_and_the_emitters(
    stack_template: dict[str, Any],
) -> None:
    policy = table_policy(stack_template, "EventsTable")
    assert policy is not None
    [put_deny] = [statement for statement in policy["Statement"] if statement["Sid"] == PUT_DENY_SID]
    exempt = put_deny["Condition"]["ArnNotEquals"]["aws:PrincipalArn"]
    # The operator role, then each role granted grant_emit, once: the durable consumer, the example's workflow (its
    # steps emit) and the example's producer.
    assert [arn["Fn::GetAtt"][0] for arn in exempt] == [
        only_resource(stack_template, "AWS::IAM::Role", prefix)[0]
        for prefix in (
            "OutboxEventsOperatorRole",
            "OutboxDurableConsumerLambdaRole",
            "OutboxWorkflowsWorkflow0LambdaRole",
            "PlaceOrderRole",
        )
    ]
    assert put_deny == {
        "Sid": PUT_DENY_SID,
        "Effect": "Deny",
        "Principal": {"AWS": "*"},
        "Action": ["dynamodb:PutItem", "dynamodb:UpdateItem"],
        "Resource": "*",
        "Condition": {**CHAIN_ROW_CONDITIONS, "ArnNotEquals": {"aws:PrincipalArn": exempt}},
    }
    assert CHAIN_ROW_CONDITIONS["ForAnyValue:StringLike"] == {
        "dynamodb:LeadingKeys": ["TENANT#*#EVENT", "TENANT#*#HEAD", "TENANTS#*"]
    }
    [removal_deny] = [statement for statement in policy["Statement"] if statement["Sid"] == REMOVAL_DENY_SID]
    assert removal_deny == {
        "Sid": REMOVAL_DENY_SID,
        "Effect": "Deny",
        "Principal": {"AWS": "*"},
        "Action": [
            "dynamodb:BatchWriteItem",
            "dynamodb:DeleteItem",
            "dynamodb:PartiQLDelete",
            "dynamodb:PartiQLInsert",
            "dynamodb:PartiQLUpdate",
        ],
        "Resource": "*",
        "Condition": {
            "ForAnyValue:StringLike": {"dynamodb:LeadingKeys": ["TENANT#*#HEAD", "TENANTS#*"]},
            "Null": {"dynamodb:LeadingKeys": "false"},
            "ArnNotEquals": {"aws:PrincipalArn": [exempt[0]]},
        },
    }


def relayed_table(stack_template: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The table whose stream the relay carries to the durable queue (the one queue that is FIFO and redriven):
    the events table, found by what it feeds, not by its name."""
    [durable] = [
        logical_id
        for logical_id, queue in resources_of_type(stack_template, "AWS::SQS::Queue").items()
        if queue["Properties"].get("FifoQueue") and "RedrivePolicy" in queue["Properties"]
    ]
    [source] = [
        pipe["Properties"]["Source"]
        for pipe in resources_of_type(stack_template, "AWS::Pipes::Pipe").values()
        if pipe["Properties"]["Target"] == {"Fn::GetAtt": [durable, "Arn"]}
    ]
    table_id, attribute = source["Fn::GetAtt"]
    assert attribute == "StreamArn", source
    return table_id, resources_of_type(stack_template, "AWS::DynamoDB::Table")[table_id]


def test_the_events_table_refuses_every_request_without_tls(stack_template: dict[str, Any]) -> None:
    table_id, table = relayed_table(stack_template)
    statements = table["Properties"]["ResourcePolicy"]["PolicyDocument"]["Statement"]

    assert {
        "Sid": TLS_DENY_SID,
        "Effect": "Deny",
        "Principal": {"AWS": "*"},
        "Action": "dynamodb:*",
        "Resource": "*",
        "Condition": {"Bool": {"aws:SecureTransport": "false"}},
    } in statements

    # Evaluated: whoever calls over plain HTTP is refused, whatever their own policy allows; over TLS, not
    account = Account.of(stack_template)
    operator_id, _ = only_resource(stack_template, "AWS::IAM::Role", "OutboxEventsOperatorRole")
    item_calls = [("dynamodb:GetItem", EVENT_ROW), ("dynamodb:PutItem", "ORDER#1")]
    calls = [
        *((action, {"dynamodb:LeadingKeys": [key]}) for action, key in item_calls),
        *((a, {}) for a in TABLE_ACTIONS),
    ]
    for principal in (operator_id, "an administrator"):
        for action, context in calls:
            for secure, expected in ((False, Decision.EXPLICIT_DENY), (True, Decision.ALLOWED)):
                decision = account.decide(
                    principal,
                    action,
                    table_id,
                    statements,
                    identity=EVERYTHING,
                    context=context,
                    secure_transport=secure,
                )
                assert decision is expected, (principal, action, secure)


def test_no_other_table_has_a_resource_policy(stack_template: dict[str, Any]) -> None:
    # The inbox expires rows by TTL and the data table is the application's: neither gets a policy here.
    tables = resources_of_type(stack_template, "AWS::DynamoDB::Table")
    with_policy = [logical_id for logical_id, table in tables.items() if "ResourcePolicy" in table["Properties"]]
    assert len(with_policy) == 1, with_policy
    assert "EventsTable" in with_policy[0]


# The longest role ARN IAM allows: a 512-character path and a 64-character name.
LONGEST_ROLE_ARN = role_arn("p" * 511 + "/" + "r" * 64)


def test_the_policy_stays_under_dynamodb_s_size_limit_with_every_emitter_it_admits() -> None:
    # The most emitters grant_emit admits, every emitter's ARN as long as IAM allows, pretty-printed; the operator
    # role is the stack's own, named by CloudFormation (64 characters at most, no path), and named in each statement.
    from aws_cdk import App, Stack
    from aws_cdk import aws_iam as iam
    from aws_cdk.assertions import Template

    from outbox_cdk.events_table import MAX_EMITTERS, EventsTable

    stack = Stack(App(), "Emitters")
    events = EventsTable(stack, "Events", operators=[iam.AccountRootPrincipal()])
    for number in range(MAX_EMITTERS):
        events.grant_emit(iam.Role(stack, f"Emitter{number}", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com")))
    template = Template.from_stack(stack).to_json()
    operator_id, _ = only_resource(template, "AWS::IAM::Role", "EventsOperatorRole")
    arns = {logical_id: LONGEST_ROLE_ARN for logical_id in template_arns(template)} | {operator_id: role_arn("r" * 64)}
    policy = resolve(table_policy(template, "EventsTable"), arns)
    size = len(json.dumps(policy, indent=4).encode())
    assert size < RESOURCE_POLICY_MAX_BYTES, size
    with pytest.raises(ValueError, match=f"at most {MAX_EMITTERS} roles"):
        events.grant_emit(iam.Role(stack, "OneTooMany", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com")))


# What IAM's ARN operators match as patterns (ArnNotEquals as ArnNotLike): each would exempt every principal it
# matches from the PutItem Deny.
WILDCARD_ARNS = [
    "arn:aws:iam::123456789012:role/*",
    "arn:aws:iam::123456789012:role/producer-?",
    "arn:aws:iam::123456789012:user/ci*",
]


@pytest.mark.parametrize("arn", WILDCARD_ARNS)
def test_grant_emit_refuses_a_wildcard_arn_and_says_to_name_each_role(arn: str) -> None:
    from aws_cdk import App, Stack
    from aws_cdk import aws_iam as iam
    from aws_cdk.assertions import Template

    from outbox_cdk.events_table import EventsTable

    stack = Stack(App(), "Emitters")
    events = EventsTable(stack, "Events", operators=[iam.AccountRootPrincipal()])
    many = iam.User.from_user_arn(stack, "Many", arn) if ":user/" in arn else iam.Role.from_role_arn(stack, "Many", arn)

    with pytest.raises(ValueError, match=r"grant_emit: .* a wildcard .* exact ARN"):
        events.grant_emit(many)

    assert arn not in json.dumps(Template.from_stack(stack).to_json()), "admitted by no policy"


# --- what AWS would decide, asked of the synthesized policies ----------------------------------------------


def decision(
    stack_template: dict[str, Any],
    principal: str,
    action: str,
    *leading_keys: str,
    identity: list[dict[str, Any]] | None = None,
) -> Decision:
    """AWS's decision on ``principal`` (a name of ``account_principals``, or a role's construct id) calling
    ``action`` on the events table, for items in the partitions ``leading_keys``."""
    account = Account.of(stack_template)
    table_id, _ = only_resource(stack_template, "AWS::DynamoDB::Table", "EventsTable")
    if principal not in account.principals:
        principal, _ = only_resource(stack_template, "AWS::IAM::Role", principal)
    policy = table_policy(stack_template, "EventsTable")
    assert policy is not None
    keys = {"dynamodb:LeadingKeys": list(leading_keys)} if leading_keys else None
    return account.decide(principal, action, table_id, policy["Statement"], identity=identity, context=keys)


@pytest.mark.parametrize("principal", ["an administrator", "the root user", "DurableConsumer", "PlaceOrder"])
@pytest.mark.parametrize("action", EVENT_ROW_MUTATIONS)
def test_nobody_but_the_operator_role_may_change_or_remove_an_event_row(
    stack_template: dict[str, Any], principal: str, action: str
) -> None:
    # Given any principal of the account, even one whose own policy allows everything (a CI role, an admin)
    assert decision(stack_template, principal, action, EVENT_ROW, identity=list(EVERYTHING)) is Decision.EXPLICIT_DENY


# Principals of the account that do not emit: each may have a policy that allows everything.
NOT_EMITTING = (
    "an administrator",
    "the root user",
    "OutboxRunbookRole",
    "OutboxAuditorRecorderLambdaRole",
    "OutboxOperatorEndpointLambdaRole",
)


@pytest.mark.parametrize("principal", NOT_EMITTING)
def test_nobody_but_the_operator_role_and_the_emitters_may_put_an_event_row(
    stack_template: dict[str, Any], principal: str
) -> None:
    # An overwrite by an administrator, a CI role or a role of this app that does not emit is refused, not only
    # detected; whatever their own policy allows.
    everything = list(EVERYTHING)
    assert decision(stack_template, principal, "dynamodb:PutItem", EVENT_ROW, identity=everything) is (
        Decision.EXPLICIT_DENY
    )
    # Rows that are not the chain's are not this statement's business (an order, other tables').
    assert decision(stack_template, principal, "dynamodb:PutItem", "ORDER#1", identity=everything) is Decision.ALLOWED


# Every write of a row, by key: what emit() does, what it never does, and to whom the policy leaves each.
ROW_WRITES = ("dynamodb:PutItem", *EVENT_ROW_MUTATIONS)


@pytest.mark.parametrize("principal", [*NOT_EMITTING, "OutboxAuditorAnchoringRole", "DurableConsumer", "PlaceOrder"])
@pytest.mark.parametrize("row", [HEAD_ROW, INDEX_ROW])
@pytest.mark.parametrize("action", ROW_WRITES)
def test_a_head_or_an_index_row_is_written_only_as_emit_writes_it(
    stack_template: dict[str, Any], principal: str, row: str, action: str
) -> None:
    """A tenant's index row deleted would drop it from the hourly pass and status; its head deleted or moved
    would fork its chain. Whatever its own policy allows, a principal of the account may only put or update one,
    and only if it emits; nobody but the operator role may delete one, in any way."""
    emitter = principal in ("DurableConsumer", "PlaceOrder")
    allowed = emitter and action in ("dynamodb:PutItem", "dynamodb:UpdateItem")
    got = decision(stack_template, principal, action, row, identity=list(EVERYTHING))
    assert got is (Decision.ALLOWED if allowed else Decision.EXPLICIT_DENY)


@pytest.mark.parametrize("row", [EVENT_ROW, HEAD_ROW, INDEX_ROW])
@pytest.mark.parametrize("action", ROW_WRITES)
def test_the_operator_role_may(stack_template: dict[str, Any], action: str, row: str) -> None:
    if action.startswith("dynamodb:PartiQL"):
        # Its own policy (CDK's read-write grant) names no PartiQL action: not denied by the table, not granted.
        assert decision(stack_template, "EventsOperatorRole", action, row) is Decision.IMPLICIT_DENY
    else:
        assert decision(stack_template, "EventsOperatorRole", action, row) is Decision.ALLOWED


def test_a_batch_that_mixes_in_one_event_row_is_denied_and_one_without_is_not(stack_template: dict[str, Any]) -> None:
    mixed = ("ORDER#1", EVENT_ROW)
    assert decision(stack_template, "an administrator", "dynamodb:BatchWriteItem", *mixed) is Decision.EXPLICIT_DENY
    assert decision(stack_template, "an administrator", "dynamodb:BatchWriteItem", "ORDER#1") is Decision.ALLOWED


@pytest.mark.parametrize("principal", ["PlaceOrder", "DurableConsumer"])
def test_an_emitter_still_appends_and_moves_the_head(stack_template: dict[str, Any], principal: str) -> None:
    # emit() is one transaction: PutItem of the event row, UpdateItem of the head, both authorised per item.
    # IAM cannot tell this PutItem from an overwrite of an existing row: not prevented here (see tamper evidence).
    assert decision(stack_template, principal, "dynamodb:PutItem", EVENT_ROW) is Decision.ALLOWED
    assert decision(stack_template, principal, "dynamodb:PutItem", EVENT_ROW, identity=list(EVERYTHING)) is (
        Decision.ALLOWED
    )
    assert decision(stack_template, principal, "dynamodb:UpdateItem", HEAD_ROW) is Decision.ALLOWED
    assert decision(stack_template, principal, "dynamodb:GetItem", HEAD_ROW) is Decision.ALLOWED
    # A tenant's first emit puts its head and its index row.
    assert decision(stack_template, principal, "dynamodb:PutItem", HEAD_ROW) is Decision.ALLOWED
    assert decision(stack_template, principal, "dynamodb:PutItem", INDEX_ROW) is Decision.ALLOWED


@pytest.mark.parametrize("action", TABLE_ACTIONS)
def test_cloudformation_and_administrators_keep_every_table_action(stack_template: dict[str, Any], action: str) -> None:
    # CloudFormation deploys with a role as broad as an administrator's: the policy never locks it out of
    # updating the table, its settings or this very policy.
    assert decision(stack_template, "an administrator", action) is Decision.ALLOWED


def test_reads_of_event_rows_are_not_the_policy_s_business(stack_template: dict[str, Any]) -> None:
    for action in ("dynamodb:GetItem", "dynamodb:Query", "dynamodb:ConditionCheckItem"):
        assert decision(stack_template, "an administrator", action, EVENT_ROW) is Decision.ALLOWED
