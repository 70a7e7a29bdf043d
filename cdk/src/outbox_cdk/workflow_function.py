"""The WORKFLOW lane's functions: one Lambda durable function per WORKFLOW subscription of the catalog.

Each runs the subscription's durable handler from the app's code asset (``outbox.workflows.workflow(...)``) with
a durable configuration: the execution timeout, the retention of a closed execution's history and, with the
pipeline's key, that key for the execution's payloads (input, output, errors). Its executions are started
asynchronously by the durable consumer, which needs a qualified ARN: each function publishes a version with the
alias ``live``, and the consumer is granted what starting and watching an execution there needs, nothing more.

The installed aws-cdk-lib's ``lambda_.DurableConfig`` (the L2) has no key, so the configuration is set on the
``AWS::Lambda::Function`` resource itself (``CfnFunction.DurableConfigProperty``, which has ``KMSKeyArn``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final, cast

from aws_cdk import Acknowledgment, CfnElement, Duration, Stack, Validations
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from constructs import Construct, IConstruct

from outbox.redaction import ErrorDetail
from outbox.subscriptions import Lane
from outbox.workflows import WORKFLOW_FUNCTIONS_VARIABLE, WorkflowHandler
from outbox.workflows.emits import STEP_PARTITION_PREFIX
from outbox_cdk.alarmed_dlq import AlarmedDeadLetterQueue
from outbox_cdk.catalog_check import _asset_path, _environment, _importable, _load
from outbox_cdk.events_table import EventsTable
from outbox_cdk.grants import grant_items, leading_keys
from outbox_cdk.inbox_table import InboxTable
from outbox_cdk.lambda_defaults import ApplicationCode, EngineFunction
from outbox_cdk.workflow_settler import WorkflowSettler

ALIAS: Final = "live"
# Lambda's bounds (the DurableConfig model): an execution runs 1 s..366 days; a closed one's history is kept 1..90 days.
MAX_EXECUTION_TIMEOUT_SECONDS: Final = 31_622_400
RETENTION_DAYS_RANGE: Final = range(1, 91)
DEFAULT_EXECUTION_TIMEOUT: Final = Duration.days(30)
DEFAULT_RETENTION_DAYS: Final = 30
# Each invocation of a durable function is an ordinary one: its own timeout, 15 minutes at most; waits between
# steps cost no invocation time.
DEFAULT_INVOCATION_TIMEOUT: Final = Duration.minutes(5)
# What the SDK calls from inside an execution (checkpoints and its state), on the function's own executions.
EXECUTION_ACTIONS: Final = ("lambda:CheckpointDurableExecution", "lambda:GetDurableExecutionState")
# What the durable consumer needs: start an execution (an Invoke of the alias), and find one by its name when a
# start's answer was lost. Reading an execution's end is the settle pass's (WorkflowSettler's WATCH_ACTIONS).
START_ACTIONS: Final = ("lambda:InvokeFunction",)
FIND_ACTIONS: Final = ("lambda:ListDurableExecutionsByFunction",)
SERVICE_PREFIX: Final = "workflow-"
# A workflow's steps emit with the engine's emit (``outbox.workflows.emits``): the events table as any emitter, and
# on the inbox the row that makes each step's event once (put where none is), by its partition only.
EMIT_ROW_ACTIONS: Final = ("dynamodb:PutItem",)
EMIT_ROW_CONDITIONS: Final = leading_keys(f"{STEP_PARTITION_PREFIX}*")


@dataclass(frozen=True)
class WorkflowSubscription:
    """A WORKFLOW subscription as the synth reads it from the catalog: its name and its Lambda handler."""

    name: str
    handler: str


def workflow_subscriptions(
    code: lambda_.Code, reference: str, environment: Mapping[str, str]
) -> list[WorkflowSubscription]:
    """The catalog's WORKFLOW subscriptions, by name, loaded from the ``code`` asset as ``check_catalog`` loads it
    (none for inline or S3 code, which the synth cannot import)."""
    source = _asset_path(code)
    if source is None:
        return []
    with _importable(source), _environment(environment):
        catalog = _load(reference, source)
    return sorted(
        (
            WorkflowSubscription(s.name, s.handler.lambda_handler)
            for s in catalog.registry.subscriptions
            if s.lane is Lane.WORKFLOW and isinstance(s.handler, WorkflowHandler)
        ),
        key=lambda s: s.name,
    )


class WorkflowFunction(Construct):
    """One WORKFLOW subscription's durable function: ``self.function``, its ``self.alias`` (``live``, on the
    version published from the current code) and ``self.qualified_arn``, what the consumer starts executions of.

    Parameters
    ----------
    subscription
        The subscription's name (its executions' names are derived from it: ``outbox.workflows.execution_name``).
    handler
        The Lambda handler, ``package.module.function`` in ``application.code``.
    execution_timeout
        How long one execution may run, waits included: 1 s..366 days.
    retention_days
        How long Lambda keeps a closed execution's history (``GetDurableExecution``): 1..90 days. The pipeline
        settles an execution's end long before that (``outbox.workflows.ends``).
    invocation_timeout
        Each invocation's timeout, up to 15 minutes.
    encryption_key
        The pipeline's key: the executions' payloads and the function's log group.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        subscription: str,
        handler: str,
        application: ApplicationCode,
        execution_timeout: Duration = DEFAULT_EXECUTION_TIMEOUT,
        retention_days: int = DEFAULT_RETENTION_DAYS,
        invocation_timeout: Duration = DEFAULT_INVOCATION_TIMEOUT,
        encryption_key: kms.IKey | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        seconds = check_durable_config(subscription, execution_timeout, retention_days)
        self.subscription = subscription
        self.execution_timeout_seconds = seconds
        description = f"Workflow of {subscription}: a durable execution per event, started by the durable consumer"
        engine_function = EngineFunction(
            self,
            "Lambda",
            handler=handler,
            service_name=f"{SERVICE_PREFIX}{subscription}",
            description=description[:256],
            timeout=invocation_timeout,
            application=application,
            environment={},
            encryption_key=encryption_key,
        )
        self.function = engine_function.function
        self.role = engine_function.role
        resource = self.function.node.default_child
        assert isinstance(resource, lambda_.CfnFunction)
        resource.durable_config = lambda_.CfnFunction.DurableConfigProperty(
            execution_timeout=seconds,
            retention_period_in_days=retention_days,
            kms_key_arn=encryption_key.key_arn if encryption_key is not None else None,
        )
        # Checkpoints and state, on this function's own executions only (their ARNs extend its ARN). A policy of its
        # own: in the role's default policy, which the function depends on, the function's ARN would be a cycle.
        self.execution_policy = iam.Policy(
            self,
            "Executions",
            roles=[self.role],
            statements=[iam.PolicyStatement(actions=list(EXECUTION_ACTIONS), resources=[self.executions_arn])],
        )
        if encryption_key is not None:
            encryption_key.grant(self.function, "kms:Decrypt", "kms:GenerateDataKey")
        self.alias = lambda_.Alias(self, "Live", alias_name=ALIAS, version=self.function.current_version)
        # Nothing starts an execution (of the alias) before the function may checkpoint it.
        self.alias.node.add_dependency(self.execution_policy)
        self.acknowledge_executions(self.execution_policy.node.default_child)
        engine_function.acknowledge_synchronous_invocation(
            failures="An execution's failure is the execution's end (FAILED, TIMED_OUT, STOPPED): the pipeline "
            "reads it with GetDurableExecution and makes the pair dead with a dead letter that names the execution "
            "and its error; a Lambda dead-letter queue would hold nothing the inbox does not.",
            concurrency="Started once per (event, subscription) by the durable consumer, whose event source mapping "
            "bounds how many starts run at once. " + "A reserved concurrency would come out of the account's "
            "unreserved pool and fail the deployment in an account with no room above its minimum.",
        )

    @property
    def qualified_arn(self) -> str:
        """The alias's ARN: an asynchronous start of a durable function must name a version or an alias."""
        return self.alias.function_arn

    @property
    def executions_arn(self) -> str:
        """Every execution of the function (``<function ARN>:<version>/durable-execution/<name>/<id>``)."""
        return f"{self.function.function_arn}:*"

    def grant_emit(self, events: EventsTable, inbox: InboxTable) -> None:
        """What ``outbox.workflows.emits`` needs: emit (``EVENTS_TABLE_NAME``), and the step rows of the inbox
        (``INBOX_TABLE_NAME``)."""
        events.grant_emit(self.function)
        grant_items(inbox.table, self.function, EMIT_ROW_ACTIONS, conditions=EMIT_ROW_CONDITIONS)
        self.function.add_environment("EVENTS_TABLE_NAME", events.table.table_name)
        self.function.add_environment("INBOX_TABLE_NAME", inbox.table.table_name)

    def grant_start(self, grantee: iam.IGrantable, encryption_key: kms.IKey | None = None) -> None:
        """What the durable consumer needs: invoke the alias (a start) and list the alias's executions by name (the
        execution a start whose answer was lost made). Reading an execution's end is the settle pass's
        (``WorkflowSettler``), not the consumer's."""
        iam.Grant.add_to_principal(grantee=grantee, actions=list(START_ACTIONS), resource_arns=[self.qualified_arn])
        iam.Grant.add_to_principal(
            grantee=grantee, actions=list(FIND_ACTIONS), resource_arns=[self.function.function_arn, self.qualified_arn]
        )
        if encryption_key is not None:
            encryption_key.grant(grantee, "kms:Decrypt", "kms:GenerateDataKey")

    def acknowledge_executions(self, policy_resource: IConstruct | None) -> None:
        """Say to cdk-nag why a policy names the function's executions with a wildcard: their ARNs are made by
        Lambda at each start (``<function ARN>:<version>/durable-execution/<name>/<id>``), and this one names no
        other function's."""
        assert policy_resource is not None
        logical_id = Stack.of(self).get_logical_id(cast(CfnElement, self.function.node.default_child))
        Validations.of(policy_resource).acknowledge(
            Acknowledgment(
                id=f"AwsSolutions::AwsSolutions-IAM5[Resource::<{logical_id}.Arn>:*]",
                reason="A durable execution's ARN is made by Lambda when it starts (the function's ARN, its version, "
                "/durable-execution/, its name and id): the wildcard names this function's executions and no other "
                "function's.",
            )
        )


