"""Rule 13 (M24, R11.1): a stopped pipe stays STOPPED, however often DescribePipe reads it, until StartPipe.
moto as shipped walks it on to STARTING and RUNNING by itself, which would tell the anchoring pass's liveness
check, and ``outbox status``, that a stopped pipe runs."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from outbox.local import aws_fixes
from outbox.local.clock import VirtualClock

READS = 4


@pytest.fixture
def pipes(aws_credentials: None) -> Iterator[Any]:
    with mock_aws():
        client = boto3.client("pipes", region_name="us-east-1")
        client.create_pipe(
            Name="relay",
            Source="arn:aws:dynamodb:us-east-1:123456789012:table/events/stream/1",
            Target="arn:aws:sqs:us-east-1:123456789012:durable.fifo",
            RoleArn="arn:aws:iam::123456789012:role/relay",
            DesiredState="RUNNING",
        )
        yield client


def states(pipes: Any, reads: int = READS) -> list[str]:
    return [pipes.describe_pipe(Name="relay")["CurrentState"] for _ in range(reads)]


def test_a_stopped_pipe_stays_stopped_until_it_is_started(pipes: Any) -> None:
    uninstall = aws_fixes.install(VirtualClock())
    try:
        assert states(pipes) == ["RUNNING"] * READS

        pipes.stop_pipe(Name="relay")
        assert states(pipes) == ["STOPPED"] * READS

        pipes.start_pipe(Name="relay")
        assert states(pipes) == ["RUNNING"] * READS
    finally:
        uninstall()


def test_moto_as_shipped_restarts_a_stopped_pipe_by_itself(pipes: Any) -> None:
    # The gap the rule closes: read enough times, moto's stopped pipe says it is running again.
    pipes.stop_pipe(Name="relay")

    assert states(pipes)[-1] == "RUNNING"
