"""The exit codes of docs/operating.md, row by row: each command, run as the table says in the situation its row
names, exits as the row says. One rule for every command (0 done or nothing to do, 1 needs an operator or did
not do all it was asked, 2 could not run); a row the table adds and this test does not run, or the other way
round, fails here."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from tests.e2e.backends import LocalBackend
from tests.e2e.test_cli_truthful import put_in_dlq_by_hand
from tests.e2e.test_pipeline import order_and_pay, unique
from tests.e2e.test_runbook import operations, outbox, paid_with_a_dead_pet_tag

OPERATING = Path(__file__).resolve().parents[2] / "docs" / "operating.md"
ROW = re.compile(r"^\| `outbox (?P<command>[^`]+)` \| (?P<when>[^|]+) \| (?P<exit>\d) \|$")


def table() -> dict[tuple[str, str], int]:
    text = OPERATING.read_text()
    block = text[text.index("<!-- exit codes -->") :].split("\n\n", 1)[0]
    return {(m["command"], m["when"].strip()): int(m["exit"]) for m in map(ROW.match, block.splitlines()) if m}


# The situations, in the order the test brings them about: the rows of a clean pipeline first.
CLEAN = [
    ("status", "healthy"),
    ("dead-letters list", "no dead letter is open"),
    ("dead-letters groups", "no dead letter is open"),
    ("dead-letters poison", "no poison pill today"),
    ("findings", "no finding"),
    ("verify-chain --all", "every chain intact"),
    ("catalog", "no contract problem"),
    ("dead-letters show E --tenant T", "E has no dead letter"),
    ("replay --tenant T --yes", "T has no open dead letter"),
    ("replay --tenant T --yes", "T never emitted an event"),
    ("replay --tenant T --since yesterday", "the time is neither ISO nor a duration"),
    ("reconcile --since 1h --yes", "every event was handled"),
    ("reconcile --since 1h", "the question is answered no"),
    ("redrive --yes", "the DLQ is empty"),
]
TROUBLED = [
    ("status", "a dead letter is open"),
    ("dead-letters list", "a dead letter is open"),
    ("dead-letters show E --tenant T", "E's dead letter is open"),
    ("dead-letters groups", "a dead letter is open"),
    ("replay --group G --yes", "its dead letters are open"),
    ("replay --group G --yes", "it was repaired already"),
    ("dead-letters show E --tenant T", "E's dead letter was replayed"),
]
BY_HAND = [("redrive --method move-task --yes", "SQS's move task cannot move the DLQ's messages")]


def test_the_table_and_this_test_name_the_same_rows() -> None:
    assert set(table()) == {*CLEAN, *TROUBLED, *BY_HAND}
    assert len(table()) == len(CLEAN) + len(TROUBLED) + len(BY_HAND)


def run(local: LocalBackend, row: tuple[str, str], **names: str) -> None:
    words = [names.get(word, word) for word in shlex.split(row[0])]
    answer = "n\n" if row[1] == "the question is answered no" else None
    result = outbox(local, *words, answer=answer)
    local.settle()
    assert result.exit_code == table()[row], (row, words, result.output)


def test_every_row_of_the_exit_code_table(local: LocalBackend) -> None:
    clean = unique("tenant")
    payment = order_and_pay(local, clean)
    local.settle()
    for row in CLEAN:
        tenant = unique("nobody") if row[1] == "T never emitted an event" else clean
        run(local, row, T=tenant, E=payment)

    troubled = unique("tenant")
    dead = paid_with_a_dead_pet_tag(local, troubled)
    [group] = operations(local).failure_groups(tenant=troubled)
    for row in TROUBLED:
        run(local, row, T=troubled, E=dead, G=group.id)

    put_in_dlq_by_hand(local, 2, unique("group"))
    for row in BY_HAND:
        run(local, row)
