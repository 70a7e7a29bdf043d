"""A deploy changes what the catalog does with a pair, never what the pair is: each repair asks the one answer
(``outbox.pairs``) and no pair is lost, doubled or blocked where a deploy meets dead, deferred or replayed work.

Each test here is one of the ways the fourth review found to lose or block work (they failed before
``outbox.pairs``): a narrowed ordered subscription behind a dead event, a replay after a deploy that narrows a
pattern or moves a subscription off DURABLE, a dead pair from before ``ordered_since`` that could not be skipped,
and deferred events a deploy took out of the order.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import timedelta

import pytest

from outbox import Envelope, TerminalError
from outbox.delivery.consumer import DurableConsumer
from outbox.exceptions import OperationRefusedError
from outbox.inbox import DEAD, DEFERRED
from outbox.ops.context import OperatorContext
from outbox.ops.order_status import NOT_IN_ORDER, OUT_OF_ORDER, blocked
from outbox.ops.ordering import skip
from outbox.ops.reconcile import reconcile
from outbox.ops.replay import plan_replay, replay
from outbox.ops.status import Status
from outbox.pairs.order import OrderBook
from outbox.subscriptions import Lane, Subscription, SubscriptionRegistry
from outbox_cdk.durable_consumer import INBOX_ACTIONS, ORDERED_INBOX_ACTIONS
from tests.functional.conftest import EVENTS_TABLE
from tests.functional.inbox_harness import (
    INBOX_TABLE,
    Harness,
    HarnessFactory,
    Recorder,
    WorkerCrash,
    operator_context,
)
from tests.functional.test_ordered_subscriptions import AUDIT, LEDGER, Applied, emit, ordered_harness, watermark


def deploy(h: Harness, subscriptions: Iterable[Subscription]) -> OperatorContext:
    """The same tables and queue with a consumer (and operator tools) of the deployed ``subscriptions``."""
    deployed = list(subscriptions)
    consumer = DurableConsumer(SubscriptionRegistry.of(deployed), h.inbox, h.store, wake_ups=h.consumer.wake_ups)
    h.esm.handler = consumer.handle
    h.consumer = consumer
    return operator_context(h, deployed)


def ledger(h: Harness, pattern: str = "account.*", **options: object) -> Subscription:
    return Subscription(LEDGER, pattern, Lane.DURABLE, h.recorder.handler, **options)  # type: ignore[arg-type]


def open_letters(h: Harness) -> list[tuple[str, str]]:
    """(event id, subscription) of every open dead letter of tenant acme (conflict records aside)."""
    return sorted(
        (row["event_id"]["S"], row["subscription"]["S"])
        for row in h.dead_letters()
        if "resolved" not in row and row["reason"]["S"] != "conflict"
    )


def assert_counted(h: Harness, *, waiting: int = 0) -> None:
    """The ledger's order for acme holds ``waiting`` deferred rows, and its watermark counts exactly those: a row
    that left the order without lowering the count (or the reverse) would make the order look held up for ever."""
    book = OrderBook(INBOX_TABLE, EVENTS_TABLE, client=h.dynamodb, clock=h.clock)
    rows = book.deferred("acme", LEDGER)
    assert (len(rows), watermark(h).deferred) == (waiting, waiting)


@contextmanager
def granted_to_the_consumer(h: Harness) -> Iterator[None]:
    """Every request the consumer sends to the inbox meanwhile is one its role allows (outbox_cdk.durable_consumer:
    a transaction is authorised item by item): moto allows anything, AWS does not."""
    granted = {action.removeprefix("dynamodb:") for action in (*INBOX_ACTIONS, *ORDERED_INBOX_ACTIONS)}
    used: set[str] = set()

    def record(params: dict[str, object], model: object, **_: object) -> None:
        if params.get("TableName") == INBOX_TABLE:
            used.add(model.name)  # type: ignore[attr-defined]

    h.dynamodb.meta.events.register("provide-client-params.dynamodb.*", record)
    try:
        yield
    finally:
        h.dynamodb.meta.events.unregister("provide-client-params.dynamodb.*", record)
    assert used - granted == set(), f"the consumer's role does not allow {sorted(used - granted)} on the inbox"


def dead_then_deferred(
    make_harness: HarnessFactory, types: tuple[str, str] = ("account.opened", "account.credited")
) -> tuple[Harness, Applied, Envelope, Envelope]:
    """The ledger (ordered) dies on seq 1 for good; seq 2 waits behind it, DEFERRED."""
    h, applied = ordered_harness(make_harness)
    first, second = emit(h, types[0]), emit(h, types[1])
    applied.fail[1] = lambda: TerminalError("unknown account")
    h.publish(first)
    h.publish(second)
    h.esm.drain()
    assert (h.claim_status(LEDGER, first), h.claim_status(LEDGER, second)) == (DEAD, DEFERRED)
    return h, applied, first, second


# -- 2: narrowing an ordered subscription while its order waits behind a dead event ----------------------------


def test_a_narrowed_order_waiting_behind_an_event_it_no_longer_has_is_named_and_moves_on(
    make_harness: HarnessFactory,
) -> None:
    # Given seq 2 deferred behind a dead seq 1, when a deploy narrows the ledger so seq 1 no longer matches
    h, applied, first, second = dead_then_deferred(make_harness)
    context = deploy(h, [ledger(h, "account.credited", ordered=True)])

    # Then status says the order waits for an event it no longer has, and names the commands that move it
    (stuck,) = blocked(context)
    assert stuck.waits_for_seq == 1
    assert stuck.waits_for_state.startswith(NOT_IN_ORDER)
    assert "outbox reconcile --tenant acme --subscription ledger.fold" in stuck.hint
    assert "outbox skip --tenant acme --subscription ledger.fold --seq 1" in stuck.hint
    # A replay of seq 1 is refused (nothing would run it), never reported under way
    with pytest.raises(OperationRefusedError, match="no longer runs"):
        plan_replay(context, tenant="acme")

    # When the operator runs the two commands status names
    result = reconcile(context, None, subscription=LEDGER)
    h.esm.drain()
    skipped = skip(context, "acme", LEDGER, 1, by="oncall", reason="no longer ours")

    # Then seq 2 ran once, seq 1's dead letter is acknowledged, and nothing waits
    assert second.id in result.republished
    assert applied.seqs == {"acme": [2]}
    assert (h.claim_status(LEDGER, first), skipped.already) == ("SKIPPED", False)
    assert open_letters(h) == []
    assert blocked(context) == []
    assert watermark(h).applied_seq == 2


def test_skipping_the_left_out_event_first_also_sends_the_waiting_one_on(make_harness: HarnessFactory) -> None:
    h, applied, _first, _second = dead_then_deferred(make_harness)
    context = deploy(h, [ledger(h, "account.credited", ordered=True)])

    result = skip(context, "acme", LEDGER, 1, by="oncall", reason="no longer ours")
    h.esm.drain()

    assert result.woke_seq == 2
    assert applied.seqs == {"acme": [2]}
    assert blocked(context) == []
    assert open_letters(h) == []


# -- 3: replay after a deploy that narrows a pattern or moves a subscription off DURABLE --------------------------


def dead_unordered(make_harness: HarnessFactory) -> tuple[Harness, Envelope]:
    def subscriptions(recorder: Recorder) -> list[Subscription]:
        recorder.behaviours[AUDIT] = lambda _d: (_ for _ in ()).throw(TerminalError("no such account"))
        return [recorder.subscription(AUDIT, "account.*")]

    h = make_harness(subscriptions)
    event = emit(h, "account.opened")
    h.publish(event)
    h.esm.drain()
    assert h.claim_status(AUDIT, event) == DEAD
    h.recorder.behaviours[AUDIT] = lambda _d: None  # the fix
    return h, event


@pytest.mark.parametrize(
    ("change", "because"),
    [
        ("narrowed", "matches 'account.credited' now"),
        ("moved to LOCAL", "on the LOCAL lane now"),
    ],
)
def test_a_replay_of_a_pair_the_deployed_catalog_no_longer_runs_is_refused_and_its_letter_stays_open(
    make_harness: HarnessFactory, change: str, because: str
) -> None:
    h, event = dead_unordered(make_harness)
    if change == "narrowed":
        deployed = Subscription(AUDIT, "account.credited", Lane.DURABLE, h.recorder.handler)
    else:
        deployed = Subscription(AUDIT, "account.*", Lane.LOCAL, h.recorder.handler)
    context = deploy(h, [deployed])

    for select in ({"tenant": "acme"}, {"event_ids": [event.id]}):
        with pytest.raises(OperationRefusedError, match=because):
            plan_replay(context, **select)  # type: ignore[arg-type]

    assert h.claim_status(AUDIT, event) == DEAD
    assert open_letters(h) == [(event.id, AUDIT)]
    # The one command that moves it: acknowledged, final
    skip(context, "acme", AUDIT, event.seq, by="oncall", reason="no longer ours")
    assert (h.claim_status(AUDIT, event), open_letters(h)) == ("SKIPPED", [])


def test_a_replay_that_raced_a_narrowing_deploy_is_dead_again_with_an_open_letter_not_replaying_for_ever(
    make_harness: HarnessFactory,
) -> None:
    # Given a replay planned and sent under the old catalog
    h, event = dead_unordered(make_harness)
    replay(operator_context(h), plan_replay(operator_context(h), tenant="acme"))
    assert open_letters(h) == []  # the replay resolved it: the message is on its way

    # When a deploy narrows the subscription before the message is received
    context = deploy(h, [Subscription(AUDIT, "account.credited", Lane.DURABLE, h.recorder.handler)])
    h.esm.drain()

    # Then nothing ran it, and it is dead again with a letter that says why (status and groups show it)
    assert h.runs(AUDIT, event) == 1
    assert h.claim_status(AUDIT, event) == DEAD
    assert open_letters(h) == [(event.id, AUDIT)]
    (letter,) = [row for row in h.dead_letters() if "resolved" not in row]
    assert (letter["reason"]["S"], letter["error_type"]["S"]) == ("left_out", "LeftOutByDeploy")
    assert "matches 'account.credited' now" in letter["error"]["S"]
    assert reconcile(context, h.clock() - timedelta(hours=1)).republished == []


# -- 4: a dead pair from before ordered_since -----------------------------------------------------------------


def test_a_dead_pair_from_before_the_order_s_start_can_be_skipped(make_harness: HarnessFactory) -> None:
    # Given a ledger pair that died while the ledger was unordered
    h, event = dead_unordered_ledger(make_harness)
    # When the ledger is made ordered from a later moment
    h.clock.advance(1)
    since = h.clock()
    h.clock.advance(1)
    context = deploy(h, [ledger(h, ordered=True, ordered_since=since)])

    # Then the operator can acknowledge it without running it: not through the order, which it is not part of
    result = skip(context, "acme", LEDGER, event.seq, by="oncall", reason="booked by hand")
    assert (result.already, result.woke_seq) == (False, None)
    assert h.claim_status(LEDGER, event) == "SKIPPED"
    assert open_letters(h) == []
    assert watermark(h).applied_seq == 0, "the order never heard of it"


def dead_unordered_ledger(make_harness: HarnessFactory) -> tuple[Harness, Envelope]:
    def subscriptions(recorder: Recorder) -> list[Subscription]:
        recorder.behaviours[LEDGER] = lambda _d: (_ for _ in ()).throw(TerminalError("closed"))
        return [recorder.subscription(LEDGER, "account.*")]

    h = make_harness(subscriptions)
    event = emit(h)
    h.publish(event)
    h.esm.drain()
    assert h.claim_status(LEDGER, event) == DEAD
    return h, event


# -- 6: a deploy that takes deferred events out of the order --------------------------------------------------


def test_deferred_events_of_a_subscription_made_unordered_are_named_by_status_and_run_once(
    make_harness: HarnessFactory,
) -> None:
    # Given seq 2 deferred behind a dead seq 1
    h, applied, _first, second = dead_then_deferred(make_harness)
    # When a deploy makes the ledger unordered, and the dead predecessor is replayed after the fix
    h.recorder.behaviours[LEDGER] = applied
    del applied.fail[1]
    context = deploy(h, [ledger(h)])
    replay(context, plan_replay(context, tenant="acme"))
    h.esm.drain()
    assert applied.seqs == {"acme": [1]}, "the replay ran seq 1 unordered, which wakes nothing"

    # Then status names seq 2, which no wake-up will reach, and the command that moves it
    (stranded,) = blocked(context)
    assert (stranded.subscription, stranded.waits_for_seq, stranded.waits_for_state) == (LEDGER, 2, OUT_OF_ORDER)
    assert "outbox reconcile --tenant acme --subscription ledger.fold" in stranded.hint
    status_lines = Status(queues={}, pipes={}, tenants=[], poison_pills_today=0, blocked=[stranded]).problems()
    assert any("no wake-up will come" in line for line in status_lines)

    # When the operator runs it, it runs once, and nothing is left deferred
    reconcile(context, None, subscription=LEDGER)
    h.esm.drain()
    assert applied.seqs == {"acme": [1, 2]}
    assert h.claim_status(LEDGER, second) == "COMPLETED"
    assert blocked(context) == []
    assert reconcile(context, None, subscription=LEDGER).republished == []
    assert_counted(h)


def test_a_deferred_event_replayed_by_id_after_the_order_was_dropped_runs_once(make_harness: HarnessFactory) -> None:
    h, applied, _first, second = dead_then_deferred(make_harness)
    h.recorder.behaviours[LEDGER] = applied
    context = deploy(h, [ledger(h)])

    replay(context, plan_replay(context, event_ids=[second.id], subscription=LEDGER))
    h.esm.drain()

    assert applied.seqs == {"acme": [2]}
    assert blocked(context) == []
    assert_counted(h)


def test_a_deferred_event_still_in_its_order_is_not_replayed_by_id(make_harness: HarnessFactory) -> None:
    h, _applied, _first, second = dead_then_deferred(make_harness)
    with pytest.raises(OperationRefusedError, match="waits in tenant acme's order for seq 1"):
        plan_replay(operator_context(h), event_ids=[second.id], subscription=LEDGER)


def moved_start(make_harness: HarnessFactory) -> tuple[Harness, Applied, Envelope, Envelope, OperatorContext]:
    """seq 2 deferred behind a dead seq 1; then a deploy moves ordered_since past both."""
    h, applied, first, second = dead_then_deferred(make_harness)
    h.clock.advance(1)
    since = h.clock()
    h.clock.advance(1)
    context = deploy(h, [ledger(h, ordered=True, ordered_since=since)])
    h.recorder.behaviours[LEDGER] = applied
    return h, applied, first, second, context


def test_ordered_since_moved_past_a_deferred_event_is_named_and_reconciled_the_unordered_way(
    make_harness: HarnessFactory,
) -> None:
    h, applied, first, second, context = moved_start(make_harness)

    # Status names seq 2, and reconcile runs it once, the unordered way; seq 1 is acknowledged
    (stranded,) = blocked(context)
    assert (stranded.waits_for_seq, stranded.waits_for_state) == (2, OUT_OF_ORDER)
    reconcile(context, None, subscription=LEDGER)
    h.esm.drain()
    skip(context, "acme", LEDGER, first.seq, by="oncall", reason="before the order")

    assert applied.seqs == {"acme": [2]}
    assert (h.claim_status(LEDGER, second), h.effects(LEDGER, second)) == ("COMPLETED", 1)
    assert blocked(context) == []
    assert open_letters(h) == []
    assert watermark(h).applied_seq == 0, "neither is part of the order"
    assert_counted(h)


def test_ordered_since_moved_past_a_deferred_event_the_next_completion_sends_it_the_unordered_way(
    make_harness: HarnessFactory,
) -> None:
    h, applied, _first, second, context = moved_start(make_harness)
    third = emit(h, "account.credited")
    h.publish(third)
    h.esm.drain()

    # The order's first completion wakes seq 2, which is not part of the order: it runs from its wake-up, once,
    # the unordered way, and never moves the watermark (nor is it taken for applied because the watermark is past)
    assert applied.seqs == {"acme": [3, 2]}
    assert (h.claim_status(LEDGER, second), h.effects(LEDGER, second)) == ("COMPLETED", 1)
    assert watermark(h).applied_seq == 3
    assert blocked(context) == []
    assert_counted(h)


def test_ordered_since_moved_past_a_deferred_event_the_next_completion_wakes_it_and_the_one_waiting_in_the_order(
    make_harness: HarnessFactory,
) -> None:
    # Given seq 2 deferred behind a dead seq 1, a deploy that moves ordered_since past both, and seq 4 deferred
    # behind seq 3 in the order as deployed
    h, applied, _first, second, context = moved_start(make_harness)
    third, fourth = emit(h, "account.credited"), emit(h, "account.credited")
    h.publish(fourth)
    h.esm.drain()
    assert h.claim_status(LEDGER, fourth) == DEFERRED

    # When seq 3 completes
    h.publish(third)
    h.esm.drain()

    # Then its wake-up passes seq 2 (no longer in the order: sent to run the unordered way) and goes on to seq 4,
    # which waited for seq 3: before, the lowest deferred row took the one wake-up and seq 4 waited for ever
    assert applied.seqs == {"acme": [3, 4, 2]}
    assert [h.claim_status(LEDGER, one) for one in (second, third, fourth)] == ["COMPLETED"] * 3
    assert watermark(h).applied_seq == 4
    assert blocked(context) == []
    assert_counted(h)


def test_ordered_since_moved_past_a_deferred_event_a_skip_wakes_it_and_the_one_waiting_in_the_order(
    make_harness: HarnessFactory,
) -> None:
    # Given seq 2 deferred behind a dead seq 1, a deploy that moves ordered_since past both, and in the order as
    # deployed a dead seq 3 with seq 4 deferred behind it
    h, applied, _first, second, context = moved_start(make_harness)
    third, fourth = emit(h, "account.credited"), emit(h, "account.credited")
    applied.fail[third.seq] = lambda: TerminalError("unknown account")
    h.publish(fourth)
    h.publish(third)
    h.esm.drain()
    assert (h.claim_status(LEDGER, third), h.claim_status(LEDGER, fourth)) == (DEAD, DEFERRED)

    # When the operator skips seq 3
    result = skip(context, "acme", LEDGER, third.seq, by="oncall", reason="the account never existed")
    h.esm.drain()

    # Then its wake-up passes seq 2 (no longer in the order: sent to run the unordered way) and goes on to seq 4
    assert result.woke_seq == second.seq
    assert applied.seqs == {"acme": [2, 4]}
    assert [h.claim_status(LEDGER, one) for one in (second, fourth)] == ["COMPLETED"] * 2
    assert watermark(h).applied_seq == 4
    assert blocked(context) == []


def test_a_reconciled_out_of_order_event_keeps_its_place_in_status_until_the_consumer_runs_it(
    make_harness: HarnessFactory,
) -> None:
    # Given seq 2 deferred behind a dead seq 1, and a deploy that makes the ledger unordered
    h, applied, _first, second = dead_then_deferred(make_harness)
    h.recorder.behaviours[LEDGER] = applied
    context = deploy(h, [ledger(h)])

    # When reconcile sends it, and nothing has received the message yet (the reconcile may stop right here)
    assert reconcile(context, None, subscription=LEDGER).republished == [second.id]

    # Then it is still named, with its row and count: an interruption leaves it for the next reconcile
    assert [one.waits_for_seq for one in blocked(context)] == [2]
    assert_counted(h, waiting=1)
    # And once the consumer runs it, the row and the count leave the order together (with what its role allows)
    with granted_to_the_consumer(h):
        h.esm.drain()
    assert applied.seqs == {"acme": [2]}
    assert blocked(context) == []
    assert_counted(h)


def test_a_woken_event_the_narrowed_order_no_longer_has_is_never_run_in_place(make_harness: HarnessFactory) -> None:
    # Given seq 2 (account.opened) deferred behind a dead seq 1 (account.credited)
    h, applied, first, second = dead_then_deferred(make_harness, ("account.credited", "account.opened"))

    # When a deploy narrows the ledger to account.credited, and seq 1 is replayed after the fix
    del applied.fail[1]
    context = deploy(h, [ledger(h, "account.credited", ordered=True)])
    replay(context, plan_replay(context, event_ids=[first.id], subscription=LEDGER))
    h.esm.drain()

    # Then seq 1's completion wakes seq 2, which the ledger no longer runs: never run (not in place, not from its
    # wake-up), dead with a letter that says why, and out of the order with its count
    assert applied.seqs == {"acme": [1]}
    assert h.claim_status(LEDGER, second) == DEAD
    assert open_letters(h) == [(second.id, LEDGER)]
    assert_counted(h)
    assert blocked(context) == []


def test_a_run_under_way_when_a_deploy_leaves_it_out_is_dead_with_a_letter_and_its_order_goes_on(
    make_harness: HarnessFactory,
) -> None:
    # Given seq 2 and seq 3 (account.opened) deferred behind seq 1 (account.credited), and a worker killed inside
    # seq 2's handler right after seq 1 completed: seq 2 is PENDING, its lease running, still in the order
    h, applied = ordered_harness(make_harness)
    first, second, third = emit(h, "account.credited"), emit(h, "account.opened"), emit(h, "account.opened")
    h.publish(second)
    h.publish(third)
    h.esm.drain()
    crashes = iter([WorkerCrash("killed inside seq 2's handler")])
    applied.fail[2] = lambda: next(crashes, None)
    h.publish(first)
    assert h.esm.poll() is not None
    assert (h.claim_status(LEDGER, second), applied.seqs) == ("PENDING", {"acme": [1]})

    # When a deploy narrows the ledger to account.credited before anything else runs
    context = deploy(h, [ledger(h, "account.credited", ordered=True)])
    with granted_to_the_consumer(h):
        h.esm.drain()

    # Then neither opened event runs, each is dead with a letter that says why (status and the failure groups show
    # it: nothing waits as if it were running), the order holds nothing, and each can be acknowledged
    assert applied.seqs == {"acme": [1]}
    assert (h.claim_status(LEDGER, second), h.claim_status(LEDGER, third)) == (DEAD, DEAD)
    assert open_letters(h) == sorted([(second.id, LEDGER), (third.id, LEDGER)])
    assert_counted(h)
    assert blocked(context) == []
    for event in (second, third):
        skip(context, "acme", LEDGER, event.seq, by="oncall", reason="no longer ours")
    assert open_letters(h) == []


def test_a_pair_acknowledged_outside_the_order_is_skipped_in_it_once_a_deploy_orders_it_again(
    make_harness: HarnessFactory,
) -> None:
    # Given seq 2 deferred behind a dead seq 1, the ledger moved to LOCAL, and seq 1 acknowledged there
    h, applied, first, _second = dead_then_deferred(make_harness)
    h.recorder.behaviours[LEDGER] = applied
    del applied.fail[1]
    local = deploy(h, [Subscription(LEDGER, "account.*", Lane.LOCAL, h.recorder.handler)])
    skip(local, "acme", LEDGER, first.seq, by="oncall", reason="booked by hand")
    assert (h.claim_status(LEDGER, first), watermark(h).applied_seq) == ("SKIPPED", 0)

    # When a deploy orders the ledger again: its watermark never heard of that skip
    context = deploy(h, [ledger(h, ordered=True)])

    # Then status names the skip that moves the order past seq 1, and seq 2 runs once after it
    (stuck,) = blocked(context)
    assert (stuck.waits_for_seq, stuck.waits_for_state) == (1, "SKIPPED")
    assert "outbox skip --tenant acme --subscription ledger.fold --seq 1" in stuck.hint
    result = skip(context, "acme", LEDGER, first.seq, by="oncall", reason="booked by hand")
    h.esm.drain()
    assert (result.already, result.woke_seq) == (False, 2)
    assert applied.seqs == {"acme": [2]}
    assert watermark(h).applied_seq == 2
    assert blocked(context) == []
    assert_counted(h)


# -- a run cut short by a deploy that leaves it out: its own message no longer names it --------------------------


def crashed_unordered(make_harness: HarnessFactory) -> tuple[Harness, Envelope]:
    """The audit pair of one account.opened event: its worker killed inside the handler, so it is PENDING."""
    crashes = iter([WorkerCrash("killed inside the handler")])

    def subscriptions(recorder: Recorder) -> list[Subscription]:
        recorder.behaviours[AUDIT] = lambda _d: _raise(next(crashes, None))
        return [recorder.subscription(AUDIT, "account.*"), recorder.subscription(LEDGER, "account.*")]

    h = make_harness(subscriptions)
    event = emit(h, "account.opened")
    h.publish(event)
    assert h.esm.poll() is not None
    assert h.claim_status(AUDIT, event) == "PENDING"
    return h, event


def _raise(error: BaseException | None) -> None:
    if error is not None:
        raise error


@pytest.mark.parametrize(
    ("change", "because"),
    [("narrowed", "matches 'account.credited' now"), ("moved to LOCAL", "on the LOCAL lane now"), ("removed", "")],
)
def test_a_run_a_deploy_left_out_whose_own_message_no_longer_names_it_is_made_dead_by_a_window_reconcile(
    make_harness: HarnessFactory, change: str, because: str
) -> None:
    # Given an audit pair PENDING (its run cut short), when a deploy leaves audit out of the event
    h, event = crashed_unordered(make_harness)
    kept = [Subscription(LEDGER, "account.*", Lane.DURABLE, h.recorder.handler)]
    changed = {
        "narrowed": [Subscription(AUDIT, "account.credited", Lane.DURABLE, h.recorder.handler)],
        "moved to LOCAL": [Subscription(AUDIT, "account.*", Lane.LOCAL, h.recorder.handler)],
        "removed": [],
    }[change]
    context = deploy(h, [*kept, *changed])

    # and the event's own message comes back and is done with: it names no pair the catalog still gives audit
    h.clock.advance(7200)
    with granted_to_the_consumer(h):
        h.esm.drain()
    assert (h.claim_status(AUDIT, event), h.queue_depth(h.queue_url)) == ("PENDING", 0)

    # Then a window reconcile re-sends to that pair alone (what it sends is told to whoever listens, as it is sent),
    # and its message makes it dead with a letter that says why
    told: list[tuple[str, list[str], str]] = []
    context.sending.append(lambda *sent: told.append(sent))
    result = reconcile(context, h.clock() - timedelta(hours=3))
    assert result.subscriptions == {event.id: [AUDIT]}
    assert told == [(event.id, [AUDIT], "reconcile")]
    with granted_to_the_consumer(h):
        h.esm.drain()
    assert h.runs(AUDIT, event) == 1, "a pair the catalog no longer runs was run"
    assert (h.claim_status(AUDIT, event), open_letters(h)) == (DEAD, [(event.id, AUDIT)])
    (letter,) = [row for row in h.dead_letters() if "resolved" not in row]
    assert (letter["reason"]["S"], letter["error_type"]["S"]) == ("left_out", "LeftOutByDeploy")
    assert because in letter["error"]["S"]
    # and the one command that moves it on acknowledges it; a reconcile again sends nothing
    skip(context, "acme", AUDIT, event.seq, by="oncall", reason="no longer ours")
    assert (h.claim_status(AUDIT, event), open_letters(h)) == ("SKIPPED", [])
    assert reconcile(context, h.clock() - timedelta(hours=3)).republished == []


def test_a_run_a_deploy_left_out_is_not_re_sent_while_its_lease_is_live(make_harness: HarnessFactory) -> None:
    h, event = crashed_unordered(make_harness)
    context = deploy(h, [Subscription(LEDGER, "account.*", Lane.DURABLE, h.recorder.handler)])
    result = reconcile(context, h.clock() - timedelta(hours=1))
    assert result.subscriptions == {event.id: [LEDGER]}, "only the ledger pair, which never got a claim"
    assert h.claim_status(AUDIT, event) == "PENDING"


def test_reconciling_one_subscription_over_a_window_leaves_the_events_it_does_not_match_alone(
    make_harness: HarnessFactory,
) -> None:
    # Given a narrow audit subscription and events of a type it does not run
    def subscriptions(recorder: Recorder) -> list[Subscription]:
        return [recorder.subscription(AUDIT, "account.credited")]

    h = make_harness(subscriptions)
    opened, credited = emit(h, "account.opened"), emit(h, "account.credited")

    # When the operator reconciles audit over a window (both messages were lost)
    result = reconcile(operator_context(h), h.clock() - timedelta(hours=1), subscription=AUDIT)
    h.esm.drain()

    # Then only the event audit runs was re-sent and ran; the other has no claim and no dead letter
    assert result.subscriptions == {credited.id: [AUDIT]}
    assert (h.runs(AUDIT, credited), h.claim_status(AUDIT, opened)) == (1, None)
    assert open_letters(h) == []


# -- an ordered subscription widened behind its own watermark ------------------------------------------------------


def widened_behind_the_watermark(make_harness: HarnessFactory) -> tuple[Harness, Applied, Envelope, Envelope]:
    """The ledger ordered on account.credited only: an account.opened (seq 1) is acknowledged, matched by nothing;
    a credit (seq 2) runs and moves the watermark to 2. Then a deploy widens the ledger to account.*: seq 1 is in
    the order now, below a watermark that went past it while the order did not hold it."""
    h, applied = ordered_harness(make_harness, pattern="account.credited")
    opened, credited = emit(h, "account.opened"), emit(h, "account.credited")
    h.publish(opened)
    h.publish(credited)
    h.esm.drain()
    assert (applied.seqs, watermark(h).applied_seq, h.claim_status(LEDGER, opened)) == ({"acme": [2]}, 2, None)
    deploy(h, [ledger(h, "account.*", ordered=True)])
    return h, applied, opened, credited


def test_an_event_a_widened_order_holds_below_its_watermark_runs_once_when_reconciled(
    make_harness: HarnessFactory,
) -> None:
    # Given seq 1 newly in the order, below the watermark, with no claim (nothing ever ran it)
    h, applied, opened, _ = widened_behind_the_watermark(make_harness)
    context = operator_context(h, [ledger(h, "account.*", ordered=True)])

    # When the operator reconciles the window (no claim where the deployed catalog runs the pair)
    result = reconcile(context, h.clock() - timedelta(hours=1))
    h.esm.drain()

    # Then it ran once, out of the order that went past it; it was never taken as applied with nothing run
    assert result.subscriptions == {opened.id: [LEDGER]}
    assert applied.seqs == {"acme": [2, 1]}
    assert (h.claim_status(LEDGER, opened), h.runs(LEDGER, opened)) == ("COMPLETED", 1)
    assert watermark(h).applied_seq == 2
    assert open_letters(h) == []


def test_a_late_copy_of_an_event_a_widened_order_holds_below_its_watermark_runs_once(
    make_harness: HarnessFactory,
) -> None:
    # Given seq 1 newly in the order, below the watermark, with no claim
    h, applied, opened, _ = widened_behind_the_watermark(make_harness)

    # When the relay delivers it again (a copy SQS has not seen), twice
    h.publish(opened, dedup_id=f"{opened.id}-late")
    h.esm.drain()
    h.publish(opened, dedup_id=f"{opened.id}-later")
    h.esm.drain()

    # Then it ran once: the first copy ran it, the second found it done
    assert applied.seqs == {"acme": [2, 1]}
    assert (h.claim_status(LEDGER, opened), h.runs(LEDGER, opened)) == ("COMPLETED", 1)


def test_a_reconcile_of_a_log_nobody_emitted_to_scans_nothing_and_succeeds(make_harness: HarnessFactory) -> None:
    """A new stack, or one whose every emit was refused, after a route deploy: the window reconcile the runbook
    (and ``outbox status``) names finds nothing to re-send and says so; it is not refused (soak seed 7330551:
    the operator following status was told "there are no tenants"). A tenant named that has no log is."""
    h = make_harness(lambda recorder: [recorder.subscription(AUDIT, "account.*")])
    context = deploy(h, [ledger(h)])
    result = reconcile(context, h.clock() - timedelta(hours=1))
    assert (result.scanned, result.republished, result.already_handled) == (0, [], 0)
    with pytest.raises(OperationRefusedError, match="nobody"):
        reconcile(context, h.clock() - timedelta(hours=1), tenant="nobody")
