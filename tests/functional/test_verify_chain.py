"""verify_chain() finds the first broken sequence number and says why."""

from __future__ import annotations

from typing import Any

import pytest

from outbox import ChainBreak, EventStore
from outbox.keys import event_partition, head_key, seq_sort_key
from outbox.log.verification import Anchor, verify_chain
from simulation.newer_engine import newer_seal_all
from tests.functional.conftest import EVENTS_TABLE


@pytest.fixture
def chain(store: EventStore) -> EventStore:
    for n in range(1, 11):
        store.emit("counter.bumped", {"n": n}, tenant="acme", actor="system")
    assert store.verify_chain("acme").intact
    return store


def event_key(seq: int) -> dict[str, Any]:
    return {"pk": {"S": event_partition("acme")}, "sk": {"S": seq_sort_key(seq)}}


def get_row(dynamodb: Any, seq: int) -> dict[str, Any]:
    item: dict[str, Any] = dynamodb.get_item(TableName=EVENTS_TABLE, Key=event_key(seq))["Item"]
    return item


def test_an_edited_payload_is_reported_as_altered_at_its_seq(chain: EventStore, dynamodb: Any) -> None:
    dynamodb.update_item(
        TableName=EVENTS_TABLE,
        Key=event_key(4),
        UpdateExpression="SET payload.n = :forged",
        ExpressionAttributeValues={":forged": {"N": "400"}},
    )

    report = chain.verify_chain("acme")

    assert (report.intact, report.first_broken_seq, report.reason) == (False, 4, ChainBreak.ALTERED)
    assert report.events_checked == 3


def test_an_edit_that_also_recomputes_the_hash_breaks_the_next_link(chain: EventStore, dynamodb: Any) -> None:
    from outbox import Envelope

    forged = Envelope.from_item(get_row(dynamodb, 4)).model_copy(update={"payload": {"n": 400}})
    forged = forged.model_copy(update={"hash": forged.computed_hash()})
    dynamodb.put_item(TableName=EVENTS_TABLE, Item=forged.to_item())

    report = chain.verify_chain("acme")

    assert (report.first_broken_seq, report.reason) == (5, ChainBreak.BROKEN_LINK)


def test_a_deleted_event_is_reported_as_a_gap(chain: EventStore, dynamodb: Any) -> None:
    dynamodb.delete_item(TableName=EVENTS_TABLE, Key=event_key(6))

    report = chain.verify_chain("acme")

    assert (report.intact, report.first_broken_seq, report.reason) == (False, 6, ChainBreak.GAP)


def test_a_deleted_last_event_is_reported_as_a_head_mismatch(chain: EventStore, dynamodb: Any) -> None:
    dynamodb.delete_item(TableName=EVENTS_TABLE, Key=event_key(10))

    report = chain.verify_chain("acme")

    assert (report.intact, report.first_broken_seq, report.reason) == (False, 10, ChainBreak.HEAD_MISMATCH)


def test_two_swapped_events_are_reported_as_reordered(chain: EventStore, dynamodb: Any) -> None:
    third, seventh = get_row(dynamodb, 3), get_row(dynamodb, 7)
    dynamodb.put_item(TableName=EVENTS_TABLE, Item={**seventh, "sk": third["sk"]})
    dynamodb.put_item(TableName=EVENTS_TABLE, Item={**third, "sk": seventh["sk"]})

    report = chain.verify_chain("acme")

    assert (report.intact, report.first_broken_seq, report.reason) == (False, 3, ChainBreak.REORDERED)


def test_an_unknown_tenant_has_an_empty_intact_chain(store: EventStore) -> None:
    report = store.verify_chain("nobody")
    assert (report.intact, report.events_checked, report.head_seq) == (True, 0, 0)


# -- against an anchor ---------------------------------------------------------------------------------------


def anchor_at(store: EventStore, seq: int) -> Anchor:
    from outbox import Envelope

    return Anchor("acme", seq, Envelope.from_item(get_row(store.client, seq)).hash, "2026-12-01T00:00:00+00:00")


