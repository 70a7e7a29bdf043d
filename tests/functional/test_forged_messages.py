"""A message's own hash proves nothing about where it came from: the durable consumer runs an event only when the
events table holds it, with that hash, at its (tenant, seq). A forged message is refused and recorded, never run
(docs/security.md, "The consumer confirms each event against the log")."""

from __future__ import annotations

import json
from typing import Any

from botocore.awsrequest import AWSResponse

from outbox import Envelope, EventStore
from outbox.subscriptions import Subscription
from tests.functional.conftest import EVENTS_TABLE, create_pk_sk_table
from tests.functional.inbox_harness import Harness, HarnessFactory, Recorder, one_subscription


def forged_event(h: Harness, tenant: str = "acme", seq: int = 3) -> Envelope:
    """An event exactly as emit() would make it (a valid hash, a real chain), but emitted into another table:
    the pipeline's events table never held it."""
    create_pk_sk_table(h.dynamodb, "elsewhere")
    elsewhere = EventStore("elsewhere", client=h.dynamodb)
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


def test_each_message_costs_one_consistent_read_of_its_row_and_only_when_something_would_run(
    make_harness: HarnessFactory,
) -> None:
    def two_on_orders(recorder: Recorder) -> list[Subscription]:
        return [recorder.subscription("shipping.book", "order.*"), recorder.subscription("notify.buyer", "order.*")]

    h = make_harness(two_on_orders)
    reads: list[dict[str, Any]] = []

    def record(params: dict[str, Any], **_: Any) -> None:
        if params["TableName"] == EVENTS_TABLE and params["Key"]["pk"]["S"].endswith("#EVENT"):
            reads.append(params)

    h.emit("order.created", n=1)
    h.emit("order.created", n=2)
    h.emit("payment.completed")  # matches nothing: nothing to confirm
    h.dynamodb.meta.events.register("provide-client-params.dynamodb.GetItem", record)

    h.esm.drain()

    assert len(reads) == 2, "one read per message with a match, however many subscriptions it runs"
    assert all(read["ConsistentRead"] is True for read in reads)
    assert [read["Key"]["sk"]["S"] for read in reads] == sorted(read["Key"]["sk"]["S"] for read in reads)


def test_a_read_that_fails_is_retried_never_taken_for_a_forgery(make_harness: HarnessFactory) -> None:
    h = make_harness(one_subscription)
    event = h.emit()
    throttled = {"left": 1}

    def throttle_once(params: dict[str, Any], **_: Any) -> tuple[AWSResponse, dict[str, Any]] | None:
        request = json.loads(params["body"] or b"{}")  # before-call sees the serialized request
        if request["Key"]["pk"]["S"].endswith("#EVENT") and throttled["left"]:
            throttled["left"] -= 1
            error = {"Code": "ThrottlingException", "Message": "Rate of requests exceeds the allowed throughput"}
            return AWSResponse("https://dynamodb", 400, {}, None), {
                "Error": error,
                "ResponseMetadata": {"HTTPStatusCode": 400},
            }
        return None

    h.dynamodb.meta.events.register("before-call.dynamodb.GetItem", throttle_once)

    h.esm.drain()

    assert throttled["left"] == 0
    assert (h.runs("shipping.book", event), h.effects("shipping.book", event)) == (1, 1)
    assert h.dead_letters() == []
