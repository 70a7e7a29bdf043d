"""Fixtures of the local runtime's tests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from outbox.local import aws_fixes
from outbox.local.clock import VirtualClock


@pytest.fixture
def queue(aws_credentials: None) -> Iterator[tuple[Any, str, VirtualClock]]:
    """An SQS queue on moto (visibility timeout 60 s), its URL and the virtual clock the fixes stamp with."""
    clock = VirtualClock()
    with mock_aws():
        uninstall = aws_fixes.install(clock)
        sqs = boto3.client("sqs", region_name="us-east-1")
        url = sqs.create_queue(QueueName="q", Attributes={"VisibilityTimeout": "60"})["QueueUrl"]
        yield sqs, url, clock
        uninstall()
