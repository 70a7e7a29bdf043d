"""Invariant 11 sees a local runtime kinder or harsher than AWS: each case below is one it must report."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from simulation.invariants import check_runtime_as_strict_as_aws
from simulation.observations import Observations, PipeDeadLetter, PipeSend

NOW = datetime(2026, 12, 1, 12, tzinfo=UTC)
TWELVE_HOURS = 12 * 3600


def test_a_faithful_runtime_passes() -> None:
    observations = Observations()
    observations.pipe_sends.append(PipeSend("relay", NOW, TWELVE_HOURS, (NOW - timedelta(hours=11),)))
    observations.pipe_dead_letters.append(
        PipeDeadLetter("relay", NOW, TWELVE_HOURS, "RecordAgeExceeded", "old", (NOW - timedelta(hours=13),))
    )
    observations.pipe_dead_letters.append(
        PipeDeadLetter("relay", NOW, TWELVE_HOURS, "RetryAttemptsExhausted", "BatchRequestTooLong", (NOW,))
    )

    assert check_runtime_as_strict_as_aws(observations) == []


def test_a_send_of_a_record_past_its_maximum_age_is_reported() -> None:
    observations = Observations()
    observations.pipe_sends.append(PipeSend("relay", NOW, TWELVE_HOURS, (NOW - timedelta(hours=13),)))

    [violation] = check_runtime_as_strict_as_aws(observations)

    assert "AWS would have discarded for age" in str(violation)


def test_a_young_record_discarded_for_age_is_reported() -> None:
    observations = Observations()
    observations.pipe_dead_letters.append(
        PipeDeadLetter("relay", NOW, TWELVE_HOURS, "RecordAgeExceeded", "old", (NOW - timedelta(hours=1),))
    )

    [violation] = check_runtime_as_strict_as_aws(observations)

    assert "younger than the maximum age" in str(violation)


def test_a_whole_batch_dead_lettered_for_its_size_is_reported() -> None:
    observations = Observations()
    reason = "SQS SendMessageBatch failed: An error occurred (BatchRequestTooLong)"
    observations.pipe_dead_letters.append(
        PipeDeadLetter("relay", NOW, TWELVE_HOURS, "RetryAttemptsExhausted", reason, (NOW, NOW))
    )

    [violation] = check_runtime_as_strict_as_aws(observations)

    assert "AUTOMATIC_BISECT would have halved it" in str(violation)
