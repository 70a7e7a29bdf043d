"""The claim state machine on its own: races, take-over, fencing, expiry, attempts."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest

from outbox import ClaimOutcome, DeadReason, Envelope, EventStore, Inbox, LeaseLostError
from outbox.inbox import envelope_digest
from outbox.local.clock import VirtualClock
from tests.functional.conftest import EVENTS_TABLE, create_pk_sk_table

LEASE = timedelta(seconds=65)


@pytest.fixture
def world(dynamodb: Any, clock: VirtualClock) -> tuple[Inbox, Envelope, VirtualClock, Any]:
    create_pk_sk_table(dynamodb, "inbox")
    envelope = EventStore(EVENTS_TABLE, client=dynamodb, unchecked=True).emit(
        "order.created", {"n": 1}, tenant="acme", actor="t"
    )
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

    row = inbox.read_claim(envelope.id, "shipping.book")
    assert row is not None
    assert (row.status, row.owner) == ("PENDING", fresh.owner), "the new owner's row is untouched"
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
    row = inbox.read_claim(envelope.id, "shipping.book")
    assert row is not None
    assert row.last_error == "503"


def test_a_dead_claim_is_final_for_the_consumer_whatever_its_reason(
    world: tuple[Inbox, Envelope, VirtualClock, Any],
) -> None:
    # Given one pair dead after its attempts and one dead on a terminal error
    inbox, envelope, _, _ = world
    for subscription, reason in (("a.sub", DeadReason.EXHAUSTED), ("b.sub", DeadReason.TERMINAL)):
        claim = inbox.claim(envelope, subscription, LEASE).claim
        assert claim is not None
        inbox.mark_dead(claim, envelope, "failed", "RuntimeError", reason, 1)

    # Then no delivery claims either again: only an operator's replay (which clears the row) reruns them
    assert inbox.claim(envelope, "a.sub", LEASE).outcome is ClaimOutcome.DEAD
    assert inbox.claim(envelope, "b.sub", LEASE).outcome is ClaimOutcome.DEAD


def test_a_completed_row_counts_as_completed_even_past_its_expiry_until_ttl_deletes_it(
    world: tuple[Inbox, Envelope, VirtualClock, Any],
) -> None:
    # Given a completed pair whose row has expired but not been swept
    inbox, envelope, clock, _ = world
    claim = inbox.claim(envelope, "shipping.book", LEASE).claim
    assert claim is not None
    inbox.mark_completed(claim)
    clock.advance(inbox.retention + timedelta(days=3))

    # Then the row is still evidence of the completion
    assert inbox.claim(envelope, "shipping.book", LEASE).outcome is ClaimOutcome.ALREADY_COMPLETED


def test_a_missing_row_is_not_claimed_for_a_message_older_than_the_inbox_remembers(
    world: tuple[Inbox, Envelope, VirtualClock, Any],
) -> None:
    # Given a message issued longer ago than the retention (its completion may have been forgotten)
    inbox, envelope, clock, _ = world
    issued_at = clock()
    clock.advance(inbox.retention)
    assert not inbox.can_vouch_for(issued_at)

    # When it is claimed without permission to create the row
    result = inbox.claim(envelope, "shipping.book", LEASE, may_create=False)

    # Then nothing is claimed, and the pair is recorded as unverifiable dead work, once
    assert result.outcome is ClaimOutcome.UNVERIFIABLE
    assert inbox.mark_unverifiable(envelope, "shipping.book", envelope_digest(envelope), 1)
    assert not inbox.mark_unverifiable(envelope, "shipping.book", envelope_digest(envelope), 1)
    row = inbox.read_claim(envelope.id, "shipping.book")
    assert row is not None
    assert (row.status, row.dead_reason) == ("DEAD", "unverifiable")


def test_a_claim_whose_answer_was_lost_is_recognised_as_ours_when_the_sdk_resends_it(
    world: tuple[Inbox, Envelope, VirtualClock, Any],
) -> None:
    # Given the claim's UpdateItem applies but its answer is lost, and the SDK sends it again
    inbox, envelope, _, dynamodb = world
    original = dynamodb.update_item

    def applied_then_resent(**request: Any) -> Any:
        original(**request)  # applied: the row is PENDING under our owner token
        return original(**request)  # the re-send fails its condition on our own row

    dynamodb.update_item = applied_then_resent
    try:
        result = inbox.claim(envelope, "shipping.book", LEASE)
    finally:
        dynamodb.update_item = original

    # Then the claim is ours, not "in progress elsewhere" (which would wait out a lease for nothing)
    assert result.outcome is ClaimOutcome.CLAIMED
    assert result.claim is not None
    assert result.claim.attempts == 1


def test_a_completion_whose_answer_was_lost_is_recognised_as_ours(
    world: tuple[Inbox, Envelope, VirtualClock, Any],
) -> None:
    # Given a completion with writes that commits, then answers with an error the SDK retries
    inbox, envelope, _, dynamodb = world
    claim = inbox.claim(envelope, "shipping.book", LEASE).claim
    assert claim is not None
    original = dynamodb.transact_write_items

    def applied_then_resent(**request: Any) -> Any:
        original(**request)
        return original(**request)

    dynamodb.transact_write_items = applied_then_resent
    write = {"Put": {"TableName": "inbox", "Item": {"pk": {"S": "PROJECTION#1"}, "sk": {"S": "x"}}}}
    try:
        inbox.mark_completed(claim, [write])  # no LeaseLostError: the completion that landed is ours
    finally:
        dynamodb.transact_write_items = original

    row = inbox.read_claim(envelope.id, "shipping.book")
    assert row is not None
    assert row.status == "COMPLETED"


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
    from outbox.delivery.consumer import LeasePolicy

    policy = LeasePolicy(floor=timedelta(seconds=5), margin=timedelta(seconds=5))
    assert policy.lease_for(60_000) == timedelta(seconds=65)
    assert policy.lease_for(0) == timedelta(seconds=10), "remaining time reads 0 near the deadline"


def test_a_take_over_learns_how_much_time_the_unfinished_attempt_had(
    world: tuple[Inbox, Envelope, VirtualClock, Any],
) -> None:
    """A container that timed out is replaced, and what it knew of the handler's time with it: the claim row
    remembers what the attempt started with until the attempt ends, so the next claim knows it never did."""
    inbox, envelope, clock, _ = world
    first = inbox.claim(envelope, "shipping.book", LEASE, budget_ms=18_300).claim
    assert first is not None
    assert first.unfinished_with_ms is None

    clock.advance(LEASE + timedelta(seconds=1))  # the deadline cut it off: no write ended the attempt
    second = inbox.claim(envelope, "shipping.book", LEASE, budget_ms=59_000).claim

    assert second is not None
    assert second.unfinished_with_ms == 18_300
    assert second.attempts == 2
    forgiven = inbox.forgive(second)
    assert forgiven.attempts == 1
    assert inbox.read_claim(envelope.id, "shipping.book").attempts == 1  # type: ignore[union-attr]

    inbox.release(forgiven, "503")  # this attempt ended
    third = inbox.claim(envelope, "shipping.book", LEASE, budget_ms=59_000).claim
    assert third is not None
    assert third.unfinished_with_ms is None


def test_a_claim_given_back_unrun_keeps_the_unfinished_time_for_the_next(
    world: tuple[Inbox, Envelope, VirtualClock, Any],
) -> None:
    inbox, envelope, clock, _ = world
    inbox.claim(envelope, "shipping.book", LEASE, budget_ms=18_300)
    clock.advance(LEASE + timedelta(seconds=1))
    waiting = inbox.claim(envelope, "shipping.book", LEASE, budget_ms=9_000).claim
    assert waiting is not None

    inbox.release(waiting, "not enough time left", 1, still_unfinished=waiting.unfinished_with_ms)
    again = inbox.claim(envelope, "shipping.book", LEASE, budget_ms=59_000).claim

    assert again is not None
    assert again.unfinished_with_ms == 18_300
    assert again.attempts == 2  # the unfinished one, and this one: the waiting claim's was given back
