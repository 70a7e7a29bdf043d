"""A dead-letter queue that cannot exist without its alarms: the only way this app makes a DLQ."""

from __future__ import annotations

from typing import Final

from aws_cdk import Acknowledgment, Duration, Validations
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from outbox_cdk.alarms import alarm_above
from outbox_cdk.queue_defaults import encrypted_queue
from outbox_cdk.send_deny import SendDeny
from outbox_cdk.timing import DEAD_LETTER_RETENTION_DAYS

# SQS's maximum: the longest window an operator has to inspect, replay or redrive dead work.
DEAD_LETTER_RETENTION = Duration.days(DEAD_LETTER_RETENTION_DAYS)
# One message in a DLQ is already an incident: something failed every retry.
DEAD_LETTER_ALARM_THRESHOLD = 0
# The DLQ depth metric is reported every minute; a shorter period reports the same point more often.
DEAD_LETTER_ALARM_PERIOD = Duration.minutes(1)
# The queue policy statement that refuses a message from every principal but the DLQ's own senders.
DEAD_LETTER_SEND_DENY_SID: Final = "OnlyItsFailuresArrive"
# The arrival alarm's expression: how much the DLQ's messages (visible plus in flight) grew since the previous
# datapoint. An arrival raises it, by a move of SQS or a send; a receive only moves a message from visible to in
# flight, and its visibility timeout back; a redrive, a deletion or the retention period lowers it (R9.7, R9.8).
ARRIVAL_EXPRESSION: Final = "DIFF(visible + inflight)"


class AlarmedDeadLetterQueue(Construct):
    """A DLQ (``self.queue``), an alarm on its first message (``self.alarm``) and one on every later arrival
    (``self.arrival_alarm``): ``self.alarms`` are both.

    "Nothing fails silently" is structural here rather than a convention: every dead-letter target in
    the app (queue redrive, pipe DLQ, event source mapping on-failure) is made through this construct,
    and an infrastructure test fails if any dead-letter target in the template lacks these alarms. Both
    treat missing data as not breaching, since SQS stops reporting an idle queue (R9.7).

    - ``self.alarm`` is in ALARM while the queue holds a visible message, and says nothing more while it stays
      there. ``self.arrival_alarm`` fires in each minute the queue's messages (visible plus in flight) grew:
      the first dead letter (beside ``self.alarm``) and every one after it, and returns to OK the next minute.
      SQS's ``NumberOfMessagesSent`` would not do: it does not count what a redrive policy moves (R9.7).
    - Its policy denies ``sqs:SendMessage`` to every IAM principal (administrators and this app's roles
      included) but the roles ``admit_sender`` names, those that write their failures here: a pipe's role, a
      function's role for its asynchronous failures (``send_deny.SendDeny``). A service principal acting as
      itself (EventBridge, for a rule's undeliverable events) is spared by the deny and refused unless the policy
      allows it (a rule target's DLQ: CDK's Allow for that rule). With ``of_queue`` (the DLQ of a queue's
      redrive policy) no role is admitted: SQS's own move is no principal's send (R10.8).
    - Its redrive allow policy (R10.9): ``denyAll`` unless ``of_queue``, so no queue of the account can name it
      as its DLQ and have SQS move messages in, past the send deny. With ``of_queue`` the template declares none:
      ``byQueue`` naming the source queue's ARN would be a cycle (the source queue's redrive policy names this
      one's), so the source queue sets it once both exist (``redrive_allow.OnlyItsSourceQueue``).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        alarm_topic: sns.ITopic,
        fifo: bool,
        description: str,
        encryption_key: kms.IKey | None = None,
        of_queue: bool = False,
    ) -> None:
        super().__init__(scope, construct_id)
        self.queue = encrypted_queue(
            self,
            "Queue",
            fifo=fifo,
            retention_period=DEAD_LETTER_RETENTION,
            # With of_queue, none here: the source queue sets its byQueue once both exist (redrive_allow).
            redrive_allow_policy=None
            if of_queue
            else sqs.RedriveAllowPolicy(redrive_permission=sqs.RedrivePermission.DENY_ALL),
            encryption_key=encryption_key,
        )
        queue_resource = self.queue.node.default_child
        assert queue_resource is not None
        Validations.of(queue_resource).acknowledge(
            Acknowledgment(
                id="Serverless::Serverless-SQSRedrivePolicy",
                reason="This queue is itself a dead-letter queue; a DLQ of a DLQ would only move failures "
                "one level further from the alarm below, which fires on its first message.",
            )
        )
        self.send_deny = SendDeny(self.queue, DEAD_LETTER_SEND_DENY_SID, spare_services=True)
        self.alarm = alarm_above(
            self,
            "NotEmpty",
            self.queue.metric_approximate_number_of_messages_visible(
                period=DEAD_LETTER_ALARM_PERIOD, statistic=cloudwatch.Stats.MAXIMUM
            ),
            threshold=DEAD_LETTER_ALARM_THRESHOLD,
            description=f"Dead letters waiting: {description}. See the runbook (replay / redrive).",
            alarm_topic=alarm_topic,
        )
        self.arrival_alarm = alarm_above(
            self,
            "Arriving",
            self.arrivals(),
            threshold=0,
            description=f"More dead letters arrived: {description}. Fires in each minute the queue grew, also while "
            "its NotEmpty alarm is already in ALARM, and returns to OK the next minute. See the runbook "
            "(Dead letters arriving).",
            alarm_topic=alarm_topic,
        )

    @property
    def alarms(self) -> list[cloudwatch.IAlarm]:
        """The depth alarm, then the arrival alarm."""
        return [self.alarm, self.arrival_alarm]

    def arrivals(self, period: Duration = DEAD_LETTER_ALARM_PERIOD) -> cloudwatch.MathExpression:
        """How many more messages the queue held than at the previous datapoint (``ARRIVAL_EXPRESSION``)."""
        return cloudwatch.MathExpression(
            expression=ARRIVAL_EXPRESSION,
            using_metrics={
                "visible": self.queue.metric_approximate_number_of_messages_visible(
                    period=period, statistic=cloudwatch.Stats.MAXIMUM
                ),
                "inflight": self.queue.metric_approximate_number_of_messages_not_visible(
                    period=period, statistic=cloudwatch.Stats.MAXIMUM
                ),
            },
            label="messages arrived",
            period=period,
        )

    def admit_sender(self, role: iam.IRole) -> None:
        """Let ``role`` send its failures here (its own policy must grant the send too); admitted twice counts once."""
        self.send_deny.admit(role)
