"""Claim rows written before this engine are the same content's claims, whatever digest their release wrote.

Release 0.5.0 had no ``trace_context`` field: its claim rows hold the digest of an event without it. The engine
from a54ead0 until the fix digested every event without a trace context with ``"trace_context": null``. An
upgrade from either must find its rows claimable, done or dead as they are, never other content: a take-over of
an expired lease, a replay of dead work and a duplicate of completed work, on the lease path (an EXTERNAL
subscription) and on the direct path (a DynamoDB-only one); genuinely other content under the id stays a
conflict.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from outbox import Effects, Envelope, Lane, TerminalError, keys
from outbox.inbox import COMPLETED, DEAD, PENDING, REPLAYING, envelope_digest
from outbox.log.canonical import canonical_json
from outbox.ops.replay import plan_replay, replay
from outbox.subscriptions import Delivery, Subscription
from tests.functional.inbox_harness import INBOX_TABLE, Harness, HarnessFactory, Recorder, operator_context

LEASED, DIRECT = "shipping.book", "sales.project"
PAIRS = (LEASED, DIRECT)
LEASE = timedelta(seconds=65)


def _sha256(body: dict[str, Any]) -> str:
    return hashlib.sha256(canonical_json(body)).hexdigest()


def digest_of_release_050(event: Envelope) -> str:
    """What 0.5.0 wrote: every field of an envelope that had no trace_context (computed here, not by the engine)."""
    body = event.model_dump(mode="json")
    assert body.pop("trace_context", None) is None
    return _sha256(body)


def digest_with_null_trace_context(event: Envelope) -> str:
    """What the engine wrote from a54ead0 until the fix: the same, with ``"trace_context": null``."""
    assert event.trace_context is None
    return _sha256({**event.model_dump(mode="json"), "trace_context": None})


OLDER_DIGESTS: dict[str, Callable[[Envelope], str]] = {
    "0.5.0": digest_of_release_050,
    "null trace context": digest_with_null_trace_context,
}


def both_paths(recorder: Recorder) -> list[Subscription]:
    direct = Subscription(
        name=DIRECT, pattern="*", lane=Lane.DURABLE, handler=recorder.handler, effects=Effects.DYNAMODB
    )
    return [recorder.subscription(LEASED), direct]


def written_by_an_older_engine(h: Harness, event: Envelope, digest: str) -> None:
    """Each pair's claim row as the older release left it: the same row, its digest as that release wrote it."""
    for name in PAIRS:
        h.dynamodb.update_item(
            TableName=INBOX_TABLE,
            Key=keys.claim_key(event.id, name),
            UpdateExpression="SET digest = :digest",
            ConditionExpression="attribute_exists(pk)",
            ExpressionAttributeValues={":digest": {"S": digest}},
        )
        assert stored_digest(h, event, name) == digest


def stored_digest(h: Harness, event: Envelope, name: str) -> str:
    record = h.inbox.read_claim(event.id, name)
    assert record is not None
    return record.digest


def letters(h: Harness) -> list[tuple[str, str, str]]:
    """Every dead letter as (subscription, reason, error type), open or resolved."""
    return sorted((row["subscription"]["S"], row["reason"]["S"], row["error_type"]["S"]) for row in h.dead_letters())


def statuses(h: Harness, event: Envelope) -> list[str | None]:
    return [h.claim_status(name, event) for name in PAIRS]


def effects(h: Harness, event: Envelope) -> list[int]:
    return [h.effects(name, event) for name in PAIRS]


def refuse(_delivery: Delivery) -> None:
    raise TerminalError("the account is closed")


@pytest.fixture
def h(make_harness: HarnessFactory) -> Harness:
    return make_harness(both_paths)


