"""The inbox's typed readers: rows written by the real ``Inbox`` on moto read back as ``ClaimRecord`` and
``DeadLetter``, field by field."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from outbox import DeadReason, Envelope, EventStore, Inbox
from outbox.inbox import ClaimRecord, DeadLetter, envelope_digest, reconcile_row
from outbox.keys import dead_letter_key
from outbox.local.clock import VirtualClock
from outbox.log.envelope import format_timestamp
from tests.functional.conftest import EVENTS_TABLE, create_pk_sk_table

LEASE = timedelta(seconds=65)
RETENTION = timedelta(days=7)
INBOX_TABLE = "inbox"


@pytest.fixture
def inbox(dynamodb: Any, clock: VirtualClock) -> Inbox:
    create_pk_sk_table(dynamodb, INBOX_TABLE)
    return Inbox(INBOX_TABLE, client=dynamodb, max_attempts=5, retention=RETENTION, clock=clock)


@pytest.fixture
def store(dynamodb: Any) -> EventStore:
    return EventStore(EVENTS_TABLE, client=dynamodb, unchecked=True)


def emit(store: EventStore, tenant: str = "acme") -> Envelope:
    return store.emit("order.created", {"n": 1}, tenant=tenant, actor="t")


def test_a_claim_reads_back_as_the_claim_wrote_it(inbox: Inbox, store: EventStore, clock: VirtualClock) -> None:
    # Given an event claimed for one subscription
    envelope = emit(store)
    claim = inbox.claim(envelope, "shipping.book", LEASE).claim
    assert claim is not None

    # When the row is read back, then every field is the claim's
    now = format_timestamp(clock())
    assert inbox.read_claim(envelope.id, "shipping.book") == ClaimRecord(
        event_id=envelope.id,
        subscription="shipping.book",
        tenant="acme",
        status="PENDING",
        attempts=1,
        digest=envelope_digest(envelope),
        owner=claim.owner,
        lease_expires_at=clock() + LEASE,
        event_type="order.created",
        event_seq=envelope.seq,
        created_at=now,
        updated_at=now,
    )


def test_a_released_then_completed_claim_keeps_its_history(
    inbox: Inbox, store: EventStore, clock: VirtualClock
) -> None:
    # Given a claim released after an error, claimed again a minute later and completed
    envelope = emit(store)
    first = inbox.claim(envelope, "shipping.book", LEASE).claim
    assert first is not None
    inbox.release(first, "503 from the carrier")
    released = inbox.read_claim(envelope.id, "shipping.book")
    clock.advance(60)
    second = inbox.claim(envelope, "shipping.book", LEASE).claim
    assert second is not None
    inbox.mark_completed(second)

    # Then the released row's lease had ended at once; the completed one has no lease and a TTL
    assert released is not None
    assert (released.lease_expires_at, released.last_error) == (datetime.fromtimestamp(0, UTC), "503 from the carrier")
    record = inbox.read_claim(envelope.id, "shipping.book")
    assert record is not None
    assert (record.status, record.attempts, record.owner) == ("COMPLETED", 2, second.owner)
    assert record.lease_expires_at is None
    assert record.completed_at == format_timestamp(clock())
    assert record.expires_at == clock() + RETENTION
    assert record.created_at == format_timestamp(clock() - timedelta(seconds=60)), "kept from the first claim"


def test_a_dead_claim_and_its_dead_letter_read_back_typed(inbox: Inbox, store: EventStore, clock: VirtualClock) -> None:
    # Given a claim marked dead by a terminal error
    envelope = emit(store)
    claim = inbox.claim(envelope, "shipping.book", LEASE).claim
    assert claim is not None
    inbox.mark_dead(claim, envelope, "no such address", "TerminalError", DeadReason.TERMINAL, receive_count=2)

    # Then the claim says DEAD and why, and the dead letter carries the event and the error
    record = inbox.read_claim(envelope.id, "shipping.book")
    assert record is not None
    assert (record.status, record.dead_reason, record.last_error) == ("DEAD", "terminal", "no such address")
    assert (record.dead_at, record.lease_expires_at) == (format_timestamp(clock()), None)
    letter = DeadLetter(
        tenant="acme",
        event_id=envelope.id,
        event_seq=envelope.seq,
        event_type="order.created",
        subscription="shipping.book",
        reason="terminal",
        error="no such address",
        error_type="TerminalError",
        attempts=1,
        dead_at=format_timestamp(clock()),
        resolved=None,
    )
    assert inbox.dead_letters("acme") == [letter]
    assert inbox.dead_letter("acme", envelope.id, "shipping.book") == letter
    assert inbox.dead_letter("acme", envelope.id, "billing.invoice") is None


def test_a_row_no_worker_claimed_reads_back_without_owner_or_lease(
    inbox: Inbox, store: EventStore, clock: VirtualClock
) -> None:
    # Given the REPLAYING row a reconcile writes where there was no claim
    envelope = emit(store)
    inbox.client.put_item(TableName=INBOX_TABLE, Item=reconcile_row(envelope, "shipping.book", clock()))

    # Then it reads back as REPLAYING, unowned, with no attempt made
    record = inbox.read_claim(envelope.id, "shipping.book")
    assert record is not None
    assert (record.status, record.owner, record.lease_expires_at, record.attempts) == ("REPLAYING", None, None, 0)
    assert record.replayed_at == format_timestamp(clock())
    assert (record.tenant, record.event_seq, record.digest) == ("acme", envelope.seq, envelope_digest(envelope))


def test_the_claims_of_an_event_are_by_subscription(inbox: Inbox, store: EventStore) -> None:
    # Given an event claimed by two subscriptions, and another event with no claim
    envelope, unclaimed = emit(store), emit(store)
    for name in ("shipping.book", "billing.invoice"):
        inbox.claim(envelope, name, LEASE)

    # Then its claims are found by name, the other event has none, and a missing pair reads None
    claims = inbox.claims_of(envelope.id)
    assert sorted(claims) == ["billing.invoice", "shipping.book"]
    assert all(record.event_id == envelope.id and record.subscription == name for name, record in claims.items())
    assert inbox.claims_of(unclaimed.id) == {}
    assert inbox.read_claim(unclaimed.id, "shipping.book") is None


def dead(inbox: Inbox, envelope: Envelope, subscription: str) -> None:
    claim = inbox.claim(envelope, subscription, LEASE).claim
    assert claim is not None
    inbox.mark_dead(claim, envelope, "boom", "RuntimeError", DeadReason.EXHAUSTED, receive_count=1)


def test_dead_letters_are_selected_by_subscription_event_time_and_resolution(
    inbox: Inbox, store: EventStore, clock: VirtualClock
) -> None:
    # Given three dead pairs an hour apart, one of them resolved, a conflict, and another tenant's
    first, second = emit(store), emit(store)
    start = clock()
    dead(inbox, first, "shipping.book")
    clock.advance(timedelta(hours=1))
    dead(inbox, first, "billing.invoice")
    clock.advance(timedelta(hours=1))
    dead(inbox, second, "shipping.book")
    inbox.client.update_item(
        TableName=INBOX_TABLE,
        Key=dead_letter_key("acme", second.id, "shipping.book"),
        UpdateExpression="SET resolved = :how",
        ExpressionAttributeValues={":how": {"S": "replayed at then"}},
    )
    other_content = first.model_copy(update={"payload": {"n": 2}})
    inbox.record_conflict(other_content, "shipping.book", {"digest": {"S": envelope_digest(first)}}, 1)
    dead(inbox, emit(store, tenant="globex"), "shipping.book")

    def pairs(letters: list[DeadLetter]) -> list[tuple[str, str, str]]:
        return [(letter.event_id, letter.subscription, letter.reason) for letter in letters]

    # Then each filter selects its own, open letters only unless asked
    assert sorted(pairs(inbox.dead_letters("acme"))) == [
        (first.id, "billing.invoice", "exhausted"),
        (first.id, "shipping.book", "conflict"),
        (first.id, "shipping.book", "exhausted"),
    ]
    assert pairs(inbox.dead_letters("acme", subscription="billing.invoice")) == [
        (first.id, "billing.invoice", "exhausted")
    ]
    assert pairs(inbox.dead_letters("acme", event_id=second.id, include_resolved=True)) == [
        (second.id, "shipping.book", "exhausted")
    ]
    assert inbox.dead_letters("acme", event_id=second.id) == []
    in_the_first_hour = inbox.dead_letters("acme", since=start, until=start + timedelta(minutes=59))
    assert pairs(in_the_first_hour) == [(first.id, "shipping.book", "exhausted")]
    [conflict] = [letter for letter in inbox.dead_letters("acme") if letter.reason == "conflict"]
    assert (conflict.attempts, conflict.error_type) == (None, "ConflictingPayload"), "a conflict was never run"
    assert pairs(inbox.dead_letters("globex"))[0][1:] == ("shipping.book", "exhausted")


def test_poison_pills_are_read_by_the_day_they_were_recorded(inbox: Inbox, clock: VirtualClock) -> None:
    # Given a poison pill recorded today
    inbox.record_poison("m-1", "<html>502</html>", "not an event", {})

    # Then today's pills hold it, as recorded, and tomorrow's are empty
    [pill] = inbox.poison_pills(clock())
    assert (pill.message_id, pill.body, pill.error, pill.body_truncated) == (
        "m-1",
        "<html>502</html>",
        "not an event",
        False,
    )
    assert inbox.poison_pills(clock() + timedelta(days=1)) == []
