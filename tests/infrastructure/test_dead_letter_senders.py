"""Only what fails into a dead-letter queue may send to it: each DLQ's policy denies sqs:SendMessage to every IAM
principal but the role that writes its failures there, and its redrive allow policy lets no other queue of the
account move messages in (a queue's own DLQ admits its source queue alone: test_redrive_allow), read from the
synthesized template and evaluated on forged sends.

The local runtime (moto) does not enforce queue policies (docs/aws-behaviour.md M23): what AWS would decide is
asked of the synthesized policies with ``policy_evaluation``, as ``test_queue_senders`` does for the lanes."""

from __future__ import annotations

from typing import Any

import pytest
from aws_cdk import App, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_sns as sns
from aws_cdk.assertions import Template

from outbox_cdk.alarmed_dlq import DEAD_LETTER_SEND_DENY_SID, AlarmedDeadLetterQueue
from tests.infrastructure.policy_evaluation import (
    Decision,
    Request,
    account_principals,
    decide,
    resolve,
    template_arns,
)
from tests.infrastructure.template_queries import only_resource
from tests.infrastructure.test_queue_senders import deny_statement, queue_policy, role_id

# Each DLQ by its construct id in the example stack, with the roles that write its failures there.
QUEUE_DEAD_LETTERS = ["DurableDeadLetters", "RecordChangesDeadLetters", "AuditorFindingsDeadLetters"]
SENT_DEAD_LETTERS = {
    "RelayDeadLetters": "RelayRole",  # the pipe, with its role (R10.8)
    "RecordChangePipeDeadLetters": "RecordChangePipeRole",
    "AuditorPipeDeadLetters": "AuditorPipeRole",
    "AuditorAnchoringDeadLetters": "AuditorAnchoringRole",  # Lambda, for a failed asynchronous invocation
    "WorkflowsSettlerDeadLetters": "WorkflowsSettlerLambdaRole",  # the same, for the WORKFLOW lane's settle pass
}
PIPE_DEAD_LETTERS = {
    "RelayDeadLetters": "RelayPipe",
    "RecordChangePipeDeadLetters": "RecordChangePipe",
    "AuditorPipeDeadLetters": "AuditorPipe",
}
ANCHORING_DEAD_LETTERS = "AuditorAnchoringDeadLetters"
# The control-plane watch's DLQ: EventBridge writes a notice its rules could not publish, as itself; no role.
WATCH_DEAD_LETTERS = "ControlPlaneDeadLetters"
WATCH_RULES = "OutboxControlPlane"
ANCHORING_SCHEDULE = "AuditorAnchoringSchedule"
EVENTBRIDGE = "events.amazonaws.com"
SPARE_SERVICES = {"BoolIfExists": {"aws:PrincipalIsAWSService": "false"}}


def dlq_id(stack_template: dict[str, Any], prefix: str) -> str:
    return only_resource(stack_template, "AWS::SQS::Queue", prefix)[0]


def send_deny(statements: list[dict[str, Any]]) -> dict[str, Any]:
    [deny] = [statement for statement in statements if statement.get("Sid") == DEAD_LETTER_SEND_DENY_SID]
    return deny


def test_there_are_nine_dead_letter_queues(stack_template: dict[str, Any]) -> None:
    dead_letter_queues = [
        logical_id
        for logical_id, resource in stack_template["Resources"].items()
        if resource["Type"] == "AWS::SQS::Queue" and "DeadLetters" in logical_id
    ]
    assert len(dead_letter_queues) == len(QUEUE_DEAD_LETTERS) + len(SENT_DEAD_LETTERS) + 1 == 9


def watch_rules(stack_template: dict[str, Any]) -> list[str]:
    return [
        logical_id
        for logical_id, resource in stack_template["Resources"].items()
        if resource["Type"] == "AWS::Events::Rule" and logical_id.startswith(WATCH_RULES)
    ]


def test_the_watch_s_dead_letter_queue_admits_no_role_and_eventbridge_for_its_rules_only(
    stack_template: dict[str, Any],
) -> None:
    arns = template_arns(stack_template)
    queue_id = dlq_id(stack_template, WATCH_DEAD_LETTERS)
    policy = resolve(queue_policy(stack_template, queue_id), arns)
    assert send_deny(queue_policy(stack_template, queue_id)) == deny_statement(
        DEAD_LETTER_SEND_DENY_SID, queue_id, SPARE_SERVICES
    )
    properties = stack_template["Resources"][queue_id]["Properties"]
    assert properties["RedriveAllowPolicy"] == {"redrivePermission": "denyAll"}
    decisions = {
        name: decide(Request("sqs:SendMessage", arns[queue_id], arn), identity, policy)
        for name, (arn, identity) in account_principals(stack_template).items()
    }
    assert decisions == dict.fromkeys(decisions, Decision.EXPLICIT_DENY)
    rules = watch_rules(stack_template)
    # A rule per service (Lambda's: the emitting functions' calls over two rules, their names being five now, and
    # the roles given), and the one watching the rules rule
    assert len(rules) == 12, rules

    def send(source: str) -> Decision:
        request = Request(
            "sqs:SendMessage", arns[queue_id], None, context={"aws:SourceArn": source}, service=EVENTBRIDGE
        )
        return decide(request, [], policy)

    assert {rule: send(arns[rule]) for rule in rules} == dict.fromkeys(rules, Decision.ALLOWED)
    anchoring = arns[only_resource(stack_template, "AWS::Events::Rule", ANCHORING_SCHEDULE)[0]]
    assert send(anchoring) is Decision.IMPLICIT_DENY


