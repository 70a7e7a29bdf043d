"""The runbook, tested: each path from an alarm to a fix runs through the `outbox` CLI on the local runtime."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner, Result

from modules import build_catalog
from modules.services import Services
from outbox import TerminalError
from outbox.cli import CliContext, app
from outbox.local import faults
from outbox.local.pipe import PipeFaults, TargetInvocationError
from outbox.ops import Operations
from tests.e2e.backends import LocalBackend, claim_statuses, queue_depth
from tests.e2e.test_pipeline import order_and_pay, unique


def operations(local: LocalBackend, sqs: Any | None = None) -> Operations:
    catalog = build_catalog(data_table=local.output("DataTableName"), services=Services.served_by(local.fakes))
    ops: Operations = local.runtime.operations(catalog, sqs=sqs)
    return ops


def outbox(local: LocalBackend, *args: str, answer: str | None = None, sqs: Any | None = None) -> Result:
    # Wide enough that no table cell is cut in the captured output.
    context = CliContext.of(
        operations(local, sqs), console=Console(width=250), err_console=Console(width=250, stderr=True)
    )
    return CliRunner().invoke(app, list(args), obj=context, input=answer)


def as_json(result: Result) -> Any:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def dead_letter_rows(result: Result) -> Any:
    """The document of ``dead-letters list`` or ``show``: exit 1 while a row is open, 0 when none is."""
    rows = json.loads(result.stdout)
    assert result.exit_code == (1 if any(row["resolved"] is None for row in rows) else 0), result.output
    return rows


# -- alarm: durable DLQ > 0 (the consumer could not process messages at all) -----------------------------------


def paid_with_a_dead_pet_tag(local: LocalBackend, tenant: str) -> str:
    """A payment whose pet-tag mark died on a terminal error while its siblings completed."""
    with faults.fail_handler("pet_tag.mark_ordered", times=1, error=lambda: TerminalError("tag registry said no")):
        payment = order_and_pay(local, tenant)
        local.settle()
    return payment


@contextmanager
def broken_consumer() -> Iterator[None]:
    """A consumer that fails before it writes anything for a pair (a bad deploy): before any claim, and before
    the commit of a pair run with no claim (a DynamoDB-only subscription's, on the direct path). Every message
    comes back, until SQS moves it to the DLQ after the queue's maxReceiveCount."""
    with faults.crash_before_claim(times=10**6), faults.crash_before_completion(times=10**6):
        yield


@pytest.mark.parametrize("method", ["move-task", "receive-send-delete"])
def test_runbook_dlq_alarm_fix_then_redrive_runs_each_effect_once(local: LocalBackend, method: str) -> None:
    # Given a broken deploy that sent a tenant's order and payment to the DLQ, unclaimed
    tenant = unique("tenant")
    with broken_consumer():
        payment = order_and_pay(local, tenant)
        local.settle()
    assert queue_depth(local, "DurableDeadLetterQueueUrl") == 2
    assert claim_statuses(local, payment) == {}

    # When the fix is deployed and the operator redrives
    result = outbox(local, "--json", "redrive", "--method", method, "--yes")
    local.settle()

    # Then each effect ran once, the DLQ is empty, and the result said what moved
    assert as_json(result)["moved"] == 2
    assert set(claim_statuses(local, payment).values()) == {"COMPLETED"}
    notifier = local.service("notifier")
    assert sum(1 for key in notifier.effects if key.startswith(payment)) == 1, "one e-mail for the payment"
    assert queue_depth(local, "DurableDeadLetterQueueUrl") == 0
    assert dead_letter_rows(outbox(local, "--json", "dead-letters", "list", "--tenant", tenant)) == []


@pytest.mark.parametrize("method", ["move-task", "receive-send-delete"])
def test_redrive_of_more_than_a_batch_of_one_tenant_runs_every_message_and_leaves_dead_work_visible(
    local: LocalBackend, method: str
) -> None:
    # Given 15 messages of one tenant in the DLQ, behind an earlier event of the tenant with a dead pair
    tenant = unique("tenant")
    first = paid_with_a_dead_pet_tag(local, tenant)
    with broken_consumer():
        payments = [order_and_pay(local, tenant) for _ in range(7)]
        extra = local.commerce().place_order(
            local.store(),
            tenant=tenant,
            actor="e2e",
            order_id=unique("order"),
            buyer_email="b@x.io",
            items=[{"sku": "tag", "quantity": 1, "unit_price_cents": 100}],
        )
        local.settle()
    assert queue_depth(local, "DurableDeadLetterQueueUrl") == 15
    dead_before = dead_letter_rows(outbox(local, "--json", "dead-letters", "list", "--tenant", tenant))

    # When the operator redrives
    result = as_json(outbox(local, "--json", "redrive", "--method", method, "--yes"))
    local.settle()

    # Then all 15 moved and ran; the dead pair stayed dead, visible, and nothing ran twice
    assert result["moved"] == 15
    assert queue_depth(local, "DurableDeadLetterQueueUrl") == 0
    for payment in payments:
        assert set(claim_statuses(local, payment).values()) == {"COMPLETED"}
    assert extra.event_id is not None
    assert set(claim_statuses(local, extra.event_id).values()) == {"COMPLETED"}
    assert claim_statuses(local, first)["pet_tag.mark_ordered"] == "DEAD"
    assert dead_letter_rows(outbox(local, "--json", "dead-letters", "list", "--tenant", tenant)) == dead_before
    carrier = local.service("carrier")
    assert all(count == 1 for count in carrier.calls.values())


def test_runbook_redrive_interrupted_halfway_and_resumed_loses_nothing_and_doubles_nothing(local: LocalBackend) -> None:
    with broken_consumer():
        payments = [order_and_pay(local, unique("tenant")) for _ in range(3)]
        local.settle()
    assert queue_depth(local, "DurableDeadLetterQueueUrl") == 6

    class DiesOnSecondDelete:
        """The operator's laptop goes to sleep between a send and its delete."""

        def __init__(self, sqs: Any) -> None:
            self._sqs, self.deletes = sqs, 0

        def delete_message(self, **request: Any) -> Any:
            self.deletes += 1
            if self.deletes == 2:
                raise KeyboardInterrupt
            return self._sqs.delete_message(**request)

        def __getattr__(self, name: str) -> Any:
            return getattr(self._sqs, name)

    interrupted = outbox(
        local,
        "redrive",
        "--method",
        "receive-send-delete",
        "--yes",
        sqs=DiesOnSecondDelete(local.runtime.client("sqs")),
    )
    assert interrupted.exit_code != 0
    local.settle()
    blocked = outbox(local, "redrive", "--method", "receive-send-delete", "--yes")
    assert blocked.exit_code == 2
    assert "in flight" in blocked.output, "the operator is told why, not shown an empty success"
    local.runtime.clock.advance(61)  # the operator comes back a minute later
    resumed = outbox(local, "redrive", "--method", "receive-send-delete", "--yes")
    assert resumed.exit_code == 0, resumed.output
    local.settle()

    notifier = local.service("notifier")
    for payment in payments:
        assert set(claim_statuses(local, payment).values()) == {"COMPLETED"}
        assert notifier.effects.get(f"{payment}:notify.buyer") is not None
    assert len(notifier.effects) == 6, "each payment and each shipment e-mailed once"
    assert queue_depth(local, "DurableDeadLetterQueueUrl") == 0


# -- alarm: dead letters (exhausted) ---------------------------------------------------------------------------


def test_runbook_dead_letters_alarm_fix_then_replay_runs_each_dead_effect_once(local: LocalBackend) -> None:
    # Given the mail provider down for good: both e-mails of a payment dead after their attempts
    notifier = local.service("notifier")
    notifier.fail_next = 10**6
    tenant = unique("tenant")
    payment = order_and_pay(local, tenant)
    local.settle()
    listed = dead_letter_rows(outbox(local, "--json", "dead-letters", "list", "--tenant", tenant))
    assert {row["subscription"] for row in listed} == {"notify.buyer", "notify.shipment_booked"}
    assert queue_depth(local, "DurableDeadLetterQueueUrl") == 0, "dead work is acknowledged, not parked"

    # When the fix is deployed and the operator replays the tenant's dead work
    notifier.fail_next = 0
    result = outbox(local, "replay", "--tenant", tenant, "--yes")
    assert result.exit_code == 0, result.output
    local.settle()

    # Then each e-mail went out once and no sibling ran again
    assert claim_statuses(local, payment)["notify.buyer"] == "COMPLETED"
    assert sum(1 for key in notifier.effects if key.startswith(payment)) == 1, "one e-mail for the payment"
    assert local.service("carrier").calls[f"{payment}:shipping.book_shipment"] == 1
    assert dead_letter_rows(outbox(local, "--json", "dead-letters", "list", "--tenant", tenant)) == [], "resolved"


# -- alarm: dead letters (terminal) ---------------------------------------------------------------------------


def test_runbook_terminal_dead_letter_fixed_then_replayed_runs_once(local: LocalBackend) -> None:
    tenant = unique("tenant")
    with faults.fail_handler("pet_tag.mark_ordered", times=1, error=lambda: TerminalError("tag registry said no")):
        payment = order_and_pay(local, tenant)
        local.settle()
    assert claim_statuses(local, payment)["pet_tag.mark_ordered"] == "DEAD"
    assert queue_depth(local, "DurableDeadLetterQueueUrl") == 0, "terminal: handled, not in the DLQ"

    dry = outbox(local, "replay", "--tenant", tenant, "--dry-run")
    assert dry.exit_code == 0
    assert "pet_tag.mark_ordered" in dry.output
    assert claim_statuses(local, payment)["pet_tag.mark_ordered"] == "DEAD", "a dry run changes nothing"

    result = outbox(local, "replay", "--tenant", tenant, "--yes")
    assert result.exit_code == 0, result.output
    local.settle()

    statuses = claim_statuses(local, payment)
    assert set(statuses.values()) == {"COMPLETED"}
    carrier = local.service("carrier")
    assert carrier.calls[f"{payment}:shipping.book_shipment"] == 1, "the replay did not rerun completed work"


def test_replaying_a_completed_event_is_refused_unless_forced(local: LocalBackend) -> None:
    payment = order_and_pay(local, unique("tenant"))
    local.settle()

    refused = outbox(local, "replay", "--event-id", payment, "--subscription", "notify.buyer", "--yes")
    assert refused.exit_code == 2
    assert "notify.buyer completed" in refused.output

    forced = outbox(local, "replay", "--event-id", payment, "--subscription", "notify.buyer", "--force", "--yes")
    assert forced.exit_code == 0, forced.output
    local.settle()
    assert local.service("notifier").calls[f"{payment}:notify.buyer"] == 2, "it ran again, as asked"
    assert len([k for k in local.service("notifier").effects if k.startswith(payment)]) == 1, "the key held"


# -- alarm: relay pipe DLQ > 0 (or the stream position was lost) ---------------------------------------------


def test_runbook_reconcile_after_the_stream_position_was_lost_is_idempotent(local: LocalBackend) -> None:
    relay = local.runtime.pipe("RelayPipeName")

    def queue_refuses(_entries: Any) -> None:
        raise TargetInvocationError("AccessDenied: the pipe's role lost sqs:SendMessage")

    relay.faults = PipeFaults(before_send=queue_refuses)
    tenant = unique("tenant")
    payment = order_and_pay(local, tenant)
    local.settle()
    assert claim_statuses(local, payment) == {}, "nothing was delivered"
    assert queue_depth(local, "RelayDeadLetterQueueUrl") > 0
    relay.faults = PipeFaults()  # the role is fixed; the records themselves are gone from the pipe

    first = as_json(outbox(local, "--json", "reconcile", "--since", "2d", "--yes"))
    local.settle()
    second = as_json(outbox(local, "--json", "reconcile", "--since", "2d", "--yes"))

    assert len(first["republished"]) == 2, "order.created and payment.completed: nothing else is unhandled"
    assert set(claim_statuses(local, payment).values()) == {"COMPLETED"}
    assert second["republished"] == [], "a second run publishes nothing"
    assert local.service("carrier").calls[f"{payment}:shipping.book_shipment"] == 1


# -- reading --------------------------------------------------------------------------------------------------


def test_status_reports_chain_intact_and_dead_letters_per_tenant_and_every_queue(local: LocalBackend) -> None:
    local.service("notifier").fail_next = 10**6
    tenant = unique("tenant")
    order_and_pay(local, tenant)
    local.settle()

    result = outbox(local, "--json", "status")
    report = json.loads(result.output)

    [row] = [t for t in report["tenants"] if t["tenant"] == tenant]
    assert (row["chain_intact"], row["dead_letters"]) == (True, 2)
    assert report["queues"]["durable-dlq"]["visible"] == 0
    assert set(report["queues"]) >= {"durable", "durable-dlq", "relay-pipe-dlq", "record-change", "record-change-dlq"}
    assert set(report["pipes"].values()) == {"RUNNING"}
    assert (
        f"tenant {tenant}: 2 dead letters: outbox dead-letters list --tenant {tenant}; after the fix, outbox replay "
        f"--tenant {tenant}"
    ) in report["problems"]
    # Exit 1: something needs an operator (here the two dead letters), for a monitoring script; the same
    # with or without --json, and the human form names the problem.
    human = outbox(local, "status")
    assert (result.exit_code, human.exit_code) == (1, 1)
    assert f"needs attention: tenant {tenant}: 2 dead letters" in human.output


def test_status_exits_0_when_nothing_needs_an_operator(local: LocalBackend) -> None:
    order_and_pay(local, unique("tenant"))
    local.settle()

    result = outbox(local, "--json", "status")

    assert (as_json(result)["problems"], result.exit_code) == ([], 0)


def test_verify_chain_checks_every_tenant_and_fails_on_a_broken_one(local: LocalBackend) -> None:
    tenant = unique("tenant")
    order_and_pay(local, tenant)
    assert outbox(local, "verify-chain", "--all").exit_code == 0

    from outbox.keys import event_partition, seq_sort_key

    local.client("dynamodb").delete_item(
        TableName=local.output("EventsTableName"),
        Key={"pk": {"S": event_partition(tenant)}, "sk": {"S": seq_sort_key(1)}},
    )
    broken = outbox(local, "--json", "verify-chain", "--tenant", tenant)
    assert broken.exit_code == 1
    assert json.loads(broken.output)[0]["reason"] == "gap"


def test_the_catalog_command_lists_types_and_subscriptions(local: LocalBackend) -> None:
    document = as_json(outbox(local, "--json", "catalog"))
    assert "payment.completed" in {t["type"] for t in document["event_types"]}
    assert outbox(local, "catalog").exit_code == 0


# -- refusals -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["verify-chain", "--tenant", "nobody"], "unknown tenant"),
        (["verify-chain"], "name a tenant"),
        (["replay", "--event-id", "not-an-id", "--yes"], "not an event id"),
        (["replay", "--yes"], "select what to replay"),
        (["replay", "--tenant", "nobody", "--yes"], "unknown tenant"),
        (["replay", "--tenant", "TENANT", "--subscription", "no.such", "--yes"], "unknown subscription"),
        (["redrive", "--dlq", "relay-pipe-dlq", "--yes"], "cannot redrive"),
        (["reconcile", "--since", "1d", "--tenant", "nobody", "--yes"], "unknown tenant"),
    ],
)
def test_bad_input_is_refused_clearly_and_changes_nothing(local: LocalBackend, args: list[str], message: str) -> None:
    tenant = unique("tenant")
    order_and_pay(local, tenant)
    local.settle()
    before = queue_depth(local, "DurableQueueUrl")

    result = outbox(local, *[tenant if a == "TENANT" else a for a in args])

    assert result.exit_code == 2, result.output
    assert message in result.output
    assert queue_depth(local, "DurableQueueUrl") == before


