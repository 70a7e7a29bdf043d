"""The claim state machine on its own: races, take-over, fencing, expiry, attempts."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest

from local_runtime.clock import VirtualClock
from outbox import ClaimOutcome, DeadReason, Envelope, EventStore, Inbox, LeaseLostError
from tests.functional.conftest import EVENTS_TABLE, create_pk_sk_table

LEASE = timedelta(seconds=65)


@pytest.fixture
def world(dynamodb: Any, clock: VirtualClock) -> tuple[Inbox, Envelope, VirtualClock, Any]:
    create_pk_sk_table(dynamodb, "inbox")
    envelope = EventStore(EVENTS_TABLE, client=dynamodb).emit("order.created", {"n": 1}, tenant="acme", actor="t")
    return Inbox("inbox", client=dynamodb, max_attempts=5, clock=clock), envelope, clock, dynamodb


def test_two_workers_racing_for_one_claim_exactly_one_wins(world: tuple[Inbox, Envelope, VirtualClock, Any]) -> None:
    racing, envelope, _, _ = world
    start = threading.Barrier(8)
    outcomes: list[ClaimOutcome] = []

    def worker() -> None:
        start.wait()
        outcomes.append(racing.claim(envelope, "shipping.book", LEASE).outcome)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert outcomes.count(ClaimOutcome.CLAIMED) == 1
    assert outcomes.count(ClaimOutcome.IN_PROGRESS) == 7


def test_a_stale_owner_cannot_complete_release_or_kill_the_new_owners_claim(
    world: tuple[Inbox, Envelope, VirtualClock, Any],
) -> None:
    inbox, envelope, clock, _ = world
    stale = inbox.claim(envelope, "shipping.book", LEASE).claim
    assert stale is not None
    assert inbox.claim(envelope, "shipping.book", LEASE).outcome is ClaimOutcome.IN_PROGRESS, "live lease holds"

    clock.advance(LEASE + timedelta(seconds=1))
    fresh = inbox.claim(envelope, "shipping.book", LEASE).claim
    assert fresh is not None, "an expired lease is taken over"
    assert (fresh.attempts, fresh.owner != stale.owner) == (2, True)

    with pytest.raises(LeaseLostError):
        inbox.mark_completed(stale)
    with pytest.raises(LeaseLostError):
        inbox.release(stale, "late failure")
    with pytest.raises(LeaseLostError):
        inbox.mark_dead(stale, envelope, "late", "RuntimeError", DeadReason.TERMINAL, 1)

    row = inbox.get_claim(envelope.id, "shipping.book")
    assert row is not None
    assert (row["status"]["S"], row["owner"]["S"]) == ("PENDING", fresh.owner), "the new owner's row is untouched"
    inbox.mark_completed(fresh)
    assert inbox.claim(envelope, "shipping.book", LEASE).outcome is ClaimOutcome.ALREADY_COMPLETED


def test_a_released_claim_is_claimable_at_once_and_counts_attempts(
    world: tuple[Inbox, Envelope, VirtualClock, Any],
) -> None:
    inbox, envelope, _, _ = world
    first = inbox.claim(envelope, "shipping.book", LEASE).claim
    assert first is not None
    inbox.release(first, "503")

    second = inbox.claim(envelope, "shipping.book", LEASE).claim

    assert second is not None
    assert second.attempts == 2
    row = inbox.get_claim(envelope.id, "shipping.book")
    assert row is not None
    assert row["last_error"]["S"] == "503"


def test_a_dead_claim_with_attempts_left_is_claimable_and_a_terminal_one_is_not(
    world: tuple[Inbox, Envelope, VirtualClock, Any],
) -> None:
    inbox, envelope, _, _ = world
    claim = inbox.claim(envelope, "a.sub", LEASE).claim
    assert claim is not None
    inbox.mark_dead(claim, envelope, "exhausted on the last receive", "TimeoutError", DeadReason.EXHAUSTED, 5)
    assert inbox.claim(envelope, "a.sub", LEASE).outcome is ClaimOutcome.CLAIMED, "attempts 1 < 5"

    terminal = inbox.claim(envelope, "b.sub", LEASE).claim
    assert terminal is not None
    inbox.mark_dead(terminal, envelope, "bad address", "TerminalError", DeadReason.TERMINAL, 1)
    assert inbox.claim(envelope, "b.sub", LEASE).outcome is ClaimOutcome.DEAD_EXHAUSTED


def test_a_completed_row_past_its_retention_counts_as_absent_before_ttl_deletes_it(
    world: tuple[Inbox, Envelope, VirtualClock, Any],
) -> None:
    inbox, envelope, clock, _ = world
    claim = inbox.claim(envelope, "shipping.book", LEASE).claim
    assert claim is not None
    inbox.mark_completed(claim)
    clock.advance(inbox.retention - timedelta(minutes=1))
    assert inbox.claim(envelope, "shipping.book", LEASE).outcome is ClaimOutcome.ALREADY_COMPLETED

    clock.advance(timedelta(minutes=2))

    assert inbox.claim(envelope, "shipping.book", LEASE).outcome is ClaimOutcome.CLAIMED


def test_the_same_event_id_with_other_content_is_a_conflict_whatever_the_state(
    world: tuple[Inbox, Envelope, VirtualClock, Any],
) -> None:
    inbox, envelope, _, _ = world
    claim = inbox.claim(envelope, "shipping.book", LEASE).claim
    assert claim is not None
    other = envelope.model_copy(update={"payload": {"n": 2}})

    assert inbox.claim(other, "shipping.book", LEASE).outcome is ClaimOutcome.CONFLICT
    inbox.mark_completed(claim)
    assert inbox.claim(other, "shipping.book", LEASE).outcome is ClaimOutcome.CONFLICT


def test_the_lease_covers_the_whole_invocation_with_a_floor_at_the_deadline() -> None:
    from outbox.consumer import LeasePolicy

    policy = LeasePolicy(floor=timedelta(seconds=5), margin=timedelta(seconds=5))
    assert policy.lease_for(60_000) == timedelta(seconds=65)
    assert policy.lease_for(0) == timedelta(seconds=10), "remaining time reads 0 near the deadline"


def test_completing_a_claim_that_took_over_a_dead_row_resolves_its_dead_letter(
    world: tuple[Inbox, Envelope, VirtualClock, Any],
) -> None:
    """Found by simulation seed 39: done work must not stay an open dead letter (a replay would redo it)."""
    inbox, envelope, _, dynamodb = world
    claim = inbox.claim(envelope, "shipping.book", LEASE).claim
    assert claim is not None
    inbox.mark_dead(claim, envelope, "exhausted", "TimeoutError", DeadReason.EXHAUSTED, 5)
    again = inbox.claim(envelope, "shipping.book", LEASE).claim
    assert again is not None
    assert again.open_dead_letter == f"{envelope.id}#shipping.book"

    inbox.mark_completed(again)

    letter = dynamodb.get_item(
        TableName="inbox",
        Key={"pk": {"S": "TENANT#acme#DEAD"}, "sk": {"S": f"{envelope.id}#shipping.book"}},
    )["Item"]
    assert letter["resolved"]["S"].startswith("completed at")
    assert inbox.get_claim(envelope.id, "shipping.book")["status"]["S"] == "COMPLETED"  # type: ignore[index]


def test_a_fresh_claim_has_no_dead_letter_to_resolve(world: tuple[Inbox, Envelope, VirtualClock, Any]) -> None:
    inbox, envelope, _, _ = world
    claim = inbox.claim(envelope, "shipping.book", LEASE).claim
    assert claim is not None
    assert (claim.open_dead_letter, claim.attempts) == (None, 1)
    assert len(inbox.completion_writes(claim)) == 1


def test_the_open_dead_letter_survives_a_release_and_a_take_over_before_the_completion(
    world: tuple[Inbox, Envelope, VirtualClock, Any],
) -> None:
    """Found by simulation seed 53: dead, taken over, released after a retryable error, then completed."""
    inbox, envelope, _, dynamodb = world
    first = inbox.claim(envelope, "shipping.book", LEASE).claim
    assert first is not None
    inbox.mark_dead(first, envelope, "exhausted", "TimeoutError", DeadReason.EXHAUSTED, 5)
    second = inbox.claim(envelope, "shipping.book", LEASE).claim
    assert second is not None
    inbox.release(second, "503")
    third = inbox.claim(envelope, "shipping.book", LEASE).claim
    assert third is not None

    inbox.mark_completed(third)

    letter = dynamodb.get_item(
        TableName="inbox",
        Key={"pk": {"S": "TENANT#acme#DEAD"}, "sk": {"S": f"{envelope.id}#shipping.book"}},
    )["Item"]
    assert letter["resolved"]["S"].startswith("completed at")
    assert "open_dead_letter" not in inbox.get_claim(envelope.id, "shipping.book")  # type: ignore[operator]
