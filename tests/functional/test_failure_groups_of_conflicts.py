"""The engine's own conflict dead letters group by what happened, across events and tenants.

One incident (a forged batch, a rewrite of the log, an upgrade) refuses many events of many tenants with the same
text but for the hashes, digests and tenant it names: it is one failure group, not one group per event. Two
different refusals stay two groups. The letters are written by the consumer itself, on moto, and grouped as
``outbox dead-letters groups`` groups them.
"""

from __future__ import annotations

from outbox import Envelope, EventStore
from outbox.ops.groups import FailureGroup, failure_groups
from tests.functional.conftest import EVENTS_TABLE, create_pk_sk_table
from tests.functional.inbox_harness import Harness, HarnessFactory, one_subscription, operator_context

TENANTS = ("acme", "globex", "initech")
EVENTS = 4  # a tenant


def logged(h: Harness) -> dict[str, list[Envelope]]:
    """EVENTS events of each tenant, in the log and delivered."""
    events = {tenant: [h.emit(tenant=tenant, n=index) for index in range(EVENTS)] for tenant in TENANTS}
    h.esm.drain()
    return events


def forged(h: Harness, count: int) -> dict[str, list[Envelope]]:
    """``count`` events of each tenant as emit() makes them (valid hashes, a real chain), emitted into another
    table: from seq 1, where the log holds other events, on."""
    create_pk_sk_table(h.dynamodb, "elsewhere")
    elsewhere = EventStore("elsewhere", client=h.dynamodb, unchecked=True)
    return {
        tenant: [
            elsewhere.emit("order.created", {"amount": 10_000}, tenant=tenant, actor="forger") for _ in range(count)
        ]
        for tenant in TENANTS
    }


def groups(h: Harness) -> list[FailureGroup]:
    return failure_groups(operator_context(h))


def test_a_forged_batch_across_three_tenants_is_one_failure_group(make_harness: HarnessFactory) -> None:
    # Given the log's events of three tenants, and a forger's copies of their places (seq 1..4 each)
    h = make_harness(one_subscription)
    logged(h)
    for events in forged(h, EVENTS).values():
        for event in events:
            h.publish(event, dedup_id=f"{event.id}-forged")

    # When the consumer refuses each (the log holds another event there, each with its own hash)
    h.esm.drain()

    # Then the twelve refusals are one group, across the three tenants
    [group] = groups(h)
    assert (group.count, group.tenants) == (len(TENANTS) * EVENTS, list(TENANTS))
    assert (group.reason, group.error_type) == ("conflict", "NotInEventLog")
    assert group.where == (
        "event <event> was not run: the events table holds another event at seq # of tenant <tenant> "
        "(hash <hash>): the message is not the log's"
    )


def test_claim_digest_conflicts_across_three_tenants_are_one_failure_group(make_harness: HarnessFactory) -> None:
    # Given delivered events of three tenants, each then rewritten in the log and sent again (a repair)
    h = make_harness(one_subscription)
    for events in logged(h).values():
        for event in events:
            rewritten = event.model_copy(update={"payload": {"n": 100 + event.seq}})
            rewritten = rewritten.model_copy(update={"hash": rewritten.computed_hash()})
            h.dynamodb.put_item(TableName=EVENTS_TABLE, Item=rewritten.to_item())
            h.publish(rewritten, dedup_id=f"{event.id}-repaired")

    # When the consumer finds each claimed with another digest
    h.esm.drain()

    # Then the twelve conflicts (each with its own two digests) are one group
    [group] = groups(h)
    assert (group.count, group.tenants) == (len(TENANTS) * EVENTS, list(TENANTS))
    assert (group.reason, group.error_type) == ("conflict", "ConflictingPayload")
    assert group.where == "event <event> arrived with digest <hash>, but shipping.book claimed it with <hash>"


def test_two_different_refusals_are_still_two_groups(make_harness: HarnessFactory) -> None:
    # Given forged events of three tenants: two at places the log holds, two where it holds nothing yet
    h = make_harness(one_subscription)
    logged(h)
    for tenant in TENANTS:
        h.emit(tenant=tenant)  # seq 5 of each is in the log too; a forged seq 6 and 7 are not
    h.esm.drain()
    for events in forged(h, 7).values():
        for event in (*events[:2], *events[5:]):
            h.publish(event, dedup_id=f"{event.id}-forged")

    h.esm.drain()

    listed = groups(h)
    assert sorted((group.count, group.where) for group in listed) == [
        (
            6,
            "event <event> was not run: the events table has no event at seq # of tenant <tenant>: the message "
            "was not relayed from the log",
        ),
        (
            6,
            "event <event> was not run: the events table holds another event at seq # of tenant <tenant> "
            "(hash <hash>): the message is not the log's",
        ),
    ]
    assert all(group.tenants == list(TENANTS) for group in listed)
