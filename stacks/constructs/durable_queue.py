"""The durable lane's queue: SQS FIFO, one message group per tenant, redriven to an alarmed FIFO DLQ."""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from stacks.constructs.alarmed_dlq import AlarmedDeadLetterQueue
from stacks.constructs.timing import MAX_RECEIVE_COUNT, QUEUE_VISIBILITY_TIMEOUT_SECONDS

# As long as SQS allows: if the consumer is down for days, events wait here rather than expire. The
# age-of-oldest-message alarm fires long before this matters.
QUEUE_RETENTION = Duration.days(14)


class DurableQueue(Construct):
    """``self.queue`` carries domain events to the durable consumer; ``self.dead_letter_queue`` catches
    what failed ``self.max_receive_count`` receives.

    - Content-based deduplication is off: the relay sets the event id as the deduplication id, so a
      re-sent event is dropped within SQS's 5-minute window even if its rendering ever differed.
    - The visibility timeout is derived in ``timing`` from the consumer's timeout, never typed here.
    - Encryption is SSE-SQS (keys owned by SQS). A customer key would have to be granted to the pipe
      role, the consumer and every operator tool, for no separation that IAM on the queue does not
      already give; the AWS-managed ``aws/sqs`` key would add KMS calls and cost and no control at all.
    - The DLQ is FIFO because a FIFO queue's DLQ must be (SQS rejects a standard one).
    """

    def __init__(self, scope: Construct, construct_id: str, *, alarm_topic: sns.ITopic) -> None:
        super().__init__(scope, construct_id)
        self.max_receive_count = MAX_RECEIVE_COUNT
        self.dead_letters = AlarmedDeadLetterQueue(
            self,
            "DeadLetters",
            alarm_topic=alarm_topic,
            fifo=True,
            description="domain events the durable consumer failed on every receive",
        )
        self.dead_letter_queue: sqs.IQueue = self.dead_letters.queue
        self.queue = sqs.Queue(
            self,
            "Queue",
            fifo=True,
            content_based_deduplication=False,
            visibility_timeout=Duration.seconds(QUEUE_VISIBILITY_TIMEOUT_SECONDS),
            retention_period=QUEUE_RETENTION,
            dead_letter_queue=sqs.DeadLetterQueue(
                queue=self.dead_letter_queue, max_receive_count=self.max_receive_count
            ),
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
        )
