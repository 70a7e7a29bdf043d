"""Every malformed body in the poison corpus is a recorded poison pill that never blocks its tenant.

The rule (outbox.messages): anything that goes wrong while reading a durable-queue message is recorded in
the inbox under ``POISON#<day>`` and acknowledged, so the real events queued behind it in the same FIFO
group run at once. Each test puts one corpus body into tenant acme's group, a real acme event behind it,
and drains the queue through the local event source mapping.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pytest
from moto import mock_aws
from moto.core.models import MockAWS

from outbox.inbox import POISON_BODY_LIMIT
from outbox.local.clock import VirtualClock
from outbox.log.limits import item_size
from tests.functional.inbox_harness import Harness, HarnessFactory, build_harness, one_subscription
from tests.functional.poison_corpus import PoisonBody, corpus

TENANT = "acme"
DYNAMODB_MAX_ITEM_BYTES = 400 * 1024

# Corpus entries the consumer gets wrong, by name, with why: each runs as a strict xfail, so a bug stays
# visible and its fix turns it into a failure that asks for the mark to go. None today: the lone surrogate
# in an error text and the payloads the hash could not see (NaN, Infinity, a set) were fixed.
KNOWN_BUGS: dict[str, str] = {}


@pytest.fixture(scope="module")
def warm_moto() -> Iterator[MockAWS]:
    """One moto around the whole module, so that each test's own ``aws`` (nested inside it) keeps the boto3
    session: a fresh session loads every service model again (~0.2 s a test, 20 s over the corpus)."""
    with mock_aws() as moto:
        yield moto


@pytest.fixture
def make_harness(warm_moto: MockAWS, aws: None, clock: VirtualClock) -> HarnessFactory:
    warm_moto.reset()  # an empty account, as a fresh moto gives; the test's clock and AWS fixes are its own
    return lambda subscriptions: build_harness(subscriptions, clock)


def corpus_params(entries: Iterable[PoisonBody]) -> list[Any]:
    return [
        pytest.param(
            entry,
            id=entry.name,
            marks=[pytest.mark.xfail(strict=True, reason=KNOWN_BUGS[entry.name])] if entry.name in KNOWN_BUGS else [],
        )
        for entry in entries
    ]


def stored_text(body: str) -> str:
    """What the poison row keeps of a body: unencodable characters escaped, then cut to the limit."""
    return body.encode("utf-8", "backslashreplace").decode("utf-8")[:POISON_BODY_LIMIT]


def largest_entries() -> list[PoisonBody]:
    """The largest body on the wire, and the body whose poison row is largest (by its stored bytes)."""
    entries = corpus()
    on_the_wire = max(entries, key=lambda entry: entry.utf8_size)
    stored = max(entries, key=lambda entry: len(stored_text(entry.body).encode("utf-8")))
    return list({entry.name: entry for entry in (on_the_wire, stored)}.values())


def put_on_queue(h: Harness, entry: PoisonBody) -> None:
    """Send ``entry`` into acme's group as a producer would. A body boto3 cannot encode is sent as a
    placeholder, and the event source mapping hands the consumer the real body in its place: the message
    keeps its place in the group, and the consumer sees exactly the str a broken transport would give it."""
    dedup_id = f"poison-{entry.name}"
    if entry.sendable:
        extra = {"MessageAttributes": dict(entry.attributes)} if entry.attributes else {}
        h.sqs.send_message(
            QueueUrl=h.queue_url,
            MessageBody=entry.body,
            MessageGroupId=TENANT,
            MessageDeduplicationId=dedup_id,
            **extra,
        )
        return
    placeholder = f"placeholder for {entry.name}"
    h.send(placeholder, TENANT, dedup_id)
    h.esm.handler = delivering(h.esm.handler, placeholder, entry.body)


def delivering(
    handler: Callable[[dict[str, Any], Any], Any], placeholder: str, body: str
) -> Callable[[dict[str, Any], Any], Any]:
    def handle(event: dict[str, Any], context: Any) -> Any:
        records = [{**record, "body": body} if record["body"] == placeholder else record for record in event["Records"]]
        return handler({**event, "Records": records}, context)

    return handle


@pytest.mark.parametrize("entry", corpus_params(corpus()))
def test_a_malformed_body_is_a_recorded_poison_pill_and_the_event_behind_it_runs_once(
    make_harness: HarnessFactory, entry: PoisonBody, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a malformed body in acme's group, and a real acme event queued behind it
    h = make_harness(one_subscription)
    put_on_queue(h, entry)
    event = h.emit(tenant=TENANT)

    # When the consumer drains the queue
    with caplog.at_level(logging.ERROR, logger="outbox.delivery.consumer"):
        results = h.esm.drain()

    # Then its log line can be written out (a lone surrogate would make the line itself fail to encode)
    for record in caplog.records:
        record.getMessage().encode("utf-8")

    # Then the body is one poison pill, kept with its group, and the message is acknowledged
    [pill] = h.poison_pills()
    assert pill["attributes"]["M"]["MessageGroupId"]["S"] == TENANT
    assert pill["body"]["S"] == stored_text(entry.body)
    assert pill["body_truncated"]["BOOL"] is (len(entry.body) > POISON_BODY_LIMIT)
    pill["body"]["S"].encode("utf-8")  # valid UTF-8 text, whatever came in
    assert [result.failed for result in results] == [[]] * len(results), "nothing waited for a redelivery"
    assert h.queue_depth(h.queue_url) == 0
    assert h.queue_depth(h.dlq_url) == 0
    assert h.dlq_bodies() == []
    # And the real event behind it ran exactly once
    assert h.runs("shipping.book", event) == 1
    assert h.effects("shipping.book", event) == 1
    assert h.claim_status("shipping.book", event) == "COMPLETED"


@pytest.mark.parametrize("entry", corpus_params(largest_entries()))
def test_the_poison_row_of_the_largest_bodies_fits_a_dynamodb_item_and_is_valid_utf8(
    make_harness: HarnessFactory, entry: PoisonBody
) -> None:
    # Given one of the largest bodies in the corpus
    h = make_harness(one_subscription)
    put_on_queue(h, entry)

    # When the consumer reads it
    h.esm.drain()

    # Then its poison row stays under DynamoDB's item limit, and its body is text DynamoDB can hold
    [pill] = h.poison_pills()
    assert item_size(pill) < DYNAMODB_MAX_ITEM_BYTES
    stored = pill["body"]["S"]
    assert stored.encode("utf-8").decode("utf-8") == stored
    assert entry.body.startswith(stored) or not entry.sendable
