"""The example's producer function (lambdas/place_order.py), tested the way a user tests their own app:
``outbox.testing``'s ``outbox_pipeline`` fixture boots the synthesized stack, the function is invoked as
Lambda would, and its order and ``order.created`` event commit together, once."""

from __future__ import annotations

from typing import Any

from outbox.testing.pipeline import LocalPipeline

ITEMS = [{"sku": "tag", "quantity": 2, "unit_price_cents": 700}]


def place(pipeline: LocalPipeline, **request: Any) -> dict[str, Any]:
    answer: dict[str, Any] = pipeline.runtime.function("PlaceOrderFunctionName").invoke(request)
    return answer


def test_an_order_placed_through_the_function_is_one_event_and_a_retry_is_the_same_answer(
    outbox_pipeline: LocalPipeline,
) -> None:
    request = {"tenant": "acme-producer", "order_id": "o-1", "buyer_email": "b@x.io", "items": ITEMS}

    first = place(outbox_pipeline, **request)
    again = place(outbox_pipeline, **request)
    outbox_pipeline.drain()

    assert first["status"] == 201
    assert first["event_id"]
    # The repeat is answered from the existing order: nothing new was emitted
    assert (again["status"], again["order_id"], again["event_id"]) == (200, first["order_id"], None)
    report = outbox_pipeline.operations.verify("acme-producer")
    assert (report.intact, report.events_checked) == (True, 1)
    claim = outbox_pipeline.claim(first["event_id"], "sales.project_order")
    assert claim is not None
    assert claim.status == "COMPLETED"


def test_other_content_under_the_same_order_id_is_refused_and_a_bad_request_is_answered(
    outbox_pipeline: LocalPipeline,
) -> None:
    request = {"tenant": "acme-conflict", "order_id": "o-1", "buyer_email": "b@x.io", "items": ITEMS}
    assert place(outbox_pipeline, **request)["status"] == 201

    conflicting = place(outbox_pipeline, **{**request, "buyer_email": "other@x.io"})
    malformed = place(outbox_pipeline, tenant="acme-conflict", order_id="o-2")

    assert conflicting["status"] == 409
    assert malformed["status"] == 400
    assert {error["loc"][0] for error in malformed["error"]} >= {"buyer_email", "items"}
