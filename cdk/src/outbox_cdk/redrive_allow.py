"""A lane DLQ that its source queue alone may name: ``byQueue``, set once both queues exist (``OnlyItsSourceQueue``)."""

from __future__ import annotations

from typing import Final

from aws_cdk import Acknowledgment, Stack, Validations
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sqs as sqs
from aws_cdk import custom_resources as cr
from constructs import Construct

from outbox_cdk import checkov
from outbox_cdk.lambda_defaults import LAMBDA_PRINCIPAL, LOG_RETENTION

# The one call the custom resource makes, on create and on update (R10.9).
SET_ATTRIBUTES_ACTION: Final = "sqs:SetQueueAttributes"
# The stack-level construct holding the role and log group of the function every AwsCustomResource of the stack
# shares (CDK makes one function per stack, with the role and log group of the first one made).
WRITER_ID: Final = "RedriveAllowPolicyWriter"
# What CDK's AwsCustomResource runs with when it does not install the latest SDK: Lambda's default, said.
WRITER_MEMORY_MB: Final = 128
# Why the function has no DLQ: CloudFormation waits for its answer and fails the deploy without one.
_FAILURES_REASON: Final = (
    "CDK's AwsCustomResource function, run by CloudFormation during a deploy: a failed call answers FAILED "
    "and the deploy fails and rolls back, and an unanswered one fails it at the custom resource's timeout. "
    "There is no later failure for a DLQ to keep."
)


def by_queue(source_queue_arn: str) -> dict[str, object]:
    """The redrive allow policy that admits ``source_queue_arn`` alone."""
    return {"redrivePermission": "byQueue", "sourceQueueArns": [source_queue_arn]}


class OnlyItsSourceQueue(Construct):
    """Sets ``dead_letter_queue``'s redrive allow policy to ``byQueue`` naming ``source_queue`` alone, with
    ``sqs:SetQueueAttributes`` once both queues exist (an ``AwsCustomResource``).

    CloudFormation cannot say it on the DLQ itself: the source queue's ``RedrivePolicy`` names the DLQ's ARN, so a
    ``byQueue`` naming the source queue's ARN would be a circular dependency, and naming the queues at synth to
    break it would replace them, deleting the messages they hold. The DLQ's template declares no redrive allow
    policy, so no later update of its own properties sets ``allowAll`` back over this one.

    - Create and update: ``SetQueueAttributes`` of the DLQ's ``RedriveAllowPolicy``. An update runs when either
      queue's ARN or URL changes, so a replaced DLQ is given the policy again.
    - Delete: nothing. The DLQ is deleted with the stack; and when this construct alone leaves the app,
      ``byQueue`` naming the queue that still uses the DLQ stays right, where putting ``allowAll`` back would let
      every queue of the account name it again.
    - The function's role may call ``sqs:SetQueueAttributes`` on these DLQs only (one policy per DLQ) and write to
      its own log group; no AWS managed policy.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        dead_letter_queue: sqs.IQueue,
        source_queue: sqs.IQueue,
        encryption_key: kms.IKey | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        writer = _writer(Stack.of(self), encryption_key)
        policy = Stack.of(self).to_json_string(by_queue(source_queue.queue_arn))
        call = cr.AwsSdkCall(
            service="SQS",
            action="setQueueAttributes",
            parameters={"QueueUrl": dead_letter_queue.queue_url, "Attributes": {"RedriveAllowPolicy": policy}},
            # Fixed: a changed queue is an update of this resource, never a replacement (no delete to run).
            physical_resource_id=cr.PhysicalResourceId.of(f"{self.node.path}/RedriveAllowPolicy"),
        )
        self.resource = cr.AwsCustomResource(
            self,
            "SetRedriveAllowPolicy",
            on_create=call,
            on_update=call,
            policy=cr.AwsCustomResourcePolicy.from_statements(
                [iam.PolicyStatement(actions=[SET_ATTRIBUTES_ACTION], resources=[dead_letter_queue.queue_arn])]
            ),
            role=writer.role,
            log_group=writer.log_group,
            memory_size=WRITER_MEMORY_MB,
            install_latest_aws_sdk=False,
        )
        writer.acknowledge_function()


class _Writer(Construct):
    """The role and log group of the stack's ``AwsCustomResource`` function (``WRITER_ID``)."""

    def __init__(self, scope: Construct, construct_id: str, *, encryption_key: kms.IKey | None) -> None:
        super().__init__(scope, construct_id)
        self.log_group = logs.LogGroup(self, "Logs", retention=LOG_RETENTION, encryption_key=encryption_key)
        if encryption_key is None:  # with a customer-managed key, the check passes
            checkov.skip(self.log_group, "CKV_AWS_158", checkov.LOG_GROUP_KEY_REASON)
        # Not CDK's default role with AWSLambdaBasicExecutionRole, which writes to every log group of the account.
        self.role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal(LAMBDA_PRINCIPAL),
            description="Sets the lane DLQs' redrive allow policies during a deploy",
        )
        self.log_group.grant_write(self.role)
        self._acknowledged = False

    def acknowledge_function(self) -> None:
        """Say, once, why CDK's function lacks what the packs ask of the engine's own functions."""
        if self._acknowledged:
            return
        self._acknowledged = True
        stack = Stack.of(self)
        function = stack.node.find_child(f"AWS{cr.AwsCustomResource.PROVIDER_FUNCTION_UUID.replace('-', '')}")
        resource = function.node.default_child
        assert resource is not None
        Validations.of(resource).acknowledge(
            Acknowledgment(id="Serverless::Serverless-LambdaDLQ", reason=_FAILURES_REASON)
        )
        checkov.skip(resource, "CKV_AWS_116", _FAILURES_REASON)
        Validations.of(resource).acknowledge(
            Acknowledgment(
                id="Serverless::Serverless-LambdaTracing",
                reason="One SetQueueAttributes call per lane DLQ during a deploy, answered to CloudFormation; its "
                "log group holds the request and the answer, and a trace would add nothing.",
            )
        )
        checkov.skip(
            resource,
            "CKV_AWS_115",
            "Invoked by CloudFormation only, once per lane DLQ and deploy: its concurrency is bounded by the "
            "custom resources of this stack (three at most), and reserving any would take it from the engine.",
        )
        checkov.skip(
            resource,
            "CKV_AWS_117",
            "Outside a VPC on purpose: it calls SQS's API only (SetQueueAttributes), signed with IAM over TLS, and "
            "answers CloudFormation through a presigned S3 URL; in a VPC both would need endpoints or a NAT gateway.",
        )


def _writer(stack: Stack, encryption_key: kms.IKey | None) -> _Writer:
    """The stack's one writer, made by the first lane (with its log group on that lane's key: the pipeline's)."""
    found = stack.node.try_find_child(WRITER_ID)
    if isinstance(found, _Writer):
        return found
    return _Writer(stack, WRITER_ID, encryption_key=encryption_key)