@pytest.mark.parametrize("prefix", QUEUE_DEAD_LETTERS)
def test_a_queue_s_dead_letter_queue_denies_every_principal_s_send(stack_template: dict[str, Any], prefix: str) -> None:
    queue_id = dlq_id(stack_template, prefix)
    statements = queue_policy(stack_template, queue_id)
    # SQS's own move after maxReceiveCount receives is no principal's send (R10.8): nobody is admitted.
    assert send_deny(statements) == deny_statement(DEAD_LETTER_SEND_DENY_SID, queue_id, SPARE_SERVICES)
    assert len(statements) == 2  # beside the TLS deny, nothing
    assert all(statement["Effect"] == "Deny" for statement in statements)


@pytest.mark.parametrize(("prefix", "role_prefix"), SENT_DEAD_LETTERS.items())
def test_a_sent_to_dead_letter_queue_denies_every_principal_s_send_but_its_sender_s(
    stack_template: dict[str, Any], prefix: str, role_prefix: str
) -> None:
    queue_id = dlq_id(stack_template, prefix)
    sender = {"Fn::GetAtt": [role_id(stack_template, role_prefix), "Arn"]}
    assert send_deny(queue_policy(stack_template, queue_id)) == deny_statement(
        DEAD_LETTER_SEND_DENY_SID, queue_id, {**SPARE_SERVICES, "ArnNotEquals": {"aws:PrincipalArn": [sender]}}
    )


def test_the_anchoring_dead_letter_queue_allows_its_schedule_only(stack_template: dict[str, Any]) -> None:
    queue_id = dlq_id(stack_template, ANCHORING_DEAD_LETTERS)
    rule_id = only_resource(stack_template, "AWS::Events::Rule", ANCHORING_SCHEDULE)[0]
    [allow] = [s for s in queue_policy(stack_template, queue_id) if s["Effect"] == "Allow"]
    assert allow["Principal"] == {"Service": EVENTBRIDGE}
    assert allow["Action"] == "sqs:SendMessage"
    assert allow["Condition"] == {"ArnEquals": {"aws:SourceArn": {"Fn::GetAtt": [rule_id, "Arn"]}}}


def test_redrive_allow_policies(stack_template: dict[str, Any]) -> None:
    # No queue of the account may name a sent-to DLQ as its dead-letter queue (and have SQS move messages in past
    # the send deny). A queue's own DLQ declares none in its template: byQueue naming its source queue's ARN would
    # be a cycle, so a custom resource sets it once both exist (R10.9, test_redrive_allow).
    permissions = {
        prefix: stack_template["Resources"][dlq_id(stack_template, prefix)]["Properties"].get("RedriveAllowPolicy")
        for prefix in [*QUEUE_DEAD_LETTERS, *SENT_DEAD_LETTERS]
    }
    assert permissions == {
        **dict.fromkeys(QUEUE_DEAD_LETTERS),
        **{prefix: {"redrivePermission": "denyAll"} for prefix in SENT_DEAD_LETTERS},
    }


@pytest.mark.parametrize(("prefix", "pipe_prefix"), PIPE_DEAD_LETTERS.items())
def test_each_pipe_starts_after_the_policy_that_admits_it(
    stack_template: dict[str, Any], prefix: str, pipe_prefix: str
) -> None:
    # A replaced pipe role is admitted before the pipe writes a failed batch as it. (The anchoring function
    # cannot wait for its DLQ's policy: the policy names the rule, which names the function. A pass that fails
    # during the one deploy that replaces its role is repeated the next hour.)
    queue_id = dlq_id(stack_template, prefix)
    [policy_id] = [
        logical_id
        for logical_id, resource in stack_template["Resources"].items()
        if resource["Type"] == "AWS::SQS::QueuePolicy" and {"Ref": queue_id} in resource["Properties"]["Queues"]
    ]
    _, pipe = only_resource(stack_template, "AWS::Pipes::Pipe", pipe_prefix)
    assert policy_id in pipe["DependsOn"]


# --- what AWS would decide on a send, asked of the synthesized policies -----------------------------------


