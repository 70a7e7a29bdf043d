"""The operator endpoint: an IAM-signed HTTP endpoint that reports each tenant's chain and the dead work.

The handler (``outbox.handlers.operator_api``) answers ``GET /status`` and ``GET /tenants/<tenant>/chain``:
whether a tenant's hash chain is intact (``verify_chain`` over the events table), next to the
dead-letter rows in the inbox table and the depth and age of every queue and dead-letter queue. It
reads all of that and may change none of it: repairs go through the operator role, not through here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Final

from aws_cdk import Acknowledgment, Duration, Validations
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from outbox_cdk.alarms import alarm_above
from outbox_cdk.audit import Auditor, AuditTable
from outbox_cdk.events_table import EventsTable
from outbox_cdk.grants import grant_items, grant_pipe_status
from outbox_cdk.inbox_table import InboxTable
from outbox_cdk.lambda_defaults import UNRESERVED_POOL, ApplicationCode, EngineFunction
from outbox_cdk.queue_consumer import ALARM_PERIOD
from outbox_cdk.redriven_queue import RedrivenQueue
from outbox_cdk.stream_pipe import StreamPipe

HANDLER: Final = "outbox.handlers.operator_api.handler"
SERVICE_NAME: Final = "operator-api"
# Status verifies each tenant from its anchor (what was appended since the last hourly pass), a tenant
# without one from genesis; a minute leaves room for a long unanchored chain.
TIMEOUT_SECONDS: Final = 60
# Two calls at once are plenty for operators and their scripts; a caller looping on GET /status then waits
# (HTTP 429) instead of taking the account's concurrency and the tables' read capacity. It comes out of the
# account's unreserved pool (docs: "Reserved concurrency"); None switches it off.
DEFAULT_RESERVED_CONCURRENCY: Final = 2
MAX_RESERVED_CONCURRENCY: Final = 50

# The inbox's dead letters and poison pills, each a partition read page by page (outbox.inbox.InboxReader).
INBOX_READ_ACTIONS: Final = ("dynamodb:Query",)
QUEUE_STATUS_ACTIONS: Final = ("sqs:GetQueueAttributes",)
# ApproximateAgeOfOldestMessage is a CloudWatch metric, not a queue attribute.
METRIC_READ_ACTIONS: Final = ("cloudwatch:GetMetricData",)


@dataclass(frozen=True)
class OperatedPipeline:
    """What the operators' tools look at: the endpoint reports on it, the runbook role also repairs it.

    ``record_change_queue`` and ``record_change_pipe`` are None in a pipeline without that lane.
    """

    events: EventsTable
    inbox: InboxTable
    durable_queue: RedrivenQueue
    relay_pipe: StreamPipe
    # Anchors and findings, and the auditor's queue (its DLQ is redriven like a lane's), pipe and DLQs.
    audit: AuditTable
    auditor: Auditor
    record_change_queue: RedrivenQueue | None = None
    record_change_pipe: StreamPipe | None = None
    workflow_settle_dead_letters: sqs.IQueue | None = None  # with WORKFLOW subscriptions

    def queues(self) -> dict[str, sqs.IQueue]:
        """Every queue and DLQ, by the endpoint's variable for its URL."""
        queues: dict[str, sqs.IQueue] = {
            "DURABLE_QUEUE_URL": self.durable_queue.queue,
            "DURABLE_DLQ_URL": self.durable_queue.dead_letter_queue,
            "RELAY_DLQ_URL": self.relay_pipe.dead_letter_queue,
            "TAMPER_QUEUE_URL": self.auditor.queue.queue,
            "TAMPER_DLQ_URL": self.auditor.queue.dead_letter_queue,
            "TAMPER_PIPE_DLQ_URL": self.auditor.pipe.dead_letter_queue,
            "ANCHORING_DLQ_URL": self.auditor.anchoring_dead_letters.queue,
        }
        if self.record_change_queue is not None and self.record_change_pipe is not None:
            queues["RECORD_CHANGE_QUEUE_URL"] = self.record_change_queue.queue
            queues["RECORD_CHANGE_DLQ_URL"] = self.record_change_queue.dead_letter_queue
            queues["RECORD_CHANGE_PIPE_DLQ_URL"] = self.record_change_pipe.dead_letter_queue
        if self.workflow_settle_dead_letters is not None:
            queues["WORKFLOW_SETTLE_DLQ_URL"] = self.workflow_settle_dead_letters
        return queues

    def pipes(self) -> dict[str, StreamPipe]:
        """Every pipe, by the endpoint's variable for its name."""
        pipes = {"RELAY_PIPE_NAME": self.relay_pipe, "TAMPER_PIPE_NAME": self.auditor.pipe}
        if self.record_change_pipe is not None:
            pipes["RECORD_CHANGE_PIPE_NAME"] = self.record_change_pipe
        return pipes

    def lanes(self) -> list[RedrivenQueue]:
        """The lanes' queues, each with the DLQ that redrive moves back into it."""
        lanes = [self.durable_queue, self.auditor.queue]
        return lanes + ([self.record_change_queue] if self.record_change_queue is not None else [])

    def reader_environment(self) -> dict[str, str]:
        """Where everything is, for a function that reads status: exactly the names ``OperatorSettings`` reads."""
        return {
            "EVENTS_TABLE_NAME": self.events.table.table_name,
            "INBOX_TABLE_NAME": self.inbox.table.table_name,
            "AUDIT_TABLE_NAME": self.audit.table.table_name,
            **{name: queue.queue_url for name, queue in self.queues().items()},
            **{name: pipe.pipe_name for name, pipe in self.pipes().items()},
        }

    def grant_status_read(self, function: lambda_.IFunction) -> None:
        """What status and the failure groups read: the chains (with the deny on mutating event rows), the
        inbox's dead letters, the anchors and findings, every queue's depth, every pipe's state. Nothing written."""
        self.events.grant_read(function)
        grant_items(self.inbox.table, function, INBOX_READ_ACTIONS)
        self.audit.grant_read(function)
        for queue in self.queues().values():
            queue.grant(function, *QUEUE_STATUS_ACTIONS)
        grant_pipe_status(function, [pipe.pipe.attr_arn for pipe in self.pipes().values()])


