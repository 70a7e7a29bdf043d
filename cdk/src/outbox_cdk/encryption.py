"""The pipeline's optional customer-managed KMS key (``OutboxPipeline(encryption_key=...)``), in one place:
what CloudWatch Logs is admitted to do with it, and what cdk-nag is told about the grants CDK writes for it.

The key encrypts the events and inbox tables, every queue and DLQ of the pipeline and every log group of
its functions and pipes; EventBridge writes to two of those DLQs (the anchoring schedule's and the control-plane
watch's), so it is admitted too. Where this package grants a table's items or a queue's messages by hand (``grants``:
the functions' and the runbook role's explicit grants, ``EventsTable.grant_emit``), it names the key actions
itself, without wildcards; where it still uses CDK's own ``grant_*`` (the pipes' stream reads and sends, the
operator role's repair), CDK grants the key with it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

import jsii
from aws_cdk import Acknowledgment, ArnFormat, IStableListProducer, Lazy, Stack, Validations
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from constructs import Construct

# What CloudWatch Logs needs on a key that encrypts log groups, as its guide writes the key policy
# statement ("Encrypt log data in CloudWatch Logs using AWS KMS", step 2).
LOGS_KEY_ACTIONS: Final = (
    "kms:Encrypt*",
    "kms:Decrypt*",
    "kms:ReEncrypt*",
    "kms:GenerateDataKey*",
    "kms:Describe*",
)
LOGS_ENCRYPTION_CONTEXT: Final = "kms:EncryptionContext:aws:logs:arn"
EVENTBRIDGE_PRINCIPAL: Final = "events.amazonaws.com"

# The actions CDK's table and queue grants add on a key (aws_dynamodb KEY_WRITE_ACTIONS, and an SQS send)
# that end in a wildcard, which cdk-nag's AwsSolutions-IAM5 reports.
CDK_KEY_WILDCARD_ACTIONS: Final = ("kms:ReEncrypt*", "kms:GenerateDataKey*")


def admit_cloudwatch_logs(scope: Construct, key: kms.IKey) -> bool:
    """Let CloudWatch Logs of this stack's region use ``key`` for the log groups of this account and region.

    Returns whether the statement is in the key policy: False for a key imported by ARN, whose policy CDK
    cannot change (``IKey.add_to_resource_policy`` adds nothing then).
    """
    stack = Stack.of(scope)
    log_groups = stack.format_arn(
        service="logs", resource="log-group", resource_name="*", arn_format=ArnFormat.COLON_RESOURCE_NAME
    )
    result = key.add_to_resource_policy(
        iam.PolicyStatement(
            sid="AllowCloudWatchLogsOfThisAccountAndRegion",
            principals=[iam.ServicePrincipal(f"logs.{stack.region}.{stack.url_suffix}")],
            actions=list(LOGS_KEY_ACTIONS),
            resources=["*"],  # in a key policy, "*" means this key
            conditions={"ArnLike": {LOGS_ENCRYPTION_CONTEXT: log_groups}},
        ),
        allow_no_op=True,  # an imported key: report it to the caller, which decides
    )
    return bool(result.statement_added)


@jsii.implements(IStableListProducer)
class _Produced:
    def __init__(self, produce: Callable[[], list[str]]) -> None:
        self._produce = produce

    def produce(self) -> list[str]:
        return self._produce()


def admit_eventbridge_dead_letters(scope: Construct, key: kms.IKey, rule_arns: Callable[[], list[str]]) -> bool:
    """Let EventBridge use ``key`` on behalf of the rules ``rule_arns`` gives at synth (the anchoring schedule's,
    the control-plane watch's: each rule is named at synth, and each ARN is written from its name): it writes an
    event it could not deliver to the rule target's SSE-KMS dead-letter queue with the key. A rule's ``Arn``
    attribute would make the key depend on the rule, and through the function's log group the rule on the key (a
    cycle).

    Returns whether the statement is in the key policy: False for a key imported by ARN, whose policy must then
    admit ``events.amazonaws.com`` itself.
    """
    result = key.add_to_resource_policy(
        iam.PolicyStatement(
            sid="EventBridgeDeadLetters",
            principals=[iam.ServicePrincipal(EVENTBRIDGE_PRINCIPAL)],
            actions=["kms:Decrypt", "kms:GenerateDataKey"],
            resources=["*"],  # in a key policy, "*" means this key
            conditions={
                "StringEquals": {"aws:SourceAccount": Stack.of(scope).account},
                "ArnEquals": {"aws:SourceArn": Lazy.list(_Produced(rule_arns))},
            },
        ),
        allow_no_op=True,
    )
    return bool(result.statement_added)


def acknowledge_key_wildcards(role: iam.Role, granted: str) -> None:
    """Tell cdk-nag why ``role``'s default policy holds CDK's wildcard key actions: ``granted`` names the
    grants that wrote them. Call it after those grants (the default policy exists from the first one)."""
    policy = role.node.find_child("DefaultPolicy").node.default_child
    assert policy is not None
    for action in CDK_KEY_WILDCARD_ACTIONS:
        Validations.of(policy).acknowledge(
            Acknowledgment(
                id=f"AwsSolutions::AwsSolutions-IAM5[Action::{action}]",
                reason=f"{action} on the pipeline's one customer-managed key only, written by CDK's own {granted} "
                "for a resource encrypted with it (the data key operations SSE-KMS and DynamoDB encryption use).",
            )
        )
