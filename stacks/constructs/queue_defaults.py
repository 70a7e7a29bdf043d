"""What every SQS queue of the app has in common, defined once: ``encrypted_queue``."""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_sqs as sqs
from constructs import Construct


def encrypted_queue(
    scope: Construct,
    construct_id: str,
    *,
    fifo: bool,
    retention_period: Duration,
    visibility_timeout: Duration | None = None,
    dead_letter_queue: sqs.DeadLetterQueue | None = None,
    content_based_deduplication: bool | None = None,
) -> sqs.Queue:
    """A queue encrypted with SSE-SQS that refuses every request without TLS.

    SSE-SQS (keys owned by SQS): a customer key would have to be granted to the pipe roles, the
    consumers and every operator tool, for no separation that IAM on the queue does not already give;
    the AWS-managed ``aws/sqs`` key would add KMS calls and cost and no control at all.
    """
    return sqs.Queue(
        scope,
        construct_id,
        fifo=fifo or None,  # absent, not false: CloudFormation only accepts FifoQueue on FIFO queues
        content_based_deduplication=content_based_deduplication,
        visibility_timeout=visibility_timeout,
        retention_period=retention_period,
        dead_letter_queue=dead_letter_queue,
        encryption=sqs.QueueEncryption.SQS_MANAGED,
        enforce_ssl=True,
    )
