"""Repairs at any age: replay, redrive and reconcile never rerun an (event, subscription) that completed,
however long ago, and a selection that contradicts itself changes nothing."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

from outbox.keys import claim_key
from outbox.local.pipe import PipeFaults, TargetInvocationError
from outbox.ops import reconcile as reconciling
from tests.e2e.backends import LocalBackend, claim_statuses, event_image, queue_depth
from tests.e2e.test_pipeline import order_and_pay, unique
from tests.e2e.test_runbook import as_json, dead_letter_rows, operations, outbox, paid_with_a_dead_pet_tag


@pytest.mark.parametrize("days", [8, 15, 31])
def test_a_replay_days_later_reruns_only_the_dead_pair_never_its_completed_siblings(
    local: LocalBackend, days: int
) -> None:
    # Given a payment whose pet-tag mark died on a terminal error while its siblings completed
    tenant = unique("tenant")
    payment = paid_with_a_dead_pet_tag(local, tenant)
    completed_siblings = {name for name, status in claim_statuses(local, payment).items() if status == "COMPLETED"}

    # When days pass (the inbox's TTL sweep runs) and the operator replays the tenant's dead work
    local.runtime.clock.advance(days * 24 * 3600)
    local.runtime.sweep_expired_items()
    result = outbox(local, "replay", "--tenant", tenant, "--yes")
    assert result.exit_code == 0, result.output
    local.settle()

    # Then the dead pair ran once and no sibling ran again, whether or not the inbox still remembers them
    assert claim_statuses(local, payment)["pet_tag.mark_ordered"] == "COMPLETED"
    assert local.service("carrier").calls[f"{payment}:shipping.book_shipment"] == 1
    assert local.service("notifier").calls[f"{payment}:notify.buyer"] == 1
    remembered = set(claim_statuses(local, payment)) - {"pet_tag.mark_ordered"}
    assert remembered == (completed_siblings if days < 30 else set()), "the sweep forgot them after 30 days"


def test_an_event_redelivered_after_the_inbox_forgot_it_is_dead_lettered_as_unverifiable_not_run(
    local: LocalBackend,
) -> None:
    # Given a completed payment, forgotten by the inbox a month later
    tenant = unique("tenant")
    payment = order_and_pay(local, tenant)
    local.settle()
    local.runtime.clock.advance(31 * 24 * 3600)
    local.runtime.sweep_expired_items()
    assert claim_statuses(local, payment) == {}

    # When the event arrives again as the pipe sends it (a month-old message, say from a DLQ)
    local.client("sqs").send_message(
        QueueUrl=local.output("DurableQueueUrl"),
        MessageBody=json.dumps(event_image(local, tenant, 2)),
        MessageGroupId=tenant,
        MessageDeduplicationId=f"{payment}-again",
    )
    local.settle()

    # Then nothing ran again; each pair is an unverifiable dead letter the operator can see
    assert local.service("carrier").calls[f"{payment}:shipping.book_shipment"] == 1
    assert set(claim_statuses(local, payment).values()) == {"DEAD"}
    listed = dead_letter_rows(outbox(local, "--json", "dead-letters", "list", "--tenant", tenant))
    assert {row["reason"] for row in listed} == {"unverifiable"}
    refused = outbox(local, "replay", "--tenant", tenant, "--yes")
    assert refused.exit_code == 2
    assert "--force" in refused.output


@pytest.mark.parametrize("since", ["31d", "2020-01-01T00:00:00Z"])
def test_reconcile_refuses_a_window_older_than_the_inbox_remembers(local: LocalBackend, since: str) -> None:
    order_and_pay(local, unique("tenant"))
    local.settle()

    result = outbox(local, "reconcile", "--since", since, "--yes")

    assert result.exit_code == 2
    assert "remembers completions for 30 days" in result.output


def test_a_replay_selection_that_contradicts_itself_is_refused_and_sends_nothing(local: LocalBackend) -> None:
    # Given two tenants, each with a dead pair
    tenants = [unique("tenant"), unique("tenant")]
    payments = []
    for tenant in tenants:
        payments.append(paid_with_a_dead_pet_tag(local, tenant))
    before = queue_depth(local, "DurableQueueUrl")

    # When the operator names tenant A with an event of tenant B, or an event id with a time window
    wrong_tenant = outbox(local, "replay", "--tenant", tenants[0], "--event-id", payments[1], "--yes")
    with_window = outbox(local, "replay", "--event-id", payments[0], "--since", "1d", "--yes")

    # Then both are refused with exit code 2, and nothing was cleared or sent
    assert wrong_tenant.exit_code == 2
    assert "belongs to tenant" in wrong_tenant.output
    assert with_window.exit_code == 2
    assert "--since" in with_window.output
    assert queue_depth(local, "DurableQueueUrl") == before
    for payment in payments:
        assert claim_statuses(local, payment)["pet_tag.mark_ordered"] == "DEAD"


def test_a_replay_cut_short_before_it_re_sent_loses_nothing_and_leaves_no_stale_dead_letter(
    local: LocalBackend,
) -> None:
    """Found by simulation seed 14: a replay interrupted after clearing the claim, and the pair then
    completed by another copy of its event, left its dead letter open beside the completed work."""
    tenant = unique("tenant")
    payment = paid_with_a_dead_pet_tag(local, tenant)

    class DiesBeforeSending:
        def __init__(self, sqs: Any) -> None:
            self._sqs = sqs

        def send_message(self, **_request: Any) -> Any:
            raise KeyboardInterrupt  # the operator's laptop goes to sleep

        def __getattr__(self, name: str) -> Any:
            return getattr(self._sqs, name)

    # When the replay dies before it re-sends, and another copy of the event arrives meanwhile
    interrupted = outbox(local, "replay", "--tenant", tenant, "--yes", sqs=DiesBeforeSending(local.client("sqs")))
    assert interrupted.exit_code != 0
    assert claim_statuses(local, payment)["pet_tag.mark_ordered"] == "REPLAYING"
    local.client("sqs").send_message(
        QueueUrl=local.output("DurableQueueUrl"),
        MessageBody=json.dumps(event_image(local, tenant, 2)),
        MessageGroupId=tenant,
        MessageDeduplicationId=f"{payment}-copy",
    )
    local.settle()

    # Then the pair ran once, and its dead letter was resolved by that completion, not left open
    assert claim_statuses(local, payment)["pet_tag.mark_ordered"] == "COMPLETED"
    assert dead_letter_rows(outbox(local, "--json", "dead-letters", "list", "--tenant", tenant)) == []
    assert local.service("carrier").calls[f"{payment}:shipping.book_shipment"] == 1


def never_relayed(local: LocalBackend) -> tuple[str, str]:
    """A tenant's order and payment that the relay pipe never delivered (its role could not send, and the
    records ended in the pipe DLQ): only reconcile recovers them. Returns (tenant, payment event id)."""
    relay = local.runtime.pipe("RelayPipeName")

    def queue_refuses(_entries: Any) -> None:
        raise TargetInvocationError("AccessDenied: the pipe's role lost sqs:SendMessage")

    relay.faults = PipeFaults(before_send=queue_refuses)
    tenant = unique("tenant")
    payment = order_and_pay(local, tenant)
    local.settle()
    relay.faults = PipeFaults()
    return tenant, payment


def test_a_reconciled_pair_runs_once_even_when_its_message_arrives_after_the_retention(local: LocalBackend) -> None:
    # Given a payment the relay never delivered, reconciled 29 days later (just inside the inbox's memory)
    tenant, payment = never_relayed(local)
    local.runtime.clock.advance(29 * 24 * 3600 - 3600)
    result = outbox(local, "--json", "reconcile", "--since", "29d", "--tenant", tenant, "--yes")
    assert payment in as_json(result)["republished"]

    # When the re-sent message reaches the consumer two days later (a backlog, a stay in the DLQ), when a
    # missing claim row could no longer prove that the pair never completed
    assert set(claim_statuses(local, payment).values()) == {"REPLAYING"}, "reconcile wrote the rows that vouch"
    local.runtime.clock.advance(2 * 24 * 3600)
    local.settle()

    # Then every subscription ran once: the rows reconcile wrote vouched for the message
    assert set(claim_statuses(local, payment).values()) == {"COMPLETED"}
    assert local.service("carrier").calls[f"{payment}:shipping.book_shipment"] == 1
    assert dead_letter_rows(outbox(local, "--json", "dead-letters", "list", "--tenant", tenant)) == []


def test_reconcile_run_again_re_sends_what_a_cut_short_run_marked_and_each_effect_happens_once(
    local: LocalBackend,
) -> None:
    # Given a reconcile that marked the payment's pairs REPLAYING, but whose messages never reached a consumer
    tenant, payment = never_relayed(local)
    as_json(outbox(local, "--json", "reconcile", "--since", "1d", "--tenant", tenant, "--yes"))
    local.client("sqs").purge_queue(QueueUrl=local.output("DurableQueueUrl"))
    assert set(claim_statuses(local, payment).values()) == {"REPLAYING"}

    # When the operator runs it again at once (as the runbook says after an interruption), and the pipeline runs
    again = as_json(outbox(local, "--json", "reconcile", "--since", "1d", "--tenant", tenant, "--yes"))
    local.settle()
    after = as_json(outbox(local, "--json", "reconcile", "--since", "1d", "--tenant", tenant, "--yes"))

    # Then the second run re-sent the marked pairs, each effect happened once, and a third run sends nothing
    assert payment in again["republished"]
    assert set(claim_statuses(local, payment).values()) == {"COMPLETED"}
    assert local.service("carrier").calls[f"{payment}:shipping.book_shipment"] == 1
    assert after["republished"] == []


def test_reconcile_sends_nothing_for_a_pair_claimed_between_its_read_and_its_repair(
    local: LocalBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given an event whose claim appears after reconcile read the inbox and before it marked the pair
    tenant, payment = never_relayed(local)
    ops = operations(local)
    unclaimed = reconciling._unclaimed

    def claimed_meanwhile(context: Any, envelope: Any, selected: Any, stale: Any) -> dict[str, str | None]:
        missing = unclaimed(context, envelope, selected, stale)
        if envelope.id == payment:  # a slow pipe delivery claims every pair right now
            for name in missing:
                local.client("dynamodb").put_item(
                    TableName=local.output("InboxTableName"),
                    Item={**claim_key(payment, name), "status": {"S": "COMPLETED"}},
                )
        return missing

    monkeypatch.setattr(reconciling, "_unclaimed", claimed_meanwhile)
    before = queue_depth(local, "DurableQueueUrl")

    # When reconcile runs
    result = ops.reconcile(local.runtime.clock() - timedelta(days=1), tenant=tenant)

    # Then it re-sent the order (unclaimed) but nothing for the payment, whose pairs are in hand
    assert payment not in result.republished
    assert queue_depth(local, "DurableQueueUrl") == before + len(result.republished)
    assert set(claim_statuses(local, payment).values()) == {"COMPLETED"}
