"""A message's own hash proves nothing about where it came from: the durable consumer runs an event only when the
events table holds it, with that hash, at its (tenant, seq). A forged message is refused and recorded, never run
(docs/security.md, "The consumer confirms each event against the log")."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from botocore.awsrequest import AWSResponse

from outbox import Envelope, EventStore
from outbox.local.lambda_context import LocalLambdaContext
from outbox.subscriptions import Subscription
from tests.functional.conftest import EVENTS_TABLE, create_pk_sk_table
from tests.functional.inbox_harness import Harness, HarnessFactory, Recorder, one_subscription


def forged_event(h: Harness, tenant: str = "acme", seq: int = 3) -> Envelope:
    """An event exactly as emit() would make it (a valid hash, a real chain), but emitted into another table:
    the pipeline's events table never held it."""
    create_pk_sk_table(h.dynamodb, "elsewhere")
    elsewhere = EventStore("elsewhere", client=h.dynamodb, unchecked=True)
    forged = [elsewhere.emit("order.created", {"amount": 10_000}, tenant=tenant, actor="forger") for _ in range(seq)]
    return forged[-1]


def test_a_forged_event_with_a_valid_hash_is_refused_recorded_and_never_run(make_harness: HarnessFactory) -> None:
    h = make_harness(one_subscription)
    forged = forged_event(h)
    assert forged.computed_hash() == forged.hash, "it would pass the consumer's own hash check"
    h.publish(forged)
    real = h.emit()  # behind it in the tenant's group

    h.esm.drain()

    assert h.runs("shipping.book", forged) == 0
    assert h.claim_status("shipping.book", forged) is None, "no claim is taken for it"
    [refusal] = h.dead_letters()
    assert (refusal["reason"]["S"], refusal["error_type"]["S"]) == ("conflict", "NotInEventLog")
    assert (refusal["event_id"]["S"], refusal["received_hash"]["S"], refusal["logged_hash"]["S"]) == (
        forged.id,
        forged.hash,
        "",
    )
    assert "has no event at seq 3 of tenant acme" in refusal["error"]["S"]
    # Acknowledged: it blocks nothing, and the event the log holds runs as usual.
    assert (h.runs("shipping.book", real), h.effects("shipping.book", real)) == (1, 1)
    assert h.queue_depth(h.queue_url) == 0
    assert h.dlq_bodies() == []


def test_each_batch_reads_the_rows_of_its_messages_at_once_and_only_those_that_would_run(
    make_harness: HarnessFactory,
) -> None:
    def two_on_orders(recorder: Recorder) -> list[Subscription]:
        return [recorder.subscription("shipping.book", "order.*"), recorder.subscription("notify.buyer", "order.*")]

    h = make_harness(two_on_orders)
    batches: list[dict[str, Any]] = []
    single: list[dict[str, Any]] = []

    def record_batch(params: dict[str, Any], **_: Any) -> None:
        batches.append(params)

    def record_single(params: dict[str, Any], **_: Any) -> None:
        if params["TableName"] == EVENTS_TABLE and params["Key"]["pk"]["S"].endswith("#EVENT"):
            single.append(params)

    h.emit("order.created", n=1)
    h.emit("order.created", n=2)
    h.emit("payment.completed")  # matches nothing: nothing to confirm
    h.dynamodb.meta.events.register("provide-client-params.dynamodb.BatchGetItem", record_batch)
    h.dynamodb.meta.events.register("provide-client-params.dynamodb.GetItem", record_single)

    h.esm.drain()

    [read] = batches  # one request for the batch, however many messages and subscriptions it holds
    request = read["RequestItems"][EVENTS_TABLE]
    assert request["ConsistentRead"] is True
    assert sorted(key["sk"]["S"] for key in request["Keys"]) == ["00000000000000000001", "00000000000000000002"]
    assert single == []