@pytest.mark.parametrize("release", sorted(OLDER_DIGESTS))
def test_an_expired_lease_an_older_engine_held_is_taken_over(h: Harness, release: str) -> None:
    # Given a worker of the older release that claimed both pairs and died, its message back on the queue
    event = h.emit()
    for name in PAIRS:
        assert h.inbox.claim(event, name, LEASE).claim is not None
    written_by_an_older_engine(h, event, OLDER_DIGESTS[release](event))
    h.clock.advance(LEASE + timedelta(seconds=1))

    # When this engine receives it
    h.esm.drain()

    # Then the lease is taken over and the pairs run, once: the same content, not a conflict
    assert statuses(h, event) == [COMPLETED, COMPLETED]
    assert effects(h, event) == [1, 1]
    assert letters(h) == []
    # and the rows now hold the digest this engine writes
    assert [stored_digest(h, event, name) for name in PAIRS] == [envelope_digest(event)] * 2


@pytest.mark.parametrize("release", sorted(OLDER_DIGESTS))
def test_dead_work_an_older_engine_left_stays_dead_and_reruns_when_replayed(h: Harness, release: str) -> None:
    # Given both pairs dead under the older release
    for name in PAIRS:
        h.recorder.behaviours[name] = refuse
    event = h.emit()
    h.esm.drain()
    assert statuses(h, event) == [DEAD, DEAD]
    written_by_an_older_engine(h, event, OLDER_DIGESTS[release](event))
    dead = sorted((name, "terminal", "TerminalError") for name in PAIRS)
    assert letters(h) == dead

    # When a copy of the event arrives: the pairs are dead, not in conflict (no further dead letter)
    h.publish(event, dedup_id=f"{event.id}-again")
    h.esm.drain()
    assert statuses(h, event) == [DEAD, DEAD]
    assert letters(h) == dead

    # When the cause is fixed and the operator replays them
    h.recorder.behaviours.clear()
    context = operator_context(h)
    replay(context, plan_replay(context, event_ids=[event.id]))
    assert statuses(h, event) == [REPLAYING, REPLAYING]
    h.esm.drain()

    # Then each runs once from its REPLAYING row, and its dead letter is resolved
    assert statuses(h, event) == [COMPLETED, COMPLETED]
    assert effects(h, event) == [1, 1]
    assert letters(h) == dead
    assert all("resolved" in row for row in h.dead_letters())


@pytest.mark.parametrize("release", sorted(OLDER_DIGESTS))
def test_a_duplicate_of_work_an_older_engine_completed_is_already_completed(h: Harness, release: str) -> None:
    # Given both pairs completed under the older release
    event = h.emit()
    h.esm.drain()
    written_by_an_older_engine(h, event, OLDER_DIGESTS[release](event))

    # When a copy of the event arrives after the upgrade
    h.publish(event, dedup_id=f"{event.id}-again")
    h.esm.drain()

    # Then it is a duplicate: nothing runs again, nothing is recorded as a conflict
    assert statuses(h, event) == [COMPLETED, COMPLETED]
    assert effects(h, event) == [1, 1]
    assert letters(h) == []
    assert h.runs(LEASED, event) == 1


@pytest.mark.parametrize("status", [PENDING, COMPLETED])
def test_other_content_under_a_claimed_id_is_still_a_conflict(h: Harness, status: str) -> None:
    # Given claim rows of other content under the event's id (a lease expired, or completed)
    event = h.emit()
    if status == PENDING:
        for name in PAIRS:
            assert h.inbox.claim(event, name, LEASE).claim is not None
        h.clock.advance(LEASE + timedelta(seconds=1))
    else:
        h.esm.drain()
    other = event.model_copy(update={"payload": {"n": 2}})
    assert other.trace_context is None
    written_by_an_older_engine(h, event, digest_of_release_050(other))

    # When the event is delivered
    h.publish(event, dedup_id=f"{event.id}-again")
    h.esm.drain()

    # Then neither pair runs it: each records a conflict, and the claims are left as they were
    assert statuses(h, event) == [status, status]
    assert letters(h) == sorted((name, "conflict", "ConflictingPayload") for name in PAIRS)
    assert h.runs(LEASED, event) == (0 if status == PENDING else 1)
