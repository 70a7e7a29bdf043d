"""DynamoDB-only subscriptions (``effects="dynamodb"``): no lease, one request per (event, subscription).

The handler runs first; its writes then commit with a COMPLETED marker conditioned on the pair having no
inbox row, in one transaction. Each test is one promise of that path, on real SQS FIFO messages and moto:
one request on the happy path, a duplicate skipped by the marker's condition, a conflicting payload told
apart by its digest, a crash anywhere before the commit harmless, failures counted and dead-lettered as on
the lease path, and the lease path for every delivery with history.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest

from outbox import Effects, FollowUp, HandlerResult, Lane, OutboxValidationError, TerminalError, writes
from outbox.inbox import REPLAYING
from outbox.local import faults
from outbox.local.faults import FaultCount
from outbox.subscriptions import Delivery, Subscription, SubscriptionRegistry
from tests.functional.conftest import ORDERS_TABLE
from tests.functional.inbox_harness import MAX_ATTEMPTS, Harness, HarnessFactory, Recorder

NAME = "sales.project"


class Projection:
    """A DynamoDB-only handler: ``ADD applied :one`` on a row per event, so a doubled effect reads 2."""

    def __init__(self) -> None:
        self.runs: Counter[str] = Counter()
        self.fail: Callable[[Delivery], None] = lambda _delivery: None
        self.writes_per_run = 1
        self.follow_up = False

    def handler(self, delivery: Delivery) -> HandlerResult:
        self.runs[delivery.envelope.id] += 1
        self.fail(delivery)
        rows = [
            writes.update(
                ORDERS_TABLE,
                {"pk": f"PROJECTION#{delivery.envelope.id}", "sk": str(index)},
                "ADD applied :one",
                values={":one": 1},
            )
            for index in range(self.writes_per_run)
        ]
        follow_up = FollowUp("order.projected", {"n": 1}) if self.follow_up else None
        return HandlerResult(writes=rows, follow_up=follow_up)

    def applied(self, h: Harness, event_id: str, index: int = 0) -> int:
        item = h.dynamodb.get_item(
            TableName=ORDERS_TABLE, Key={"pk": {"S": f"PROJECTION#{event_id}"}, "sk": {"S": str(index)}}
        ).get("Item")
        return int(item["applied"]["N"]) if item else 0


@pytest.fixture
def projection() -> Projection:
    return Projection()


@pytest.fixture
def h(make_harness: HarnessFactory, projection: Projection) -> Harness:
    def subscriptions(_recorder: Recorder) -> list[Subscription]:
        return [Subscription(NAME, "order.created", Lane.DURABLE, projection.handler, effects=Effects.DYNAMODB)]

    return make_harness(subscriptions)


@contextmanager
def counted_requests(h: Harness) -> Iterator[Counter[str]]:
    """The DynamoDB requests the harness's client sends, by operation."""
    counts: Counter[str] = Counter()

    def count(model: Any, **_kwargs: Any) -> None:
        counts[model.name] += 1

    h.dynamodb.meta.events.register("before-call.dynamodb", count, unique_id="direct-completion-count")
    try:
        yield counts
    finally:
        h.dynamodb.meta.events.unregister("before-call.dynamodb", unique_id="direct-completion-count")


def test_the_happy_path_is_one_transaction_per_pair_besides_the_log_check(h: Harness, projection: Projection) -> None:
    event = h.emit()

    with counted_requests(h) as requests:
        h.esm.drain()

    # one BatchGetItem per batch (the check against the log), one TransactWriteItems for the pair: no claim
    assert requests == Counter({"BatchGetItem": 1, "TransactWriteItems": 1})
    assert (projection.runs[event.id], projection.applied(h, event.id)) == (1, 1)
    record = h.inbox.read_claim(event.id, NAME)
    assert record is not None
    assert (record.status, record.attempts, record.owner) == ("COMPLETED", 1, None)
    assert record.expires_at is not None  # forgotten after the retention, like any completion


