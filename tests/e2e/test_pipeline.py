"""The seed's checklist, end to end: emit -> stream -> pipe -> FIFO -> consumer -> inbox, built from the
synthesized template. Scenarios on ``backend`` run on the local runtime and, when configured, on AWS;
those on ``local`` need fault injection."""

from __future__ import annotations

import json
import uuid
from dataclasses import replace

import pytest

from outbox import Envelope, TerminalError
from outbox.keys import dead_letter_partition
from outbox.local import faults
from outbox.local.pipe import PipeFaults
from tests.conftest import Synthesized
from tests.e2e.backends import (
    Backend,
    LocalBackend,
    claim_statuses,
    data_row,
    event_image,
    inbox_rows,
    local_backend,
    queue_depth,
    send_raw,
)

FAN_OUT = {"storefront.mirror_order", "shipping.book_shipment", "notify.buyer", "pet_tag.mark_ordered"}


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def order_and_pay(backend: Backend, tenant: str, total: int = 1500) -> str:
    """Place an order and pay it; returns the payment.completed event id."""
    store, commerce = backend.store(), backend.commerce()
    order_id, payment_id = unique("order"), unique("pay")
    items = [{"sku": "tag", "quantity": 1, "unit_price_cents": total}]
    commerce.place_order(store, tenant=tenant, actor="e2e", order_id=order_id, buyer_email="b@x.io", items=items)
    result = commerce.complete_payment(
        store,
        tenant=tenant,
        actor="e2e",
        order_id=order_id,
        payment_id=payment_id,
        amount_cents=total,
        pet_tag_id=unique("tag"),
        shipping_address="1 Main St",
    )
    assert result.event_id is not None
    return result.event_id


def test_a_payment_fans_out_to_four_subscriptions_each_completed_once(backend: Backend) -> None:
    tenant = unique("tenant")
    payment_event = order_and_pay(backend, tenant)

    backend.settle()

    assert claim_statuses(backend, payment_event) == dict.fromkeys(FAN_OUT, "COMPLETED")
    sales = data_row(backend, f"SALES#{tenant}", "TOTALS")
    assert sales is not None
    assert (sales["orders"]["N"], sales["revenue_cents"]["N"]) == ("1", "1500")
    types = [e.type for e in backend.store().events(tenant)]
    assert types[:3] == ["order.created", "payment.completed", "shipment.booked"], "the follow-up joined the log"
    # The booked shipment's label workflow announces its label once, after its 12-hour wait (which the local
    # runtime's testing SDK skips: there it has ended by now)
    assert types[3:] == ["shipment.labelled"] if backend.name == "local" else types[3:] in ([], ["shipment.labelled"])
    assert backend.store().verify_chain(tenant).intact
    assert queue_depth(backend, "DurableQueueUrl") == 0
    assert queue_depth(backend, "DurableDeadLetterQueueUrl") == 0


def test_the_same_event_resent_under_a_new_message_id_has_no_second_effect(backend: Backend) -> None:
    tenant = unique("tenant")
    order_and_pay(backend, tenant)
    backend.settle()

    send_raw(backend, json.dumps(event_image(backend, tenant, 1)), tenant, unique("resend"))
    backend.settle()

    sales = data_row(backend, f"SALES#{tenant}", "TOTALS")
    assert sales is not None
    assert sales["orders"]["N"] == "1", "the sales projection counted the order once"


def test_a_body_that_is_not_json_is_a_recorded_poison_pill_and_the_group_moves_on(backend: Backend) -> None:
    tenant = unique("tenant")
    marker = unique("poison")
    send_raw(backend, f"not json {marker}", tenant, marker)
    payment_event = order_and_pay(backend, tenant)

    backend.settle()

    from datetime import UTC, datetime

    day = datetime.now(UTC).strftime("%Y-%m-%d")
    if isinstance(backend, LocalBackend):
        day = backend.runtime.clock().strftime("%Y-%m-%d")
    pills = [row for row in inbox_rows(backend, f"POISON#{day}") if marker in row["body"]["S"]]
    assert len(pills) == 1
    assert set(claim_statuses(backend, payment_event).values()) == {"COMPLETED"}


