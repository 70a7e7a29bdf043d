"""The example's real evolution: ``order.created`` version 2 added the channel an order came from. An order
stored as version 1 before that, replayed a year later, reaches today's sales projection as version 2."""

from __future__ import annotations

from outbox import TerminalError
from outbox.local import faults
from tests.e2e.backends import LocalBackend, claim_statuses, data_row
from tests.e2e.test_pipeline import unique
from tests.e2e.test_runbook import outbox

YEAR = 365 * 24 * 3600


def version_one_order(order_id: str) -> dict[str, object]:
    """``order.created`` as version 1 stored it: no channel."""
    return {
        "order_id": order_id,
        "buyer_email": "b@x.io",
        "items": [{"sku": "tag", "quantity": 2, "unit_price_cents": 700}],
        "total_cents": 1400,
        "currency": "EUR",
    }


def test_a_version_one_order_replayed_a_year_later_is_projected_by_todays_handler_as_version_two(
    local: LocalBackend,
) -> None:
    # Given an order.created stored as version 1 (by last year's code: no catalog of today's), whose sales
    # projection died then
    tenant = unique("tenant")
    last_years_code = local.runtime.event_store(unchecked=True)
    with faults.fail_handler("sales.project_order", times=1, error=lambda: TerminalError("projection was down")):
        envelope = last_years_code.emit(
            "order.created", version_one_order(unique("order")), tenant=tenant, actor="e2e", schema_version=1
        )
        local.settle()
    assert claim_statuses(local, envelope.id)["sales.project_order"] == "DEAD"

    # When a year passes and the operator replays the tenant's dead work into today's consumer
    local.runtime.clock.advance(YEAR)
    result = outbox(local, "replay", "--tenant", tenant, "--yes")
    assert result.exit_code == 0, result.output
    local.settle()

    # Then today's handler counted it as a version 2 order of the web shop, once
    assert claim_statuses(local, envelope.id)["sales.project_order"] == "COMPLETED"
    totals = data_row(local, f"SALES#{tenant}", "TOTALS")
    assert totals is not None
    assert (totals["orders"]["N"], totals["orders_web"]["N"], totals["revenue_cents"]["N"]) == ("1", "1", "1400")


def test_todays_producer_stores_version_two_and_the_projection_counts_its_channel(local: LocalBackend) -> None:
    tenant = unique("tenant")
    store, commerce = local.store(), local.commerce()
    items = [{"sku": "tag", "quantity": 1, "unit_price_cents": 900}]
    result = commerce.place_order(
        store, tenant=tenant, actor="e2e", order_id=unique("order"), buyer_email="b@x.io", items=items, channel="phone"
    )
    local.settle()
    (stored,) = [e for e in store.events(tenant) if e.id == result.event_id]
    assert (stored.schema_version, stored.payload["channel"]) == (2, "phone")
    totals = data_row(local, f"SALES#{tenant}", "TOTALS")
    assert totals is not None
    assert totals["orders_phone"]["N"] == "1"
    assert "orders_web" not in totals
