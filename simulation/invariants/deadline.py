"""Invariants 11 and 15: time. The local runtime is as strict as AWS (a pipe's record ages, its bisection),
and Lambda's deadline never lets one tenant's work cost another tenant its time or its attempts."""

from __future__ import annotations

from datetime import timedelta

from simulation.invariants.base import Violation, name_of
from simulation.observations import AttemptCounts, Observations
from simulation.state import State
from simulation.world import World

# What SQS says when it refuses a request for what it carries: AWS's AUTOMATIC_BISECT would halve the batch.
_CONTENT_REFUSALS = ("BatchRequestTooLong", "shorter than")


def check_runtime_as_strict_as_aws(observations: Observations) -> list[Violation]:
    """The local runtime delivers nothing AWS would drop and drops nothing AWS would deliver: a pipe sends
    only records younger than MaximumRecordAgeInSeconds (counted from their creation), discards for age only
    older ones, and never dead-letters a batch of several records that SQS refused for its content (AWS
    halves it first)."""
    found: list[Violation] = []
    for send in observations.pipe_sends:
        if send.max_age_seconds >= 0:
            cutoff = send.at - timedelta(seconds=send.max_age_seconds)
            stale = [created for created in send.created if created < cutoff]
            if stale:
                found.append(Violation(11, f"{send.pipe} sent {len(stale)} record(s) AWS would have discarded for age"))
    for letter in observations.pipe_dead_letters:
        if letter.condition == "RecordAgeExceeded":
            cutoff = letter.at - timedelta(seconds=letter.max_age_seconds)
            young = [created for created in letter.created if created >= cutoff]
            if young:
                found.append(
                    Violation(11, f"{letter.pipe} discarded {len(young)} record(s) younger than the maximum age")
                )
        elif len(letter.created) > 1 and any(sign in letter.reason for sign in _CONTENT_REFUSALS):
            found.append(
                Violation(
                    11,
                    f"{letter.pipe} dead-lettered a batch of {len(letter.created)} that SQS refused for its content: "
                    "AUTOMATIC_BISECT would have halved it",
                )
            )
    return found


def check_deadline(world: World, observations: Observations, state: State) -> list[Violation]:
    """Invariant 15: one tenant's work never costs another tenant its time or its attempts."""
    found = [
        Violation(15, f"in-place work came before the rest of its batch: {what}")
        for what in observations.records_after_in_place
    ]
    found += [
        Violation(15, f"a pair the deadline cut off should not have started: {what}")
        for what in observations.started_too_late
    ]
    for index, (key, attempt, reason) in enumerate(observations.dead_calls):
        if reason != "exhausted" or key in world.too_slow:
            continue
        counts = _since_the_last_replay(observations, key, index)
        if not counts.cut_for_others:
            continue
        # A cut-off the engine forgave is given back already (in ``claimed``): not to be taken off twice.
        own = counts.claimed - max(counts.cut_for_others - counts.forgiven, 0)
        if own < state.max_attempts:
            found.append(
                Violation(
                    15,
                    f"{name_of(world, key)}: dead as exhausted at attempt {attempt}, but {counts.cut_for_others} of "
                    f"its {counts.claimed} attempt(s) were cut off by the deadline for other tenants' work (its "
                    "handler fits the function's timeout)",
                )
            )
    return found


def _since_the_last_replay(observations: Observations, key: str, index: int) -> AttemptCounts:
    """The attempt counts of the dead call at ``index`` since the replay before it (a replay starts the pair's
    attempts over), or since the start."""
    at_the_call = observations.dead_call_counts[index]
    replays = [counts for k, calls_before, counts in observations.replay_counts if k == key and calls_before <= index]
    return at_the_call.since(replays[-1]) if replays else at_the_call