def test_an_incremental_check_reads_only_the_anchored_row_and_what_follows(chain: EventStore) -> None:
    report = verify_chain(chain.client, EVENTS_TABLE, "acme", anchor=anchor_at(chain, 7), full=False)
    assert (report.intact, report.events_checked, report.verified_from_seq, report.anchor_seq) == (True, 3, 8, 7)
    assert report.head_hash == chain.head("acme").last_hash


def test_an_anchor_at_the_head_leaves_nothing_to_read_but_the_anchored_row(chain: EventStore) -> None:
    report = verify_chain(chain.client, EVENTS_TABLE, "acme", anchor=anchor_at(chain, 10), full=False)
    assert (report.intact, report.events_checked, report.verified_from_seq) == (True, 0, 11)


@pytest.mark.parametrize("full", [True, False])
def test_a_rewrite_through_the_anchored_row_contradicts_the_anchor(chain: EventStore, full: bool) -> None:
    from outbox import Envelope

    anchor = anchor_at(chain, 6)
    prev = Envelope.from_item(get_row(chain.client, 3)).hash
    for seq in range(4, 11):  # seq 4 forged, every later hash recomputed, the head moved along
        row = Envelope.from_item(get_row(chain.client, seq))
        changes: dict[str, Any] = {"prev_hash": prev, **({"payload": {"n": 400}} if seq == 4 else {})}
        forged = row.model_copy(update=changes)
        forged = forged.model_copy(update={"hash": forged.computed_hash()})
        chain.client.put_item(TableName=EVENTS_TABLE, Item=forged.to_item())
        prev = forged.hash
    head = chain.client.get_item(TableName=EVENTS_TABLE, Key=head_key("acme"))["Item"]
    chain.client.put_item(TableName=EVENTS_TABLE, Item={**head, "last_hash": {"S": prev}})
    assert chain.verify_chain("acme").intact  # the chain alone is fooled

    report = verify_chain(chain.client, EVENTS_TABLE, "acme", anchor=anchor, full=full)

    assert (report.intact, report.first_broken_seq, report.reason) == (False, 6, ChainBreak.ANCHOR_MISMATCH)


@pytest.mark.parametrize("full", [True, False])
def test_an_anchored_row_that_is_gone_contradicts_the_anchor(chain: EventStore, dynamodb: Any, full: bool) -> None:
    anchor = anchor_at(chain, 10)
    dynamodb.delete_item(TableName=EVENTS_TABLE, Key=event_key(10))
    head = dynamodb.get_item(TableName=EVENTS_TABLE, Key=head_key("acme"))["Item"]
    row9 = get_row(dynamodb, 9)
    dynamodb.put_item(
        TableName=EVENTS_TABLE, Item={**head, "last_seq": {"N": "9"}, "last_hash": row9["hash"]}
    )  # the head moved back with it: the chain alone says intact
    assert chain.verify_chain("acme").intact

    report = verify_chain(chain.client, EVENTS_TABLE, "acme", anchor=anchor, full=full)

    assert (report.intact, report.reason) == (False, ChainBreak.ANCHOR_MISMATCH)


def test_events_of_a_newer_engine_verify_and_this_engine_extends_their_chain(store: EventStore, dynamodb: Any) -> None:
    # Emitters upgraded before this engine's readers: their rows carry fields it does not know, all hashed.
    newer = EventStore(EVENTS_TABLE, client=dynamodb, unchecked=True, sealing=newer_seal_all)
    store.emit("counter.bumped", {"n": 1}, tenant="acme", actor="system")
    newer.emit("counter.bumped", {"n": 2}, tenant="acme", actor="newer")
    store.emit("counter.bumped", {"n": 3}, tenant="acme", actor="system")

    assert "placement" in get_row(dynamodb, 2)
    assert "placement" not in get_row(dynamodb, 3)
    report = store.verify_chain("acme")
    assert (report.intact, report.events_checked, report.head_seq) == (True, 3, 3)
