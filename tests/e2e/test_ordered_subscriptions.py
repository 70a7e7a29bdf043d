"""The example's ordered subscription, end to end on the local runtime: ``sales.journal_order`` appends a
journal line per order, in the order the orders were placed, and a dead line blocks the journal (only
that tenant's, only the journal) until the operator replays or skips it."""

from __future__ import annotations

import json

from outbox import Envelope, TerminalError
from outbox.local import faults
from outbox.log.chain import read_events
from tests.e2e.backends import LocalBackend, claim_statuses, data_row
from tests.e2e.test_pipeline import unique
from tests.e2e.test_runbook import broken_consumer, outbox

JOURNAL = "sales.journal_order"


def place(local: LocalBackend, tenant: str) -> str:
    """Place an order; the id of its order.created event."""
    return placed(local, tenant).id


def placed(local: LocalBackend, tenant: str) -> Envelope:
    """Place an order; its order.created event as the log holds it."""
    items = [{"sku": "tag", "quantity": 1, "unit_price_cents": 500}]
    result = local.commerce().place_order(
        local.store(), tenant=tenant, actor="e2e", order_id=unique("order"), buyer_email="b@x.io", items=items
    )
    assert result.event_id is not None
    client, table = local.client("dynamodb"), local.output("EventsTableName")
    [envelope] = [e for e in read_events(client, table, tenant) if e.id == result.event_id]
    return envelope


def journal_lines(local: LocalBackend, tenant: str) -> list[int]:
    head = data_row(local, f"JOURNAL#{tenant}", "HEAD")
    if head is None:
        return []
    return [seq for seq in range(1, int(head["last_seq"]["N"]) + 1) if data_row(local, f"JOURNAL#{tenant}", _line(seq))]


def _line(seq: int) -> str:
    return f"LINE#{seq:020d}"


def test_orders_are_journaled_in_order(local: LocalBackend) -> None:
    tenant = unique("tenant")
    for _ in range(3):
        place(local, tenant)
    local.settle()
    assert journal_lines(local, tenant) == [1, 2, 3]


def test_a_dead_journal_line_blocks_only_the_journal_until_it_is_replayed(local: LocalBackend) -> None:
    tenant, other = unique("tenant"), unique("tenant")
    with faults.fail_handler(JOURNAL, times=1, error=lambda: TerminalError("journal was down")):
        first = place(local, tenant)
        local.settle()
    second = place(local, tenant)
    place(local, other)
    local.settle()

    statuses = claim_statuses(local, second)
    assert statuses[JOURNAL] == "DEFERRED"
    assert statuses["sales.project_order"] == "COMPLETED", "the other subscriptions of the order did not wait"
    assert journal_lines(local, other) == [1], "another tenant's journal did not wait"
    status = outbox(local, "status", "--json")
    assert status.exit_code == 1
    (blocked,) = [row for row in json.loads(status.stdout)["blocked"] if row["tenant"] == tenant]
    assert (blocked["subscription"], blocked["waits_for_seq"], blocked["waits_for_state"]) == (JOURNAL, 1, "DEAD")

    replayed = outbox(local, "replay", "--tenant", tenant, "--yes")
    assert replayed.exit_code == 0, replayed.output
    local.settle()

    assert journal_lines(local, tenant) == [1, 2]
    assert claim_statuses(local, first)[JOURNAL] == "COMPLETED"
    assert not [
        row for row in json.loads(outbox(local, "status", "--json").stdout)["blocked"] if row["tenant"] == tenant
    ]


def test_the_operator_skips_a_dead_journal_line_and_the_journal_goes_on(local: LocalBackend) -> None:
    tenant = unique("tenant")
    with faults.fail_handler(JOURNAL, times=1, error=lambda: TerminalError("bad order")):
        first = place(local, tenant)
        local.settle()
    place(local, tenant)
    local.settle()

    skipped = outbox(
        local, "skip", "--tenant", tenant, "--subscription", JOURNAL, "--seq", "1",
        "--reason", "order voided", "--by", "oncall", "--yes", "--json",
    )  # fmt: skip
    assert skipped.exit_code == 0, skipped.output
    assert json.loads(skipped.stdout)["woke_seq"] == 2
    local.settle()

    assert journal_lines(local, tenant) == [2]
    assert claim_statuses(local, first)[JOURNAL] == "SKIPPED"
    refused = outbox(local, "skip", "--tenant", tenant, "--subscription", "sales.project_order", "--seq", "1",
                     "--reason", "r", "--yes", "--json")  # fmt: skip
    assert refused.exit_code == 2
    assert "nothing to skip" in json.loads(refused.stdout)["error"]["message"]


def test_a_middle_order_redriven_from_the_dlq_is_journaled_before_the_later_one_that_waited(
    local: LocalBackend,
) -> None:
    # The second order's messages went to the DLQ (a broken deploy); the third order arrived after the fix. Its
    # line waits for the second's (the journal's own condition would refuse it out of order), and the redrive
    # brings the second back: both are journaled, in order, in the invocation that applied the second.
    tenant = unique("tenant")
    place(local, tenant)
    local.settle()
    with broken_consumer():
        second = placed(local, tenant)
        local.settle()
    third = placed(local, tenant)
    local.settle()
    assert claim_statuses(local, third.id)[JOURNAL] == "DEFERRED"
    assert journal_lines(local, tenant) == [1]

    redriven = outbox(local, "redrive", "--yes", "--json")
    assert redriven.exit_code == 0, redriven.output
    local.settle()

    assert journal_lines(local, tenant) == [1, second.seq, third.seq]
    assert {claim_statuses(local, e.id)[JOURNAL] for e in (second, third)} == {"COMPLETED"}
