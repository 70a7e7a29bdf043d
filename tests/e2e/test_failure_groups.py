"""Failure groups and bulk repairs on the local runtime: 200 dead letters of three failures across five
tenants are three groups; replaying one group runs exactly its pairs, once; skipping one records each pair,
final; both rerun safely; the operator endpoint serves the same groups."""

from __future__ import annotations

import itertools
import json
from contextlib import ExitStack
from typing import Any

import pytest

from outbox import TerminalError
from outbox.local import faults
from outbox_cdk import operator_endpoint
from tests.e2e.backends import LocalBackend, claim_statuses
from tests.e2e.test_lanes_and_modes import function_url_event
from tests.e2e.test_pipeline import order_and_pay, send_a_conflicting_copy, unique
from tests.e2e.test_runbook import as_json, dead_letter_rows, operations, outbox, paid_with_a_dead_pet_tag

TENANTS = 5
PAYMENTS = 100  # each leaves two dead letters: 200
SHIP, TAG, NOTIFY = "shipping.book_shipment", "pet_tag.mark_ordered", "notify.buyer"


@pytest.fixture
def failures(local: LocalBackend) -> dict[str, list[str]]:
    """Every buyer notification dies on the mail relay; the first half of the payments' shipments die on
    the carrier (a message that names the parcel: one failure all the same), the second half's pet tags on
    the tag registry. Payment event ids by the failure their second dead letter is of."""
    tenants = [unique("tenant") for _ in range(TENANTS)]
    parcel = itertools.count(1000)
    half = PAYMENTS // 2
    payments: dict[str, list[str]] = {SHIP: [], TAG: []}
    for failing, error in (
        (SHIP, lambda: TerminalError(f"carrier has no capacity for parcel {next(parcel)}")),
        (TAG, lambda: TerminalError("tag registry is down")),
    ):
        with ExitStack() as faults_on:
            faults_on.enter_context(faults.fail_handler(NOTIFY, 10**6, lambda: TerminalError("mail relay refused")))
            faults_on.enter_context(faults.fail_handler(failing, 10**6, error))
            for index in range(half):
                payments[failing].append(order_and_pay(local, tenants[index % TENANTS]))
            local.settle()
    return payments


def groups(local: LocalBackend) -> list[dict[str, Any]]:
    result = outbox(local, "dead-letters", "groups", "--json")
    assert result.exit_code in (0, 1), result.output
    listed: list[dict[str, Any]] = json.loads(result.stdout)
    return listed


def group_of(listed: list[dict[str, Any]], subscription: str) -> dict[str, Any]:
    [group] = [group for group in listed if group["subscription"] == subscription]
    return group


