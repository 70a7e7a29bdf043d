"""What every DynamoDB table of the app has in common, defined once: ``protected_table``."""

from __future__ import annotations

from aws_cdk import RemovalPolicy
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_kms as kms
from constructs import Construct

from outbox_cdk import checkov


def protected_table(
    scope: Construct,
    construct_id: str,
    *,
    stream: dynamodb.StreamViewType | None = None,
    time_to_live_attribute: str | None = None,
    encryption_key: kms.IKey | None = None,
) -> dynamodb.Table:
    """A table keyed by string ``pk`` and ``sk``, on demand, that survives mistakes and stack deletion.

    Point-in-time recovery is the way back from a bad write; deletion protection and the RETAIN policy
    keep the data when a stack update replaces the table or the stack is deleted. Encryption uses the
    AWS-managed ``aws/dynamodb`` KMS key (``AWS_MANAGED``) unless ``encryption_key`` names a customer-managed
    one: every reader is already scoped by IAM, so a customer key is for whoever must also control, audit or
    revoke the key itself (``OutboxPipeline(encryption_key=...)``), and each reader is then granted it too.

    Parameters
    ----------
    stream
        The stream view, for a table a pipe reads; ``None`` for no stream.
    time_to_live_attribute
        The epoch-seconds attribute DynamoDB expires items by; ``None`` for no TTL.
    encryption_key
        A customer-managed KMS key (``CUSTOMER_MANAGED``); ``None`` for the AWS-managed one.
    """
    table = dynamodb.Table(
        scope,
        construct_id,
        partition_key=dynamodb.Attribute(name="pk", type=dynamodb.AttributeType.STRING),
        sort_key=dynamodb.Attribute(name="sk", type=dynamodb.AttributeType.STRING),
        billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
        stream=stream,
        time_to_live_attribute=time_to_live_attribute,
        point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
            point_in_time_recovery_enabled=True
        ),
        encryption=dynamodb.TableEncryption.CUSTOMER_MANAGED
        if encryption_key
        else dynamodb.TableEncryption.AWS_MANAGED,
        encryption_key=encryption_key,
        deletion_protection=True,
        removal_policy=RemovalPolicy.RETAIN,
    )
    if encryption_key is None:  # with a customer-managed key, the check passes
        checkov.skip(
            table,
            "CKV_AWS_119",
            "Encrypted at rest with the AWS-managed aws/dynamodb KMS key by default (TableEncryption.AWS_MANAGED); "
            f"{checkov.CUSTOMER_KEY_OPTION}.",
        )
    return table