class StatusReader(Construct):
    """A read-only function of the operators' (``self.function``, ``self.role``, ``self.log_group``): the
    environment of ``OperatorSettings``, what status reads, at most ``reserved_concurrency`` calls at once, and
    ``self.errors_alarm`` on its first failed invocation. The operator endpoint and the status widget are two:
    each names its handler and says where a failed call goes instead of a DLQ (both are only ever invoked
    synchronously), what its alarm means and who calls it (what bounds it without a reservation), and adds what
    is its own in ``_complete``.

    Parameters
    ----------
    operated
        Read: the chains (events) and the dead-letter rows (inbox); each lane's queue and its redrive DLQ, their
        depth (``GetQueueAttributes``); each pipe's state (``DescribePipe``) and its DLQ's depth; each tenant's
        anchor and tamper findings (audit).
    reserved_concurrency
        The function's reserved concurrency (2 by default): how many calls run at once; None reserves none.
    encryption_key
        The pipeline's customer-managed key, for the function's log group; ``None`` for the key CloudWatch
        Logs manages. (The tables' key, if any, is granted with the tables.)
    """

    HANDLER: ClassVar[str]
    SERVICE_NAME: ClassVar[str]
    DESCRIPTION: ClassVar[str]
    FAILURES: ClassVar[str]
    ERRORS: ClassVar[str]
    CALLERS: ClassVar[str]

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        operated: OperatedPipeline,
        application: ApplicationCode,
        alarm_topic: sns.ITopic,
        reserved_concurrency: int | None = DEFAULT_RESERVED_CONCURRENCY,
        encryption_key: kms.IKey | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        _check_reserved_concurrency(reserved_concurrency)
        engine_function = EngineFunction(
            self,
            "Lambda",
            handler=self.HANDLER,
            service_name=self.SERVICE_NAME,
            description=self.DESCRIPTION,
            timeout=Duration.seconds(TIMEOUT_SECONDS),
            application=application,
            environment=operated.reader_environment(),
            encryption_key=encryption_key,
        )
        self.function = engine_function.function
        if reserved_concurrency is not None:
            function_resource = self.function.node.default_child
            assert isinstance(function_resource, lambda_.CfnFunction)
            function_resource.reserved_concurrent_executions = reserved_concurrency
        self.role = engine_function.role
        self.log_group = engine_function.log_group
        operated.grant_status_read(self.function)
        self.errors_alarm = alarm_above(
            self,
            "ErrorsAlarm",
            self.function.metric_errors(period=ALARM_PERIOD, statistic=cloudwatch.Stats.SUM),
            threshold=0,
            description=self.ERRORS,
            alarm_topic=alarm_topic,
        )
        unreserved = (
            "Reserved concurrency switched off (OperatorAccess(endpoint_concurrency=None)): called only "
            f"{self.CALLERS}. {UNRESERVED_POOL}"
        )
        engine_function.acknowledge_synchronous_invocation(
            failures=self.FAILURES,
            concurrency=None if reserved_concurrency is not None else unreserved,  # with one, CKV_AWS_115 passes
        )
        self._complete()

    def _complete(self) -> None:
        """What the function is for besides reading: its URL, its widget."""

    @property
    def alarms(self) -> list[cloudwatch.IAlarm]:
        return [self.errors_alarm]


