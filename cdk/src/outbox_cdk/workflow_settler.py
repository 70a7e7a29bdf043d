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
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from constructs import Construct

from outbox.redaction import ErrorDetail
from outbox.workflows.ends import OLDEST_METRIC, SETTLED_METRICS, Settled
from outbox.workflows.handoffs import RUNNING_PARTITION_PREFIX
from outbox_cdk.alarms import alarm_above
from outbox_cdk.grants import grant_items, leading_keys
from outbox_cdk.inbox_table import InboxTable
from outbox_cdk.lambda_defaults import ApplicationCode, engine_metric
from outbox_cdk.rule_names import rule_name
from outbox_cdk.scheduled_pass import PassIds, PassWords, scheduled_pass

HANDLER: Final = "outbox.handlers.workflow_ends.handler"
SERVICE_NAME: Final = "workflow-ends"
SCHEDULE: Final = Duration.minutes(1)
TIMEOUT: Final = Duration.minutes(1)
DEAD_METRIC: Final = SETTLED_METRICS[Settled.DEAD]
# The schedule's construct id; its rule is named from it at synth (rule_names): the pipeline key's policy names it.
SETTLE_SCHEDULE_ID: Final = "Schedule"


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

        def grant(function: lambda_.Function) -> None:
            for actions, conditions in INBOX_GRANTS:
                grant_items(inbox.table, function, actions, conditions=conditions)
            iam.Grant.add_to_principal(grantee=function, actions=list(WATCH_ACTIONS), resource_arns=list(executions))
            if encryption_key is not None:
                encryption_key.grant(function, "kms:Decrypt")

        settle = scheduled_pass(
            self,
            PassIds("Lambda", "DeadLetters", SETTLE_SCHEDULE_ID, "ErrorsAlarm"),
            PassWords(
                function="Settles each pair handed to a workflow once its durable execution ended",
                dead_letters="workflow settle passes that failed every retry (the next minute's pass repeats the work)",
                schedule="Runs the workflow settle pass",
                errors_alarm="The workflow settle pass failed (its log group has the error): ended executions are not "
                "brought back to the inbox until a pass succeeds.",
                why_no_reserved_concurrency="Invoked once a minute by its schedule; passes that overlap settle each "
                "pair once (a write conditioned on the execution), so a limit protects nothing.",
            ),
            handler=HANDLER,
            service_name=SERVICE_NAME,
            timeout=TIMEOUT,
            application=application,
            environment={
                "INBOX_TABLE_NAME": inbox.table.table_name,
                "INBOX_RETENTION_DAYS": str(inbox.retention_days),
                "ERROR_DETAIL": error_detail.value,
            },
            rate=SCHEDULE,
            max_event_age=Duration.minutes(5),
            errors_period=SCHEDULE,
            alarm_topic=alarm_topic,
            encryption_key=encryption_key,
            grant=grant,
            rule_name=rule_name(self, SETTLE_SCHEDULE_ID),  # the pipeline key's policy names it (encryption)
        )
        self.function, self.role = settle.function, settle.role
        self.dead_letters, self.schedule, self.errors_alarm = settle.dead_letters, settle.schedule, settle.errors_alarm
        self.dead_alarm = alarm_above(
            self,
            "DeadAlarm",
            engine_metric(SERVICE_NAME, DEAD_METRIC, statistic=cloudwatch.Stats.SUM, period=SCHEDULE),
            threshold=0,
            description="A workflow execution ended FAILED, TIMED_OUT or STOPPED: its pair is dead, with a dead "
            "letter naming the execution. See the runbook (status, replay).",
            alarm_topic=alarm_topic,
        )

    def widgets(self, *, width: int, period: Duration) -> list[cloudwatch.IWidget]:
        """The dashboard's graphs of the passes' counts (``outbox.handlers.workflow_ends``): the workflows running
        and how long the oldest has run (``outbox status`` and the status widget list each), and how they ended."""

        def metric(name: str, statistic: str, label: str) -> cloudwatch.Metric:
            return engine_metric(SERVICE_NAME, name, statistic=statistic, period=period).with_(label=label)

        return [
            cloudwatch.GraphWidget(
                title="Workflows: running, and how long the oldest has run (s)",
                left=[metric(SETTLED_METRICS[Settled.RUNNING], cloudwatch.Stats.MAXIMUM, "running")],
                right=[metric(OLDEST_METRIC, cloudwatch.Stats.MAXIMUM, "oldest running (s)")],
                width=width,
            ),
            cloudwatch.GraphWidget(
                title="Workflows: ended, completed or dead",
                left=[
                    metric(SETTLED_METRICS[Settled.COMPLETED], cloudwatch.Stats.SUM, "completed"),
                    metric(DEAD_METRIC, cloudwatch.Stats.SUM, "dead"),
                ],
                width=width,
            ),
        ]

    @property
    def alarms(self) -> list[cloudwatch.IAlarm]:
        return [self.errors_alarm, self.dead_alarm, *self.dead_letters.alarms]
