"""The CLI never misleads the operator at 3 a.m.: a repair that did not do what was asked exits non-zero and
says why in AWS's words and what to try next; a repair with nothing to do exits 0; a refusal names the
narrowest command that does what is needed, and that command, run as printed, works; "no" and a closed stdin
are said alike; every "needs attention" line names its next command."""

from __future__ import annotations

import json
import re
import shlex

import pytest

from tests.e2e.backends import LocalBackend, claim_statuses, queue_depth
from tests.e2e.test_pipeline import order_and_pay, unique
from tests.e2e.test_runbook import as_json, broken_consumer, dead_letter_rows, outbox, paid_with_a_dead_pet_tag


def flat(text: str) -> str:
    return " ".join(text.split())


def put_in_dlq_by_hand(local: LocalBackend, count: int, group: str) -> None:
    """Messages SQS never dead-lettered itself (copied in by a person or a script): they carry no
    DeadLetterQueueSourceArn, so SQS's move task cannot tell where they go back to."""
    sqs = local.client("sqs")
    for index in range(count):
        sqs.send_message(
            QueueUrl=local.output("DurableDeadLetterQueueUrl"),
            MessageBody=json.dumps({"not": "an event", "n": index}),
            MessageGroupId=group,
            MessageDeduplicationId=unique("by-hand"),
        )


def test_a_move_task_that_fails_exits_1_with_sqs_s_reason_and_the_method_that_works(local: LocalBackend) -> None:
    put_in_dlq_by_hand(local, 3, unique("group"))
    before = queue_depth(local, "DurableDeadLetterQueueUrl")

    failed = outbox(local, "redrive", "--method", "move-task", "--yes", "--json")

    assert failed.exit_code == 1, failed.output
    document = json.loads(failed.stdout)
    assert (document["status"], document["done"], document["moved"]) == ("FAILED", False, 0)
    assert "has no DeadLetterQueueSourceArn and no DestinationArn was given" in document["failure"]
    assert "--method receive-send-delete" in document["shortfall"]
    assert "has no DeadLetterQueueSourceArn" in flat(failed.stderr)
    assert queue_depth(local, "DurableDeadLetterQueueUrl") == before

    # The method it names, run as it says, moves them
    moved = as_json(outbox(local, "redrive", "--method", "receive-send-delete", "--yes", "--json"))
    assert (moved["moved"], moved["done"]) == (before, True)
    local.settle()


def test_auto_goes_on_by_receive_send_delete_where_the_move_task_failed(local: LocalBackend) -> None:
    put_in_dlq_by_hand(local, 2, unique("group"))
    before = queue_depth(local, "DurableDeadLetterQueueUrl")

    result = as_json(outbox(local, "redrive", "--yes", "--json"))

    assert (result["method"], result["moved"], result["remaining"]) == (
        "move-task, then receive-send-delete",
        before,
        0,
    )
    assert "has no DeadLetterQueueSourceArn" in result["failure"]
    local.settle()


def test_a_redrive_that_could_not_receive_what_is_left_exits_1_and_says_when_to_run_it_again(
    local: LocalBackend,
) -> None:
    # Two messages of one group; another reader holds the first (an interrupted redrive, say): SQS FIFO hands
    # out nothing more of that group until it is deleted or visible again
    group = unique("group")
    put_in_dlq_by_hand(local, 2, group)
    held = local.client("sqs").receive_message(
        QueueUrl=local.output("DurableDeadLetterQueueUrl"), MaxNumberOfMessages=1, VisibilityTimeout=60
    )
    assert len(held["Messages"]) == 1

    result = outbox(local, "redrive", "--method", "receive-send-delete", "--yes")

    assert result.exit_code == 1, result.output
    assert "moved 0 messages, 2 messages left in durable-dlq" in flat(result.stdout)
    assert "could not be received" in flat(result.stderr)
    assert "run this again then" in flat(result.stderr)


def test_a_redrive_that_moved_what_was_asked_exits_0_and_a_rerun_finds_nothing_to_do(local: LocalBackend) -> None:
    with broken_consumer():
        order_and_pay(local, unique("tenant"))
        local.settle()

    first = outbox(local, "redrive", "--yes")
    local.settle()
    again = outbox(local, "redrive", "--yes")

    assert first.exit_code == 0, first.output
    assert "moved 2 messages, 0 messages left" in flat(first.stdout)
    assert (again.exit_code, flat(again.stdout)) == (0, "durable-dlq is empty: nothing to redrive")