class OperatorEndpoint(StatusReader):
    """``self.function`` behind ``self.url`` (AWS_IAM, no CORS), which reads the queues' age too
    (``GetMetricData``); ``self.errors_alarm`` fires on its first failed invocation.

    Callers need a SigV4-signed request and ``grant_invoke_url``; the stack grants it to the operator role.
    """

    HANDLER = HANDLER
    SERVICE_NAME = SERVICE_NAME
    DESCRIPTION = "Operator API: per tenant, chain_intact next to the dead letters and the DLQ depths"
    FAILURES = (
        "Lambda's DeadLetterConfig applies to asynchronous invocations only; this function is invoked synchronously "
        "through its function URL, the caller sees every failure as the HTTP response, and the Errors alarm fires "
        "on the first one."
    )
    ERRORS = (
        "The operator API failed an invocation (crash, timeout or out of memory): the caller got an error response. "
        "Its log group has the error."
    )
    CALLERS = "through its AWS_IAM function URL, by the few principals granted grant_invoke_url"

    def _complete(self) -> None:
        # AWS_IAM: only signed requests from principals granted below get in. No CORS: operators call it
        # from a shell or a script, never from a browser page.
        self.url = self.function.add_function_url(auth_type=lambda_.FunctionUrlAuthType.AWS_IAM)
        policy = grant_metric_read(self, self.role, "the operator API")
        # Present before the first call, like the grants in the role's default policy.
        self.function.node.add_dependency(policy)

    def grant_invoke_url(self, grantee: iam.IGrantable) -> iam.Grant:
        """Let ``grantee`` call the endpoint with a SigV4-signed request.

        CDK grants ``lambda:InvokeFunctionUrl`` and, since Lambda's October 2025 change, the
        ``lambda:InvokeFunction`` that a new function URL also requires (only via the URL).
        """
        return self.url.grant_invoke_url(grantee)


def _check_reserved_concurrency(value: int | None) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_RESERVED_CONCURRENCY:
        raise ValueError(
            f"OperatorAccess(endpoint_concurrency=...) must be 1..{MAX_RESERVED_CONCURRENCY} (or None for none "
            f"reserved), got {value!r}"
        )


def grant_metric_read(scope: Construct, role: iam.IRole, reader: str) -> iam.Policy:
    """``METRIC_READ_ACTIONS`` for ``role``, in a policy of its own (``reader`` names who reads, for cdk-nag).

    Its own policy rather than the role's default one: the IAM5 acknowledgement below then covers this one
    statement, whose "*" is the only resource GetMetricData takes, and says why.
    """
    policy = iam.Policy(
        scope,
        "MetricRead",
        statements=[iam.PolicyStatement(actions=list(METRIC_READ_ACTIONS), resources=["*"])],
    )
    policy.attach_to_role(role)
    policy_resource = policy.node.default_child
    assert policy_resource is not None
    Validations.of(policy_resource).acknowledge(
        Acknowledgment(
            id="AwsSolutions::AwsSolutions-IAM5[Resource::*]",
            reason=f"cloudwatch:GetMetricData supports no resource-level permissions; {reader} reads "
            "ApproximateAgeOfOldestMessage of the queues with it. This policy holds that one action.",
        )
    )
    return policy
