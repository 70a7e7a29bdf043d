"""The WORKFLOW lane's settle pass, deployed: a function that EventBridge runs every minute, which asks Lambda how
each handed pair's execution ended and settles the pair (``outbox.workflows.ends``, docs/workflows.md).

Every minute, not on a notice: an execution that fails, times out or is stopped runs no last step of its own, and a
notice can be lost; a pass over the running index makes a lost notice cost a minute, never an open pair. A pass
that fails every retry lands in an alarmed dead-letter queue (the next minute's pass repeats the work), and a pair
the pass makes dead fires an alarm, as the consumer's dead letters do.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_events as eventbridge
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from constructs import Construct

from outbox.redaction import ErrorDetail
from outbox.workflows.ends import SETTLED_METRICS, Settled
from outbox.workflows.handoffs import RUNNING_PARTITION_PREFIX
from outbox_cdk import checkov
from outbox_cdk.alarmed_dlq import AlarmedDeadLetterQueue
from outbox_cdk.alarms import alarm_above
from outbox_cdk.grants import QUEUE_SEND_ACTIONS, grant_items, grant_messages, leading_keys
from outbox_cdk.inbox_table import InboxTable
from outbox_cdk.lambda_defaults import UNRESERVED_POOL, ApplicationCode, EngineFunction, engine_metric

HANDLER: Final = "outbox.handlers.workflow_ends.handler"
SERVICE_NAME: Final = "workflow-ends"
SCHEDULE: Final = Duration.minutes(1)
TIMEOUT: Final = Duration.minutes(1)
DEAD_METRIC: Final = SETTLED_METRICS[Settled.DEAD]


# On the inbox, by partition (``dynamodb:LeadingKeys``): the running index is read and its rows deleted; a claim is
# read and settled (UpdateItem); a dead letter written (PutItem) or a replay's resolved (UpdateItem). Nothing else.
INBOX_GRANTS: Final[tuple[tuple[tuple[str, ...], dict[str, dict[str, Any]]], ...]] = (
    (("dynamodb:Query", "dynamodb:DeleteItem"), leading_keys(f"{RUNNING_PARTITION_PREFIX}*")),
    (("dynamodb:GetItem",), leading_keys("CLAIM#*")),
    (("dynamodb:UpdateItem",), leading_keys("CLAIM#*", "TENANT#*#DEAD")),
    (("dynamodb:PutItem",), leading_keys("TENANT#*#DEAD")),
)
WATCH_ACTIONS: Final = ("lambda:GetDurableExecution",)


class WorkflowSettler(Construct):
    """``self.function`` settles handed pairs every minute; ``self.dead_letters`` holds the passes that failed every
    retry; ``self.alarms``: its errors, and a pair made dead by its execution's end."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        inbox: InboxTable,
        executions: Sequence[str],
        application: ApplicationCode,
        alarm_topic: sns.ITopic,
        error_detail: ErrorDetail,
        encryption_key: kms.IKey | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        engine_function = EngineFunction(
            self,
            "Lambda",
            handler=HANDLER,
            service_name=SERVICE_NAME,
            description="Settles each pair handed to a workflow once its durable execution ended",
            timeout=TIMEOUT,
            application=application,
            environment={
                "INBOX_TABLE_NAME": inbox.table.table_name,
                "INBOX_RETENTION_DAYS": str(inbox.retention_days),
                "ERROR_DETAIL": error_detail.value,
            },
            encryption_key=encryption_key,
        )
        self.function = function = engine_function.function
        self.role = engine_function.role
        for actions, conditions in INBOX_GRANTS:
            grant_items(inbox.table, function, actions, conditions=conditions)
        iam.Grant.add_to_principal(grantee=function, actions=list(WATCH_ACTIONS), resource_arns=list(executions))
        if encryption_key is not None:
            encryption_key.grant(function, "kms:Decrypt")
        self.dead_letters = AlarmedDeadLetterQueue(
            self,
            "DeadLetters",
            alarm_topic=alarm_topic,
            fifo=False,
            description="workflow settle passes that failed every retry (the next minute's pass repeats the work)",
            encryption_key=encryption_key,
        )
        function_resource = function.node.default_child
        assert isinstance(function_resource, lambda_.CfnFunction)
        function_resource.dead_letter_config = lambda_.CfnFunction.DeadLetterConfigProperty(
            target_arn=self.dead_letters.queue.queue_arn
        )
        grant_messages(self.dead_letters.queue, function, QUEUE_SEND_ACTIONS)
        assert function.role is not None
        self.dead_letters.admit_sender(function.role)
        checkov.skip(
            function_resource,
            "CKV_AWS_115",
            "Invoked once a minute by its schedule; passes that overlap settle each pair once (a write conditioned "
            "on the execution), so a limit protects nothing. " + UNRESERVED_POOL,
        )
        self.schedule = eventbridge.Rule(
            self,
            "Schedule",
            description="Runs the workflow settle pass",
            schedule=eventbridge.Schedule.rate(SCHEDULE),
            targets=[
                targets.LambdaFunction(
                    function,
                    retry_attempts=2,
                    max_event_age=Duration.minutes(5),
                    dead_letter_queue=self.dead_letters.queue,
                )
            ],
        )
        self.errors_alarm = alarm_above(
            self,
            "ErrorsAlarm",
            function.metric_errors(period=SCHEDULE, statistic=cloudwatch.Stats.SUM),
            threshold=0,
            description="The workflow settle pass failed (its log group has the error): ended executions are not "
            "brought back to the inbox until a pass succeeds.",
            alarm_topic=alarm_topic,
        )
        self.dead_alarm = alarm_above(
            self,
            "DeadAlarm",
            engine_metric(SERVICE_NAME, DEAD_METRIC, statistic=cloudwatch.Stats.SUM, period=SCHEDULE),
            threshold=0,
            description="A workflow execution ended FAILED, TIMED_OUT or STOPPED: its pair is dead, with a dead "
            "letter naming the execution. See the runbook (status, replay).",
            alarm_topic=alarm_topic,
        )

    @property
    def alarms(self) -> list[cloudwatch.IAlarm]:
        return [self.errors_alarm, self.dead_alarm, *self.dead_letters.alarms]
