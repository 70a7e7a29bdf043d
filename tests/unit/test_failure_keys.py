"""What makes two dead letters one failure group: the subscription, the reason, the error type and where it
was raised; what varies per event inside an operator's message (ids, numbers) does not split a group, and a
group's id is the same in every listing."""

from __future__ import annotations

import re

from outbox.inbox import DeadLetter
from outbox.ops.groups import _grouped, failure_key


def letter(error: str, *, subscription: str = "shipping.book", tenant: str = "acme", seq: int = 1) -> DeadLetter:
    return DeadLetter(
        tenant=tenant,
        event_id=f"01JB8Z3Q4K5M6N7P8R9S0T1V{seq:02d}",
        event_seq=seq,
        event_type="payment.completed",
        subscription=subscription,
        reason="terminal",
        error=error,
        error_type=error.split(":")[0].split(" ")[0],
        attempts=1,
        dead_at=f"2026-12-04T10:00:{seq:02d}.000Z",
        resolved=None,
    )


def test_numbers_and_ids_in_a_message_do_not_split_a_failure() -> None:
    one = failure_key(letter("TerminalError: no capacity for parcel 4711 of order 01JB8Z3Q4K5M6N7P8R9S0T1V2W"))
    two = failure_key(letter("TerminalError: no capacity for parcel 12 of order 01JB8Z3Q4K5M6N7P8R9S0T1V3X"))
    assert one == two
    assert one.where == "TerminalError: no capacity for parcel # of order <event>"
    uuid = failure_key(letter("TerminalError: quote 123e4567-e89b-12d3-a456-426614174000 expired"))
    assert uuid.where == "TerminalError: quote <id> expired"


def test_where_it_was_raised_is_kept_to_the_line() -> None:
    here = failure_key(letter("ValueError at carrier.py:41 in book (text withheld: error_detail=full shows it)"))
    there = failure_key(letter("ValueError at carrier.py:57 in book (text withheld: error_detail=full shows it)"))
    assert here.where == "ValueError at carrier.py:41 in book (text withheld: error_detail=full shows it)"
    assert here.id != there.id


def test_the_same_failure_of_two_subscriptions_is_two_groups() -> None:
    error = "TerminalError: registry down"
    assert failure_key(letter(error, subscription="a")).id != failure_key(letter(error, subscription="b")).id


def test_a_group_s_id_is_a_stable_digest_of_what_defines_it() -> None:
    key = failure_key(letter("TerminalError: registry down"))
    assert re.fullmatch(r"g-[0-9a-f]{10}", key.id)
    assert key.id == failure_key(letter("TerminalError: registry down", tenant="other", seq=9)).id


def test_groups_count_across_tenants_largest_first_with_first_and_last_seen() -> None:
    rows = [letter("TerminalError: registry down", tenant=f"t{n % 3}", seq=n) for n in range(1, 8)]
    rows += [letter("TerminalError: mail refused", subscription="notify", seq=n) for n in range(1, 3)]

    big, small = _grouped(rows)

    assert (big.count, big.tenants, small.count) == (7, ["t0", "t1", "t2"], 2)
    assert (big.first_seen, big.last_seen) == ("2026-12-04T10:00:01.000Z", "2026-12-04T10:00:07.000Z")
    assert big.example.event_seq == 7, "the latest as the example"
