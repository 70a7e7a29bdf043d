"""The durable consumer end to end on moto: real SQS FIFO messages, the real Powertools processor, the
inbox claim. Each test is one guarantee of docs/concepts.md's "The inbox claim" that would fail if the guarantee
broke."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from outbox import FollowUp, HandlerResult, Lane, TerminalError, writes
from outbox.subscriptions import Delivery, Subscription
from tests.functional.conftest import EVENTS_TABLE, ORDERS_TABLE
from tests.functional.inbox_harness import (
    MAX_ATTEMPTS,
    HarnessFactory,
    Recorder,
    WorkerCrash,
    one_subscription,
)


def fail_times(times: int, error: BaseException) -> Callable[[Delivery], None]:
    remaining = {"left": times}

    def behaviour(_delivery: Delivery) -> None:
        if remaining["left"] > 0:
            remaining["left"] -= 1
            raise error

    return behaviour


def test_a_worker_killed_between_claim_and_complete_is_taken_over_on_redelivery(
    make_harness: HarnessFactory,
) -> None:
    h = make_harness(one_subscription)
    h.recorder.behaviours["shipping.book"] = fail_times(1, WorkerCrash("killed after the claim"))
    event = h.emit()

    results = h.esm.drain()

    assert isinstance(results[0].crashed, WorkerCrash)
    assert h.runs("shipping.book", event) == 2, "ran once, crashed, ran again after the lease expired"
    assert h.effects("shipping.book", event) == 1, "completed once"
    assert h.claim_status("shipping.book", event) == "COMPLETED"
    assert h.dead_letters() == []
    assert h.queue_depth(h.queue_url) == 0


def test_a_handler_that_fails_once_succeeds_on_the_second_receive(make_harness: HarnessFactory) -> None:
    h = make_harness(one_subscription)
    h.recorder.behaviours["shipping.book"] = fail_times(1, ConnectionError("503 from the carrier"))
    event = h.emit()

    h.esm.drain()

    assert h.runs("shipping.book", event) == 2
    assert h.effects("shipping.book", event) == 1
    assert h.claim_status("shipping.book", event) == "COMPLETED"
    assert h.dead_letters() == []


def test_a_handler_failing_on_every_attempt_is_dead_after_its_attempts_and_the_message_is_acknowledged(
    make_harness: HarnessFactory,
) -> None:
    h = make_harness(one_subscription)
    h.recorder.behaviours["shipping.book"] = fail_times(99, TimeoutError("carrier down"))
    event = h.emit()

    h.esm.drain()

    assert h.runs("shipping.book", event) == MAX_ATTEMPTS, "the claim's attempts are the retry policy"
    assert h.effects("shipping.book", event) == 0
    assert h.claim_status("shipping.book", event) == "DEAD"
    [dead] = h.dead_letters()
    assert dead["reason"]["S"] == "exhausted"
    assert dead["error_type"]["S"] == "TimeoutError"
    assert dead["subscription"]["S"] == "shipping.book"
    assert int(dead["attempts"]["N"]) == MAX_ATTEMPTS
    assert h.queue_depth(h.queue_url) == 0
    assert h.dlq_bodies() == [], "the dead letter is the record; the DLQ is only a transport backstop"


def test_a_terminal_error_is_dead_at_once_and_never_retried(make_harness: HarnessFactory) -> None:
    h = make_harness(one_subscription)
    h.recorder.behaviours["shipping.book"] = fail_times(99, TerminalError("address does not exist"))
    event = h.emit()

    h.esm.drain()

    assert h.runs("shipping.book", event) == 1
    assert h.claim_status("shipping.book", event) == "DEAD"
    [dead] = h.dead_letters()
    assert dead["reason"]["S"] == "terminal"
    assert "address does not exist" in dead["error"]["S"]
    assert h.queue_depth(h.queue_url) == 0
    assert h.dlq_bodies() == [], "handled: the inbox holds the dead letter, the message is done"


def test_a_validation_error_in_a_handler_is_terminal(make_harness: HarnessFactory) -> None:
    from pydantic import BaseModel

    class Shipment(BaseModel):
        address: str

    h = make_harness(one_subscription)
    h.recorder.behaviours["shipping.book"] = lambda d: Shipment.model_validate(d.envelope.payload) and None
    event = h.emit(n=1)

    h.esm.drain()

    assert h.runs("shipping.book", event) == 1
    assert h.dead_letters()[0]["error_type"]["S"] == "ValidationError"


def four_subscriptions(recorder: Recorder) -> list[Subscription]:
    return [
        recorder.subscription("storefront.mirror_order", "payment.completed"),
        recorder.subscription("shipping.book", "payment.completed"),
        recorder.subscription("notify.buyer", "payment.*"),
        recorder.subscription("pet_tag.mark_ordered", "payment.completed"),
    ]


def test_fan_out_runs_each_subscription_once_and_redelivery_reruns_only_the_failing_one(
    make_harness: HarnessFactory,
) -> None:
    h = make_harness(four_subscriptions)
    h.recorder.behaviours["storefront.mirror_order"] = fail_times(2, ConnectionError("storefront 503"))
    event = h.emit("payment.completed")

    h.esm.drain()

    assert h.runs("storefront.mirror_order", event) == 3
    for name in ("shipping.book", "notify.buyer", "pet_tag.mark_ordered"):
        assert h.runs(name, event) == 1, f"{name} must not rerun because a sibling failed"
    for name in ("storefront.mirror_order", "shipping.book", "notify.buyer", "pet_tag.mark_ordered"):
        assert h.effects(name, event) == 1
        assert h.claim_status(name, event) == "COMPLETED"


def test_the_same_event_delivered_twice_runs_each_effect_once(make_harness: HarnessFactory) -> None:
    h = make_harness(four_subscriptions)
    event = h.emit("payment.completed")
    h.esm.drain()
    h.publish(event, dedup_id=f"{event.id}-replayed")  # the same event under a new message id

    h.esm.drain()

    for name in ("storefront.mirror_order", "shipping.book", "notify.buyer", "pet_tag.mark_ordered"):
        assert (h.runs(name, event), h.effects(name, event)) == (1, 1)


def test_the_same_message_handed_to_the_function_twice_runs_each_effect_once(make_harness: HarnessFactory) -> None:
    h = make_harness(one_subscription)
    event = h.emit()
    message = h.sqs.receive_message(QueueUrl=h.queue_url, MessageSystemAttributeNames=["All"])["Messages"][0]
    batch = {"Records": [h.esm._record(message)]}

    from outbox.local.lambda_context import LocalLambdaContext

    first = h.consumer.handle(batch, LocalLambdaContext("fn", h.esm.function_timeout, h.clock))
    second = h.consumer.handle(batch, LocalLambdaContext("fn", h.esm.function_timeout, h.clock))

    assert first == second == {"batchItemFailures": []}
    assert (h.runs("shipping.book", event), h.effects("shipping.book", event)) == (1, 1)


def test_a_delivery_while_another_worker_holds_the_lease_is_not_acknowledged(make_harness: HarnessFactory) -> None:
    """The live owner may crash; if this copy were deleted, the effect would be lost with it."""
    from datetime import timedelta

    h = make_harness(one_subscription)
    event = h.emit()
    owner = h.inbox.claim(event, "shipping.book", timedelta(seconds=65))
    assert owner.claim is not None

    result = h.esm.poll()

    assert result is not None
    assert result.failed == result.received, "left for a later receive"
    assert h.runs("shipping.book", event) == 0
    # The owner dies; after the visibility timeout the lease is long gone and the work is taken over.
    h.esm.drain()
    assert (h.runs("shipping.book", event), h.effects("shipping.book", event)) == (1, 1)


def test_a_conflicting_payload_under_the_same_event_id_is_a_recorded_terminal_conflict(
    make_harness: HarnessFactory,
) -> None:
    h = make_harness(one_subscription)
    event = h.emit(amount=10)
    h.esm.drain()
    forged = event.model_copy(update={"payload": {"amount": 10_000}})
    forged = forged.model_copy(update={"hash": forged.computed_hash()})
    h.publish(forged, dedup_id=f"{event.id}-forged")

    h.esm.drain()

    assert h.runs("shipping.book", event) == 1, "the conflicting content never runs"
    assert h.claim_status("shipping.book", event) == "COMPLETED", "the original claim is untouched"
    [conflict] = h.dead_letters()
    assert conflict["reason"]["S"] == "conflict"
    # Refused before any claim: the events table holds the original at that seq, not this content.
    assert (conflict["logged_hash"]["S"], conflict["received_hash"]["S"]) == (event.hash, forged.hash)
    assert h.queue_depth(h.queue_url) == 0
    assert h.dlq_bodies() == []


def test_content_the_log_holds_but_another_claim_ran_is_a_conflict_of_digests(make_harness: HarnessFactory) -> None:
    """The inbox's own digest check stays, behind the log's: an operator rewrites an event row after its
    delivery, and a repair sends the row as the table now holds it."""
    h = make_harness(one_subscription)
    event = h.emit(amount=10)
    h.esm.drain()
    rewritten = event.model_copy(update={"payload": {"amount": 11}})
    rewritten = rewritten.model_copy(update={"hash": rewritten.computed_hash()})
    h.dynamodb.put_item(TableName=EVENTS_TABLE, Item=rewritten.to_item())
    h.publish(rewritten, dedup_id=f"{event.id}-repaired")

    h.esm.drain()

    assert h.runs("shipping.book", event) == 1
    [conflict] = h.dead_letters()
    assert (conflict["reason"]["S"], conflict["error_type"]["S"]) == ("conflict", "ConflictingPayload")
    assert conflict["stored_digest"]["S"] != conflict["received_digest"]["S"]


def test_poison_pills_are_recorded_and_never_block_the_tenants_group(make_harness: HarnessFactory) -> None:
    h = make_harness(one_subscription)
    h.send("this is not JSON", "acme", "poison-1")
    h.send(json.dumps({"hello": "world"}), "acme", "poison-2")
    event = h.emit()  # behind the two pills in acme's group

    h.esm.drain()

    pills = h.poison_pills()
    assert len(pills) == 2
    assert {p["body"]["S"] for p in pills} == {"this is not JSON", '{"hello": "world"}'}
    assert all(p["attributes"]["M"]["MessageGroupId"]["S"] == "acme" for p in pills)
    assert (h.runs("shipping.book", event), h.effects("shipping.book", event)) == (1, 1)
    assert h.queue_depth(h.queue_url) == 0
    assert h.dlq_bodies() == []


def test_a_handler_write_and_the_completion_commit_together_or_not_at_all(make_harness: HarnessFactory) -> None:
    h = make_harness(one_subscription)
    event = h.emit()
    # Something already occupies the effect row, so the handler's conditional write must fail.
    blocker = {"pk": {"S": f"EFFECT#{event.id}:shipping.book"}, "sk": {"S": "EFFECT"}}
    h.dynamodb.put_item(TableName=ORDERS_TABLE, Item=blocker)

    first = h.esm.poll()

    assert first is not None
    assert first.failed == first.received
    row = h.inbox.read_claim(event.id, "shipping.book")
    assert row is not None
    assert (row.status, row.lease_expires_at) == ("PENDING", datetime.fromtimestamp(0, UTC)), "released: retryable"
    assert "attempt" not in h.dynamodb.get_item(TableName=ORDERS_TABLE, Key=blocker)["Item"]

    h.dynamodb.delete_item(TableName=ORDERS_TABLE, Key=blocker)
    h.esm.drain()

    assert h.claim_status("shipping.book", event) == "COMPLETED"
    assert h.effects("shipping.book", event) == 1
    assert h.runs("shipping.book", event) == 2


def test_a_failure_stops_only_its_own_tenants_group(make_harness: HarnessFactory) -> None:
    h = make_harness(one_subscription)
    a1 = h.emit(tenant="tenant-a", n=1)
    a2 = h.emit(tenant="tenant-a", n=2)
    b1 = h.emit(tenant="tenant-b", n=1)
    b2 = h.emit(tenant="tenant-b", n=2)
    h.recorder.behaviours["shipping.book"] = lambda d: (
        (_ for _ in ()).throw(ConnectionError("down")) if (d.envelope.id == a1.id) else None
    )

    result = h.esm.poll()

    assert result is not None
    assert len(result.received) == 4
    assert len(result.failed) == 2, "a1 failed and a2, behind it in its group, is reported without running"
    assert h.runs("shipping.book", a2) == 0
    assert (h.effects("shipping.book", b1), h.effects("shipping.book", b2)) == (1, 1)
    assert h.claim_status("shipping.book", a2) is None


def test_ten_followers_behind_a_head_that_fails_four_times_all_run_once_and_nothing_is_dead(
    make_harness: HarnessFactory,
) -> None:
    # Given one tenant with a head and ten queued followers (more than one batch), and a head that fails
    # four times before it succeeds
    h = make_harness(one_subscription)
    events = [h.emit(n=n) for n in range(11)]
    head = events[0]
    failures = fail_times(4, TimeoutError("down"))
    h.recorder.behaviours["shipping.book"] = lambda d: failures(d) if d.envelope.id == head.id else None

    # When the queue drains
    h.esm.drain()

    # Then all eleven ran once to completion: waiting cost the followers time, not their attempts
    for event in events:
        assert h.claim_status("shipping.book", event) == "COMPLETED"
        assert h.effects("shipping.book", event) == 1
    assert h.runs("shipping.book", head) == 5
    assert [h.runs("shipping.book", e) for e in events[1:]] == [1] * 10
    assert h.dead_letters() == []
    assert h.dlq_bodies() == []


def test_a_follower_that_fails_once_after_a_long_wait_is_retried_not_dead(make_harness: HarnessFactory) -> None:
    # Given a head that succeeds only on its last attempt, and a follower whose first attempt fails
    h = make_harness(one_subscription)
    head, follower = h.emit(n=1), h.emit(n=2)
    head_failures = fail_times(MAX_ATTEMPTS - 1, TimeoutError("down"))
    follower_failures = fail_times(1, ConnectionError("503"))

    def behaviour(delivery: Delivery) -> None:
        (head_failures if delivery.envelope.id == head.id else follower_failures)(delivery)

    h.recorder.behaviours["shipping.book"] = behaviour

    # When the queue drains
    h.esm.drain()

    # Then the follower's one failure cost one attempt, although its receive count was already high
    assert h.claim_status("shipping.book", follower) == "COMPLETED"
    assert h.runs("shipping.book", follower) == 2
    assert h.dead_letters() == []


def test_followers_of_a_head_that_never_succeeds_run_once_after_it_is_dead(make_harness: HarnessFactory) -> None:
    h = make_harness(one_subscription)
    head, follower = h.emit(n=1), h.emit(n=2)
    h.recorder.behaviours["shipping.book"] = lambda d: (
        (_ for _ in ()).throw(TimeoutError("down")) if (d.envelope.id == head.id) else None
    )

    h.esm.drain()

    assert h.claim_status("shipping.book", head) == "DEAD"
    assert h.claim_status("shipping.book", follower) == "COMPLETED"
    assert h.runs("shipping.book", follower) == 1
    assert h.dlq_bodies() == []


@pytest.mark.parametrize(
    "broken",
    [
        pytest.param(lambda d: {"writes": []}, id="returns-a-dict"),
        pytest.param(lambda d: "done", id="returns-a-string"),
        pytest.param(lambda d: HandlerResult(writes=[{"Put": {"TableName": ORDERS_TABLE}}]), id="invalid-write"),
        pytest.param(lambda d: HandlerResult(follow_up=FollowUp("not a type!", {})), id="invalid-follow-up"),
        pytest.param(lambda d: HandlerResult(follow_up=FollowUp("x.y", {"n": 1e300})), id="number-out-of-range"),
        pytest.param(lambda d: HandlerResult(writes=[_effect(n) for n in range(100)]), id="too-many-writes"),
    ],
)
def test_a_handler_that_breaks_its_contract_is_a_terminal_dead_letter_at_once(
    make_harness: HarnessFactory, broken: Callable[[Delivery], object]
) -> None:
    # Given a handler whose result no retry can make acceptable
    runs: list[str] = []

    def handler(delivery: Delivery) -> object:
        runs.append(delivery.envelope.id)
        return broken(delivery)

    h = make_harness(lambda _r: [Subscription("shipping.book", "*", Lane.DURABLE, handler)])  # type: ignore[arg-type]
    event = h.emit()

    # When it is delivered
    h.esm.drain()

    # Then it ran once and is dead with a dead letter that says so; nothing is left in the queue or the DLQ
    assert runs == [event.id]
    assert h.claim_status("shipping.book", event) == "DEAD"
    [dead] = h.dead_letters()
    assert dead["reason"]["S"] == "terminal"
    assert h.queue_depth(h.queue_url) == 0
    assert h.dlq_bodies() == []


def _effect(n: int) -> dict[str, object]:
    return writes.put(ORDERS_TABLE, {"pk": f"MANY#{n}", "sk": "x"})


def test_a_worker_crashing_on_every_attempt_is_dead_without_a_further_run(make_harness: HarnessFactory) -> None:
    h = make_harness(one_subscription)
    h.recorder.behaviours["shipping.book"] = fail_times(99, WorkerCrash("killed"))
    event = h.emit()

    h.esm.drain()

    assert h.runs("shipping.book", event) == MAX_ATTEMPTS
    assert h.claim_status("shipping.book", event) == "DEAD"
    [dead] = h.dead_letters()
    assert dead["error_type"]["S"] == "UnfinishedAttemptsError"
    assert h.dlq_bodies() == []


def test_a_follow_up_event_commits_with_the_completion_and_carries_its_cause(make_harness: HarnessFactory) -> None:
    from outbox import FollowUp, HandlerResult, Lane

    def book(delivery: Delivery) -> HandlerResult:
        return HandlerResult(follow_up=FollowUp("shipment.booked", {"order": delivery.envelope.payload["n"]}))

    h = make_harness(lambda _r: [Subscription("shipping.book", "order.created", Lane.DURABLE, book)])
    event = h.emit(n=7)

    h.esm.drain()

    logged = list(h.store.events("acme"))
    assert [e.type for e in logged] == ["order.created", "shipment.booked"]
    follow_up = logged[1]
    assert (follow_up.causation_id, follow_up.correlation_id) == (event.id, event.correlation_id)
    assert follow_up.payload == {"order": 7}
    assert h.claim_status("shipping.book", event) == "COMPLETED"
    assert h.store.verify_chain("acme").intact


def test_a_follow_up_with_a_number_dynamodb_cannot_store_is_dead_at_once_with_the_reason(
    make_harness: HarnessFactory,
) -> None:
    from outbox import FollowUp, HandlerResult, Lane

    runs: list[int] = []

    def book(delivery: Delivery) -> HandlerResult:
        runs.append(delivery.attempt)
        return HandlerResult(follow_up=FollowUp("shipment.booked", {"order": 1e300}))

    h = make_harness(lambda _r: [Subscription("shipping.book", "order.created", Lane.DURABLE, book)])
    event = h.emit(n=7)

    h.esm.drain()

    assert runs == [1], "no retry can make 1e300 fit: dead on the first attempt"
    assert h.claim_status("shipping.book", event) == "DEAD"
    [dead] = h.dead_letters()
    assert dead["error_type"]["S"] == "InvalidEventError"
    # Its type and place; not its text, which repeats the value (outbox.redaction)
    assert dead["error"]["S"].startswith("InvalidEventError at ")
    assert "e+300" not in dead["error"]["S"]
    assert [e.type for e in h.store.events("acme")] == ["order.created"]


def test_a_pair_not_started_for_lack_of_time_comes_back_with_its_attempt_unspent(
    make_harness: HarnessFactory,
) -> None:
    # Given a subscription whose runs take 20 s, already seen once in this container
    def slow(_delivery: Delivery) -> None:
        h.clock.advance(20)

    def subscriptions(recorder: Recorder) -> list[Subscription]:
        recorder.behaviours["shipping.book"] = slow
        return [recorder.subscription("shipping.book")]

    h = make_harness(subscriptions)
    h.emit(tenant="warmup")
    h.esm.drain()

    # When one batch holds three tenants' events: two runs fit in the 60 s function, a third would not
    batch = [h.emit(tenant=tenant) for tenant in ("acme", "globex", "initech")]
    first = h.esm.poll()

    # Then the third is not started (no claim, no attempt) instead of being stopped at the deadline
    assert first is not None
    assert first.crashed is None
    assert [h.claim_status("shipping.book", e) for e in batch] == ["COMPLETED", "COMPLETED", None]
    h.esm.drain()
    assert h.claim_status("shipping.book", batch[2]) == "COMPLETED"
    assert h.inbox.read_claim(batch[2].id, "shipping.book").attempts == 1  # type: ignore[union-attr]


def test_a_handler_with_lambdas_signature_is_dead_at_once_naming_it_not_the_engine(
    make_harness: HarnessFactory,
) -> None:
    def record_sale(event: Any, context: Any) -> None:  # Lambda's habit: the engine passes one Delivery
        raise AssertionError("never called")

    h = make_harness(lambda _recorder: [Subscription("shop.record_sale", "*", Lane.DURABLE, record_sale)])
    event = h.emit()

    h.esm.drain()

    [dead] = h.dead_letters()
    assert dead["reason"]["S"] == "terminal", "no retry can bind it: not retried as a transient failure"
    assert dead["attempts"]["N"] == "1"
    assert h.claim_status("shop.record_sale", event) == "DEAD"
    error = dead["error"]["S"]
    assert error.startswith("ContractViolationError: subscription 'shop.record_sale': its handler ")
    assert ".record_sale(event, context) at " in error
    assert f"{__file__}:" in error, "where the user's handler is, not attempts.py"
    assert "attempts.py" not in error