def send_a_conflicting_copy(backend: Backend, tenant: str, *, seq: int) -> None:
    """Another content under the id of the tenant's event at ``seq`` (its hash recomputed), sent to the queue."""
    original = Envelope.from_item(event_image(backend, tenant, seq))
    forged = original.model_copy(update={"payload": {**original.payload, "total_cents": 1}})
    forged = forged.model_copy(update={"hash": forged.computed_hash()})
    send_raw(backend, json.dumps(forged.to_item()), tenant, unique("forged"))


def test_a_conflicting_payload_under_a_known_event_id_is_dead_lettered_not_run(backend: Backend) -> None:
    tenant = unique("tenant")
    order_and_pay(backend, tenant)
    backend.settle()
    send_a_conflicting_copy(backend, tenant, seq=1)
    backend.settle()

    rows = inbox_rows(backend, dead_letter_partition(tenant))
    # One conflict per durable subscription of order.created (the sales projection, the order journal).
    assert sorted((row["subscription"]["S"], row["reason"]["S"]) for row in rows) == [
        ("sales.journal_order", "conflict"),
        ("sales.project_order", "conflict"),
    ]
    sales = data_row(backend, f"SALES#{tenant}", "TOTALS")
    assert sales is not None
    assert sales["revenue_cents"]["N"] == "1500"


def test_an_address_change_reaches_the_best_effort_lane(backend: Backend) -> None:
    tenant = unique("tenant")
    backend.profile().change_address(backend.store(), tenant=tenant, actor="e2e", profile_id="p1", address="2 Elm St")

    backend.settle()

    mailing = data_row(backend, f"MAILING#{tenant}#p1", "MAILING")
    assert mailing is not None
    assert mailing["address"]["S"] == "2 Elm St"


def test_only_the_watched_entities_row_changes_reach_the_record_change_queue(local: LocalBackend) -> None:
    # An order and its payment write ORDER, PAYMENT, SALES, JOURNAL and PETTAG rows: nobody watches them, and
    # the record-change pipe drops their changes at the source; an address change passes.
    tenant = unique("tenant")
    pipe = local.runtime.pipe("RecordChangePipeName")
    order_and_pay(local, tenant)
    local.settle()
    assert (pipe.counters.delivered, pipe.counters.filtered_out > 0) == (0, True)
    local.profile().change_address(local.store(), tenant=tenant, actor="e2e", profile_id="p1", address="3 Oak St")
    local.settle()
    assert pipe.counters.delivered == 1, "the address row's change (the mailing row it writes is dropped)"


def test_the_inline_lane_refuses_a_payment_and_nothing_commits(backend: Backend) -> None:
    tenant = unique("tenant")
    with pytest.raises(TerminalError, match="screening limit"):
        order_and_pay(backend, tenant, total=2_000_000)
    backend.settle()

    assert [e.type for e in backend.store().events(tenant)] == ["order.created"], "no payment event"


# -- scenarios that need fault injection (local runtime only) ------------------------------------------


def test_a_worker_killed_after_the_effect_and_before_completion_runs_again_without_a_second_effect(
    local: LocalBackend,
) -> None:
    tenant = unique("tenant")
    with faults.crash_before_completion(subscription="shipping.book_shipment") as crash:
        payment_event = order_and_pay(local, tenant)
        local.settle()

    assert crash.fired == 1
    key = f"{payment_event}:shipping.book_shipment"
    carrier = local.service("carrier")
    assert carrier.calls[key] == 2, "the handler ran again after the take-over"
    shipments = [k for k, effect in carrier.effects.items() if effect["operation"] == "shipments"]
    assert shipments == [key], "and the idempotency key kept it to one shipment"
    assert claim_statuses(local, payment_event)["shipping.book_shipment"] == "COMPLETED"
    booked = [e for e in local.store().events(tenant) if e.type == "shipment.booked"]
    assert len(booked) == 1, "the follow-up event committed once, with the completion"