def throttled_reads(times: int) -> Callable[..., tuple[AWSResponse, dict[str, Any]] | None]:
    """A before-call hook that answers the next ``times`` reads of an event row with a throttle."""
    left = {"n": times}

    def throttle(params: dict[str, Any], **_: Any) -> tuple[AWSResponse, dict[str, Any]] | None:
        request = json.loads(params["body"] or b"{}")  # before-call sees the serialized request
        if "#EVENT" in json.dumps(request.get("Key") or request.get("RequestItems")) and left["n"]:
            left["n"] -= 1
            error = {"Code": "ThrottlingException", "Message": "Rate of requests exceeds the allowed throughput"}
            return AWSResponse("https://dynamodb", 400, {}, None), {
                "Error": error,
                "ResponseMetadata": {"HTTPStatusCode": 400},
            }
        return None

    throttle.left = left  # type: ignore[attr-defined]
    return throttle


def test_a_read_that_fails_is_retried_never_taken_for_a_forgery(make_harness: HarnessFactory) -> None:
    h = make_harness(one_subscription)
    event = h.emit()
    # Every read of the row fails for a while: the batch's read, then the message's own read and the SDK's
    # retries of it; the message comes back, and its next receive reads the row.
    throttle = throttled_reads(10)
    h.dynamodb.meta.events.register("before-call.dynamodb.BatchGetItem", throttle)
    h.dynamodb.meta.events.register("before-call.dynamodb.GetItem", throttle)

    h.esm.drain()

    assert throttle.left["n"] == 0  # type: ignore[attr-defined]
    assert (h.runs("shipping.book", event), h.effects("shipping.book", event)) == (1, 1)
    assert h.dead_letters() == []


def test_keys_the_batch_read_left_unprocessed_are_read_one_by_one(make_harness: HarnessFactory) -> None:
    h = make_harness(one_subscription)
    first, second = h.emit(), h.emit()
    single: list[str] = []

    def nothing_processed(params: dict[str, Any], **_: Any) -> tuple[AWSResponse, dict[str, Any]]:
        request = json.loads(params["body"] or b"{}")
        return AWSResponse("https://dynamodb", 200, {}, None), {
            "Responses": {},
            "UnprocessedKeys": request["RequestItems"],
            "ResponseMetadata": {"HTTPStatusCode": 200},
        }

    def record_single(params: dict[str, Any], **_: Any) -> None:
        if params["TableName"] == EVENTS_TABLE:
            single.append(params["Key"]["sk"]["S"])

    h.dynamodb.meta.events.register("before-call.dynamodb.BatchGetItem", nothing_processed)
    h.dynamodb.meta.events.register("provide-client-params.dynamodb.GetItem", record_single)

    h.esm.drain()

    assert sorted(single) == ["00000000000000000001", "00000000000000000002"]
    assert [h.runs("shipping.book", e) for e in (first, second)] == [1, 1]
    assert h.dead_letters() == []


def test_more_messages_than_one_batch_read_holds_are_read_a_hundred_keys_at_a_time(
    make_harness: HarnessFactory,
) -> None:
    # SQS hands a FIFO consumer at most 10 messages; the handler is also callable with any event (a test, a
    # replay tool of yours), and DynamoDB takes at most 100 keys per BatchGetItem.
    h = make_harness(one_subscription)
    events = [h.store.emit("order.created", {"n": n}, tenant="acme", actor="test") for n in range(120)]
    records = [
        {
            "messageId": f"m-{envelope.seq}",
            "receiptHandle": f"r-{envelope.seq}",
            "body": json.dumps(envelope.to_item()),
            "attributes": {"ApproximateReceiveCount": "1", "MessageGroupId": f"g-{envelope.seq}"},
            "messageAttributes": {},
            "eventSource": "aws:sqs",
        }
        for envelope in events
    ]
    sizes: list[int] = []

    def record_batch(params: dict[str, Any], **_: Any) -> None:
        sizes.append(len(params["RequestItems"][EVENTS_TABLE]["Keys"]))

    h.dynamodb.meta.events.register("provide-client-params.dynamodb.BatchGetItem", record_batch)

    response = h.consumer.handle({"Records": records}, LocalLambdaContext("durable", timedelta(seconds=60), h.clock))

    assert response == {"batchItemFailures": []}
    assert sizes == [100, 20]
    assert all(h.runs("shipping.book", envelope) == 1 for envelope in events)