def suggested_commands(message: str) -> list[list[str]]:
    """The `outbox ...` commands a refusal suggests, as argument lists (without the program's name)."""
    found = re.findall(r"outbox .*?(?=\.\s|;|\.?$)", flat(message))
    return [shlex.split(command)[1:] for command in found]


def test_a_replay_of_an_event_with_completed_siblings_suggests_its_dead_pair_not_force(local: LocalBackend) -> None:
    tenant = unique("tenant")
    payment = paid_with_a_dead_pet_tag(local, tenant)

    refused = outbox(local, "replay", "--event-id", payment, "--dry-run")

    assert refused.exit_code == 2
    message = flat(refused.output)
    narrow = ["replay", "--event-id", payment, "--subscription", "pet_tag.mark_ordered"]
    assert narrow in suggested_commands(message), message
    assert "add --force (reruns " in message
    assert "pet_tag.mark_ordered" not in message.split("--force (reruns ")[1]

    # The suggestion, run as printed, reruns exactly the dead pair
    shipments_before = local.service("carrier").calls[f"{payment}:shipping.book_shipment"]
    assert outbox(local, *narrow, "--yes").exit_code == 0
    local.settle()
    assert set(claim_statuses(local, payment).values()) == {"COMPLETED"}
    assert local.service("carrier").calls[f"{payment}:shipping.book_shipment"] == shipments_before


def test_a_reconcile_past_the_retention_suggests_the_widest_window_it_accepts(local: LocalBackend) -> None:
    order_and_pay(local, unique("tenant"))
    local.settle()
    refused = outbox(local, "reconcile", "--since", "4000d", "--dry-run")

    assert refused.exit_code == 2
    [suggested, *_] = suggested_commands(refused.output)
    assert suggested[:2] == ["reconcile", "--since"]
    accepted = outbox(local, *suggested, "--dry-run", "--json")
    assert accepted.exit_code == 0, accepted.output
    assert json.loads(accepted.stdout)["dry_run"] is True


@pytest.mark.parametrize("answer", ["n\n", "", "whatever\n"], ids=["no", "closed-stdin", "not-yes"])
def test_any_answer_but_yes_declines_in_words_and_exits_1_changing_nothing(local: LocalBackend, answer: str) -> None:
    tenant = unique("tenant")
    paid_with_a_dead_pet_tag(local, tenant)

    plain = outbox(local, "replay", "--tenant", tenant, answer=answer)
    scripted = outbox(local, "replay", "--tenant", tenant, "--json", answer=answer)

    assert plain.exit_code == scripted.exit_code == 1
    assert "declined:" in plain.stderr
    assert "nothing was changed" in flat(plain.stderr)
    if not answer:
        assert "pass --yes" in flat(plain.stderr)
    document = json.loads(scripted.stdout)
    assert (document["error"]["kind"], document["exit_code"]) == ("declined", 1)
    assert dead_letter_rows(outbox(local, "--json", "dead-letters", "list", "--tenant", tenant))[0]["resolved"] is None


def test_every_needs_attention_line_names_its_next_command(local: LocalBackend) -> None:
    tenant = unique("tenant")
    paid_with_a_dead_pet_tag(local, tenant)
    with broken_consumer():
        order_and_pay(local, unique("tenant"))
        local.settle()

    report = outbox(local, "status", "--json")

    problems: list[str] = json.loads(report.stdout)["problems"]
    assert report.exit_code == 1
    assert any("durable-dlq" in line for line in problems)
    assert any(tenant in line for line in problems)
    for line in problems:
        assert "outbox " in line or "aws pipes" in line, line


def test_dead_letters_list_with_resolved_rows_has_a_resolved_column(local: LocalBackend) -> None:
    tenant = unique("tenant")
    paid_with_a_dead_pet_tag(local, tenant)
    assert outbox(local, "replay", "--tenant", tenant, "--yes").exit_code == 0
    local.settle()

    listed = outbox(local, "dead-letters", "list", "--tenant", tenant, "--include-resolved")

    assert "resolved" in listed.stdout
    assert "after a replay" in listed.stdout
    assert "1 dead letter (0 open);" in flat(listed.stdout), "one dead letter, not 1 dead letters"
