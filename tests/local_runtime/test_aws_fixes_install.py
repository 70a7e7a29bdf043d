"""``install`` itself: nothing at import, idempotent, fully undone, and the same rules on a moto server."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws
from moto.moto_server.threaded_moto_server import ThreadedMotoServer
from moto.sqs.responses import SQSResponse

from outbox.local import aws_fixes
from outbox.local.clock import VirtualClock


def test_importing_the_fixes_patches_nothing() -> None:
    # Given the module imported (above), when nothing installs it, then moto is as shipped
    assert not aws_fixes.installed()
    assert not hasattr(SQSResponse, "start_message_move_task")


def test_install_is_idempotent_and_uninstall_restores_moto(aws_credentials: None) -> None:
    with mock_aws():
        sqs = boto3.client("sqs", region_name="us-east-1")
        dlq_url = sqs.create_queue(QueueName="dlq")["QueueUrl"]
        dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        redrive = json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": "1"})
        sqs.create_queue(QueueName="q", Attributes={"RedrivePolicy": redrive})

        # Given the fixes installed twice, the second time with another clock
        uninstall = aws_fixes.install(VirtualClock())
        assert aws_fixes.install(VirtualClock()) is uninstall
        sqs.start_message_move_task(SourceArn=dlq_arn)

        # When they are uninstalled (twice: harmless)
        uninstall()
        uninstall()

        # Then moto is back as shipped: StartMessageMoveTask is not implemented again
        assert not aws_fixes.installed()
        with pytest.raises(NotImplementedError):
            sqs.start_message_move_task(SourceArn=dlq_arn)


@pytest.fixture
def server(aws_credentials: None) -> Iterator[str]:
    moto_server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    moto_server.start()
    host, port = moto_server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    try:
        yield endpoint
    finally:
        urllib.request.urlopen(urllib.request.Request(f"{endpoint}/moto-api/reset", method="POST")).close()
        moto_server.stop()


def test_the_fixes_hold_for_a_threaded_moto_server_in_the_same_process(server: str) -> None:
    # Given the fixes installed while a moto server runs in this process
    clock = VirtualClock()
    uninstall = aws_fixes.install(clock)
    try:
        sqs: Any = boto3.client("sqs", region_name="us-east-1", endpoint_url=server)
        dynamodb: Any = boto3.client("dynamodb", region_name="us-east-1", endpoint_url=server)
        url = sqs.create_queue(QueueName="q.fifo", Attributes={"FifoQueue": "true", "VisibilityTimeout": "30"})[
            "QueueUrl"
        ]
        dynamodb.create_table(
            TableName="t",
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        bump = [
            {
                "Update": {
                    "TableName": "t",
                    "Key": {"pk": {"S": "n"}},
                    "UpdateExpression": "ADD n :one",
                    "ExpressionAttributeValues": {":one": {"N": "1"}},
                }
            }
        ]

        # When a message is received and left, a deleted message is resent, and a transaction is replayed
        sqs.send_message(QueueUrl=url, MessageBody="left", MessageGroupId="g1", MessageDeduplicationId="left")
        sqs.receive_message(QueueUrl=url)
        sqs.send_message(QueueUrl=url, MessageBody="done", MessageGroupId="g2", MessageDeduplicationId="done")
        [done] = sqs.receive_message(QueueUrl=url)["Messages"]
        sqs.delete_message(QueueUrl=url, ReceiptHandle=done["ReceiptHandle"])
        sqs.send_message(QueueUrl=url, MessageBody="done", MessageGroupId="g2", MessageDeduplicationId="done")
        clock.advance(timedelta(seconds=30))
        dynamodb.transact_write_items(TransactItems=bump, ClientRequestToken="once")
        dynamodb.transact_write_items(TransactItems=bump, ClientRequestToken="once")

        # Then the left message is back on the virtual clock, the resend is deduplicated, the replay is a no-op
        assert [m["Body"] for m in sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]] == ["left"]
        item = dynamodb.get_item(TableName="t", Key={"pk": {"S": "n"}})["Item"]
        assert item["n"] == {"N": "1"}
    finally:
        uninstall()


def test_an_idempotency_mismatch_is_reported_through_a_moto_server(server: str) -> None:
    # Given the fixes installed, a moto server, and a transaction committed with token "t1"
    uninstall = aws_fixes.install(VirtualClock())
    try:
        dynamodb: Any = boto3.client("dynamodb", region_name="us-east-1", endpoint_url=server)
        dynamodb.create_table(
            TableName="t",
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        put_a = [{"Put": {"TableName": "t", "Item": {"pk": {"S": "a"}}}}]
        put_b = [{"Put": {"TableName": "t", "Item": {"pk": {"S": "b"}}}}]
        dynamodb.transact_write_items(TransactItems=put_a, ClientRequestToken="t1")

        # When the token comes back with other parameters
        with pytest.raises(ClientError) as raised:
            dynamodb.transact_write_items(TransactItems=put_b, ClientRequestToken="t1")

        # Then the client sees the modelled error
        assert raised.value.response["Error"]["Code"] == "IdempotentParameterMismatchException"
    finally:
        uninstall()