def test_a_change_is_not_made_without_confirmation(local: LocalBackend) -> None:
    tenant = unique("tenant")
    with faults.fail_handler("pet_tag.mark_ordered", times=1, error=lambda: TerminalError("no")):
        payment = order_and_pay(local, tenant)
        local.settle()

    result = outbox(local, "replay", "--tenant", tenant, answer="n\n")

    assert result.exit_code == 1
    assert claim_statuses(local, payment)["pet_tag.mark_ordered"] == "DEAD"


def test_a_tenant_replay_never_reruns_work_completed_after_it_died(local: LocalBackend) -> None:
    """Found by simulation seed 39: an old dead letter whose claim was taken over and completed since."""
    from outbox import DeadReason, Envelope
    from outbox.inbox import Inbox
    from tests.e2e.backends import event_image

    tenant = unique("tenant")
    payment = order_and_pay(local, tenant)
    local.settle()
    inbox = Inbox(local.output("InboxTableName"), client=local.client("dynamodb"), max_attempts=5)
    envelope = Envelope.from_item(event_image(local, tenant, 2))
    stale = inbox.dead_letter_item(envelope, "notify.buyer", "timeout", "TimeoutError", DeadReason.EXHAUSTED, 5)
    local.client("dynamodb").put_item(TableName=local.output("InboxTableName"), Item=stale)

    result = outbox(local, "replay", "--tenant", tenant, "--yes")

    assert result.exit_code == 0, "nothing to do: nothing was changed, and nothing had to be"
    assert "nothing to replay" in result.output
    assert claim_statuses(local, payment)["notify.buyer"] == "COMPLETED"
