"""Ordered subscriptions (outbox.pairs.order): a tenant's events applied strictly in seq order, each once, whatever
order the queue delivers them in; waiting spends no attempt; a dead predecessor blocks only its own
(tenant, subscription) until an operator replays or skips it."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from botocore.exceptions import ClientError

from outbox import Envelope, TerminalError, keys
from outbox.exceptions import OperationRefusedError, OutboxValidationError
from outbox.inbox import DEFERRED, REPLAYING
from outbox.messages import relay_body, repair_attributes
from outbox.ops.context import OperatorContext
from outbox.ops.order_status import UNREADABLE, blocked
from outbox.ops.ordering import skip
from outbox.ops.reconcile import reconcile
from outbox.pairs.order import OrderBook
from outbox.subscriptions import Delivery, Lane, Subscription
from tests.functional.conftest import EVENTS_TABLE
from tests.functional.inbox_harness import (
    INBOX_TABLE,
    MAX_ATTEMPTS,
    Harness,
    HarnessFactory,
    Recorder,
    WorkerCrash,
    operator_context,
)

LEDGER = "ledger.fold"  # ordered: folds a tenant's account events into a balance
AUDIT = "audit.copy"  # unordered, on the same events: must never wait for the ledger


class Applied:
    """What the ordered handler applied, in the order it applied it, per tenant."""

    def __init__(self) -> None:
        self.seqs: dict[str, list[int]] = {}
        self.attempts: dict[int, int] = {}
        # By seq, for tenant acme: what to raise on this attempt (None: succeed).
        self.fail: dict[int, Callable[[], BaseException | None]] = {}

    def __call__(self, delivery: Delivery) -> None:
        envelope = delivery.envelope
        self.attempts[envelope.seq] = delivery.attempt
        failure = self.fail.get(envelope.seq) if envelope.tenant == "acme" else None
        error = failure() if failure is not None else None
        if error is not None:
            raise error
        self.seqs.setdefault(envelope.tenant, []).append(envelope.seq)


def ordered_harness(
    make_harness: HarnessFactory, pattern: str = "account.*", since: datetime | None = None
) -> tuple[Harness, Applied]:
    applied = Applied()

    def subscriptions(recorder: Recorder) -> list[Subscription]:
        recorder.behaviours[LEDGER] = applied
        return [
            Subscription(LEDGER, pattern, Lane.DURABLE, recorder.handler, ordered=True, ordered_since=since),
            recorder.subscription(AUDIT, "account.*"),
        ]

    return make_harness(subscriptions), applied


def emit(h: Harness, event_type: str = "account.credited", tenant: str = "acme", **payload: Any) -> Envelope:
    """An event in the log, not yet on the queue: the test publishes it when (and as often as) it likes."""
    return h.store.emit(event_type, payload or {"amount": 1}, tenant=tenant, actor="test")


def watermark(h: Harness, tenant: str = "acme") -> Any:
    return OrderBook(INBOX_TABLE, EVENTS_TABLE, client=h.dynamodb, clock=h.clock).watermark(tenant, LEDGER)


def operator(h: Harness) -> OperatorContext:
    return operator_context(h)


def replay(h: Harness, envelope: Envelope, subscription: str = LEDGER) -> None:
    """What ``outbox replay`` does for one dead pair: REPLAYING, then a repair message naming the pair."""
    h.dynamodb.update_item(
        TableName=INBOX_TABLE,
        Key={"pk": {"S": f"CLAIM#{envelope.id}"}, "sk": {"S": subscription}},
        UpdateExpression="SET #s = :replaying, attempts = :zero",
        ExpressionAttributeNames={"#s": "status"},
        ExpressionAttributeValues={":replaying": {"S": REPLAYING}, ":zero": {"N": "0"}},
    )
    h.sqs.send_message(
        QueueUrl=h.queue_url,
        MessageBody=relay_body(envelope.to_item()),
        MessageGroupId=envelope.tenant,
        MessageDeduplicationId=f"replay-{envelope.id}",
        MessageAttributes=repair_attributes([subscription]),
    )


def test_events_in_order_are_applied_in_order_and_the_watermark_follows(make_harness: HarnessFactory) -> None:
    h, applied = ordered_harness(make_harness)
    for _ in range(3):
        h.publish(emit(h))
    h.esm.drain()
    assert applied.seqs == {"acme": [1, 2, 3]}
    assert (watermark(h).applied_seq, watermark(h).deferred) == (3, 0)


def test_events_delivered_backwards_are_deferred_then_applied_in_seq_order(make_harness: HarnessFactory) -> None:
    h, applied = ordered_harness(make_harness)
    first, second, third = emit(h), emit(h), emit(h)
    for envelope in (third, second):
        h.publish(envelope)
    h.esm.drain()
    assert applied.seqs == {}, "nothing runs before seq 1"
    assert (h.claim_status(LEDGER, third), h.claim_status(LEDGER, second)) == (DEFERRED, DEFERRED)
    assert watermark(h).deferred == 2
    assert h.queue_depth(h.queue_url) == 0, "a deferred event is acknowledged, not retried"
    assert h.runs(AUDIT, third) == 1, "the unordered subscription of the same events did not wait"

    h.publish(first)
    h.esm.drain()

    assert applied.seqs == {"acme": [1, 2, 3]}
    assert [h.claim_status(LEDGER, e) for e in (first, second, third)] == ["COMPLETED"] * 3
    assert (watermark(h).applied_seq, watermark(h).deferred) == (3, 0)
    assert applied.attempts == {1: 1, 2: 1, 3: 1}, "waiting spent no attempt"
    assert h.dead_letters() == []
    assert h.dlq_bodies() == []


def test_the_predecessor_is_the_previous_event_the_subscription_runs_not_the_previous_seq(
    make_harness: HarnessFactory,
) -> None:
    h, applied = ordered_harness(make_harness, pattern="account.credited")
    credited, _debited, credited_again = emit(h), emit(h, "account.debited"), emit(h)
    h.publish(credited_again)
    h.esm.drain()
    (waiting,) = OrderBook(INBOX_TABLE, EVENTS_TABLE, client=h.dynamodb).deferred("acme", LEDGER)
    assert waiting.waits_for == credited.seq, "seq 2 is not the ledger's: it waits for seq 1"
    h.publish(credited)
    h.esm.drain()
    assert applied.seqs == {"acme": [1, 3]}


def test_a_duplicated_out_of_order_message_is_deferred_once_and_applied_once(make_harness: HarnessFactory) -> None:
    h, applied = ordered_harness(make_harness)
    first, second = emit(h), emit(h)
    h.publish(second)
    h.publish(second, dedup_id=f"{second.id}-again")
    h.esm.drain()
    assert watermark(h).deferred == 1
    h.publish(first)
    h.publish(second, dedup_id=f"{second.id}-third")
    h.esm.drain()
    assert applied.seqs == {"acme": [1, 2]}
    assert h.effects(LEDGER, second) == 1
    assert watermark(h).deferred == 0


def test_a_failing_predecessor_is_retried_and_its_successors_wait_without_spending_attempts(
    make_harness: HarnessFactory,
) -> None:
    h, applied = ordered_harness(make_harness)
    first, second = emit(h), emit(h)
    failures = iter([ConnectionError("ledger db 503"), ConnectionError("ledger db 503")])
    applied.fail[1] = lambda: next(failures, None)
    h.publish(second)
    h.publish(first)

    h.esm.drain()

    assert applied.seqs == {"acme": [1, 2]}
    assert applied.attempts[1] == 3
    assert applied.attempts[2] == 1


def test_a_dead_predecessor_blocks_only_its_tenant_and_subscription_until_it_is_replayed(
    make_harness: HarnessFactory,
) -> None:
    h, applied = ordered_harness(make_harness)
    first, second = emit(h), emit(h)
    other_tenant = emit(h, tenant="globex")
    applied.fail[1] = lambda: TerminalError("unknown account")
    for envelope in (first, second, other_tenant):
        h.publish(envelope)
    h.esm.drain()

    assert h.claim_status(LEDGER, first) == "DEAD"
    assert h.claim_status(LEDGER, second) == DEFERRED
    assert applied.seqs == {"globex": [1]}, "another tenant never waits"
    assert h.runs(AUDIT, second) == 1, "another subscription never waits"
    (stuck,) = blocked(operator(h))
    assert (stuck.tenant, stuck.subscription, stuck.waits_for_seq, stuck.waits_for_state) == ("acme", LEDGER, 1, "DEAD")
    assert "outbox replay" in stuck.hint
    assert "outbox skip" in stuck.hint

    del applied.fail[1]  # the fix is deployed
    replay(h, first)
    h.esm.drain()

    assert applied.seqs == {"globex": [1], "acme": [1, 2]}
    assert blocked(operator(h)) == []


def test_an_operator_skips_a_dead_predecessor_and_the_next_event_runs(make_harness: HarnessFactory) -> None:
    h, applied = ordered_harness(make_harness)
    first, second = emit(h), emit(h)
    applied.fail[1] = lambda: TerminalError("corrupt entry")
    h.publish(first)
    h.publish(second)
    h.esm.drain()

    result = skip(operator(h), "acme", LEDGER, 1, by="oncall@example.com", reason="entry voided by finance")
    h.esm.drain()

    assert (result.woke_seq, result.already) == (2, False)
    assert applied.seqs == {"acme": [2]}
    assert h.claim_status(LEDGER, first) == "SKIPPED"
    (record,) = OrderBook(INBOX_TABLE, EVENTS_TABLE, client=h.dynamodb).skips("acme", LEDGER)
    assert (record.seq, record.by, record.reason) == (1, "oncall@example.com", "entry voided by finance")
    (letter,) = h.dead_letters()
    assert "skipped by oncall@example.com" in letter["resolved"]["S"]
    # A skip is final: a replay of the skipped event does not run it, and skipping again only re-wakes.
    replay(h, first)
    h.esm.drain()
    assert applied.seqs == {"acme": [2]}
    assert skip(operator(h), "acme", LEDGER, 1, by="oncall", reason="again").already


def test_skip_refuses_what_is_not_next_running_or_not_ordered(make_harness: HarnessFactory) -> None:
    h, applied = ordered_harness(make_harness)
    first, second = emit(h), emit(h)
    h.publish(second)
    h.esm.drain()
    context = operator(h)
    with pytest.raises(OperationRefusedError, match="seq 1 comes first"):
        skip(context, "acme", LEDGER, second.seq, by="me", reason="r")
    with pytest.raises(OperationRefusedError, match="not an ordered subscription"):
        skip(context, "acme", AUDIT, first.seq, by="me", reason="r")
    with pytest.raises(OperationRefusedError, match="--by and --reason"):
        skip(context, "acme", LEDGER, first.seq, by="me", reason=" ")
    assert applied.seqs == {}


def test_a_duplicate_of_an_applied_event_long_after_the_inbox_forgot_it_is_skipped_not_dead(
    make_harness: HarnessFactory,
) -> None:
    h, applied = ordered_harness(make_harness)
    first = emit(h)
    h.publish(first)
    h.esm.drain()
    h.clock.advance(timedelta(days=90).total_seconds())
    h.publish(first, dedup_id=f"{first.id}-months-later")
    h.esm.drain()
    assert applied.seqs == {"acme": [1]}
    assert h.dead_letters() == [], "the watermark remembers what the COMPLETED row forgot"


def test_an_event_deferred_behind_one_that_completes_runs_right_after_it_in_the_same_invocation(
    make_harness: HarnessFactory,
) -> None:
    # Sent back to the queue, it would queue behind the tenant's other messages, and each of those would be
    # deferred behind it in turn: one queue round trip per event. It runs here instead, and so do the ones
    # deferred behind it.
    h, applied = ordered_harness(make_harness)
    events = [emit(h) for _ in range(30)]
    for envelope in reversed(events[1:]):
        h.publish(envelope)
    h.esm.drain()
    assert watermark(h).deferred == 29
    h.publish(events[0])
    invocations = h.esm.invocations

    h.esm.drain()

    assert applied.seqs == {"acme": list(range(1, 31))}
    assert h.esm.invocations == invocations + 1, "one invocation applied all thirty, no wake-up message"
    assert (watermark(h).applied_seq, watermark(h).deferred) == (30, 0)
    assert applied.attempts == dict.fromkeys(range(1, 31), 1)


def test_without_time_left_for_it_the_deferred_event_goes_back_to_the_queue(
    make_harness: HarnessFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    h, applied = ordered_harness(make_harness)
    first, second = emit(h), emit(h)
    h.publish(second)
    h.esm.drain()
    monkeypatch.setattr("outbox.delivery.timing.WAKE_HERE_MIN_REMAINING_MS", 10**9)  # never enough time left
    h.publish(first)
    h.esm.drain()
    assert applied.seqs == {"acme": [1, 2]}
    assert h.claim_status(LEDGER, second) == "COMPLETED"


def test_a_deferred_event_that_fails_right_after_its_predecessor_is_retried_from_its_own_message(
    make_harness: HarnessFactory,
) -> None:
    h, applied = ordered_harness(make_harness)
    first, second = emit(h), emit(h)
    failures = iter([ConnectionError("ledger db 503")])
    applied.fail[2] = lambda: next(failures, None)
    h.publish(second)
    h.esm.drain()
    h.publish(first)
    h.esm.drain()
    assert applied.seqs == {"acme": [1, 2]}
    assert applied.attempts[2] == 2, "its failure here counted, and its wake-up message ran it again"
    assert h.dead_letters() == []


def test_a_deferred_event_that_dies_right_after_its_predecessor_blocks_and_is_not_sent_again(
    make_harness: HarnessFactory,
) -> None:
    h, applied = ordered_harness(make_harness)
    first, second, third = emit(h), emit(h), emit(h)
    applied.fail[2] = lambda: TerminalError("unknown account")
    h.publish(third)
    h.publish(second)
    h.esm.drain()
    h.publish(first)
    h.esm.drain()
    assert applied.seqs == {"acme": [1]}
    assert applied.attempts[2] == 1, "a dead event is not re-sent (a DEAD claim with attempts left is claimable)"
    assert (h.claim_status(LEDGER, second), h.claim_status(LEDGER, third)) == ("DEAD", DEFERRED)
    (stuck,) = blocked(operator(h))
    assert (stuck.waits_for_seq, stuck.waits_for_state) == (2, "DEAD")


def test_a_worker_killed_while_running_a_deferred_event_leaves_it_to_the_redelivery(
    make_harness: HarnessFactory,
) -> None:
    # The predecessor completed, the worker died inside the deferred event's handler: the predecessor's
    # message was never acknowledged, comes back, finds its event applied, and runs the deferred one (taking
    # over its expired lease).
    h, applied = ordered_harness(make_harness)
    first, second = emit(h), emit(h)
    crashes = iter([WorkerCrash("killed inside the deferred event's handler")])
    applied.fail[2] = lambda: next(crashes, None)
    h.publish(second)
    h.esm.drain()
    h.publish(first)
    h.esm.drain()
    assert applied.seqs == {"acme": [1, 2]}
    assert (h.effects(LEDGER, first), h.effects(LEDGER, second)) == (1, 1)
    assert watermark(h).applied_seq == 2


def test_the_deferred_events_lost_with_the_completions_answer_run_on_the_redelivery(
    make_harness: HarnessFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    h, applied = ordered_harness(make_harness)
    first, second = emit(h), emit(h)
    h.publish(second)
    h.esm.drain()
    book, failures = h.consumer.order, iter([ConnectionError("dynamodb unreachable")])
    real = book.ready_deferred

    def unreachable_once(watermark: Any, **where: Any) -> Any:
        error = next(failures, None)
        if error is not None:
            raise error
        return real(watermark, **where)

    monkeypatch.setattr(book, "ready_deferred", unreachable_once)
    h.publish(first)
    h.esm.drain()
    assert applied.seqs == {"acme": [1, 2]}
    assert applied.attempts == {1: 1, 2: 1}, "seq 1 was not run again: its redelivery found it applied"


def test_events_before_ordered_since_are_not_part_of_the_order_and_run_once_the_unordered_way(
    make_harness: HarnessFactory,
) -> None:
    h, applied = ordered_harness(make_harness)
    before = emit(h)
    since = h.clock() + timedelta(seconds=1)
    h.clock.advance(2)
    h2, applied2 = ordered_harness_on(h, since)
    after = emit(h2)
    h2.publish(after)
    h2.publish(before)
    h2.esm.drain()
    assert applied2.seqs == {"acme": [after.seq, before.seq]}, "the first event after the start waits for nothing"
    assert watermark(h2).applied_seq == after.seq, "the event before the start did not move the watermark"
    assert (h2.claim_status(LEDGER, before), h2.effects(LEDGER, before)) == ("COMPLETED", 1)
    assert applied.seqs == {}


# -- a subscription made ordered while its work is in flight (docs/concepts.md: ordered_since = the switch) --


def unordered_then_ordered(make_harness: HarnessFactory) -> tuple[Harness, Callable[[], Applied]]:
    """The ledger runs unordered; ``switch()`` deploys it ordered from now on (``ordered_since`` = the moment of
    the deploy), on the same tables and queue, and returns what the ordered ledger applies."""
    h = make_harness(lambda recorder: [recorder.subscription(LEDGER, "account.*")])

    def switch() -> Applied:
        h.clock.advance(1)
        since = h.clock()  # after every event so far
        h.clock.advance(1)
        return ordered_harness_on(h, since)[1]

    return h, switch


def test_an_event_relayed_before_the_switch_and_received_after_it_runs_once(make_harness: HarnessFactory) -> None:
    # Given an event relayed to the queue while the ledger was unordered, and not yet received
    h, switch = unordered_then_ordered(make_harness)
    in_flight = emit(h)
    h.publish(in_flight)

    # When the ledger becomes ordered, then the message is received
    applied = switch()
    h.esm.drain()

    # Then it ran, once, the unordered way, and the order (which starts after it) does not wait for it
    assert applied.seqs == {"acme": [in_flight.seq]}
    assert (h.claim_status(LEDGER, in_flight), h.effects(LEDGER, in_flight)) == ("COMPLETED", 1)
    assert watermark(h).applied_seq == 0
    assert blocked(operator(h)) == []


def test_a_retry_from_before_the_switch_runs_after_it(make_harness: HarnessFactory) -> None:
    # Given an event whose first attempt failed on a transient error while the ledger was unordered
    h, switch = unordered_then_ordered(make_harness)
    retried = emit(h)
    h.recorder.behaviours[LEDGER] = lambda _d: (_ for _ in ()).throw(ConnectionError("ledger db 503"))
    h.publish(retried)
    h.esm.poll()
    assert h.claim_status(LEDGER, retried) == "PENDING"

    # When the ledger becomes ordered, and the message comes back
    applied = switch()
    h.esm.drain()

    # Then the retry ran to its end: once, with its earlier attempt counted
    assert applied.seqs == {"acme": [retried.seq]}
    assert applied.attempts == {retried.seq: 2}
    assert (h.claim_status(LEDGER, retried), h.effects(LEDGER, retried)) == ("COMPLETED", 1)


def test_a_dead_pair_from_before_the_switch_is_replayed_after_it_and_runs(make_harness: HarnessFactory) -> None:
    # Given an event whose ledger pair died while the ledger was unordered, and a later one it never blocked
    h, switch = unordered_then_ordered(make_harness)
    dead = emit(h)
    h.recorder.behaviours[LEDGER] = lambda _d: (_ for _ in ()).throw(TerminalError("unknown account"))
    h.publish(dead)
    h.esm.drain()
    assert h.claim_status(LEDGER, dead) == "DEAD"

    # When the fix is deployed with the ledger ordered, a new event arrives, and the operator replays the dead pair
    applied = switch()
    later = emit(h)
    h.publish(later)
    h.esm.drain()
    replay(h, dead)
    h.esm.drain()

    # Then the new event did not wait for it, and the replay ran it once
    assert applied.seqs == {"acme": [later.seq, dead.seq]}
    assert (h.claim_status(LEDGER, dead), h.effects(LEDGER, dead)) == ("COMPLETED", 1)
    assert blocked(operator(h)) == []


def test_a_lost_message_from_before_the_switch_is_reconciled_by_the_ordered_reconcile(
    make_harness: HarnessFactory,
) -> None:
    # Given an event relayed before the switch whose message was lost (no claim row at all)
    h, switch = unordered_then_ordered(make_harness)
    lost = emit(h)

    # When the ledger becomes ordered and the operator reconciles it alone
    applied = switch()
    result = reconcile(operator(h), None, subscription=LEDGER)
    h.esm.drain()

    # Then the event before the switch was sent to it, and ran once
    assert result.subscriptions == {lost.id: [LEDGER]}
    assert applied.seqs == {"acme": [lost.seq]}
    assert reconcile(operator(h), None, subscription=LEDGER).republished == [], "a second run sends nothing"


def ordered_harness_on(h: Harness, since: datetime) -> tuple[Harness, Applied]:
    """The same tables and queue with a consumer whose ledger starts at ``since``."""
    from outbox.delivery.consumer import DurableConsumer
    from outbox.subscriptions import SubscriptionRegistry

    applied = Applied()
    h.recorder.behaviours[LEDGER] = applied
    registry = SubscriptionRegistry.of(
        [Subscription(LEDGER, "account.*", Lane.DURABLE, h.recorder.handler, ordered=True, ordered_since=since)]
    )
    consumer = DurableConsumer(registry, h.inbox, h.store, wake_ups=h.consumer.wake_ups)
    h.esm.handler = consumer.handle
    h.consumer = consumer
    return h, applied


def test_an_ordered_subscription_is_durable_needs_wake_ups_and_an_aware_start() -> None:
    handler = lambda _d: None  # noqa: E731
    with pytest.raises(OutboxValidationError, match="DURABLE lane"):
        Subscription("a.b", "x", Lane.LOCAL, handler, ordered=True)
    with pytest.raises(OutboxValidationError, match="timezone-aware"):
        Subscription("a.b", "x", Lane.DURABLE, handler, ordered=True, ordered_since=datetime(2026, 1, 1))
    with pytest.raises(OutboxValidationError, match="not ordered=True"):
        Subscription("a.b", "x", Lane.DURABLE, handler, ordered_since=datetime(2026, 1, 1, tzinfo=UTC))


def test_max_attempts_still_bound_an_ordered_event_that_keeps_failing(make_harness: HarnessFactory) -> None:
    h, applied = ordered_harness(make_harness)
    first = emit(h)
    applied.fail[1] = lambda: ConnectionError("down")
    h.publish(first)
    h.esm.drain()
    assert applied.attempts[1] == MAX_ATTEMPTS
    assert h.claim_status(LEDGER, first) == "DEAD"


def test_a_worker_killed_before_its_completion_commits_leaves_the_watermark_where_it_was(
    make_harness: HarnessFactory,
) -> None:
    # The watermark moves in the completion's transaction: had it moved before it, the takeover would find
    # seq 1 "applied" and skip it, and its effect would be lost.
    h, applied = ordered_harness(make_harness)
    first, second = emit(h), emit(h)
    real, crashed = h.inbox.mark_completed, {"n": 0}

    def killed_once(*args: Any, **kwargs: Any) -> None:
        if crashed["n"] == 0:
            crashed["n"] += 1
            raise WorkerCrash("killed before the completion committed")
        real(*args, **kwargs)

    h.inbox.mark_completed = killed_once  # type: ignore[method-assign]
    h.publish(first)
    h.publish(second)
    h.esm.drain()

    assert applied.seqs == {"acme": [1, 1, 2]}, "seq 1 ran, was killed, and ran again after the lease expired"
    assert (h.effects(LEDGER, first), h.effects(LEDGER, second)) == (1, 1)
    assert watermark(h).applied_seq == 2


def test_an_ordered_completion_whose_answer_was_lost_is_recognised_as_its_own(make_harness: HarnessFactory) -> None:
    h, applied = ordered_harness(make_harness)
    first, second = emit(h), emit(h)
    real, lost = h.inbox.client.transact_write_items, {"n": 0}

    def answer_lost(**request: Any) -> Any:
        real(**request)
        if lost["n"] == 0:  # it applied; the SDK did not hear so and sends it again
            lost["n"] += 1
            return real(**request)
        return None

    h.publish(second)
    h.esm.drain()
    h.inbox.client.transact_write_items = answer_lost
    h.publish(first)
    h.esm.drain()
    assert applied.seqs == {"acme": [1, 2]}
    assert watermark(h).applied_seq == 2
    assert h.dead_letters() == []


@pytest.mark.parametrize("what_became_of_it", ["deleted", "rewritten without its id"])
def test_status_reports_an_order_waiting_for_a_row_that_no_longer_reads_as_an_event(
    make_harness: HarnessFactory, what_became_of_it: str
) -> None:
    # The row the order waits for is gone, or rewritten into something that is no event (a restore, a script):
    # status must still report the order and point at verify-chain, not fail as a whole.
    h, _ = ordered_harness(make_harness)
    first, second = emit(h), emit(h)
    h.publish(second)
    h.esm.drain()
    key = keys.event_key("acme", first.seq)
    assert h.dynamodb.get_item(TableName=EVENTS_TABLE, Key=key).get("Item", {}).get("event_id"), "the row's key"
    if what_became_of_it == "deleted":
        h.dynamodb.delete_item(TableName=EVENTS_TABLE, Key=key)
    else:
        h.dynamodb.update_item(TableName=EVENTS_TABLE, Key=key, UpdateExpression="REMOVE event_id")

    (stuck,) = blocked(operator(h))
    assert (stuck.waits_for_seq, stuck.waits_for_state, stuck.waiting) == (1, UNREADABLE, 1)
    assert "outbox verify-chain --tenant acme" in stuck.hint
    with pytest.raises(OperationRefusedError, match=r"has no event at seq 1|does not read as an event"):
        skip(operator(h), "acme", LEDGER, 1, by="on-call", reason="the row is gone")  # refused, not a traceback


def test_a_new_ordered_subscription_over_a_log_older_than_the_inbox_is_backfilled_from_its_watermark(
    make_harness: HarnessFactory,
) -> None:
    # Three events from before the ledger existed, older than the inbox's memory: reconcile with a window
    # would refuse them (a missing claim there may be a forgotten completion); the ledger's watermark says
    # they were never applied, so an ordered reconcile sends them, at any age, to the ledger alone.
    h, applied = ordered_harness(make_harness)
    old = [emit(h) for _ in range(3)]
    h.clock.advance(timedelta(days=90).total_seconds())
    new = emit(h)
    h.publish(new)
    h.esm.drain()
    (stuck,) = blocked(operator(h))
    assert (stuck.waits_for_seq, stuck.waits_for_state) == (3, "absent")
    assert f"outbox reconcile --tenant acme --subscription {LEDGER}" in stuck.hint

    with pytest.raises(OperationRefusedError, match="remembers completions for 7 days"):
        reconcile(operator(h), h.clock() - timedelta(days=91))
    planned = reconcile(operator(h), None, subscription=LEDGER, dry_run=True)
    assert planned.republished == [e.id for e in old]
    result = reconcile(operator(h), None, subscription=LEDGER)
    h.esm.drain()

    assert result.subscriptions == {e.id: [LEDGER] for e in old}, "the unordered audit is sent nothing"
    assert applied.seqs == {"acme": [1, 2, 3, 4]}
    assert [h.runs(AUDIT, e) for e in old] == [0, 0, 0]
    assert blocked(operator(h)) == []
    again = reconcile(operator(h), None, subscription=LEDGER)
    assert (again.scanned, again.republished) == (0, []), "nothing lies above the watermark any more"


def test_an_ordered_backfill_starts_above_the_watermark_and_leaves_claimed_work_alone(
    make_harness: HarnessFactory,
) -> None:
    h, applied = ordered_harness(make_harness)
    first, second, third, fourth = emit(h), emit(h), emit(h), emit(h)
    h.publish(first)
    applied.fail[3] = lambda: TerminalError("bad entry")
    h.publish(third)  # deferred behind seq 2, which never reached the ledger
    h.esm.drain()

    result = reconcile(operator(h), None, subscription=LEDGER)
    h.esm.drain()

    # seq 1 is applied (below the watermark) and seq 3 has a claim (DEFERRED): only 2 and 4 are sent. Seq 3,
    # woken by seq 2, dies; seq 4 waits for it, as a dead predecessor blocks.
    assert result.republished == [second.id, fourth.id]
    assert applied.seqs == {"acme": [1, 2]}
    assert (h.claim_status(LEDGER, third), h.claim_status(LEDGER, fourth)) == ("DEAD", DEFERRED)


def test_reconcile_of_one_subscription_refuses_what_it_cannot_do(make_harness: HarnessFactory) -> None:
    h, _applied = ordered_harness(make_harness)
    event = emit(h)
    context, yesterday = operator(h), h.clock() - timedelta(days=1)
    with pytest.raises(OperationRefusedError, match="is ordered: it is reconciled from each tenant's watermark"):
        reconcile(context, yesterday, subscription=LEDGER)
    # An unordered subscription alone, without --since: only its pairs a deploy took out of an order (none here).
    assert reconcile(context, None, subscription=AUDIT).republished == []
    with pytest.raises(OperationRefusedError, match="needs --since"):
        reconcile(context, None)
    with pytest.raises(OperationRefusedError, match=r"unknown subscription 'no\.such'"):
        reconcile(context, None, subscription="no.such")
    # Neither subscription has a claim of the event: naming one sends it to that one only.
    assert reconcile(context, yesterday, subscription=AUDIT).subscriptions == {event.id: [AUDIT]}
    assert h.claim_status(LEDGER, event) is None


def test_an_ordered_reconcile_sends_a_deferred_event_whose_wake_up_never_came(
    make_harness: HarnessFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Its wake-up went to the queue and from there (a broken deploy, say) to the DLQ, which was purged.
    h, applied = ordered_harness(make_harness)
    first, second = emit(h), emit(h)
    h.publish(second)
    h.esm.drain()
    monkeypatch.setattr("outbox.delivery.timing.WAKE_HERE_MIN_REMAINING_MS", 10**9)
    wake_ups = h.consumer.wake_ups
    assert wake_ups is not None
    monkeypatch.setattr(wake_ups, "send", lambda *_args: None)
    h.publish(first)
    h.esm.drain()
    (stuck,) = blocked(operator(h))
    assert (stuck.waits_for_seq, stuck.waits_for_state) == (2, DEFERRED)
    assert f"outbox reconcile --tenant acme --subscription {LEDGER}" in stuck.hint
    monkeypatch.undo()

    planned = reconcile(operator(h), None, subscription=LEDGER, dry_run=True)
    h.esm.drain()
    assert (planned.subscriptions, applied.seqs) == ({second.id: [LEDGER]}, {"acme": [1]}), "named, not sent"
    result = reconcile(operator(h), None, subscription=LEDGER)
    h.esm.drain()

    assert result.subscriptions == {second.id: [LEDGER]}
    assert applied.seqs == {"acme": [1, 2]}
    assert blocked(operator(h)) == []


def test_a_deferred_event_whose_log_row_was_rewritten_into_garbage_does_not_hold_its_predecessor_back(
    make_harness: HarnessFactory,
) -> None:
    # Read back from the log to run right after its predecessor, the row no longer parses: it is sent to the
    # queue, where the message path records what it is; the predecessor's message is acknowledged.
    h, applied = ordered_harness(make_harness)
    first, second = emit(h), emit(h)
    h.publish(second)
    h.esm.drain()
    h.dynamodb.put_item(
        TableName=EVENTS_TABLE,
        Item={**second.to_item(), "tenant": {"N": "12"}, "payload": {"S": "not an object"}},
    )
    h.publish(first)
    h.esm.drain()
    assert applied.seqs == {"acme": [1]}
    assert h.claim_status(LEDGER, first) == "COMPLETED"
    assert h.queue_depth(h.queue_url) == 0
    assert h.dlq_bodies() == []


def test_an_event_deferred_for_longer_than_the_inbox_remembers_still_runs_after_its_predecessor(
    make_harness: HarnessFactory,
) -> None:
    # Its DEFERRED claim never expires: when its dead predecessor is replayed a month later, past the inbox's
    # retention, the claim still vouches for the pair, and it runs right after it.
    h, applied = ordered_harness(make_harness)
    first, second = emit(h), emit(h)
    applied.fail[1] = lambda: TerminalError("ledger closed for the audit")
    h.publish(first)
    h.publish(second)
    h.esm.drain()
    assert h.claim_status(LEDGER, second) == DEFERRED
    h.clock.advance(timedelta(days=30).total_seconds())
    del applied.fail[1]
    replay(h, first)
    h.esm.drain()
    assert applied.seqs == {"acme": [1, 2]}
    assert watermark(h).applied_seq == 2


# -- one tenant's backlog never spends another tenant's time -----------------------------------------------------

INVOICE = "billing.invoice"  # unordered, another tenant's: its healthy handler needs 15 s of the 60 s function


def test_a_woken_backlog_never_takes_the_time_another_tenants_record_in_its_batch_needs(
    make_harness: HarnessFactory,
) -> None:
    # Given acme's first ordered event dead and 60 events deferred behind it (each run of the ledger takes 5 s),
    # and globex's invoice, whose handler needs 15 s
    applied, invoice_started_with = Applied(), []

    def ledger(delivery: Delivery) -> None:
        applied(delivery)
        h.clock.advance(5)

    def invoice(delivery: Delivery) -> None:
        invoice_started_with.append(delivery.remaining_time_ms())
        h.clock.advance(15)

    def subscriptions(recorder: Recorder) -> list[Subscription]:
        recorder.behaviours.update({LEDGER: ledger, INVOICE: invoice})
        return [
            Subscription(LEDGER, "account.*", Lane.DURABLE, recorder.handler, ordered=True),
            recorder.subscription(INVOICE, "invoice.*"),
        ]

    h = make_harness(subscriptions)
    backlog = [emit(h) for _ in range(61)]
    applied.fail[1] = lambda: TerminalError("unknown account")
    for envelope in backlog:
        h.publish(envelope)
    h.esm.drain()
    assert (h.claim_status(LEDGER, backlog[0]), watermark(h).deferred) == ("DEAD", 60)

    # When the fix is deployed and the dead event replayed, with globex's invoice in the same batch after it
    del applied.fail[1]
    replay(h, backlog[0])
    invoice_event = emit(h, "invoice.issued", tenant="globex")
    h.publish(invoice_event)
    results = h.esm.drain()

    # Then the invoice ran once, with the time its handler needs, and no invocation ran into its deadline
    assert invoice_started_with
    assert min(invoice_started_with) >= 15_000
    assert (h.claim_status(INVOICE, invoice_event), h.effects(INVOICE, invoice_event)) == ("COMPLETED", 1)
    assert [r.crashed for r in results if r.crashed is not None] == []
    # and acme's backlog was applied in order, each event once, partly in place and the rest from wake-ups
    assert applied.seqs == {"acme": list(range(1, 62))}
    assert (watermark(h).applied_seq, watermark(h).deferred) == (61, 0)
    assert h.dead_letters("globex") == []


def test_an_in_place_run_cut_off_by_the_deadline_runs_next_from_its_own_message_with_one_attempt_spent(
    make_harness: HarnessFactory,
) -> None:
    # Given seq 2 deferred behind seq 1, and a ledger whose run of seq 2 is, once, slower than anything seen
    h, applied = ordered_harness(make_harness)
    first, second = emit(h), emit(h)
    h.publish(second)
    h.esm.drain()
    slow_once = iter([True])

    def sometimes_slow(delivery: Delivery) -> None:
        if delivery.envelope.seq == 2 and next(slow_once, False):
            h.clock.advance(61)  # woken in place right after seq 1: Lambda stops it at the deadline
        applied(delivery)

    h.recorder.behaviours[LEDGER] = sometimes_slow

    # When seq 1 arrives and completes, and seq 2 runs in place until the deadline stops the invocation
    h.publish(first)
    results = h.esm.drain()

    # Then seq 2 ran to its end later, from its wake-up message, and the cut-off run cost it one attempt only
    assert any(r.crashed is not None for r in results), "the in-place run was cut off"
    assert applied.seqs == {"acme": [1, 2, 2]}, "seq 2's code ran twice: cut off once, then to its end"
    assert applied.attempts[2] == 2
    assert watermark(h).applied_seq == 2
    assert (h.claim_status(LEDGER, second), h.effects(LEDGER, second)) == ("COMPLETED", 1)
    assert h.dead_letters() == []


# -- repairs of what the order has applied ------------------------------------------------------------------------


def test_a_forced_replay_of_a_pair_the_order_applied_is_refused_with_what_to_do(make_harness: HarnessFactory) -> None:
    from outbox.ops.replay import plan_replay

    h, _ = ordered_harness(make_harness)
    first, second = emit(h), emit(h)
    for envelope in (first, second):
        h.publish(envelope)
    h.esm.drain()

    with pytest.raises(OperationRefusedError, match=r"applied in tenant acme's order .* emit a new event"):
        plan_replay(operator(h), event_ids=[first.id], subscription=LEDGER, force=True)
    # the unordered subscription of the same event is still the operator's to force
    (item,) = plan_replay(operator(h), event_ids=[first.id], subscription=AUDIT, force=True)
    assert (item.subscription, item.forced) == (AUDIT, True)
    assert h.claim_status(LEDGER, first) == "COMPLETED"


def test_a_repair_message_for_an_applied_pair_puts_its_claim_back_to_completed(make_harness: HarnessFactory) -> None:
    # Given an applied ordered pair whose claim a repair left REPLAYING (a forced replay before it was refused)
    h, applied = ordered_harness(make_harness)
    first = emit(h)
    h.publish(first)
    h.esm.drain()
    replay(h, first)

    # When its repair message is delivered
    h.esm.drain()

    # Then nothing ran again, and the claim is no longer waiting for a run that will never come
    assert applied.seqs == {"acme": [1]}
    assert h.claim_status(LEDGER, first) == "COMPLETED"
    assert reconcile(operator(h), h.clock() - timedelta(hours=1)).republished == [], "nothing left to re-send"


# -- the watermarks a batch carries (outbox.delivery.ordered: read once per batch, carried from write to write) --


def inbox_requests(h: Harness) -> list[tuple[str, dict[str, Any]]]:
    """Every request the harness's DynamoDB client makes from here on that touches the inbox table."""
    seen: list[tuple[str, dict[str, Any]]] = []

    def record(params: dict[str, Any], model: Any, **_: Any) -> None:
        if INBOX_TABLE in (params.get("TableName"), *params.get("RequestItems", {})):
            seen.append((model.name, params))

    h.dynamodb.meta.events.register("provide-client-params.dynamodb.*", record)
    return seen