def test_a_handler_that_returns_no_writes_costs_one_put_of_the_marker(h: Harness, projection: Projection) -> None:
    projection.writes_per_run = 0
    event = h.emit()

    with counted_requests(h) as requests:
        h.esm.drain()

    assert requests == Counter({"BatchGetItem": 1, "PutItem": 1})
    assert h.claim_status(NAME, event) == "COMPLETED"


def test_the_same_event_delivered_twice_applies_once_and_the_second_is_skipped_by_the_marker(
    h: Harness, projection: Projection
) -> None:
    event = h.emit()
    h.esm.drain()
    h.publish(event, dedup_id=f"{event.id}-again")  # a copy after the deduplication window, first receive

    with counted_requests(h) as requests:
        h.esm.drain()

    assert projection.runs[event.id] == 2  # a DynamoDB-only handler may run twice: that is harmless
    assert projection.applied(h, event.id) == 1
    assert requests == Counter({"BatchGetItem": 1, "TransactWriteItems": 1})  # refused by the condition, no more
    assert h.dead_letters() == []


def test_a_conflicting_payload_under_a_completed_pair_is_a_conflict_dead_letter(
    h: Harness, projection: Projection
) -> None:
    event = h.emit()
    h.esm.drain()
    # The log's row changes after the delivery (a repair), and the new content is relayed again
    altered = event.model_copy(update={"payload": {"n": 2}})
    altered = altered.model_copy(update={"hash": altered.computed_hash()})
    h.dynamodb.put_item(TableName="events", Item=altered.to_item())
    h.publish(altered, dedup_id=f"{event.id}-altered")

    h.esm.drain()

    assert projection.applied(h, event.id) == 1
    [letter] = h.dead_letters()
    assert (letter["reason"]["S"], letter["error_type"]["S"]) == ("conflict", "ConflictingPayload")


@pytest.mark.parametrize("crash", [faults.crash_before_completion, faults.crash_after_completion])
def test_a_crash_before_or_after_the_commit_leaves_one_effect(
    h: Harness, projection: Projection, crash: Callable[..., Any]
) -> None:
    event = h.emit()

    with crash(times=1) as fired:
        results = h.esm.drain()

    assert fired.fired == 1
    assert any(result.crashed is not None for result in results)
    assert projection.applied(h, event.id) == 1
    assert h.claim_status(NAME, event) == "COMPLETED"
    assert h.dead_letters() == []


def test_an_answer_lost_after_the_commit_is_one_effect(h: Harness, projection: Projection) -> None:
    event = h.emit()

    lost = FaultCount(1)
    with faults.lose_answers_after_commit(lost, operations=("TransactWriteItems",)):
        h.esm.drain()

    assert lost.fired == 1
    assert projection.applied(h, event.id) == 1
    assert h.claim_status(NAME, event) == "COMPLETED"
    assert h.dead_letters() == []


def test_an_answer_lost_and_resent_by_the_sdk_is_one_effect(h: Harness, projection: Projection) -> None:
    event = h.emit()

    lost = FaultCount(1)
    with faults.lose_answers_after_commit(lost, operations=("TransactWriteItems",), resent=lambda _subject: True):
        h.esm.drain()

    assert lost.fired == 1
    assert projection.applied(h, event.id) == 1


def test_a_commit_refused_by_a_row_runs_the_lease_path_only_if_a_second_run_fits_before_the_deadline(
    h: Harness, projection: Projection
) -> None:
    event = h.emit()

    def slow_beside_a_crashed_duplicate(delivery: Delivery) -> None:
        if projection.runs[event.id] == 1:
            # A duplicate of the message, received by another worker meanwhile, claimed the pair and died.
            h.inbox.claim(event, NAME, lease=timedelta(seconds=5))
        h.clock.advance(40)  # most of the invocation's 60 s; the dead worker's lease runs out meanwhile

    projection.fail = slow_beside_a_crashed_duplicate
    results = h.esm.drain()

    # The refused commit left too little time for the take-over's run: the message came back instead of a run
    # the deadline would have cut off, and the next invocation ran it under a lease, once.
    assert all(result.crashed is None for result in results), "no run was started past what the time allowed"
    assert projection.runs[event.id] == 2
    assert projection.applied(h, event.id) == 1
    assert h.claim_status(NAME, event) == "COMPLETED"
    assert h.dead_letters() == []


