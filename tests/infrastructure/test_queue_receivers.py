"""Only its consumer takes a message off a lane's queue: the policy of every queue an event source mapping polls
denies sqs:ReceiveMessage, sqs:DeleteMessage and sqs:ChangeMessageVisibility to every principal but the role of
that mapping's function (the mapping polls as it), so an administrator or a CI role granted ``sqs:*`` cannot make
a durable message vanish. Found by what the template connects (mapping -> queue, mapping -> function -> role),
and evaluated on the synthesized policies (``policy_evaluation``): moto enforces no queue policy (M23).

A redrive still works: it receives from and deletes on the DLQ, and sends to the lane's queue."""

from __future__ import annotations

from typing import Any

import pytest
from aws_cdk import App, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_sns as sns

from outbox.outputs import StackOutput
from outbox_cdk.redriven_queue import RedrivenQueue
from tests.infrastructure.conftest import resources_of_type
from tests.infrastructure.policy_evaluation import Account, Decision

RECEIVE_ACTIONS = ("sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:ChangeMessageVisibility")
# What a principal with sqs:* in its own policy (an administrator's, a CI role's) is allowed on every queue.
EVERY_SQS_ACTION = {"Effect": "Allow", "Action": "sqs:*", "Resource": "*"}


def polled_queues(template: dict[str, Any]) -> dict[str, str]:
    """Each queue an event source mapping polls -> the logical id of the role of that mapping's function."""
    polled = {}
    for mapping in resources_of_type(template, "AWS::Lambda::EventSourceMapping").values():
        queue_id, _ = mapping["Properties"]["EventSourceArn"]["Fn::GetAtt"]
        assert template["Resources"][queue_id]["Type"] == "AWS::SQS::Queue"
        function = template["Resources"][mapping["Properties"]["FunctionName"]["Ref"]]
        role_id, _ = function["Properties"]["Role"]["Fn::GetAtt"]
        polled[queue_id] = role_id
    return polled


def queue_policy(template: dict[str, Any], queue_id: str) -> list[dict[str, Any]]:
    [statements] = [
        policy["Properties"]["PolicyDocument"]["Statement"]
        for policy in resources_of_type(template, "AWS::SQS::QueuePolicy").values()
        if {"Ref": queue_id} in policy["Properties"]["Queues"]
    ]
    return list(statements)


def dead_letter_queue(template: dict[str, Any], queue_id: str) -> str:
    dlq_id, _ = template["Resources"][queue_id]["Properties"]["RedrivePolicy"]["deadLetterTargetArn"]["Fn::GetAtt"]
    return str(dlq_id)


def test_the_durable_record_change_and_tamper_queues_are_polled(stack_template: dict[str, Any]) -> None:
    # The durable consumer, the record-change consumer and the tamper recorder: one mapping each.
    assert len(polled_queues(stack_template)) == 3


def test_each_polled_queue_lets_only_its_consumer_receive_delete_or_hide_a_message(
    stack_template: dict[str, Any],
) -> None:
    account = Account.of(stack_template)
    for queue_id, consumer in polled_queues(stack_template).items():
        policy = queue_policy(stack_template, queue_id)
        for name in account.principals:
            for action in RECEIVE_ACTIONS:
                # Whatever its own policy allows: sqs:* on every queue, as an administrator's or a CI role's.
                decision = account.decide(name, action, queue_id, policy, granted=[EVERY_SQS_ACTION])
                expected = Decision.ALLOWED if name == consumer else Decision.EXPLICIT_DENY
                assert decision is expected, (queue_id, name, action)
        # And the consumer's mapping still polls with the consumer's own grants.
        for action in ("sqs:ReceiveMessage", "sqs:DeleteMessage"):
            assert account.decide(consumer, action, queue_id, policy) is Decision.ALLOWED


def test_nobody_purges_a_polled_queue(stack_template: dict[str, Any]) -> None:
    """A purge empties a lane's queue in one call, and no repair needs it: every principal of the account, the
    consumer's role and an anonymous caller included, each granted sqs:*, is explicitly denied it."""
    account = Account.of(stack_template)
    for queue_id in polled_queues(stack_template):
        policy = queue_policy(stack_template, queue_id)
        for name in account.principals:
            decision = account.decide(name, "sqs:PurgeQueue", queue_id, policy, granted=[EVERY_SQS_ACTION])
            assert decision is Decision.EXPLICIT_DENY, (queue_id, name)
        # Its DLQ stays the repairs' to purge (the runbook purges a pipe's DLQ; an administrator may purge these).
        dlq_id = dead_letter_queue(stack_template, queue_id)
        dlq_policy = queue_policy(stack_template, dlq_id)
        decision = account.decide("an administrator", "sqs:PurgeQueue", dlq_id, dlq_policy, identity=[EVERY_SQS_ACTION])
        assert decision is Decision.ALLOWED


def test_a_redrive_from_each_lane_s_dlq_back_into_its_queue_is_still_allowed(stack_template: dict[str, Any]) -> None:
    account = Account.of(stack_template)
    runbook_id, _ = stack_template["Outputs"][StackOutput.RUNBOOK_ROLE.value]["Value"]["Fn::GetAtt"]
    # Every lane's DLQ is redriven (the durable, record-change and tamper ones: outbox redrive --dlq).
    for queue_id in polled_queues(stack_template):
        dlq_id = dead_letter_queue(stack_template, queue_id)
        dlq_policy, queue = queue_policy(stack_template, dlq_id), queue_policy(stack_template, queue_id)
        assert account.decide(runbook_id, "sqs:ReceiveMessage", dlq_id, dlq_policy) is Decision.ALLOWED
        assert account.decide(runbook_id, "sqs:DeleteMessage", dlq_id, dlq_policy) is Decision.ALLOWED
        assert account.decide(runbook_id, "sqs:SendMessage", queue_id, queue) is Decision.ALLOWED, queue_id


def test_a_queue_takes_one_consumer_and_refuses_a_second_by_name() -> None:
    # A second consumer on a lane's queue would have its receives denied on AWS: the synth refuses it instead.
    stack = Stack(App(), "Lane")
    queue = RedrivenQueue(
        stack,
        "Queue",
        alarm_topic=sns.Topic(stack, "Alarms"),
        fifo=True,
        visibility_timeout_seconds=60,
        dead_letter_description="lane",
        max_receive_count=5,
    )
    polling = iam.Role(stack, "First", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))
    queue.polled_by(polling)
    second = iam.Role(stack, "Second", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))
    with pytest.raises(ValueError, match="polled by one consumer, already Lane/First"):
        queue.polled_by(second)
