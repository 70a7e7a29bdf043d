"""moto-backed DynamoDB with the events table and a module data table."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import boto3
import pytest
from moto import mock_aws

from outbox import EventStore
from outbox.local import aws_fixes
from outbox.local.clock import VirtualClock

if TYPE_CHECKING:
    from tests.functional.inbox_harness import HarnessFactory

EVENTS_TABLE = "events"
ORDERS_TABLE = "orders"


def create_pk_sk_table(client: Any, name: str, stream: bool = False) -> None:
    extra: dict[str, Any] = {}
    if stream:
        extra["StreamSpecification"] = {"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"}
    client.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
        ],
        BillingMode="PAY_PER_REQUEST",
        **extra,
    )


@pytest.fixture
def clock() -> VirtualClock:
    return VirtualClock()


@pytest.fixture
def aws(aws_credentials: None, clock: VirtualClock) -> Iterator[None]:
    """moto with the runtime's AWS fixes: transactions atomic across threads (as in DynamoDB) and
    O(touched items) instead of a deep copy of every table per transaction."""
    with mock_aws():
        uninstall = aws_fixes.install(clock)
        try:
            yield
        finally:
            uninstall()


@pytest.fixture
def dynamodb(aws: None) -> Any:
    client = boto3.client("dynamodb", region_name="us-east-1")
    create_pk_sk_table(client, EVENTS_TABLE, stream=True)
    create_pk_sk_table(client, ORDERS_TABLE)
    return client


@pytest.fixture
def store(dynamodb: Any) -> EventStore:
    return EventStore(EVENTS_TABLE, client=dynamodb, sleep=lambda _seconds: None, unchecked=True)


@pytest.fixture
def make_harness(aws: None, clock: VirtualClock) -> HarnessFactory:
    """A consumer wired to real SQS FIFO messages on moto, with the subscriptions a test gives it."""
    from tests.functional.inbox_harness import build_harness  # the harness imports this module's tables

    return lambda subscriptions: build_harness(subscriptions, clock)