def test_a_failure_counts_its_attempt_and_the_retry_takes_the_lease_path(h: Harness, projection: Projection) -> None:
    failures = {"left": 1}

    def fail_once(_delivery: Delivery) -> None:
        if failures["left"]:
            failures["left"] -= 1
            raise ConnectionError("503 from the projection's read")

    projection.fail = fail_once
    event = h.emit()

    h.esm.drain()

    assert (projection.runs[event.id], projection.applied(h, event.id)) == (2, 1)
    record = h.inbox.read_claim(event.id, NAME)
    assert record is not None
    assert (record.status, record.attempts) == ("COMPLETED", 2)
    assert record.owner is not None  # the second attempt ran under a lease


def test_a_terminal_error_is_dead_at_once_with_one_attempt(h: Harness, projection: Projection) -> None:
    def refuse(_delivery: Delivery) -> None:
        raise TerminalError("the order is not projectable")

    projection.fail = refuse
    event = h.emit()

    h.esm.drain()

    assert projection.runs[event.id] == 1
    [letter] = h.dead_letters()
    assert (letter["reason"]["S"], letter["attempts"]["N"]) == ("terminal", "1")
    assert h.claim_status(NAME, event) == "DEAD"
    assert h.queue_depth(h.queue_url) == 0


def test_a_handler_failing_every_time_is_dead_after_its_attempts(h: Harness, projection: Projection) -> None:
    def always(_delivery: Delivery) -> None:
        raise ConnectionError("503")

    projection.fail = always
    event = h.emit()

    h.esm.drain()

    assert projection.runs[event.id] == MAX_ATTEMPTS
    [letter] = h.dead_letters()
    assert (letter["reason"]["S"], letter["attempts"]["N"]) == ("exhausted", str(MAX_ATTEMPTS))
    assert projection.applied(h, event.id) == 0


def test_a_failed_condition_of_the_handler_s_own_write_is_retried_and_commits_nothing(
    h: Harness, projection: Projection
) -> None:
    guard = {"pk": {"S": "GUARD"}, "sk": {"S": "GUARD"}}
    conditions = {"left": 1}
    original = projection.handler

    def guarded(delivery: Delivery) -> HandlerResult:
        result = original(delivery)
        if not conditions["left"]:
            return result
        conditions["left"] -= 1
        blocked = writes.put(ORDERS_TABLE, {"pk": "GUARD", "sk": "GUARD"}, condition="attribute_not_exists(pk)")
        return HandlerResult(writes=[*result.writes, blocked])

    h.dynamodb.put_item(TableName=ORDERS_TABLE, Item=guard)
    h.consumer.registry = SubscriptionRegistry.of(
        [Subscription(NAME, "order.created", Lane.DURABLE, guarded, effects=Effects.DYNAMODB)]
    )
    event = h.emit()

    h.esm.drain()

    assert projection.applied(h, event.id) == 1  # the first commit was cancelled whole, the retry applied
    record = h.inbox.read_claim(event.id, NAME)
    assert record is not None
    assert (record.status, record.attempts) == ("COMPLETED", 2)


def test_too_many_writes_are_a_terminal_dead_letter(h: Harness, projection: Projection) -> None:
    projection.writes_per_run = 100  # with the marker, one more than a transaction holds
    event = h.emit()

    h.esm.drain()

    [letter] = h.dead_letters()
    assert (letter["reason"]["S"], letter["error_type"]["S"]) == ("terminal", "CompletionTooLargeError")
    assert projection.applied(h, event.id) == 0


