"""One trace from the request to every effect, on the local runtime, recorded with OpenTelemetry's SDK.

The request is a span of the test's own; the example's producer function and its payment command emit inside
it, so every event records its context (``outbox.tracing``). The consumers run after it, each (event,
subscription) attempt in a span of its own, linked to the event's context: every span of the story must lead
back, by parent or link, to the request's trace, with the outcome each attempt had; a follow-up event records
the attempt that emitted it; a replay's send links the original event; and the services the handlers call
receive the attempt's trace headers."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from outbox import tracing
from tests.e2e.backends import LocalBackend, claim_statuses
from tests.e2e.test_pipeline import FAN_OUT, unique
from tests.e2e.test_runbook import operations


@pytest.fixture
def recorded() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.use_tracer_provider(provider)
    try:
        yield provider, exporter
    finally:
        tracing.use_tracer_provider(None)
        provider.shutdown()


def request(provider: TracerProvider, local: LocalBackend, tenant: str) -> tuple[str, int]:
    """Inside one request span, an order placed through the example's producer function (lambdas/place_order.py,
    invoked as Lambda would) and paid: (the payment event's id, the request's trace id)."""
    order_id, items = unique("order"), [{"sku": "tag", "quantity": 1, "unit_price_cents": 1500}]
    with provider.get_tracer("test").start_as_current_span("POST /orders") as span:
        placed = local.runtime.function("PlaceOrderFunctionName").invoke(
            {"tenant": tenant, "order_id": order_id, "buyer_email": "b@x.io", "items": items}
        )
        assert placed["status"] == 201, placed
        paid = local.commerce().complete_payment(
            local.store(),
            tenant=tenant,
            actor="e2e",
            order_id=order_id,
            payment_id=unique("pay"),
            amount_cents=1500,
            pet_tag_id=unique("tag"),
            shipping_address="1 Main St",
        )
    assert paid.event_id is not None
    return paid.event_id, span.get_span_context().trace_id


def leads_to(trace_id: int, span: ReadableSpan, by_id: dict[int, ReadableSpan], seen: set[int] | None = None) -> bool:
    """Whether ``span`` reaches the request's trace through its parents and links."""
    seen = set() if seen is None else seen
    if span.context.trace_id == trace_id:
        return True
    if span.context.span_id in seen:
        return False
    seen.add(span.context.span_id)
    followed = [link.context for link in span.links] + ([span.parent] if span.parent is not None else [])
    for context in followed:
        if context.trace_id == trace_id:
            return True
        nearer = by_id.get(context.span_id)
        if nearer is not None and leads_to(trace_id, nearer, by_id, seen):
            return True
    return False


def attempts(spans: list[ReadableSpan], event_id: str) -> dict[str, list[tuple[Any, Any]]]:
    """Each subscription's attempt spans of the event: [(attempt, outcome), ...] in the order they ended. A
    receive of a message whose pair had completed already is a span too, "skipped": not an attempt."""
    found: dict[str, list[tuple[Any, Any]]] = {}
    for span in spans:
        attributes = span.attributes or {}
        if attributes.get("outbox.outcome") == "skipped":
            continue
        if attributes.get("outbox.event.id") == event_id and span.name.startswith("process "):
            found.setdefault(str(attributes["outbox.subscription"]), []).append(
                (attributes.get("outbox.attempt"), attributes.get("outbox.outcome"))
            )
    return found


def test_every_effect_of_a_request_leads_back_to_its_trace(
    local: LocalBackend, recorded: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    provider, exporter = recorded
    local.service("storefront").fail_next = 1  # one retried attempt
    local.service("notifier").fail_next = 10**6  # and two dead pairs: the buyer's and the shipment's e-mail
    tenant = unique("traced")

    payment, trace_id = request(provider, local, tenant)
    local.settle()

    store = local.store()
    created, paid, booked, labelled = list(store.events(tenant))
    # The shipment's label workflow announced it, caused by the booking, in the booking's correlation
    assert (labelled.type, labelled.causation_id, labelled.correlation_id) == (
        "shipment.labelled",
        booked.id,
        booked.correlation_id,
    )
    # The request's events record its context; the follow-up records the attempt that emitted it.
    assert created.trace_context is not None
    assert paid.trace_context is not None
    assert {int(created.trace_context.trace_id, 16), int(paid.trace_context.trace_id, 16)} == {trace_id}
    spans = list(exporter.get_finished_spans())
    by_id = {span.context.span_id: span for span in spans}
    [emitter] = [
        s
        for s in spans
        if (s.attributes or {}).get("outbox.subscription") == "shipping.book_shipment"
        and (s.attributes or {}).get("outbox.outcome") == "completed"
    ]
    assert booked.trace_context is not None
    assert booked.trace_context.traceparent.split("-")[2] == f"{emitter.context.span_id:016x}"

    # Every attempt of the payment's four subscriptions and of the follow-up's subscriber, with its outcome.
    paid_attempts = attempts(spans, payment)
    assert set(paid_attempts) == FAN_OUT
    assert paid_attempts["storefront.mirror_order"] == [(1, "retry"), (2, "completed")]
    assert paid_attempts["notify.buyer"][-1][1] == "dead"
    assert {outcome for _, outcome in paid_attempts["notify.buyer"][:-1]} == {"retry"}
    assert attempts(spans, booked.id)["notify.shipment_booked"][-1][1] == "dead"
    story = [s for s in spans if s.name.startswith("process ")]
    assert story
    assert [s.name for s in story if not leads_to(trace_id, s, by_id)] == []

    # The services heard each attempt's own context: the call joins the attempt's span.
    [*_, last] = local.service("storefront").trace_headers[f"{payment}:storefront.mirror_order"]
    [completed] = [s for s in spans if s.name == "process storefront.mirror_order" and s.attributes
                   and s.attributes.get("outbox.outcome") == "completed"]  # fmt: skip
    assert last["traceparent"].split("-")[1:3] == [
        f"{completed.context.trace_id:032x}",
        f"{completed.context.span_id:016x}",
    ]

    # After the fix, a replay: its send links the original event, and the rerun leads back to the request.
    local.service("notifier").fail_next = 0
    exporter.clear()
    ops = operations(local)
    ops.replay(ops.plan_replay(tenant=tenant))
    local.settle()
    spans = list(exporter.get_finished_spans())
    by_id = {span.context.span_id: span for span in spans}
    sends = [s for s in spans if s.name == "replay send"]
    assert {(s.attributes or {}).get("outbox.event.id") for s in sends} == {payment, booked.id}
    payment_send = next(s for s in sends if (s.attributes or {}).get("outbox.event.id") == payment)
    assert [link.context.trace_id for link in payment_send.links] == [trace_id]
    assert [outcome for _, outcome in attempts(spans, payment)["notify.buyer"]] == ["completed"]
    assert all(leads_to(trace_id, s, by_id) for s in spans if s.name == "process notify.buyer")
    assert claim_statuses(local, payment)["notify.buyer"] == "COMPLETED"
