"""Only the pipe feeds each lane's queue: the queue policies deny sqs:SendMessage to every principal but the
pipe's role and the repairs' roles (and, in a pipeline with ordered subscriptions, the durable consumer's
role on its own queue: it sends a deferred event back), read from the synthesized template and evaluated on
forged sends.

The local runtime (moto) does not enforce queue policies (docs/aws-behaviour.md M23): what AWS would decide
is asked of the synthesized policies with ``policy_evaluation``, a deliberately small evaluator."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aws_cdk import aws_iam as iam
from aws_cdk.assertions import Template

from outbox_cdk.redriven_queue import SEND_DENY_SID
from tests.infrastructure.conftest import resources_of_type
from tests.infrastructure.policy_evaluation import Decision, Request, account_principals, decide, resolve, template_arns
from tests.infrastructure.template_queries import only_resource, role_statements
from tests.infrastructure.test_pipeline import record_change_pipeline

# (queue, the pipe role that feeds it) by their construct ids in the example stack.
LANES = [
    ("DurableQueue", "RelayRole"),
    ("RecordChangesQueue", "RecordChangePipeRole"),
    ("AuditorFindingsQueue", "AuditorPipeRole"),  # a forged finding would page for nothing, or bury a real one
]
OPERATOR_ROLE = "EventsOperatorRole"
RUNBOOK_ROLE = "OutboxRunbookRole"
# The example has an ordered subscription: its durable consumer sends deferred events back to its own queue.
WAKING_CONSUMER = {"DurableQueue": "OutboxDurableConsumerLambdaRole"}


def queue_policy(stack_template: dict[str, Any], queue_id: str) -> list[dict[str, Any]]:
    [policy] = [
        policy["Properties"]["PolicyDocument"]["Statement"]
        for policy in resources_of_type(stack_template, "AWS::SQS::QueuePolicy").values()
        if {"Ref": queue_id} in policy["Properties"]["Queues"]
    ]
    return list(policy)


def send_deny(statements: list[dict[str, Any]]) -> dict[str, Any]:
    [deny] = [statement for statement in statements if statement.get("Sid") == SEND_DENY_SID]
    return deny


def deny_statement(sid: str, queue_id: str, condition: dict[str, Any]) -> dict[str, Any]:
    """The statement a queue policy denies sqs:SendMessage with, to everyone the condition holds for."""
    return {
        "Sid": sid,
        "Effect": "Deny",
        "Principal": {"AWS": "*"},
        "Action": "sqs:SendMessage",
        "Resource": {"Fn::GetAtt": [queue_id, "Arn"]},
        "Condition": condition,
    }


def role_id(stack_template: dict[str, Any], prefix: str) -> str:
    return only_resource(stack_template, "AWS::IAM::Role", prefix)[0]


@pytest.mark.parametrize(("queue_prefix", "pipe_role_prefix"), LANES)
def test_each_lane_queue_denies_a_send_to_all_but_its_pipe_and_the_repair_roles(
    stack_template: dict[str, Any], queue_prefix: str, pipe_role_prefix: str
) -> None:
    queue_id, _ = only_resource(stack_template, "AWS::SQS::Queue", queue_prefix)
    statements = queue_policy(stack_template, queue_id)
    waking = [WAKING_CONSUMER[queue_prefix]] if queue_prefix in WAKING_CONSUMER else []
    exempt = [
        {"Fn::GetAtt": [role_id(stack_template, prefix), "Arn"]}
        for prefix in (pipe_role_prefix, OPERATOR_ROLE, *waking, RUNBOOK_ROLE)
    ]
    assert send_deny(statements) == deny_statement(
        SEND_DENY_SID, queue_id, {"ArnNotEquals": {"aws:PrincipalArn": exempt}}
    )
    # The TLS deny, the receive deny and the purge deny (test_queue_receivers) stay beside it, and nothing is
    # allowed by the queue policy itself.
    assert len(statements) == 4
    assert all(statement["Effect"] == "Deny" for statement in statements)


def test_each_pipe_starts_after_its_target_s_policy(stack_template: dict[str, Any]) -> None:
    # A replaced pipe role must be admitted before the pipe sends as it, or its first batches are refused.
    for queue_prefix, pipe_prefix in (
        ("DurableQueue", "RelayPipe"),
        ("RecordChangesQueue", "RecordChangePipe"),
        ("AuditorFindingsQueue", "AuditorPipe"),
    ):
        queue_id, _ = only_resource(stack_template, "AWS::SQS::Queue", queue_prefix)
        [policy_id] = [
            logical_id
            for logical_id, policy in resources_of_type(stack_template, "AWS::SQS::QueuePolicy").items()
            if {"Ref": queue_id} in policy["Properties"]["Queues"]
        ]
        _, pipe = only_resource(stack_template, "AWS::Pipes::Pipe", pipe_prefix)
        assert policy_id in pipe["DependsOn"]


# --- what AWS would decide on a send, asked of the synthesized policies -----------------------------------


@pytest.mark.parametrize(("queue_prefix", "pipe_role_prefix"), LANES)
def test_a_forged_send_from_any_other_principal_of_the_account_is_denied(
    stack_template: dict[str, Any], queue_prefix: str, pipe_role_prefix: str
) -> None:
    arns = template_arns(stack_template)
    queue_id, _ = only_resource(stack_template, "AWS::SQS::Queue", queue_prefix)
    policy = resolve(queue_policy(stack_template, queue_id), arns)
    pipe, operator = role_id(stack_template, pipe_role_prefix), role_id(stack_template, OPERATOR_ROLE)
    runbook = role_id(stack_template, RUNBOOK_ROLE)

    decisions = {
        name: decide(Request("sqs:SendMessage", arns[queue_id], arn), identity, policy)
        for name, (arn, identity) in account_principals(stack_template).items()
    }

    # The pipe sends: its own policy allows it and the queue's does not deny it.
    assert decisions.pop(pipe) is Decision.ALLOWED
    # The operator role is not denied by the queue; its own policy grants it no send, which a repair needs.
    assert decisions.pop(operator) is Decision.IMPLICIT_DENY
    # The runbook role sends repairs (replay, reconcile, redrive): its policy grants it, the queue admits it.
    assert decisions.pop(runbook) is Decision.ALLOWED
    # So does the durable consumer of ordered subscriptions, to its own queue: a deferred event sent back.
    if queue_prefix in WAKING_CONSUMER:
        assert decisions.pop(role_id(stack_template, WAKING_CONSUMER[queue_prefix])) is Decision.ALLOWED
    # Everyone else is refused by the queue policy itself, whatever their own policy allows: the consumers,
    # the other lane's pipe, the operator endpoint, the application's producer, an admin, root, anonymous.
    assert decisions == dict.fromkeys(decisions, Decision.EXPLICIT_DENY)
    assert len(decisions) >= 8, sorted(decisions)


@pytest.mark.parametrize("ordered", [False, True])
def test_a_consumer_granted_every_sqs_action_still_cannot_inject(ordered: bool) -> None:
    # The durable consumer of a pipeline without ordered subscriptions, and the record-change consumer always.
    template = Template.from_stack(record_change_pipeline(ordered_subscriptions=ordered).stack).to_json()
    arns = template_arns(template)
    queue_id, _ = only_resource(template, "AWS::SQS::Queue", "OutboxDurableQueue")
    policy = resolve(queue_policy(template, queue_id), arns)
    consumers = ["OutboxRecordChangeConsumer", *["OutboxDurableConsumer"] * (not ordered)]
    for prefix in consumers:
        consumer = role_id(template, prefix)
        granted = [
            *resolve(role_statements(template, consumer), arns),
            {"Effect": "Allow", "Action": "sqs:*", "Resource": "*"},
        ]
        forged = Request("sqs:SendMessage", arns[queue_id], arns[consumer])
        # (SendMessageBatch is authorised as sqs:SendMessage, R10.4: the one denied action covers it.)
        assert decide(forged, granted, policy) is Decision.EXPLICIT_DENY, prefix


def test_the_pipe_itself_is_still_refused_without_tls(stack_template: dict[str, Any]) -> None:
    arns = template_arns(stack_template)
    queue_id, _ = only_resource(stack_template, "AWS::SQS::Queue", "DurableQueue")
    pipe = role_id(stack_template, "RelayRole")
    identity = resolve(role_statements(stack_template, pipe), arns)
    policy = resolve(queue_policy(stack_template, queue_id), arns)

    plain = Request("sqs:SendMessage", arns[queue_id], arns[pipe], secure_transport=False)

    assert decide(plain, identity, policy) is Decision.EXPLICIT_DENY


# --- the construct: who else may send -----------------------------------------------------------------


def test_admit_queue_sender_adds_one_role_to_every_lane_queue_once() -> None:
    pipeline = record_change_pipeline()
    oncall = iam.Role(pipeline.stack, "Oncall", assumed_by=iam.AccountRootPrincipal())

    pipeline.admit_queue_sender(oncall)
    pipeline.admit_queue_sender(oncall)
    pipeline.admit_queue_sender(pipeline.runbook.role)  # already admitted by the pipeline itself

    template = Template.from_stack(pipeline.stack).to_json()
    for queue_prefix, pipe_role_prefix in LANES:
        queue_id, _ = only_resource(template, "AWS::SQS::Queue", queue_prefix)
        exempt = send_deny(queue_policy(template, queue_id))["Condition"]["ArnNotEquals"]["aws:PrincipalArn"]
        assert exempt == [
            {"Fn::GetAtt": [role_id(template, prefix), "Arn"]}
            for prefix in (pipe_role_prefix, OPERATOR_ROLE, RUNBOOK_ROLE, "Oncall")
        ]


@pytest.mark.parametrize("arn", ["arn:aws:iam::123456789012:role/*", "arn:aws:iam::123456789012:role/oncall-?"])
def test_a_wildcard_arn_is_admitted_to_no_queue(arn: str) -> None:
    # ArnNotEquals matches * and ? as ArnNotLike does: such a sender would exempt every role it matches.
    pipeline = record_change_pipeline()
    many = iam.Role.from_role_arn(pipeline.stack, "Many", arn)

    with pytest.raises(ValueError, match=r"admit_queue_sender: .* a wildcard .* exact ARN"):
        pipeline.admit_queue_sender(many)
    with pytest.raises(ValueError, match=r"a wildcard .* exact ARN"):
        pipeline.durable.admit_sender(many)

    assert arn not in json.dumps(Template.from_stack(pipeline.stack).to_json()), "admitted by no queue policy"


def test_a_queue_is_fed_by_one_pipe() -> None:
    pipeline = record_change_pipeline()
    with pytest.raises(ValueError, match="fed by one pipe"):
        pipeline.durable.fed_by(pipeline.relay)