def test_a_follow_up_commits_with_the_marker_once(h: Harness, projection: Projection) -> None:
    projection.follow_up = True
    event = h.emit()
    h.esm.drain()
    h.publish(event, dedup_id=f"{event.id}-again")

    h.esm.drain()

    follow_ups = [e for e in h.store.events("acme") if e.type == "order.projected"]
    assert [e.causation_id for e in follow_ups] == [event.id]
    assert projection.applied(h, event.id) == 1
    assert h.claim_status(NAME, event) == "COMPLETED"


def test_a_replayed_pair_runs_under_a_lease_and_resolves_its_dead_letter(h: Harness, projection: Projection) -> None:
    def refuse(_delivery: Delivery) -> None:
        raise TerminalError("not yet")

    projection.fail = refuse
    event = h.emit()
    h.esm.drain()
    projection.fail = lambda _delivery: None
    h.inbox.client.update_item(  # what an operator's replay does to the claim row
        TableName="inbox",
        Key={"pk": {"S": f"CLAIM#{event.id}"}, "sk": {"S": NAME}},
        UpdateExpression="SET #status = :replaying, open_dead_letter = :letter",
        ExpressionAttributeNames={"#status": "status"},
        ExpressionAttributeValues={
            ":replaying": {"S": REPLAYING},
            ":letter": {"S": h.dead_letters()[0]["sk"]["S"]},
        },
    )
    h.publish(event, dedup_id=f"{event.id}-replay")

    h.esm.drain()

    assert projection.applied(h, event.id) == 1
    assert h.claim_status(NAME, event) == "COMPLETED"
    assert "resolved" in h.dead_letters()[0]


def test_effects_dynamodb_is_refused_on_any_lane_but_durable() -> None:
    for lane in (Lane.INLINE, Lane.LOCAL, Lane.BEST_EFFORT):
        subscription = Subscription("sales.project", "order.created", lane, lambda _d: None, effects=Effects.DYNAMODB)
        with pytest.raises(OutboxValidationError, match="only DURABLE subscriptions"):
            SubscriptionRegistry.of([subscription])


def test_effects_is_checked_when_the_subscription_is_declared() -> None:
    with pytest.raises(OutboxValidationError, match="'dynamo' is not one of 'external', 'dynamodb'"):
        Subscription("sales.project", "order.created", Lane.DURABLE, lambda _d: None, effects="dynamo")  # type: ignore[arg-type]
    declared = Subscription("sales.project", "order.created", Lane.DURABLE, lambda _d: None, effects="dynamodb")  # type: ignore[arg-type]
    assert declared.effects is Effects.DYNAMODB


def test_a_copy_of_a_dead_pair_runs_nothing_into_the_log_and_stays_dead(h: Harness, projection: Projection) -> None:
    def refuse(_delivery: Delivery) -> None:
        raise TerminalError("not projectable")

    projection.fail = refuse
    event = h.emit()
    h.esm.drain()
    projection.fail = lambda _delivery: None  # the handler would succeed now: only a replay may run it
    h.publish(event, dedup_id=f"{event.id}-again")  # a copy on its first receive: the direct path

    h.esm.drain()

    assert projection.applied(h, event.id) == 0  # it may run (harmless by declaration), it commits nothing
    assert h.claim_status(NAME, event) == "DEAD"
    assert len(h.dead_letters()) == 1


def test_a_message_older_than_the_inbox_remembers_is_never_run_directly(h: Harness, projection: Projection) -> None:
    event = h.store.emit("order.created", {"n": 1}, tenant="acme", actor="test")
    h.clock.advance(h.inbox.retention + timedelta(days=1))  # the pair may have completed and been forgotten
    h.publish(event)

    h.esm.drain()

    assert projection.runs[event.id] == 0
    [letter] = h.dead_letters()
    assert letter["reason"]["S"] == "unverifiable"
