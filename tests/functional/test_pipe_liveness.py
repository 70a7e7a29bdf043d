"""The pipes' liveness as an anchoring pass reads it (``outbox.audit.liveness``), on moto's Pipes API: every state but
RUNNING counts, a pipe whose state cannot be read counts too, and the count is published every time, 0
included (its alarm treats a missing datapoint as breaching)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from outbox.audit.auditor import Metric
from outbox.audit.liveness import RUNNING, PipeWatch, not_running, pipe_states
from outbox.exceptions import OutboxValidationError
from outbox.local import aws_fixes
from outbox.local.clock import VirtualClock
from outbox.settings import AuditorSettings

REGION = "us-east-1"
PIPES = ("relay", "tamper", "record-change")


class PublishedMetrics:
    """What Powertools' ``add_metric`` was given, in order."""

    def __init__(self) -> None:
        self.added: list[tuple[str, str, float]] = []

    def add_metric(self, *, name: str, unit: str, value: float) -> None:
        self.added.append((name, unit, value))


@pytest.fixture
def pipes() -> Iterator[Any]:
    # With the runtime's fixes: moto as shipped walks a stopped pipe on to RUNNING as it is read (M24).
    with mock_aws():
        uninstall = aws_fixes.install(VirtualClock())
        client = boto3.client("pipes", region_name=REGION)
        for name in PIPES:
            client.create_pipe(
                Name=name,
                Source=f"arn:aws:dynamodb:{REGION}:123456789012:table/t/stream/1",
                Target=f"arn:aws:sqs:{REGION}:123456789012:{name}",
                RoleArn=f"arn:aws:iam::123456789012:role/{name}",
                DesiredState=RUNNING,
            )
        try:
            yield client
        finally:
            uninstall()


@pytest.mark.parametrize("stopped", [(), ("relay",), ("relay", "tamper"), PIPES])
def test_the_count_published_is_the_number_of_pipes_not_running(pipes: Any, stopped: tuple[str, ...]) -> None:
    for name in stopped:
        pipes.stop_pipe(Name=name)
    metrics = PublishedMetrics()

    states = PipeWatch(pipes, PIPES, metrics=metrics).check()

    assert sorted(not_running(states)) == sorted(stopped)
    assert metrics.added == [(Metric.PIPES_NOT_RUNNING.value, "Count", len(stopped))]


def test_a_pipe_started_again_runs_and_is_no_longer_counted(pipes: Any) -> None:
    pipes.stop_pipe(Name="relay")
    assert pipe_states(pipes, ["relay"]) == {"relay": "STOPPED"}

    pipes.start_pipe(Name="relay")

    assert pipe_states(pipes, ["relay"]) == {"relay": RUNNING}


def test_a_pipe_whose_state_cannot_be_read_counts_as_not_running(pipes: Any) -> None:
    metrics = PublishedMetrics()

    states = PipeWatch(pipes, ("relay", "deleted-by-hand"), metrics=metrics).check()

    assert states == {"relay": RUNNING, "deleted-by-hand": "unknown (NotFoundException)"}
    assert metrics.added == [(Metric.PIPES_NOT_RUNNING.value, "Count", 1)]


@pytest.mark.parametrize("state", ["STOPPED", "STARTING", "UPDATING", "CREATING", "START_FAILED", "UPDATE_FAILED"])
def test_every_state_but_running_counts(state: str) -> None:
    # Passing states too: none is sure to deliver, and a pipe stuck in one never does.
    assert not_running({"relay": state, "tamper": RUNNING}) == ["relay"]


def test_the_watched_pipes_come_from_the_environment_and_none_is_refused() -> None:
    base = {"EVENTS_TABLE_NAME": "events", "AUDIT_TABLE_NAME": "audit"}

    watched = AuditorSettings.from_env({**base, "WATCHED_PIPE_NAMES": "relay,tamper, record-change"}).watched_pipes()

    assert watched == PIPES
    # A watch of nothing would publish 0 every hour, whatever the pipes do: it is an error, not a quiet default.
    for environment in (base, {**base, "WATCHED_PIPE_NAMES": ""}, {**base, "WATCHED_PIPE_NAMES": " , "}):
        with pytest.raises(OutboxValidationError, match="WATCHED_PIPE_NAMES"):
            AuditorSettings.from_env(environment).watched_pipes()
