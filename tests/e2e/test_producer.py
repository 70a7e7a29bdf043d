"""The example's producer function (lambdas/place_order.py) on the local runtime: invoked as Lambda would,
its order and ``order.created`` event commit together, once, and the pipeline takes it from there."""

from __future__ import annotations

from typing import Any

from outbox import verify_chain
from tests.e2e.backends import LocalBackend

ITEMS = [{"sku": "tag", "quantity": 2, "unit_price_cents": 700}]


def place(local: LocalBackend, **request: Any) -> dict[str, Any]:
    answer: dict[str, Any] = local.runtime.function("PlaceOrderFunctionName").invoke(request)
    return answer


def test_an_order_placed_through_the_function_is_one_event_and_a_retry_is_the_same_answer(local: LocalBackend) -> None:
    request = {"tenant": "acme-producer", "order_id": "o-1", "buyer_email": "b@x.io", "items": ITEMS}

    first = place(local, **request)
    again = place(local, **request)
    local.settle()

    assert first["status"] == 201
    assert first["event_id"]
    # The repeat is answered from the existing order: nothing new was emitted
    assert (again["status"], again["order_id"], again["event_id"]) == (200, first["order_id"], None)
    report = verify_chain(local.client("dynamodb"), local.output("EventsTableName"), "acme-producer")
    assert (report.intact, report.events_checked) == (True, 1)


def test_other_content_under_the_same_order_id_is_refused_and_a_bad_request_is_answered(local: LocalBackend) -> None:
    request = {"tenant": "acme-conflict", "order_id": "o-1", "buyer_email": "b@x.io", "items": ITEMS}
    assert place(local, **request)["status"] == 201

    conflicting = place(local, **{**request, "buyer_email": "other@x.io"})
    malformed = place(local, tenant="acme-conflict", order_id="o-2")

    assert conflicting["status"] == 409
    assert malformed["status"] == 400
    assert {error["loc"][0] for error in malformed["error"]} >= {"buyer_email", "items"}