def test_a_worker_killed_right_after_its_claim_is_taken_over(local: LocalBackend) -> None:
    with faults.crash_after_claim(subscription="notify.buyer") as crash:
        payment_event = order_and_pay(local, unique("tenant"))
        local.settle()

    assert crash.fired == 1
    assert local.service("notifier").calls[f"{payment_event}:notify.buyer"] == 1
    assert set(claim_statuses(local, payment_event).values()) == {"COMPLETED"}


def test_a_handler_failing_twice_completes_on_the_third_receive(local: LocalBackend) -> None:
    with faults.fail_handler("pet_tag.mark_ordered", times=2) as failures:
        payment_event = order_and_pay(local, unique("tenant"))
        local.settle()

    assert failures.fired == 2
    row = inbox_rows(local, f"CLAIM#{payment_event}")
    attempts = {r["sk"]["S"]: r["attempts"]["N"] for r in row}
    assert attempts["pet_tag.mark_ordered"] == "3"
    assert set(claim_statuses(local, payment_event).values()) == {"COMPLETED"}


def test_throttled_dynamodb_calls_are_retried_without_loss(local: LocalBackend) -> None:
    with faults.throttle_dynamodb("TransactWriteItems", times=2) as throttled:
        payment_event = order_and_pay(local, unique("tenant"))
        local.settle()

    assert throttled.fired == 2
    assert set(claim_statuses(local, payment_event).values()) == {"COMPLETED"}


def test_a_lease_that_expires_while_its_owner_runs_still_completes_once(local: LocalBackend) -> None:
    with faults.expire_lease_while_running(local.runtime.clock, "notify.buyer") as expired:
        payment_event = order_and_pay(local, unique("tenant"))
        local.settle()

    assert expired.fired == 1
    assert local.service("notifier").calls[f"{payment_event}:notify.buyer"] == 1
    assert set(claim_statuses(local, payment_event).values()) == {"COMPLETED"}


def test_stream_records_reordered_across_items_change_nothing(local: LocalBackend) -> None:
    from outbox.local.pipe import reverse_items

    local.runtime.pipe("RelayPipeName").faults = PipeFaults(reorder=reverse_items)
    tenants = [unique("tenant") for _ in range(3)]
    events = [order_and_pay(local, tenant) for tenant in tenants]

    local.settle()

    for event in events:
        assert set(claim_statuses(local, event).values()) == {"COMPLETED"}


def test_a_message_redelivered_before_its_visibility_timeout_runs_each_effect_once(local: LocalBackend) -> None:
    payment_event = order_and_pay(local, unique("tenant"))
    local.runtime.pipe("RelayPipeName").drain()
    durable = local.runtime.mapping("DurableConsumerFunctionName")
    with faults.fail_handler("notify.buyer", times=1):
        local.runtime.step()
    assert faults.redeliver(durable) >= 1

    local.settle()

    assert local.service("notifier").calls[f"{payment_event}:notify.buyer"] == 1
    assert f"{payment_event}:notify.buyer" in local.service("notifier").effects
    assert set(claim_statuses(local, payment_event).values()) == {"COMPLETED"}


def test_a_flaky_service_succeeds_on_the_next_receive(local: LocalBackend) -> None:
    local.service("storefront").fail_next = 1
    payment_event = order_and_pay(local, unique("tenant"))

    local.settle()

    assert local.service("storefront").calls[f"{payment_event}:storefront.mirror_order"] == 2
    assert set(claim_statuses(local, payment_event).values()) == {"COMPLETED"}


