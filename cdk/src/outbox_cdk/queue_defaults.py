"""What every SQS queue of the app has in common, defined once: ``encrypted_queue``."""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from outbox_cdk import checkov

# Every queue states its MaximumMessageSize instead of inheriting a default that AWS has changed before
# (256 KiB for years, 1 MiB allowed since 2025). 256 KiB: ten of them stay well inside the 6 MB payload of
# one Lambda invocation. The engine's relay bound (outbox.messages.MAX_RELAY_BODY_BYTES) is derived from
# this number, and an infrastructure test keeps the two equal.
MESSAGE_MAX_BYTES = 262_144
# With a customer-managed key (SSE-KMS), how long SQS reuses a data key before it calls KMS again: SQS's
# default. Per busy queue, SQS calls KMS about (2 x producing roles + consuming roles) times per period
# (SQS developer guide, "Estimating AWS KMS costs"); one or two roles of each here, so some 30,000 to
# 45,000 requests a month, about a dime at KMS prices, and none for an idle queue. A longer period saves
# those cents but keeps a disabled key or a revoked grant working that much longer: with 5 minutes,
# turning the key off (the point of owning it) stops the queues within 5 minutes.
DATA_KEY_REUSE = Duration.minutes(5)


def encrypted_queue(
    scope: Construct,
    construct_id: str,
    *,
    fifo: bool,
    retention_period: Duration,
    visibility_timeout: Duration | None = None,
    dead_letter_queue: sqs.DeadLetterQueue | None = None,
    redrive_allow_policy: sqs.RedriveAllowPolicy | None = None,
    content_based_deduplication: bool | None = None,
    max_message_size_bytes: int = MESSAGE_MAX_BYTES,
    encryption_key: kms.IKey | None = None,
) -> sqs.Queue:
    """A queue encrypted at rest that refuses every request without TLS.

    SSE-SQS (keys owned by SQS) by default: a customer key has to be granted to the pipe roles, the
    consumers and every operator tool, for no separation that IAM on the queue does not already give;
    the AWS-managed ``aws/sqs`` key would add KMS calls and cost and no control at all. With
    ``encryption_key`` (``OutboxPipeline(encryption_key=...)``), SSE-KMS with that customer-managed key,
    for whoever must control, audit or revoke the key itself; a queue and its DLQ then share the key, as
    SQS requires for an encrypted pair, and SQS reuses each data key for ``DATA_KEY_REUSE``.
    """
    queue = sqs.Queue(
        scope,
        construct_id,
        fifo=fifo or None,  # absent, not false: CloudFormation only accepts FifoQueue on FIFO queues
        content_based_deduplication=content_based_deduplication,
        visibility_timeout=visibility_timeout,
        retention_period=retention_period,
        dead_letter_queue=dead_letter_queue,
        redrive_allow_policy=redrive_allow_policy,
        max_message_size_bytes=max_message_size_bytes,
        encryption=sqs.QueueEncryption.KMS if encryption_key else sqs.QueueEncryption.SQS_MANAGED,
        encryption_master_key=encryption_key,
        data_key_reuse=DATA_KEY_REUSE if encryption_key else None,
        enforce_ssl=True,
    )
    if encryption_key is None:  # with a customer-managed key, the check passes
        checkov.skip(
            queue,
            "CKV_AWS_27",
            "Encrypted at rest with SSE-SQS by default (SqsManagedSseEnabled: true, keys owned by SQS), which this "
            f"check does not recognise: it looks for KmsMasterKeyId only; {checkov.CUSTOMER_KEY_OPTION}.",
        )
    return queue