@pytest.mark.parametrize("prefix", [*QUEUE_DEAD_LETTERS, *SENT_DEAD_LETTERS])
def test_a_forged_send_to_a_dead_letter_queue_is_denied(stack_template: dict[str, Any], prefix: str) -> None:
    arns = template_arns(stack_template)
    queue_id = dlq_id(stack_template, prefix)
    policy = resolve(queue_policy(stack_template, queue_id), arns)
    senders = {role_id(stack_template, SENT_DEAD_LETTERS[prefix])} if prefix in SENT_DEAD_LETTERS else set()

    decisions = {
        name: decide(Request("sqs:SendMessage", arns[queue_id], arn), identity, policy)
        for name, (arn, identity) in account_principals(stack_template).items()
    }

    # The role that writes its failures here sends: its own policy allows it, the queue's does not deny it ...
    assert {name: decisions.pop(name) for name in senders} == dict.fromkeys(senders, Decision.ALLOWED)
    # ... and every other principal of the account is refused by the queue policy itself, whatever its own
    # policy allows: the pipes, the consumers, the runbook and operator roles, a producer, an admin, root, anonymous.
    assert decisions == dict.fromkeys(decisions, Decision.EXPLICIT_DENY)
    assert len(decisions) >= 12, sorted(decisions)


@pytest.mark.parametrize("principal_arn", [None, "arn:aws:iam::123456789012:root"], ids=["no PrincipalArn", "some"])
def test_eventbridge_sends_for_the_anchoring_schedule_and_no_other_rule(
    stack_template: dict[str, Any], principal_arn: str | None
) -> None:
    # Whether a service principal's request carries an aws:PrincipalArn is not documented (R10.7): either way.
    arns = template_arns(stack_template)
    queue_id = dlq_id(stack_template, ANCHORING_DEAD_LETTERS)
    rule = arns[only_resource(stack_template, "AWS::Events::Rule", ANCHORING_SCHEDULE)[0]]
    policy = resolve(queue_policy(stack_template, queue_id), arns)

    def send(service: str, source: str) -> Decision:
        request = Request(
            "sqs:SendMessage", arns[queue_id], principal_arn, context={"aws:SourceArn": source}, service=service
        )
        return decide(request, [], policy)

    assert send(EVENTBRIDGE, rule) is Decision.ALLOWED
    assert send(EVENTBRIDGE, rule.replace("Schedule", "Other")) is Decision.IMPLICIT_DENY
    assert send("sns.amazonaws.com", rule) is Decision.IMPLICIT_DENY


@pytest.mark.parametrize("prefix", QUEUE_DEAD_LETTERS)
def test_no_service_principal_may_send_to_a_queue_s_dead_letter_queue(
    stack_template: dict[str, Any], prefix: str
) -> None:
    arns = template_arns(stack_template)
    queue_id = dlq_id(stack_template, prefix)
    policy = resolve(queue_policy(stack_template, queue_id), arns)
    for service in (EVENTBRIDGE, "sqs.amazonaws.com", "sns.amazonaws.com"):
        request = Request("sqs:SendMessage", arns[queue_id], None, service=service)
        assert decide(request, [], policy) is Decision.IMPLICIT_DENY, service


def test_the_sender_itself_is_still_refused_without_tls(stack_template: dict[str, Any]) -> None:
    arns = template_arns(stack_template)
    queue_id = dlq_id(stack_template, "RelayDeadLetters")
    pipe = role_id(stack_template, "RelayRole")
    policy = resolve(queue_policy(stack_template, queue_id), arns)
    plain = Request("sqs:SendMessage", arns[queue_id], arns[pipe], secure_transport=False)
    assert decide(plain, [{"Effect": "Allow", "Action": "sqs:*", "Resource": "*"}], policy) is Decision.EXPLICIT_DENY


# --- the construct ------------------------------------------------------------------------------------


def test_a_role_admitted_twice_is_named_once() -> None:
    stack = Stack(App(), "Dlq")
    dlq = AlarmedDeadLetterQueue(stack, "Dlq", alarm_topic=sns.Topic(stack, "Topic"), fifo=False, description="probe")
    role = iam.Role(stack, "Writer", assumed_by=iam.ServicePrincipal("pipes.amazonaws.com"))

    dlq.admit_sender(role)
    dlq.admit_sender(role)

    template = Template.from_stack(stack).to_json()
    [policy_id] = [k for k, v in template["Resources"].items() if v["Type"] == "AWS::SQS::QueuePolicy"]
    deny = send_deny(template["Resources"][policy_id]["Properties"]["PolicyDocument"]["Statement"])
    [role_logical_id] = [k for k, v in template["Resources"].items() if v["Type"] == "AWS::IAM::Role"]
    assert deny["Condition"]["ArnNotEquals"] == {"aws:PrincipalArn": [{"Fn::GetAtt": [role_logical_id, "Arn"]}]}
