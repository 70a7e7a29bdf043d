"""An ordered DynamoDB-only subscription (``ordered=True, effects="dynamodb"``): the next pair in order, on its
first receive, runs with no claim, and its writes, its completion marker and the watermark commit in one
transaction. Each test is one promise of that path: one request per pair in order, out of order still deferred
with the predecessor read once, a watermark moved under the run refusing the commit (nothing written, the
lease path runs it once more), a duplicate skipped, a crash before the commit harmless, a failure counted as
on the lease path.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from botocore.exceptions import EndpointConnectionError

from outbox import Effects, HandlerResult, Lane, writes
from outbox.local import faults
from outbox.pairs.order import OrderBook
from outbox.subscriptions import Delivery, Subscription
from tests.functional.conftest import EVENTS_TABLE, ORDERS_TABLE
from tests.functional.inbox_harness import INBOX_TABLE, Harness, HarnessFactory, Recorder
from tests.functional.test_direct_completion import counted_requests

JOURNAL = "sales.journal"


class Journal:
    """A DynamoDB-only handler that must see its tenant's events in seq order: each run appends a line,
    conditioned on the journal's last seq being lower (as the example's journal is), and counts the line, so
    a doubled effect reads 2 and an out-of-order one fails its condition."""

    def __init__(self) -> None:
        self.runs: Counter[int] = Counter()
        self.before: Callable[[Delivery], None] = lambda _delivery: None

    def handler(self, delivery: Delivery) -> HandlerResult:
        seq = delivery.envelope.seq
        self.runs[seq] += 1
        self.before(delivery)
        journal = f"JOURNAL#{delivery.envelope.tenant}"
        return HandlerResult(
            writes=[
                writes.update(
                    ORDERS_TABLE,
                    {"pk": journal, "sk": "HEAD"},
                    "SET last_seq = :seq",
                    condition="attribute_not_exists(last_seq) OR last_seq < :seq",
                    values={":seq": seq},
                ),
                writes.update(ORDERS_TABLE, {"pk": journal, "sk": f"LINE#{seq:05d}"}, "ADD n :one", values={":one": 1}),
            ]
        )

    def lines(self, h: Harness, tenant: str = "acme") -> dict[int, int]:
        items = h.dynamodb.query(
            TableName=ORDERS_TABLE,
            KeyConditionExpression="pk = :pk AND begins_with(sk, :line)",
            ExpressionAttributeValues={":pk": {"S": f"JOURNAL#{tenant}"}, ":line": {"S": "LINE#"}},
        )["Items"]
        return {int(item["sk"]["S"][5:]): int(item["n"]["N"]) for item in items}


@pytest.fixture
def journal() -> Journal:
    return Journal()


@pytest.fixture
def h(make_harness: HarnessFactory, journal: Journal) -> Harness:
    def subscriptions(_recorder: Recorder) -> list[Subscription]:
        return [
            Subscription(
                JOURNAL, "order.created", Lane.DURABLE, journal.handler, effects=Effects.DYNAMODB, ordered=True
            )
        ]

    return make_harness(subscriptions)


def applied_seq(h: Harness, tenant: str = "acme") -> int:
    return OrderBook(INBOX_TABLE, EVENTS_TABLE, client=h.dynamodb, clock=h.clock).watermark(tenant, JOURNAL).applied_seq


def move_the_watermark_s_version(h: Harness) -> None:
    """What a deferral of a later event does to acme's watermark while a pair runs: its version, not its seq."""
    h.dynamodb.put_item(
        TableName=INBOX_TABLE,
        Item={
            "pk": {"S": f"TENANT#acme#ORDER#{JOURNAL}"},
            "sk": {"S": "WATERMARK"},
            "applied_seq": {"N": "0"},
            "version": {"N": "7"},
        },
    )


def test_pairs_in_order_cost_one_transaction_each_and_no_claim(h: Harness, journal: Journal) -> None:
    events = [h.emit() for _ in range(3)]

    with counted_requests(h) as requests:
        h.esm.drain()

    # One BatchGetItem (the log check and the watermark), one TransactWriteItems per pair: no claim, no read
    # of the watermark after the first, no predecessor query for events next in order.
    assert requests == Counter({"BatchGetItem": 1, "TransactWriteItems": 3})
    assert journal.lines(h) == {1: 1, 2: 1, 3: 1}
    assert applied_seq(h) == 3
    for event in events:
        record = h.inbox.read_claim(event.id, JOURNAL)
        assert record is not None
        assert (record.status, record.attempts, record.owner) == ("COMPLETED", 1, None)


def test_an_event_ahead_of_its_predecessor_is_deferred_with_one_look_at_the_log_then_applied_in_order(
    h: Harness, journal: Journal
) -> None:
    first, second, third = (h.store.emit("order.created", {"n": 1}, tenant="acme", actor="t") for _ in range(3))
    h.publish(first)
    h.esm.drain()
    h.publish(third)

    with counted_requests(h) as requests:
        h.esm.drain()

    assert requests["Query"] == 1, "the predecessor is looked up once, not again under the claim"
    assert h.claim_status(JOURNAL, third) == "DEFERRED"
    assert journal.runs[3] == 0
    h.publish(second)
    h.esm.drain()
    assert journal.lines(h) == {1: 1, 2: 1, 3: 1}
    assert applied_seq(h) == 3


