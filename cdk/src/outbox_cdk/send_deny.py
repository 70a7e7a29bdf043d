"""Queue policy statements that refuse some SQS actions to every principal but the roles they admit:
``SendDeny`` (``sqs:SendMessage``), defined once for the lanes' queues (``redriven_queue``) and the dead-letter
queues (``alarmed_dlq``), and ``ReceiveDeny`` (receive, delete, change visibility), for the lanes' queues only."""

from __future__ import annotations

from typing import ClassVar, Final

from aws_cdk import aws_iam as iam
from aws_cdk import aws_sqs as sqs
from constructs import IConstruct

from outbox_cdk.grants import one_principal_arn

# sqs:SendMessage also authorises SendMessageBatch (docs/aws-behaviour.md R10.4), and a move task from a DLQ
# sends with its caller's permissions, so this one action covers every way a principal puts a message here.
SEND_ACTIONS: Final = ("sqs:SendMessage",)
# Every way a principal takes a message off a queue without SQS moving it to the DLQ: receive it and delete it,
# or hold it invisible (ChangeMessageVisibility, up to 12 hours a receive). The batch forms are authorised as
# these actions (R10.4). Not PurgeQueue, which the lanes' queues deny to everyone (``redriven_queue``).
RECEIVE_ACTIONS: Final = ("sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:ChangeMessageVisibility")


class QueueDeny:
    """A Deny of ``self.actions`` on ``queue`` (``self.statement``, in the queue's policy ``self.policy``) for
    every principal whose ``aws:PrincipalArn`` is none of the roles ``admit`` names, in the order admitted.

    A role session's ``aws:PrincipalArn`` is its role's ARN; an anonymous request has none and is denied too
    (R10.1, R10.2). By default a service principal is denied as well. With ``spare_services`` the statement
    binds IAM principals only (``BoolIfExists aws:PrincipalIsAWSService: false``, R10.7): a service acting as
    itself, such as EventBridge writing an undeliverable event to its rule's DLQ, is left to the policy's
    Allow statements (without one, it is refused all the same), whether or not its request carries an
    ``aws:PrincipalArn``; a service that uses a role (a pipe, Lambda) is that role, bound like any other.
    """

    actions: ClassVar[tuple[str, ...]]
    admitted_by: ClassVar[str]  # the call that admits a role, named when a wildcard ARN is refused

    def __init__(self, queue: sqs.Queue, sid: str, *, spare_services: bool = False) -> None:
        self._roles: list[iam.IRole] = []
        self.statement = iam.PolicyStatement(
            sid=sid,
            effect=iam.Effect.DENY,
            principals=[iam.AnyPrincipal()],
            actions=list(self.actions),
            resources=[queue.queue_arn],
        )
        if spare_services:
            self.statement.add_condition("BoolIfExists", {"aws:PrincipalIsAWSService": "false"})
        queue.add_to_resource_policy(self.statement)
        self.policy: IConstruct = queue.node.find_child("Policy")  # made by add_to_resource_policy

    @property
    def roles(self) -> list[iam.IRole]:
        """The admitted roles, in the order admitted."""
        return list(self._roles)

    def admit(self, role: iam.IRole) -> None:
        """Exempt ``role``; a role admitted twice counts once. A wildcard ARN is refused."""
        if any(role is known for known in self._roles):
            return
        one_principal_arn(self.policy, role.role_arn, self.admitted_by, f"the queue's Deny of {self._named()}")
        self._roles.append(role)
        # The same operator and key again replaces the value (CDK merges conditions by operator and key), so the
        # statement always names every admitted role once.
        self.statement.add_condition("ArnNotEquals", {"aws:PrincipalArn": [known.role_arn for known in self._roles]})

    def _named(self) -> str:
        return ", ".join(action.removeprefix("sqs:") for action in self.actions)


class SendDeny(QueueDeny):
    """``QueueDeny`` of ``sqs:SendMessage``: only the admitted roles put a message on the queue."""

    actions = SEND_ACTIONS
    admitted_by = "admit_sender"


class ReceiveDeny(QueueDeny):
    """``QueueDeny`` of ``RECEIVE_ACTIONS``: only the admitted roles (the consumer whose event source mapping
    polls the queue, as its function's role) take a message off it, so none vanishes without a consumer's run."""

    actions = RECEIVE_ACTIONS
    admitted_by = "polled_by"
