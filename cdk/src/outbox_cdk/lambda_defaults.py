"""What every Lambda function of the app has in common, defined once: ``EngineFunction``.

Runtime and architecture follow the engine layer (its wheels are built for exactly that platform);
logs are JSON into a log group with a retention; tracing is active; Powertools is told its service
and the metrics namespace the dashboard searches. Each function gets its own role with nothing but
its log group and X-Ray, and whatever its construct grants it: no managed policy.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from aws_cdk import Acknowledgment, Duration, Validations
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from outbox.settings import CATALOG_REFERENCE
from outbox_cdk import checkov
from outbox_cdk.engine_layer import ARCHITECTURE, RUNTIME

# Every function's Powertools metrics land here (the consumers' counts: outbox.delivery.consumer.Metric and
# outbox.best_effort.consumer.Metric, with the service as dimension); the dashboard and the consumers' alarms
# read this namespace.
METRICS_NAMESPACE: Final = "OutboxEngine"
# 256 MB rather than 128: Lambda allocates CPU with memory, and pydantic and boto3 imports dominate a
# cold start at 128 MB. Revisit with Lambda Power Tuning once real handlers exist.
MEMORY_SIZE_MB: Final = 256
LOG_RETENTION: Final = logs.RetentionDays.THREE_MONTHS

LAMBDA_PRINCIPAL: Final = "lambda.amazonaws.com"
# Why a function invoked by a few callers gets no reserved concurrency (checkov CKV_AWS_115).
UNRESERVED_POOL: Final = (
    "A reserved concurrency would come out of the account's unreserved pool, which Lambda keeps above a "
    "minimum (100 in a default account), and would fail the deployment in an account whose quota has no "
    "room above that minimum."
)


def engine_metric(service: str, metric_name: str, *, statistic: str, period: Duration) -> cloudwatch.Metric:
    """One of the Powertools metrics a function of ``service`` publishes (its ``POWERTOOLS_SERVICE_NAME``)."""
    return cloudwatch.Metric(
        namespace=METRICS_NAMESPACE,
        metric_name=metric_name,
        # Powertools adds the service as a dimension to every metric it publishes.
        dimensions_map={"service": service},
        statistic=statistic,
        period=period,
    )


@dataclass(frozen=True)
class ApplicationCode:
    """What the pipeline's functions run: the engine's generic handlers (``outbox.handlers``, in ``layer``)
    over the application's own modules (``code``), which they load through ``catalog``.

    Parameters
    ----------
    code
        The application's modules, without the engine and its dependencies (they come from ``layer``),
        e.g. ``lambda_.Code.from_asset("src", exclude=[...])``. One asset shared by every function.
    catalog
        ``"package.module:function"``: the function inside ``code`` that returns the ``outbox.Catalog`` of
        event types and subscriptions. Called at cold start, with the function's environment. None for a
        function that runs engine code only (``engine_only``).
    layer
        The engine layer (``EngineLayer``).
    environment
        The application's own variables (its table names, say), set on every function.
    """

    code: lambda_.Code
    catalog: str | None
    layer: lambda_.ILayerVersion
    environment: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.catalog is not None and not re.fullmatch(CATALOG_REFERENCE, self.catalog):
            raise ValueError(
                f"catalog must name a function as 'package.module:function', got {self.catalog!r}; "
                "it is imported from the function code at cold start"
            )


class EngineFunction(Construct):
    """A Python function on the engine layer: ``self.function``, ``self.role``, ``self.log_group``.

    Parameters
    ----------
    handler
        The dotted handler path, e.g. ``outbox.handlers.durable_consumer.handler`` (in the engine layer).
    service_name
        ``POWERTOOLS_SERVICE_NAME``: the ``service`` key of every log line and metric dimension.
    timeout
        The function timeout. Callers with a queue in front derive the queue's timing from the same value.
    application
        The code, the catalog reference and the engine layer.
    environment
        The function's own variables, on top of the Powertools ones.
    encryption_key
        A customer-managed KMS key for the log group (its policy must admit CloudWatch Logs); ``None``
        for the key CloudWatch Logs manages.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        handler: str,
        service_name: str,
        description: str,
        timeout: Duration,
        application: ApplicationCode,
        environment: Mapping[str, str],
        encryption_key: kms.IKey | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        self.log_group = logs.LogGroup(self, "Logs", retention=LOG_RETENTION, encryption_key=encryption_key)
        if encryption_key is None:  # with a customer-managed key, the check passes
            checkov.skip(self.log_group, "CKV_AWS_158", checkov.LOG_GROUP_KEY_REASON)
        # An explicit role instead of the default one with AWSLambdaBasicExecutionRole: that managed
        # policy lets the function write to every log group in the account; this role writes to its own.
        self.role = iam.Role(self, "Role", assumed_by=iam.ServicePrincipal(LAMBDA_PRINCIPAL), description=description)
        self.log_group.grant_write(self.role)
        self.function = lambda_.Function(
            self,
            "Function",
            description=description,
            runtime=RUNTIME,
            architecture=ARCHITECTURE,
            code=application.code,
            handler=handler,
            layers=[application.layer],
            timeout=timeout,
            memory_size=MEMORY_SIZE_MB,
            role=self.role,
            log_group=self.log_group,
            logging_format=lambda_.LoggingFormat.JSON,
            tracing=lambda_.Tracing.ACTIVE,
            environment={
                "POWERTOOLS_SERVICE_NAME": service_name,
                "POWERTOOLS_METRICS_NAMESPACE": METRICS_NAMESPACE,
                **application.environment,
                **({"SUBSCRIPTIONS": application.catalog} if application.catalog is not None else {}),
                **environment,
            },
        )
        self._acknowledge_defaults()

    def _acknowledge_defaults(self) -> None:
        function_resource = self.function.node.default_child
        assert function_resource is not None
        checkov.skip(
            function_resource,
            "CKV_AWS_117",
            "Outside a VPC on purpose: the engine calls only AWS service APIs (DynamoDB, SQS, CloudWatch, "
            "X-Ray, EventBridge Pipes), signed with IAM over TLS, and no resource of the pipeline is in a private "
            "network; in a VPC each of those calls would need a NAT gateway or an interface endpoint, and isolate "
            "nothing.",
        )
        checkov.skip(
            function_resource,
            "CKV_AWS_173",
            "The environment holds no secret: the names and URLs of this stack's tables, queues and pipes, the "
            "catalog reference, retry and retention numbers and Powertools settings. Lambda encrypts it at rest "
            "with its AWS-managed key; there is nothing secret for a KmsKeyArn to keep from readers of the "
            "function's configuration.",
        )
        for rule in ("AwsSolutions::AwsSolutions-L1", "Serverless::Serverless-LambdaLatestVersion"):
            Validations.of(function_resource).acknowledge(
                Acknowledgment(
                    id=rule,
                    reason=f"The function runs on {RUNTIME.name} because the engine layer's pinned wheels "
                    "(pydantic-core among them) are built for exactly that runtime (engine_layer.RUNTIME); "
                    "the runtime moves with the layer, in one change.",
                )
            )
        # Tracing adds xray:PutTraceSegments and xray:PutTelemetryRecords on "*" to the role's policy.
        policy_resource = self.role.node.find_child("DefaultPolicy").node.default_child
        assert policy_resource is not None
        Validations.of(policy_resource).acknowledge(
            Acknowledgment(
                id="AwsSolutions::AwsSolutions-IAM5[Resource::*]",
                reason="Active tracing needs xray:PutTraceSegments and xray:PutTelemetryRecords, which support "
                "no resource-level permissions; every other statement of this policy names its resource.",
            )
        )

    def acknowledge_synchronous_invocation(self, *, failures: str, concurrency: str | None) -> None:
        """For a function only ever invoked synchronously: say why it has no DeadLetterConfig (``failures``:
        where its failures go instead) and, unless it has one (``concurrency`` None), no reserved concurrency
        (``concurrency``: what bounds it), to cdk-nag and checkov alike."""
        function_resource = self.function.node.default_child
        assert function_resource is not None
        Validations.of(function_resource).acknowledge(
            Acknowledgment(id="Serverless::Serverless-LambdaDLQ", reason=failures)
        )
        checkov.skip(function_resource, "CKV_AWS_116", failures)
        if concurrency is not None:
            checkov.skip(function_resource, "CKV_AWS_115", concurrency)