def test_a_watermark_moved_under_the_run_refuses_the_commit_and_the_lease_path_applies_it_once(
    h: Harness, journal: Journal
) -> None:
    event = h.store.emit("order.created", {"n": 1}, tenant="acme", actor="t")

    def another_writer_moves_the_version(delivery: Delivery) -> None:
        if journal.runs[delivery.envelope.seq] == 1:
            move_the_watermark_s_version(h)

    journal.before = another_writer_moves_the_version
    h.publish(event)
    h.esm.drain()

    assert journal.runs[1] == 2, "the refused run wrote nothing; the lease path ran it again"
    assert journal.lines(h) == {1: 1}
    assert applied_seq(h) == 1
    record = h.inbox.read_claim(event.id, JOURNAL)
    assert record is not None
    assert record.status == "COMPLETED"


def test_the_same_event_delivered_twice_is_applied_once_and_the_duplicate_skipped(h: Harness, journal: Journal) -> None:
    event = h.emit()
    h.esm.drain()
    h.publish(event, dedup_id=f"{event.id}-again")
    h.esm.drain()

    assert journal.runs[1] == 1, "the watermark says applied: the duplicate runs nothing"
    assert journal.lines(h) == {1: 1}
    assert h.claim_status(JOURNAL, event) == "COMPLETED"


def test_a_crash_before_the_commit_leaves_nothing_and_the_redelivery_applies_it_once(
    h: Harness, journal: Journal
) -> None:
    event = h.emit()
    with faults.crash_before_completion(times=1):
        h.esm.drain()

    assert journal.runs[1] == 2, "run directly, crashed before its commit, run again under a lease"
    assert journal.lines(h) == {1: 1}
    assert applied_seq(h) == 1
    assert h.claim_status(JOURNAL, event) == "COMPLETED"


def test_a_failed_direct_run_is_claimed_and_counted_and_its_successor_waits(h: Harness, journal: Journal) -> None:
    first = h.store.emit("order.created", {"n": 1}, tenant="acme", actor="t")
    second = h.store.emit("order.created", {"n": 1}, tenant="acme", actor="t")

    def fail_first_once(delivery: Delivery) -> None:
        if delivery.envelope.seq == 1 and journal.runs[1] == 1:
            raise RuntimeError("carrier down")

    journal.before = fail_first_once
    h.publish(first)
    h.esm.poll()
    record = h.inbox.read_claim(first.id, JOURNAL)
    assert record is not None
    assert (record.status, record.attempts) == ("PENDING", 1), "the failed run's attempt is counted"
    assert "RuntimeError" in (record.last_error or "")

    h.publish(second)
    h.esm.drain()
    assert journal.lines(h) == {1: 1, 2: 1}
    assert applied_seq(h) == 2


def test_a_direct_completion_whose_answer_was_lost_wakes_the_event_deferred_behind_it(
    h: Harness, journal: Journal, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = h.store.emit("order.created", {"n": 1}, tenant="acme", actor="t")
    second = h.store.emit("order.created", {"n": 1}, tenant="acme", actor="t")
    h.publish(second)
    h.esm.drain()
    assert h.claim_status(JOURNAL, second) == "DEFERRED"

    commit, lost = h.dynamodb.transact_write_items, {"left": 1}

    def answer_lost(**request: Any) -> Any:
        response = commit(**request)
        moves_watermark = any(
            item.get("Update", {}).get("Key", {}).get("sk", {}).get("S") == "WATERMARK"
            for item in request["TransactItems"]
        )
        if moves_watermark and lost["left"]:
            lost["left"] -= 1
            raise EndpointConnectionError(endpoint_url="https://dynamodb.us-east-1.amazonaws.com")
        return response

    monkeypatch.setattr(h.dynamodb, "transact_write_items", answer_lost)
    h.publish(first)
    h.esm.drain()

    # The commit landed and its answer was lost: a fresh read of the watermark finds seq 1 applied, and the
    # event deferred behind it is woken, not left waiting for a completion that already happened.
    assert lost["left"] == 0
    assert journal.runs[1] == 1
    assert journal.lines(h) == {1: 1, 2: 1}
    assert applied_seq(h) == 2
    assert h.claim_status(JOURNAL, second) == "COMPLETED"


def test_a_refused_direct_commit_runs_again_only_if_a_second_run_fits_before_the_deadline(
    h: Harness, journal: Journal
) -> None:
    event = h.store.emit("order.created", {"n": 1}, tenant="acme", actor="t")

    def slow_and_raced(delivery: Delivery) -> None:
        h.clock.advance(40)  # most of the invocation's 60 s
        if journal.runs[delivery.envelope.seq] == 1:  # a later event's deferral moves the version meanwhile
            move_the_watermark_s_version(h)

    journal.before = slow_and_raced
    h.publish(event)
    results = h.esm.drain()

    # The refused run took the time a second one needs: the message came back instead of a run the deadline
    # would have cut off, and the next invocation ran it under a lease.
    assert all(result.crashed is None for result in results), "no run was started past what the time allowed"
    assert journal.runs[1] == 2
    assert journal.lines(h) == {1: 1}
    assert applied_seq(h) == 1