def watermark_reads(requests: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """The operations among ``requests`` that read a watermark row."""
    return [
        operation
        for operation, params in requests
        if (operation == "Query" and params["ExpressionAttributeValues"].get(":sk", {}).get("S") == "WATERMARK")
        or operation == "BatchGetItem"
    ]


def test_a_batch_reads_its_tenants_watermarks_once_and_carries_them_from_write_to_write(
    make_harness: HarnessFactory,
) -> None:
    h, applied = ordered_harness(make_harness)
    for n in range(8):
        h.publish(emit(h, tenant="acme" if n % 3 else "globex"))
    requests = inbox_requests(h)
    h.esm.drain()
    reads = watermark_reads(requests)

    assert applied.seqs == {"acme": [1, 2, 3, 4, 5], "globex": [1, 2, 3]}
    assert (watermark(h, "acme").applied_seq, watermark(h, "globex").applied_seq) == (5, 3)
    # One batch of eight messages: both tenants' watermarks read with its events in one BatchGetItem, none
    # read again.
    assert reads == ["BatchGetItem"]
    (request,) = [p["RequestItems"] for op, p in requests if op == "BatchGetItem"]
    assert sorted(key["pk"]["S"] for key in request[INBOX_TABLE]["Keys"]) == [
        f"TENANT#{t}#ORDER#{LEDGER}" for t in ("acme", "globex")
    ]
    assert len(request[EVENTS_TABLE]["Keys"]) == 8, "the same request checks the batch's events against the log"


def test_a_carried_watermark_that_another_writer_moved_fails_safe_and_is_read_again(
    make_harness: HarnessFactory,
) -> None:
    h, applied = ordered_harness(make_harness)
    first, second, third = emit(h), emit(h), emit(h)

    def bump_version(delivery: Delivery) -> None:
        """After seq 1 is applied, another writer moves the watermark's version (as a deferral does)."""
        if delivery.envelope.seq == 1:
            h.dynamodb.update_item(
                TableName=INBOX_TABLE,
                Key={"pk": {"S": f"TENANT#acme#ORDER#{LEDGER}"}, "sk": {"S": "WATERMARK"}},
                UpdateExpression="SET version = version + :one",
                ExpressionAttributeValues={":one": {"N": "1"}},
            )

    h.recorder.behaviours[AUDIT] = bump_version  # AUDIT runs after LEDGER for the same message
    for envelope in (first, second, third):
        h.publish(envelope)
    requests = inbox_requests(h)
    h.esm.drain()
    reads = watermark_reads(requests)

    assert applied.seqs == {"acme": [1, 2, 3]}
    assert [h.runs(LEDGER, e) for e in (first, second, third)] == [1, 1, 1], "the stale copy ran nothing twice"
    assert watermark(h).applied_seq == 3
    assert reads == ["BatchGetItem", "Query"], "read again once, after the refused write"


def test_an_operator_skip_under_a_batch_in_flight_is_honoured_although_the_batch_carries_the_old_watermark(
    make_harness: HarnessFactory,
) -> None:
    h, applied = ordered_harness(make_harness)
    first, second, third = emit(h), emit(h), emit(h)

    def skip_the_next(delivery: Delivery) -> None:
        if delivery.envelope.seq == 1:
            skip(operator(h), "acme", LEDGER, 2, by="oncall@example.com", reason="voided while the batch ran")

    h.recorder.behaviours[AUDIT] = skip_the_next
    for envelope in (first, second, third):
        h.publish(envelope)
    h.esm.drain()

    assert applied.seqs == {"acme": [1, 3]}, "the skipped event never runs, the next one does"
    assert h.runs(LEDGER, second) == 0
    assert h.claim_status(LEDGER, second) == "SKIPPED"
    assert watermark(h).applied_seq == 3


@pytest.mark.parametrize(
    "code",
    [
        "ProvisionedThroughputExceededException",
        "AccessDeniedException",  # new code before its role's update, or a role without BatchGetItem on the inbox
    ],
)
def test_when_the_batch_read_of_watermarks_fails_each_is_read_when_needed(
    make_harness: HarnessFactory, monkeypatch: pytest.MonkeyPatch, code: str
) -> None:
    h, applied = ordered_harness(make_harness)

    def throttled(**_request: Any) -> Any:
        raise ClientError({"Error": {"Code": code}}, "BatchGetItem")

    # The batch's one read (its events and its watermarks) fails: the events are read one by one, the
    # watermarks when they are needed.
    monkeypatch.setattr(h.dynamodb, "batch_get_item", throttled)
    for n in range(4):
        h.publish(emit(h, tenant="acme" if n % 2 else "globex"))
    requests = inbox_requests(h)
    h.esm.drain()
    reads = watermark_reads(requests)

    assert applied.seqs == {"globex": [1, 2], "acme": [1, 2]}
    assert reads == ["Query", "Query"], "one read per place, then carried"


def test_each_batch_carries_its_own_watermarks_and_a_pair_outside_any_batch_reads_them(
    make_harness: HarnessFactory,
) -> None:
    """A handler called from two threads at once runs two batches: the watermarks live in each batch, not on the
    gate the threads share, and a pair delivered outside any batch reads the watermark every time."""
    h, _ = ordered_harness(make_harness)
    gate = h.consumer.ordered
    one, other = gate.carrying([("acme", LEDGER)], {}), gate.carrying([("acme", LEDGER)], {})
    assert one.carried == {}, "nothing carried that the batch's read did not hold"
    one.watermark("acme", LEDGER)  # read when needed, and carried from there
    assert list(one.carried or {}) == [("acme", LEDGER)]
    assert other.carried == {}, "the other batch's copy is its own"
    outside = gate.carried(None)
    outside.carry(one.watermark("acme", LEDGER))
    assert outside.carried is None, "outside a batch nothing is carried"
