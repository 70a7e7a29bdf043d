"""The one SNS topic every alarm of the app notifies: encrypted, and publishable by CloudWatch."""

from __future__ import annotations

from typing import Final

from aws_cdk import Acknowledgment, ArnFormat, Aws, CfnResource, Duration, Stack, Validations
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from constructs import Construct

CLOUDWATCH_PRINCIPAL = "cloudwatch.amazonaws.com"


# The topic's template metadata key that says why nobody subscribes to it (Alarms.nobody(reason)).
NO_SUBSCRIBER_METADATA: Final = "outbox:noAlarmSubscriber"


class AlarmTopic(Construct):
    """``self.topic`` receives every alarm; ``self.key`` encrypts it.

    The key is a customer-managed key, not the AWS-managed ``alias/aws/sns``: CloudWatch publishes
    alarm notifications with its own service principal, and it can only do so to an encrypted topic if
    the key policy grants it ``kms:GenerateDataKey*`` and ``kms:Decrypt``. The AWS-managed key's policy
    cannot be changed, so with it every alarm would fire and no notification would arrive, which is
    exactly the silent failure this app exists to prevent (SNS developer guide, "Enable compatibility
    between event sources from AWS services and encrypted topics"). Both the key and the topic policy
    admit CloudWatch only on behalf of this stack's alarms (confused-deputy conditions), and, with the
    control-plane watch, EventBridge only on behalf of its rules (``outbox_cdk.control_plane``).
    """

    def __init__(
        self, scope: Construct, construct_id: str, *, email: str | None = None, no_subscriber_reason: str | None = None
    ) -> None:
        super().__init__(scope, construct_id)
        self.key = kms.Key(
            self,
            "Key",
            description="Encrypts the outbox engine's alarm topic; usable by CloudWatch alarms of this stack",
            enable_key_rotation=True,
            pending_window=Duration.days(30),
        )
        self.topic = sns.Topic(
            self,
            "Topic",
            display_name="Outbox engine alarms",
            master_key=self.key,
            enforce_ssl=True,
        )
        self._admit_cloudwatch_alarms()
        if email:
            self._subscribe(email)
        if no_subscriber_reason:
            # In the template, where a reviewer of the stack sees that nobody here reads the alarms, and why.
            topic_resource = self.topic.node.default_child
            assert isinstance(topic_resource, CfnResource)
            topic_resource.add_metadata(NO_SUBSCRIBER_METADATA, no_subscriber_reason)

    def _subscribe(self, email: str) -> None:
        subscription = self.topic.add_subscription(subscriptions.EmailSubscription(email))
        resource = subscription.node.default_child
        assert resource is not None
        # Found when the first synth with an e-mail ran the Serverless pack: a deployed alarmEmail failed nag.
        Validations.of(resource).acknowledge(
            Acknowledgment(
                id="Serverless::Serverless-SNSRedrivePolicy",
                reason="An e-mail subscription to the alarm topic: SNS retries the delivery to the mail server under "
                "its delivery policy, and a redrive queue would keep the alarm notifications where nobody reads "
                "them. That the mail arrives is proved after each deploy (docs/operating.md: prove notifications).",
            )
        )

    def _admit_cloudwatch_alarms(self) -> None:
        stack = Stack.of(self)
        # CloudFormation names an unnamed alarm "<stack name>-<logical id>-<suffix>", so this matches
        # the alarms of this stack and no other. The name is the deployed one (AWS::StackName), not the
        # one this app synthesized under: the same template deployed under another name keeps its alarms.
        alarm_arns = stack.format_arn(
            service="cloudwatch",
            resource="alarm",
            resource_name=f"{Aws.STACK_NAME}-*",
            arn_format=ArnFormat.COLON_RESOURCE_NAME,
        )
        conditions = {
            "StringEquals": {"aws:SourceAccount": stack.account},
            "ArnLike": {"aws:SourceArn": alarm_arns},
        }
        principal = iam.ServicePrincipal(CLOUDWATCH_PRINCIPAL)
        self.key.add_to_resource_policy(
            iam.PolicyStatement(
                sid="AllowThisStacksAlarmsToPublishEncrypted",
                principals=[principal],
                actions=["kms:Decrypt", "kms:GenerateDataKey*"],
                resources=["*"],  # in a key policy, "*" means this key
                conditions=conditions,
            )
        )
        self.topic.add_to_resource_policy(
            iam.PolicyStatement(
                sid="AllowThisStacksAlarmsToPublish",
                principals=[principal],
                actions=["sns:Publish"],
                resources=[self.topic.topic_arn],
                conditions=conditions,
            )
        )
