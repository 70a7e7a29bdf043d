"""`--json` is always JSON: every command, run as a script would, writes exactly one JSON document on stdout
(its result, or an error document when it is refused) and everything meant for a person (prompts,
progress, messages) on stderr. The table below must name every command the CLI has."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
import typer
from rich.console import Console
from typer.testing import CliRunner, Result

from outbox import TerminalError
from outbox.cli import CliContext, app
from outbox.local import faults
from outbox.ops import Operations
from tests.e2e.backends import LocalBackend
from tests.e2e.test_local_pipeline import PAYMENT
from tests.e2e.test_ordered_subscriptions import JOURNAL, placed
from tests.e2e.test_pipeline import order_and_pay, unique
from tests.e2e.test_runbook import broken_consumer, operations, outbox

# Each command with the arguments that make it do real work on the scenario below ({tenant}, {event}, and
# {journaled} whose journal waits for the dead line at {seq}).
INVOCATIONS: dict[str, list[list[str]]] = {
    "status": [["status"], ["status", "--html", "{html}"]],
    "verify-chain": [["verify-chain", "--all"], ["verify-chain", "--tenant", "{tenant}"]],
    "catalog": [["catalog"]],
    "dead-letters list": [["dead-letters", "list"], ["dead-letters", "list", "--tenant", "{tenant}"]],
    "dead-letters show": [["dead-letters", "show", "{event}", "--tenant", "{tenant}"]],
    "dead-letters poison": [["dead-letters", "poison"]],
    "dead-letters groups": [["dead-letters", "groups"], ["dead-letters", "groups", "--tenant", "{tenant}"]],
    "replay": [
        ["replay", "--tenant", "{tenant}", "--dry-run"],
        ["replay", "--group", "{group}", "--dry-run"],
        ["replay", "--tenant", "{tenant}", "--yes"],
    ],
    "redrive": [["redrive", "--yes"]],
    "reconcile": [
        ["reconcile", "--since", "1h", "--dry-run"],
        ["reconcile", "--since", "1h", "--yes"],
        ["reconcile", "--subscription", JOURNAL, "--dry-run"],
    ],
    "skip": [
        ["skip", "--group", "{group}", "--reason", "r", "--dry-run"],
        ["skip", "--tenant", "{journaled}", "--subscription", JOURNAL, "--seq", "{seq}", "--reason", "r", "--yes"],
    ],
    "findings": [["findings"], ["findings", "--tenant", "{tenant}"]],
    "anchor": [["anchor"], ["anchor", "--tenant", "{tenant}", "--reset", "--reason", "test", "--by", "me", "--yes"]],
    "emit": [["emit", "payment.completed", "--tenant", "{tenant}", "--payload", "{payment}", "--yes"]],
}


def command_paths(group: Any, prefix: tuple[str, ...] = ()) -> Iterator[str]:
    for name, command in group.commands.items():
        if hasattr(command, "commands"):
            yield from command_paths(command, (*prefix, name))
        else:
            yield " ".join((*prefix, name))


# Commands that answer no --json document, and where they are run instead.
NOT_HERE = {"local serve": "serves until Ctrl-C: tests/e2e/test_local_serve.py runs it"}


def test_the_table_names_every_command_of_the_cli() -> None:
    assert set(command_paths(typer.main.get_command(app))) == set(INVOCATIONS) | set(NOT_HERE)


@pytest.fixture
def troubled(local: LocalBackend, tmp_path: Path) -> dict[str, str]:
    """A tenant with a dead pet-tag mark (a dead letter) and a payment in the durable DLQ; another whose order
    journal (an ordered subscription) waits behind a dead line."""
    tenant, journaled = unique("tenant"), unique("tenant")
    with faults.fail_handler("pet_tag.mark_ordered", times=1, error=lambda: TerminalError("tag registry said no")):
        payment = order_and_pay(local, tenant)
        local.settle()
    with broken_consumer():
        order_and_pay(local, tenant)
        local.settle()
    with faults.fail_handler(JOURNAL, times=1, error=lambda: TerminalError("journal refused the line")):
        dead_line = placed(local, journaled)
        local.settle()
    placed(local, journaled)
    local.settle()
    [group] = operations(local).failure_groups(tenant=tenant)
    return {
        "tenant": tenant,
        "event": payment,
        "journaled": journaled,
        "seq": str(dead_line.seq),
        "group": group.id,
        "html": str(tmp_path / "status.html"),
        "payment": json.dumps(PAYMENT),
    }


def only_json(result: Result) -> Any:
    """stdout is one JSON document and nothing else."""
    return json.loads(result.stdout)


@pytest.mark.parametrize("command", sorted(INVOCATIONS))
def test_every_command_with_json_writes_one_document_on_stdout(
    local: LocalBackend, troubled: dict[str, str], command: str
) -> None:
    for arguments in INVOCATIONS[command]:
        filled = [argument.format(**troubled) for argument in arguments]
        # --json after the command's name, as people type it, and before it, as the group option; a repair
        # once only (a second one has nothing left to do, and its refusal is tested below)
        placements = [[*filled, "--json"], ["--json", *filled]]
        for placement in placements[:1] if "--yes" in arguments else placements:
            result = outbox(local, *placement)
            assert result.exit_code in (0, 1), (placement, result.output)
            only_json(result)


def test_status_writes_the_widgets_page_to_the_html_file_and_its_document_on_stdout(
    local: LocalBackend, troubled: dict[str, str]
) -> None:
    result = outbox(local, "status", "--html", troubled["html"], "--json")
    assert result.exit_code == 1, result.output  # dead work: something needs an operator
    assert only_json(result)["problems"]
    page = Path(troubled["html"]).read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>")
    assert f"outbox dead-letters list --tenant {troubled['tenant']}" in page
    assert "<script" not in page
    assert f"wrote {troubled['html']}" in " ".join(result.stderr.split())


def test_without_json_a_command_prints_tables_not_json(local: LocalBackend, troubled: dict[str, str]) -> None:
    result = outbox(local, "dead-letters", "show", troubled["event"], "--tenant", troubled["tenant"])
    assert result.exit_code == 1, result.output  # its dead letter is open
    assert "tag registry said no" in result.stdout
    with pytest.raises(json.JSONDecodeError):
        json.loads(result.stdout)


def test_a_replay_with_json_answers_plan_and_result_in_one_document(
    local: LocalBackend, troubled: dict[str, str]
) -> None:
    dry = only_json(outbox(local, "replay", "--tenant", troubled["tenant"], "--dry-run", "--json"))
    assert (dry["dry_run"], dry["result"]) == (True, None)
    assert [item["subscription"] for item in dry["plan"]] == ["pet_tag.mark_ordered"]

    done = only_json(outbox(local, "replay", "--tenant", troubled["tenant"], "--yes", "--json"))
    assert done["dry_run"] is False
    assert done["result"]["republished"] == [troubled["event"]]


def test_the_question_goes_to_stderr_and_stdout_keeps_the_document(
    local: LocalBackend, troubled: dict[str, str]
) -> None:
    result = outbox(local, "replay", "--tenant", troubled["tenant"], "--json", answer="y\n")
    assert result.exit_code == 0, result.output
    assert "clear 1 claim and re-send their events? [y/N]" in result.stderr
    # Nothing of the question or the answer on stdout: not even click's space after the prompt.
    assert json.loads(result.stdout)["result"]["cleared"][0]["subscription"] == "pet_tag.mark_ordered"


@pytest.mark.parametrize(
    "arguments",
    [
        ["verify-chain"],
        ["verify-chain", "--tenant", "nobody"],
        ["dead-letters", "show", "01ARZ3NDEKTSV4RRFFQ69G5FAV", "--tenant", "nobody"],
        ["replay", "--tenant", "nobody", "--yes"],
        ["reconcile", "--since", "1h", "--tenant", "nobody", "--yes"],
    ],
)
def test_a_refusal_with_json_is_an_error_document_and_exit_2(local: LocalBackend, arguments: list[str]) -> None:
    result = outbox(local, *arguments, "--json")
    assert result.exit_code == 2
    document = only_json(result)
    assert (document["exit_code"], document["error"]["kind"]) == (2, "refused")
    assert document["error"]["message"] in " ".join(result.stderr.split())


def test_a_redrive_of_an_empty_dlq_finds_nothing_to_do_and_exits_0(local: LocalBackend) -> None:
    # A rerun of a redrive that moved everything is not an error
    result = outbox(local, "--json", "redrive", "--dlq", "record-change-dlq", "--yes")
    assert result.exit_code == 0, result.output
    document = only_json(result)
    assert (document["status"], document["moved"], document["done"]) == ("NOTHING_TO_DO", 0, True)
    assert (
        "record-change-dlq is empty: nothing to redrive"
        in outbox(local, "redrive", "--dlq", "record-change-dlq").stdout
    )


def test_status_names_the_services_the_functions_call(local: LocalBackend) -> None:
    # The runtime serves the commerce module's services on loopback: status says so, as the functions see it
    report = only_json(outbox(local, "status", "--json"))
    assert report["application"]["COMMERCE_SERVICES"] == local.fakes.url
    assert f"COMMERCE_SERVICES={local.fakes.url}" in outbox(local, "status").stdout


# Each command's refusal: input it cannot act on. Commands that take no input the engine could refuse are
# named below it, with why.
REFUSALS: dict[str, list[str]] = {
    "verify-chain": ["verify-chain", "--tenant", "nobody"],
    "dead-letters list": ["dead-letters", "list", "--tenant", "nobody"],
    "dead-letters show": ["dead-letters", "show", "01ARZ3NDEKTSV4RRFFQ69G5FAV", "--tenant", "nobody"],
    "dead-letters groups": ["dead-letters", "groups", "--tenant", "nobody"],
    "replay": ["replay", "--tenant", "nobody", "--yes"],
    "redrive": ["redrive", "--dlq", "relay-pipe-dlq", "--yes"],
    "reconcile": ["reconcile", "--since", "1h", "--tenant", "nobody", "--yes"],
    "skip": ["skip", "--tenant", "nobody", "--subscription", JOURNAL, "--seq", "1", "--reason", "r", "--yes"],
    "findings": ["findings", "--tenant", "nobody"],
    "anchor": ["anchor", "--tenant", "nobody"],
    "emit": ["emit", "payment.completd", "--tenant", "nobody", "--yes"],
}
NOTHING_TO_REFUSE = {
    "status": "reads everything, takes no input",
    "catalog": "reads the catalog; a catalog that cannot be built is a usage error (tests/unit/test_cli_offline.py)",
    "dead-letters poison": "its one input, --day, is a usage error if not a day (tests/unit/test_cli_offline.py)",
}


def test_the_refusal_table_names_every_command_that_answers_json() -> None:
    assert set(REFUSALS) | set(NOTHING_TO_REFUSE) == set(INVOCATIONS)


@pytest.mark.parametrize("command", sorted(REFUSALS))
def test_every_refusal_with_json_is_one_error_document_and_exit_2(local: LocalBackend, command: str) -> None:
    result = outbox(local, *REFUSALS[command], "--json")
    assert result.exit_code == 2, result.output
    document = only_json(result)
    assert (document["exit_code"], document["error"]["kind"]) == (2, "refused")


# The commands that change something, as they ask before they do.
ASKING = {
    command: [arguments for arguments in INVOCATIONS[command] if "--yes" in arguments]
    for command in INVOCATIONS
    if any("--yes" in arguments for arguments in INVOCATIONS[command])
}


@pytest.mark.parametrize("answer", ["n\n", ""], ids=["no", "closed-stdin"])
@pytest.mark.parametrize("command", sorted(ASKING))
def test_every_question_declined_with_json_is_one_document_and_exit_1(
    local: LocalBackend, troubled: dict[str, str], command: str, answer: str
) -> None:
    for arguments in ASKING[command]:
        asked = [argument.format(**troubled) for argument in arguments if argument != "--yes"]
        result = outbox(local, *asked, "--json", answer=answer)
        assert result.exit_code == 1, (asked, result.output)
        assert (only_json(result)["error"]["kind"], only_json(result)["exit_code"]) == ("declined", 1)


class Exploding:
    """Operations whose every use fails as nobody expected: a bug, or the application's catalog code raising."""

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError(f"{name} exploded")


@pytest.mark.parametrize("command", sorted(INVOCATIONS))
def test_every_crash_with_json_is_one_error_document_exit_2_and_no_traceback(command: str, tmp_path: Path) -> None:
    placeholders = {
        "tenant": "acme",
        "event": "01ARZ3NDEKTSV4RRFFQ69G5FAV",
        "journaled": "acme",
        "seq": "1",
        "group": "g-0000000000",
        "html": str(tmp_path / "status.html"),
        "payment": json.dumps(PAYMENT),
    }
    for arguments in INVOCATIONS[command]:
        context = CliContext.of(cast(Operations, Exploding()), console=Console(width=250))
        filled = [argument.format(**placeholders) for argument in arguments]
        result = CliRunner().invoke(app, [*filled, "--json"], obj=context, input="y\n")
        assert result.exit_code == 2, (filled, result.output)
        document = only_json(result)
        assert document["error"]["kind"] == "crash", (filled, document)
        assert "exploded" in document["error"]["message"]
        assert "Traceback" not in result.output