def test_two_hundred_dead_letters_of_three_failures_across_five_tenants_are_three_groups(
    local: LocalBackend, failures: dict[str, list[str]]
) -> None:
    listed = groups(local)

    assert sorted((group["subscription"], group["count"]) for group in listed) == [
        (NOTIFY, PAYMENTS),
        (TAG, PAYMENTS // 2),
        (SHIP, PAYMENTS // 2),
    ]
    assert all(len(group["tenants"]) == TENANTS for group in listed)
    ship = group_of(listed, SHIP)
    assert ship["where"] == "TerminalError: carrier has no capacity for parcel #"
    assert ship["example"]["error"].startswith("TerminalError: carrier has no capacity for parcel ")
    assert ship["first_seen"] <= ship["last_seen"]
    assert ship["repair"] == f"outbox replay --group {ship['id']} --dry-run"
    # The table says the same, with the command per group
    table = outbox(local, "dead-letters", "groups")
    assert table.exit_code == 1
    assert "3 failure groups, 200 dead letters" in table.stdout
    assert f"{ship['id']}: outbox replay --group {ship['id']} --dry-run" in table.stdout


def test_replaying_one_group_runs_exactly_its_pairs_once_and_a_rerun_finds_nothing_to_do(
    local: LocalBackend, failures: dict[str, list[str]]
) -> None:
    ship = group_of(groups(local), SHIP)

    dry = as_json(outbox(local, "replay", "--group", ship["id"], "--dry-run", "--json"))
    assert (dry["dry_run"], dry["counts"]["planned"], dry["counts"]["sent"]) == (True, PAYMENTS // 2, 0)
    assert {pair["event_id"] for pair in dry["planned"]} == set(failures[SHIP])

    done = as_json(outbox(local, "replay", "--group", ship["id"], "--yes", "--json"))
    local.settle()

    assert done["counts"] == {"planned": 50, "sent": 50, "skipped": 0, "refused": 0}
    carrier = local.service("carrier")
    for payment in failures[SHIP] + failures[TAG]:  # every shipment ran once: the replayed ones, now
        assert carrier.calls[f"{payment}:{SHIP}"] == 1, payment
    for payment in failures[SHIP]:
        assert claim_statuses(local, payment)[SHIP] == "COMPLETED"
        assert claim_statuses(local, payment)[NOTIFY] == "DEAD", "another group's pair of the same event"
    for payment in failures[TAG]:
        assert claim_statuses(local, payment)[TAG] == "DEAD"
    notified = [key for key in local.service("notifier").calls if key.endswith(f":{NOTIFY}")]
    assert notified == [], "no buyer notification ran: its group was not replayed"
    assert sorted(group["subscription"] for group in groups(local)) == sorted([NOTIFY, TAG])

    again = outbox(local, "replay", "--group", ship["id"], "--yes")
    assert (again.exit_code, again.stdout.strip()) == (0, f"group {ship['id']} has no open dead letters: nothing to do")


def test_skipping_a_group_records_each_pair_final_and_a_replay_never_runs_them(
    local: LocalBackend, failures: dict[str, list[str]]
) -> None:
    tag = group_of(groups(local), TAG)

    skipped = as_json(
        outbox(
            local,
            "skip",
            "--group",
            tag["id"],
            "--reason",
            "registry rebuilt by hand",
            "--by",
            "ops",
            "--yes",
            "--json",
        )
    )

    assert skipped["counts"] == {"planned": 50, "sent": 0, "skipped": 50, "refused": 0}
    payment = failures[TAG][0]
    assert claim_statuses(local, payment)[TAG] == "SKIPPED"
    tenant = next(pair["tenant"] for pair in skipped["planned"] if pair["event_id"] == payment)
    [letter] = [
        row
        for row in dead_letter_rows(outbox(local, "--json", "dead-letters", "show", payment, "--tenant", tenant))
        if row["subscription"] == TAG
    ]
    assert letter["resolved"].startswith("skipped by ops at ")
    assert letter["resolved"].endswith(": registry rebuilt by hand")
    # Final: a replay by the event's id leaves the skipped pair alone
    replayed = outbox(local, "replay", "--event-id", payment, "--subscription", TAG, "--yes")
    assert replayed.exit_code == 0, replayed.output
    assert "nothing to replay" in replayed.output
    assert claim_statuses(local, payment)[TAG] == "SKIPPED"
    assert outbox(local, "skip", "--group", tag["id"], "--reason", "again", "--yes").exit_code == 0


def test_a_group_replay_that_refuses_pairs_exits_1_with_why_and_skip_acknowledges_them(local: LocalBackend) -> None:
    # A conflicting payload under a known event id: conflicts, recorded as dead letters, are no dead work
    tenant = unique("tenant")
    order_and_pay(local, tenant)
    local.settle()
    send_a_conflicting_copy(local, tenant, seq=1)
    local.settle()
    [journal] = [g for g in groups(local) if g["subscription"] == "sales.journal_order" and g["reason"] == "conflict"]

    replayed = outbox(local, "replay", "--group", journal["id"], "--yes", "--json")

    assert replayed.exit_code == 1, replayed.output
    document = json.loads(replayed.stdout)
    assert document["counts"] == {"planned": 0, "sent": 0, "skipped": 0, "refused": 1}
    assert "a conflict, not dead work" in document["refused"][0]["why"]
    assert "refused" in replayed.stderr
    # Skipped, the conflict is acknowledged: resolved, and the group is gone
    acknowledged = outbox(local, "skip", "--group", journal["id"], "--reason", "forgery seen", "--yes")
    assert acknowledged.exit_code == 0, acknowledged.output
    assert journal["id"] not in {group["id"] for group in groups(local)}


def test_an_unknown_group_is_refused_and_names_the_listing(local: LocalBackend) -> None:
    order_and_pay(local, unique("tenant"))
    local.settle()
    result = outbox(local, "replay", "--group", "g-0000000000", "--yes", "--json")
    assert result.exit_code == 2
    assert "outbox dead-letters groups lists" in json.loads(result.stdout)["error"]["message"]


def test_the_operator_endpoint_serves_the_same_groups(local: LocalBackend, failures: dict[str, list[str]]) -> None:
    [endpoint] = [f for f in local.runtime.functions.values() if f.handler_path == operator_endpoint.HANDLER]

    served = endpoint.invoke(function_url_event("/dead-letters/groups"))

    assert served["statusCode"] == 200
    assert json.loads(served["body"]) == groups(local)


def test_a_group_repair_runs_the_pairs_it_showed_not_one_that_died_after_the_question(local: LocalBackend) -> None:
    # The plan shows one dead pet tag; while the operator reads it, another payment's tag dies the same way
    tenant = unique("tenant")
    shown = paid_with_a_dead_pet_tag(local, tenant)
    ops = operations(local)
    [group] = ops.failure_groups(tenant=tenant)
    plan = ops.replay_group(group.id, dry_run=True)
    later = paid_with_a_dead_pet_tag(local, tenant)

    done = ops.replay_group(group.id, only=plan.planned)
    local.settle()

    assert [pair.event_id for pair in done.sent] == [shown]
    assert claim_statuses(local, shown)[TAG] == "COMPLETED"
    assert claim_statuses(local, later)[TAG] == "DEAD", "not approved: it waits for the next run, and is shown then"
    [still] = ops.failure_groups(tenant=tenant)
    assert (still.id, still.count) == (group.id, 1)
