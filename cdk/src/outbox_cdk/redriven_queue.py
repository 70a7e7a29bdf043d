"""A consumer's queue: redriven to an alarmed dead-letter queue, encrypted, TLS only, fed only by its pipe."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Final

from aws_cdk import Duration
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from outbox_cdk.alarmed_dlq import AlarmedDeadLetterQueue
from outbox_cdk.queue_defaults import encrypted_queue
from outbox_cdk.redrive_allow import OnlyItsSourceQueue
from outbox_cdk.send_deny import ReceiveDeny, SendDeny
from outbox_cdk.timing import QUEUE_RETENTION_DAYS

if TYPE_CHECKING:
    from outbox_cdk.stream_pipe import StreamPipe

# As long as SQS allows: if a consumer is down for days, work waits here rather than expire. The
# age-of-oldest-message alarms fire long before this matters.
QUEUE_RETENTION: Final = Duration.days(QUEUE_RETENTION_DAYS)
# The queue policy statement that refuses a message from anyone but the queue's pipe and its senders.
SEND_DENY_SID: Final = "OnlyThePipeAndTheRepairsSend"
# The queue policy statement that refuses a receive, delete or visibility change to anyone but the consumer.
RECEIVE_DENY_SID: Final = "OnlyTheConsumerReceives"
# The queue policy statement that refuses a purge to every principal: no repair empties a lane's queue.
PURGE_DENY_SID: Final = "NobodyPurges"


class RedrivenQueue(Construct):
    """``self.queue`` feeds one consumer; ``self.dead_letter_queue`` catches what failed
    ``self.max_receive_count`` receives, and alarms on its first message and on every later arrival.

    - The visibility timeout is derived in ``timing`` from the consumer's timeout, never typed here.
    - Encrypted at rest (SSE-SQS, or SSE-KMS with ``encryption_key``, the DLQ with the same key) and TLS
      only, like every queue of the app (``queue_defaults``).
    - The DLQ has the queue's type: a FIFO queue's DLQ must be FIFO (SQS rejects a standard one), and a
      standard queue's must be standard.
    - Once ``fed_by(pipe)`` names the pipe that feeds it, its policy denies ``sqs:SendMessage`` to every
      principal (admins and this app's own roles included) whose ``aws:PrincipalArn`` is neither that pipe's
      role nor one of ``senders`` (``admit_sender`` adds one later): the roles the operator's repairs
      (replay, reconcile, redrive) run as (``send_deny.SendDeny``). A role session's ``aws:PrincipalArn`` is
      its role's ARN, and a request without one (anonymous, a service principal) is denied too (R10.1, R10.2).
    - Once ``polled_by(role)`` names the role its consumer's event source mapping polls as (the function's
      execution role), its policy also denies ``sqs:ReceiveMessage``, ``sqs:DeleteMessage`` and
      ``sqs:ChangeMessageVisibility`` to every other principal (``send_deny.ReceiveDeny``): a message leaves
      only through a consumer's run or SQS's move to the alarmed DLQ, never by someone's receive and delete. No
      repair receives from this queue (a redrive receives from the DLQ and sends here), so no other role is
      admitted. And ``sqs:PurgeQueue`` is denied to every principal, the consumer's role included: a purge empties
      the queue in one call, and no repair of the runbook purges a lane's queue (it purges a pipe's DLQ at most).
    - The DLQ (an ``AlarmedDeadLetterQueue`` of a queue) denies every principal's send: nothing but SQS's own
      move after ``max_receive_count`` receives, which is no principal's SendMessage (R10.8), puts a message
      there, and a redrive sends back to this queue, not to it. Its redrive allow policy is ``byQueue`` naming this
      queue alone (R10.9), so no other queue of the account can name it as its DLQ and have SQS move messages in
      past that deny. It is set once both queues exist (``redrive_allow.OnlyItsSourceQueue``): in the DLQ's
      template it would be a cycle, as this queue's redrive policy names the DLQ's ARN, and neither queue is
      named or replaced for it.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        alarm_topic: sns.ITopic,
        fifo: bool,
        visibility_timeout_seconds: int,
        dead_letter_description: str,
        max_receive_count: int,
        encryption_key: kms.IKey | None = None,
        senders: Sequence[iam.IRole] = (),
    ) -> None:
        super().__init__(scope, construct_id)
        self._senders: list[iam.IRole] = []
        self._pipe_role: iam.IRole | None = None
        self._send_deny: SendDeny | None = None
        self._receive_deny: ReceiveDeny | None = None
        for sender in senders:
            self.admit_sender(sender)
        self.max_receive_count = max_receive_count
        self.visibility_timeout_seconds = visibility_timeout_seconds
        self.dead_letters = AlarmedDeadLetterQueue(
            self,
            "DeadLetters",
            alarm_topic=alarm_topic,
            fifo=fifo,
            description=dead_letter_description,
            encryption_key=encryption_key,
            of_queue=True,
        )
        self.dead_letter_queue: sqs.IQueue = self.dead_letters.queue
        self.queue = encrypted_queue(
            self,
            "Queue",
            fifo=fifo,
            visibility_timeout=Duration.seconds(visibility_timeout_seconds),
            retention_period=QUEUE_RETENTION,
            dead_letter_queue=sqs.DeadLetterQueue(
                queue=self.dead_letter_queue, max_receive_count=self.max_receive_count
            ),
            # Off on FIFO: the relay sets the event id as the deduplication id, so a re-sent event is
            # dropped within SQS's 5-minute window even if its rendering ever differed.
            content_based_deduplication=False if fifo else None,
            encryption_key=encryption_key,
        )
        self.redrive_allow = OnlyItsSourceQueue(
            self,
            "DeadLettersOnlyFromQueue",
            dead_letter_queue=self.dead_letter_queue,
            source_queue=self.queue,
            encryption_key=encryption_key,
        )

    @property
    def exempt_senders(self) -> list[iam.IRole]:
        """The roles the send deny exempts: the feeding pipe's, then the senders, in the order given."""
        return [*([self._pipe_role] if self._pipe_role is not None else []), *self._senders]

    def fed_by(self, pipe: StreamPipe) -> None:
        """From now on only ``pipe``'s role and the senders may send here. The pipe starts after the queue
        policy is in place: a replaced pipe role is admitted before the pipe sends as it."""
        if self._pipe_role is not None:
            raise ValueError(f"{self.node.path} is fed by one pipe, already {self._pipe_role.node.path}")
        self._pipe_role = pipe.role
        self._send_deny = SendDeny(self.queue, SEND_DENY_SID)
        for role in self.exempt_senders:
            self._send_deny.admit(role)
        pipe.pipe.node.add_dependency(self._send_deny.policy)

    def admit_sender(self, role: iam.IRole) -> None:
        """Let ``role`` send here too (a role the operator's repairs run as); a role admitted twice counts once."""
        if any(role is known for known in self.exempt_senders):
            return
        self._senders.append(role)
        if self._send_deny is not None:
            self._send_deny.admit(role)

    def polled_by(self, role: iam.IRole) -> ReceiveDeny:
        """From now on only ``role``, its consumer's (the event source mapping polls as the function's role), may
        receive, delete or hide a message here, and nobody may purge it. Make the mapping depend on the returned
        statement's policy."""
        if self._receive_deny is not None:
            raise ValueError(
                f"{self.node.path} is polled by one consumer, already {self._receive_deny.roles[0].node.path}"
            )
        self._receive_deny = ReceiveDeny(self.queue, RECEIVE_DENY_SID)
        self._receive_deny.admit(role)
        self.queue.add_to_resource_policy(
            iam.PolicyStatement(
                sid=PURGE_DENY_SID,
                effect=iam.Effect.DENY,
                principals=[iam.AnyPrincipal()],
                actions=["sqs:PurgeQueue"],
                resources=[self.queue.queue_arn],
            )
        )
        return self._receive_deny