def check_durable_config(subscription: str, execution_timeout: Duration, retention_days: int) -> int:
    """The execution timeout in whole seconds, or a ValueError that says what Lambda allows."""
    seconds = execution_timeout.to_milliseconds() / 1000
    if not 1 <= seconds <= MAX_EXECUTION_TIMEOUT_SECONDS or seconds != int(seconds):
        raise ValueError(
            f"workflow {subscription}: execution_timeout must be whole seconds, 1 s..366 days "
            f"({MAX_EXECUTION_TIMEOUT_SECONDS} s), got {seconds} s"
        )
    if isinstance(retention_days, bool) or retention_days not in RETENTION_DAYS_RANGE:
        raise ValueError(
            f"workflow {subscription}: retention_days must be 1..90 (Lambda's bounds), got {retention_days!r}"
        )
    return int(seconds)


class WorkflowFunctions(Construct):
    """A ``WorkflowFunction`` per WORKFLOW subscription (``self.functions``, by subscription), the durable consumer
    granted to start them, told where each is (``WORKFLOW_FUNCTIONS``: subscription -> qualified ARN and execution
    timeout), each function granted to emit from its steps (``outbox.workflows.emits``), and, when there is one,
    the settle pass that brings their executions' ends back (``self.settler``)."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        subscriptions: Sequence[WorkflowSubscription],
        application: ApplicationCode,
        consumer: lambda_.Function,
        events: EventsTable,
        inbox: InboxTable,
        alarm_topic: sns.ITopic,
        error_detail: ErrorDetail = ErrorDetail.REDACTED,
        execution_timeout: Duration = DEFAULT_EXECUTION_TIMEOUT,
        retention_days: int = DEFAULT_RETENTION_DAYS,
        encryption_key: kms.IKey | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        self.functions: dict[str, WorkflowFunction] = {}
        for index, subscription in enumerate(subscriptions):
            function = WorkflowFunction(
                self,
                f"Workflow{index}",
                subscription=subscription.name,
                handler=subscription.handler,
                application=application,
                execution_timeout=execution_timeout,
                retention_days=retention_days,
                encryption_key=encryption_key,
            )
            function.grant_start(consumer, encryption_key)
            function.grant_emit(events, inbox)
            self.functions[subscription.name] = function
        self.settler: WorkflowSettler | None = None
        if self.functions:
            described = {
                name: {"arn": function.qualified_arn, "execution_timeout": function.execution_timeout_seconds}
                for name, function in self.functions.items()
            }
            consumer.add_environment(WORKFLOW_FUNCTIONS_VARIABLE, Stack.of(self).to_json_string(described))
            self.settler = WorkflowSettler(
                self,
                "Settler",
                inbox=inbox,
                executions=[function.executions_arn for function in self.functions.values()],
                application=application,
                alarm_topic=alarm_topic,
                error_detail=error_detail,
                encryption_key=encryption_key,
            )
            policy = self.settler.role.node.find_child("DefaultPolicy").node.default_child
            for function in self.functions.values():
                function.acknowledge_executions(policy)

    @property
    def dead_letters(self) -> list[tuple[str, AlarmedDeadLetterQueue]]:
        return [] if self.settler is None else [("workflow settle DLQ", self.settler.dead_letters)]

    @property
    def alarms(self) -> list[cloudwatch.IAlarm]:
        return [] if self.settler is None else self.settler.alarms


__all__ = [
    "ALIAS",
    "WorkflowFunction",
    "WorkflowFunctions",
    "WorkflowSubscription",
    "workflow_subscriptions",
]