def test_a_service_down_on_every_attempt_dead_letters_the_pair_and_leaves_the_dlq_empty(local: LocalBackend) -> None:
    local.service("notifier").fail_next = 10**6
    tenant = unique("tenant")
    payment_event = order_and_pay(local, tenant)

    local.settle()

    statuses = claim_statuses(local, payment_event)
    assert statuses.pop("notify.buyer") == "DEAD"
    assert set(statuses.values()) == {"COMPLETED"}, "its siblings are unaffected"
    dead = {(r["subscription"]["S"], r["reason"]["S"]) for r in inbox_rows(local, dead_letter_partition(tenant))}
    # The notifier also sends the shipment e-mail, so that subscription dies with it.
    assert dead == {("notify.buyer", "exhausted"), ("notify.shipment_booked", "exhausted")}
    # The dead letters are the record: the messages were acknowledged, the DLQ is only a transport backstop.
    assert queue_depth(local, "DurableDeadLetterQueueUrl") == 0


def test_a_failing_tenant_never_blocks_another(local: LocalBackend) -> None:
    blocked, flowing = unique("blocked"), unique("flowing")
    local.service("notifier").fail_next = 1  # the first call, which is the blocked tenant's
    first = order_and_pay(local, blocked)
    second = order_and_pay(local, flowing)

    local.runtime.pipe("RelayPipeName").drain()
    local.runtime.step()

    assert set(claim_statuses(local, second).values()) == {"COMPLETED"}, "the other tenant's group flowed"
    assert claim_statuses(local, first)["notify.buyer"] == "PENDING"
    local.settle()
    assert set(claim_statuses(local, first).values()) == {"COMPLETED"}


def test_a_duplicated_pipe_delivery_is_collapsed_by_fifo_deduplication(local: LocalBackend) -> None:
    local.runtime.pipe("RelayPipeName").faults = PipeFaults(duplicate_delivery=lambda _records: True)
    tenant = unique("tenant")
    payment_event = order_and_pay(local, tenant)

    local.settle()

    assert local.service("carrier").calls[f"{payment_event}:shipping.book_shipment"] == 1
    assert local.runtime.pipe("RelayPipeName").counters.duplicate_sends > 0


def test_a_pipe_template_that_does_not_resolve_delivers_nothing_and_says_so(synthesized: Synthesized) -> None:
    from outbox.local.template import load_stack

    stack = load_stack(synthesized.outdir, "OutboxEngine")
    relay_id = stack.output_reference("RelayPipeName").logical_id
    stack.pipes[relay_id] = replace(stack.pipes[relay_id], input_template='{"image": <$.dynamodb.NewImag>}')
    from modules.services import SERVICE_NAMES, SERVICES_VARIABLE
    from outbox.local.runtime import LocalRuntime
    from outbox.testing.services import FakeServiceServer

    with (
        FakeServiceServer(SERVICE_NAMES) as fakes,
        LocalRuntime(stack, environment={SERVICES_VARIABLE: fakes.url}) as rt,
    ):
        backend = LocalBackend(rt, fakes)
        tenant = unique("tenant")
        order_and_pay(backend, tenant)

        backend.settle()

        relay = rt.pipe("RelayPipeName")
        assert relay.counters.delivered == 0
        assert any(entry.level == "ERROR" and "NewImag" in entry.message for entry in relay.log)
        assert queue_depth(backend, "RelayDeadLetterQueueUrl") > 0, "the pipe's DLQ holds the failed batches"
        assert fakes.services["carrier"].calls == {}, "no subscriber ran: the failure the seed describes"


def test_each_runtime_starts_from_an_empty_account(synthesized: Synthesized) -> None:
    tenant = unique("tenant")
    with local_backend(synthesized.outdir) as first:
        order_and_pay(first, tenant)
    with local_backend(synthesized.outdir) as second:
        assert list(second.store().events(tenant)) == []


def test_two_in_process_runtimes_at_once_are_refused_clearly(local: LocalBackend, synthesized: Synthesized) -> None:
    from outbox.local.runtime import LocalRuntime

    with pytest.raises(RuntimeError, match="one in-process runtime at a time"):
        LocalRuntime.from_assembly(synthesized.outdir).start()
