"""In-process moto for the benchmarks, with or without the local runtime's AWS fixes."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from botocore.config import Config

from outbox.local import aws_fixes
from outbox.local.clients import REGION, STANDARD_RETRIES, local_client
from outbox.local.clock import VirtualClock
from outbox.local.esm import lambda_message_attribute

FAKE_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "benchmark",
    "AWS_SECRET_ACCESS_KEY": "benchmark",
    "AWS_DEFAULT_REGION": REGION,
    "AWS_ACCOUNT_ID_ENDPOINT_MODE": "disabled",
    "POWERTOOLS_TRACE_DISABLED": "true",
}


@contextmanager
def moto(*, fixes: bool = True, clock: VirtualClock | None = None) -> Iterator[VirtualClock]:
    """moto in-process; with ``fixes`` the runtime's AWS fixes are installed (atomic, O(touched items)
    transactions; FIFO deduplication; the virtual clock for SQS timing)."""
    from moto import mock_aws

    saved = {name: os.environ.get(name) for name in FAKE_CREDENTIALS}
    os.environ.update(FAKE_CREDENTIALS)
    clock = clock or VirtualClock(datetime.now(UTC).replace(microsecond=0))
    try:
        with mock_aws():
            uninstall = aws_fixes.install(clock) if fixes else None
            try:
                yield clock
            finally:
                if uninstall is not None:
                    uninstall()
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def client(service: str, config: Config | None = None) -> Any:
    return local_client(service, retries=STANDARD_RETRIES, config=config)


def create_table(dynamodb: Any, name: str, *, key: tuple[str, str | None] = ("pk", "sk"), stream: bool = False) -> None:
    """An on-demand table keyed like the project's tables (``pk``/``sk``), or as ``key`` says."""
    hash_key, range_key = key
    schema = [{"AttributeName": hash_key, "KeyType": "HASH"}]
    attributes = [{"AttributeName": hash_key, "AttributeType": "S"}]
    if range_key:
        schema.append({"AttributeName": range_key, "KeyType": "RANGE"})
        attributes.append({"AttributeName": range_key, "AttributeType": "S"})
    extra: dict[str, Any] = {}
    if stream:
        extra["StreamSpecification"] = {"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"}
    dynamodb.create_table(
        TableName=name, KeySchema=schema, AttributeDefinitions=attributes, BillingMode="PAY_PER_REQUEST", **extra
    )


def create_fifo_queue(sqs: Any, name: str) -> str:
    url: str = sqs.create_queue(
        QueueName=f"{name}.fifo",
        Attributes={"FifoQueue": "true", "ContentBasedDeduplication": "false", "VisibilityTimeout": "360"},
    )["QueueUrl"]
    return url


def lambda_records(sqs: Any, queue_url: str, queue_arn: str, max_messages: int = 10) -> list[dict[str, Any]]:
    """One receive, as the Lambda SQS event source hands it to a function (the ``Records`` of its event)."""
    response = sqs.receive_message(
        QueueUrl=queue_url,
        MaxNumberOfMessages=max_messages,
        MessageSystemAttributeNames=["All"],
        MessageAttributeNames=["All"],
    )
    return [
        {
            "messageId": message["MessageId"],
            "receiptHandle": message["ReceiptHandle"],
            "body": message["Body"],
            "attributes": dict(message.get("Attributes", {})),
            "messageAttributes": {
                name: lambda_message_attribute(value) for name, value in message.get("MessageAttributes", {}).items()
            },
            "md5OfBody": message["MD5OfBody"],
            "eventSource": "aws:sqs",
            "eventSourceARN": queue_arn,
            "awsRegion": REGION,
        }
        for message in response.get("Messages", [])
    ]


def queue_arn(sqs: Any, url: str) -> str:
    arn: str = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    return arn


def dumps(document: Any) -> str:
    return json.dumps(document, separators=(",", ":"))
