"""Hashes, digests and the tenant's name in the engine's own conflict texts do not split a failure group; the
groups of ordinary handler failures keep the ids they had."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from outbox.inbox import DeadLetter
from outbox.ops.groups import _grouped, failure_key

EVENT_IDS = ("01JB8Z3Q4K5M6N7P8R9S0T1V2W", "01JB8Z3Q4K5M6N7P8R9S0T1V3X", "01JB8Z3Q4K5M6N7P8R9S0T1V4Y")
HASHES = (
    "7675ebb6ddafdf016ea49436419e0816093dc579ff54aa1182a2179e439a41d1",
    "21396296fb6f1893997eac20dd5da8dac37de1508af33eaed3b34b7735b95ca6",
    "f42766c744455ef25368949ce8f9f51d2be77b12995885c4d2f85a57ca2f4c2a",
)


def letter(
    error: str, *, tenant: str = "acme", seq: int = 1, reason: str = "terminal", error_type: str | None = None
) -> DeadLetter:
    return DeadLetter(
        tenant=tenant,
        event_id=EVENT_IDS[seq % len(EVENT_IDS)],
        event_seq=seq,
        event_type="payment.completed",
        subscription="shipping.book",
        reason=reason,
        error=error,
        error_type=error_type or error.split(":")[0].split(" ")[0],
        attempts=1,
        dead_at=f"2026-12-04T10:00:{seq:02d}.000Z",
        resolved=None,
    )


def refusal(tenant: str, seq: int) -> DeadLetter:
    """A refusal as the consumer writes it (outbox.delivery.consumer's _refuse, outbox.delivery.log_check's doubt)."""
    error = (
        f"event {EVENT_IDS[seq % 3]} was not run: the events table holds another event at seq {seq} of tenant "
        f"{tenant} (hash {HASHES[seq % 3]}): the message is not the log's"
    )
    return letter(error, tenant=tenant, seq=seq, reason="conflict", error_type="NotInEventLog")


def digest_conflict(tenant: str, seq: int) -> DeadLetter:
    """A claim's digest conflict as the inbox writes it (outbox.inbox.dead_work's record_conflict)."""
    error = (
        f"event {EVENT_IDS[seq % 3]} arrived with digest {HASHES[seq % 3]}, but shipping.book claimed it with "
        f"{HASHES[(seq + 1) % 3]}"
    )
    return letter(error, tenant=tenant, seq=seq, reason="conflict", error_type="ConflictingPayload")


# Short names that are words of the texts, a name of digits, and names that start alike.
TENANTS = ("acme", "at", "no", "42", "acme.eu")


@pytest.mark.parametrize("kind", [refusal, digest_conflict])
def test_one_conflict_across_tenants_and_events_is_one_group(kind: Callable[[str, int], DeadLetter]) -> None:
    rows = [kind(tenant, seq) for tenant in TENANTS for seq in range(1, 5)]

    [group] = _grouped(rows)

    assert (group.count, group.tenants) == (len(rows), sorted(TENANTS))
    assert "<hash>" in group.where


def test_a_refusal_names_its_tenant_and_hash_blanked_and_nothing_else() -> None:
    assert failure_key(refusal("at", 3)).where == (
        "event <event> was not run: the events table holds another event at seq # of tenant <tenant> "
        "(hash <hash>): the message is not the log's"
    )


def test_different_refusals_are_still_different_groups() -> None:
    none_there = [
        letter(
            f"event {EVENT_IDS[0]} was not run: the events table has no event at seq {seq} of tenant {tenant}: the "
            "message was not relayed from the log",
            tenant=tenant,
            seq=seq,
            reason="conflict",
            error_type="NotInEventLog",
        )
        for tenant in TENANTS
        for seq in (5, 6)
    ]
    another = [refusal(tenant, seq) for tenant in TENANTS for seq in (1, 2)]

    groups = _grouped([*none_there, *another, *(digest_conflict(tenant, 1) for tenant in TENANTS)])

    assert sorted((group.error_type, group.count) for group in groups) == [
        ("ConflictingPayload", len(TENANTS)),
        ("NotInEventLog", 2 * len(TENANTS)),
        ("NotInEventLog", 2 * len(TENANTS)),
    ]


def test_a_hash_in_a_handler_s_message_does_not_split_its_failure() -> None:
    one = failure_key(letter(f"TerminalError: payment {HASHES[0][:20]} declined"))
    two = failure_key(letter(f"TerminalError: payment {HASHES[1][:20]} declined", tenant="globex", seq=2))
    assert one == two
    assert one.where == "TerminalError: payment <hash> declined"
    other = failure_key(letter(f"TerminalError: refund {HASHES[0][:20]} declined"))
    assert other.id != one.id, "another failure with a hash in it is another group"


# Ids of ordinary handler failures as the code before hashes and tenants were blanked gave them (the same texts run
# through outbox.ops.groups.failure_key at e566ca7): a listing's ids, or a dry run's, stay valid across the change.
IDS_BEFORE = {
    "TerminalError: no capacity for parcel 4711 of order 01JB8Z3Q4K5M6N7P8R9S0T1V2W": "g-ed44c46451",
    "ValueError at carrier.py:41 in book (text withheld: error_detail=full shows it)": "g-4ee6ede698",
    "TerminalError: card 4000123412341234567 declined for tenant acme": "g-15e98acf40",
    "TerminalError: quote 123e4567-e89b-12d3-a456-426614174000 expired": "g-226376266d",
    "TerminalError: registry down": "g-e6d008d0df",
}


@pytest.mark.parametrize("error", sorted(IDS_BEFORE))
def test_an_ordinary_failure_keeps_its_group_id(error: str) -> None:
    assert failure_key(letter(error)).id == IDS_BEFORE[error]
