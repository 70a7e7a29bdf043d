"""The runbook role: exactly what the ``outbox`` CLI's commands call against this stack, for the operators who
run the runbook (``outbox status``, ``verify-chain``, ``dead-letters``, ``replay``, ``redrive``, ``reconcile``).

It may read the event log and never change an event row (the Deny every events-table grant but the operator
role's carries), read and write the inbox as replay and reconcile do, receive, delete and move the messages of
the two DLQs that can be redriven, send to the two queues repairs send to, read the depth of every queue and
DLQ, the pipes' states, the queues' age metric and the stack's outputs. Each action below says which command
calls it; ``tests/e2e/test_least_privilege.py`` runs every command on the local runtime, records its calls and
fails if this role would refuse one or grants an action no command uses.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from aws_cdk import Stack
from aws_cdk import aws_iam as iam
from constructs import Construct

from outbox_cdk.grants import OperatorTrust, grant_items, grant_messages, grant_pipe_status, trusting
from outbox_cdk.operator_endpoint import (
    QUEUE_STATUS_ACTIONS,
    OperatedPipeline,
    grant_metric_read,
)

# Every command starts by reading the stack's outputs, where it finds the tables, queues and pipes.
STACK_READ_ACTIONS: Final = ("cloudformation:DescribeStacks",)
# The inbox (outbox.ops): a claim or a dead letter by its key (replay), the partitions of dead letters, poison
# pills and an event's claims (dead-letters, status, replay, reconcile); replay turns a DEAD claim REPLAYING and
# resolves its dead letter (UpdateItem); reconcile writes the REPLAYING row that vouches for a re-sent event
# (PutItem). Never DeleteItem: a repair leaves every row it read in place.
INBOX_ACTIONS: Final = ("dynamodb:GetItem", "dynamodb:Query", "dynamodb:PutItem", "dynamodb:UpdateItem")
# A DLQ that redrive moves back (the durable and record-change ones; a pipe's DLQ holds batch metadata, which
# redrive refuses): receive-send-delete receives and deletes; the move task is started and followed, and SQS
# moves the messages with the caller's receive and delete (and reads the queue: QUEUE_STATUS_ACTIONS).
REDRIVE_SOURCE_ACTIONS: Final = (
    "sqs:ReceiveMessage",
    "sqs:DeleteMessage",
    "sqs:StartMessageMoveTask",
    "sqs:ListMessageMoveTasks",
)
# The queues repairs send to: the durable queue (replay and reconcile re-send events, redrive puts the durable
# DLQ's messages back), the record-change queue (redrive of its DLQ).
REPAIR_SEND_ACTIONS: Final = ("sqs:SendMessage",)


class RunbookRole(Construct):
    """``self.role``, assumed by ``operators`` (the operator role's principals), with the runbook's actions.

    Parameters
    ----------
    operators
        Who may assume it: the principals ``OutboxPipeline(operators=...)`` was given.
    operator_trust
        What each assumption must show besides (MFA, a principal tag), as for the operator role.
    operated
        The log (read, with the event-row Deny), the inbox (read and written as repairs do), each lane's queue
        (sent to) and DLQ (redriven), each pipe (its state) and its DLQ (its depth).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        operators: Sequence[iam.IPrincipal],
        operated: OperatedPipeline,
        operator_trust: OperatorTrust | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        self.role = iam.Role(
            self,
            "Role",
            assumed_by=trusting(operators, operator_trust),
            description="The outbox CLI's runbook (status, replay, redrive, reconcile): reads the log, repairs the "
            "inbox and the queues; may change no event row (the operator role repairs those).",
        )
        iam.Grant.add_to_principal(
            grantee=self.role, actions=list(STACK_READ_ACTIONS), resource_arns=[Stack.of(self).stack_id]
        )
        operated.events.grant_read(self.role)  # verify-chain, status, replay, reconcile; carries the event-row Deny
        grant_items(operated.inbox.table, self.role, INBOX_ACTIONS)
        # status and findings read anchors and findings; moving an anchor (outbox anchor) is the operator role's.
        operated.audit.grant_read(self.role)
        for queue in operated.queues().values():  # status, and redrive's count of what is left
            grant_messages(queue, self.role, QUEUE_STATUS_ACTIONS)
        for lane in operated.lanes():
            grant_messages(lane.dead_letter_queue, self.role, REDRIVE_SOURCE_ACTIONS)
            grant_messages(lane.queue, self.role, REPAIR_SEND_ACTIONS)
        grant_pipe_status(self.role, [pipe.pipe.attr_arn for pipe in operated.pipes().values()])
        # status and redrive read each queue's ApproximateAgeOfOldestMessage.
        grant_metric_read(self, self.role, "the runbook role (outbox status)")
