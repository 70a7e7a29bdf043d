"""`make soak`: many seeds from a random first seed, far from the everyday ones, and the failing seeds
grouped by kind of violation at the end, so that a reader sees classes of failure, not a list of cases."""

from __future__ import annotations

from typing import Any

import pytest

from simulation import cli
from simulation.cli import Outcome, by_kinds, kind_of

LOST = "invariant 2 (exactly once): e{}:sim.charge: lost: no effect and no dead letter (claim REPLAYING)"


def test_one_bug_in_other_pairs_seqs_and_tenants_is_one_kind() -> None:
    assert kind_of(LOST.format(4)) == kind_of(LOST.format(17))
    assert kind_of(LOST.format(4)) == (
        "invariant 2 (exactly once): eN:sim.charge: lost: no effect and no dead letter (claim REPLAYING)"
    )
    assert kind_of("invariant 14 (ordered subscriptions): tenant t1: sim.ledger applied seq 3 2 times") == (
        "invariant 14 (ordered subscriptions): tenant tN: sim.ledger applied seq N N times"
    )


def test_ids_are_one_word_whatever_their_digits() -> None:
    message = "invariant 2 (exactly once): DLQ message {} was deleted by a redrive before it was sent back"
    assert kind_of(message.format("0f8c2f7e-1b9a-4c1e-9d55-3a1b2c3d4e5f")) == kind_of(
        message.format("a1b2c3d4-0000-4000-8000-123456789abc")
    )
    assert "message ID was deleted" in kind_of(message.format("0f8c2f7e-1b9a-4c1e-9d55-3a1b2c3d4e5f"))
    assert kind_of("invariant 2 (exactly once): forged event 01JDQ7X5K3M8N2P4R6T8V0W2Y4: no conflict") == (
        "invariant 2 (exactly once): forged event ID: no conflict"
    )


def test_failing_seeds_are_grouped_by_kind_in_the_order_of_their_invariant() -> None:
    outcomes = [
        Outcome(
            9,
            (
                LOST.format(3),
                LOST.format(5),
                "invariant 9 (poison pills): 2 malformed bodies were sent but 1 recorded as poison pills",
            ),
            None,
        ),
        Outcome(4, (), None),
        Outcome(
            7,
            ("invariant 14 (ordered subscriptions): tenant t0: sim.ledger applied seqs [1, 3], not in seq order",),
            None,
        ),
        Outcome(2, (LOST.format(8),), None),
        Outcome(5, (), "KeyError: 'e12'"),
    ]

    groups = by_kinds(outcomes)

    assert list(groups.items()) == [
        ("the simulator failed: KeyError: 'eN'", [5]),
        (kind_of(LOST.format(1)), [2, 9]),
        ("invariant 9 (poison pills): N malformed bodies were sent but N recorded as poison pills", [9]),
        ("invariant 14 (ordered subscriptions): tenant tN: sim.ledger applied seqs [N, N], not in seq order", [7]),
    ]
    assert by_kinds([Outcome(1, (), None)]) == {}


def _main(monkeypatch: pytest.MonkeyPatch, argv: list[str]) -> dict[str, Any]:
    """``main`` with the stack's synthesis and the survey replaced: what it would survey, and how."""
    asked: dict[str, Any] = {}

    def survey(seeds: list[int], stack: object, jobs: int, *, by_kind: bool = False, cuts: object = None) -> int:
        asked.update(seeds=seeds, jobs=jobs, by_kind=by_kind)
        return 0

    monkeypatch.setattr(cli, "assembly", lambda: None)
    monkeypatch.setattr(cli, "load_stack", lambda outdir, name: None)
    monkeypatch.setattr(cli, "survey", survey)
    assert cli.main(argv) == 0
    return asked


def test_a_soak_starts_at_a_random_seed_far_from_the_everyday_ones_and_says_how_to_run_it_again(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    asked = _main(monkeypatch, ["--soak", "5", "--jobs", "1"])

    known = [seed for seed, _ in cli.regression_seeds(cli.SOAK_FAILURES)]
    first = asked["seeds"][len(known)]
    assert asked == {"seeds": [*known, *range(first, first + 5)], "jobs": 1, "by_kind": True}
    assert cli.SOAK_FIRST_SEEDS[0] <= first <= cli.SOAK_FIRST_SEEDS[1]
    assert f"python -m simulation --first {first} --seeds 5" in capsys.readouterr().out


def test_a_soak_runs_every_seed_an_earlier_soak_found_failing_then_its_range(monkeypatch: pytest.MonkeyPatch) -> None:
    known = [seed for seed, _ in cli.regression_seeds(cli.SOAK_FAILURES)]
    assert known, "simulation/soak_failures.txt lists the seeds soaks found failing"
    assert _main(monkeypatch, ["--soak", "3", "--first", "42"])["seeds"] == [*known, 42, 43, 44]


def test_without_soak_the_seeds_are_the_everyday_ones_and_not_grouped(monkeypatch: pytest.MonkeyPatch) -> None:
    asked = _main(monkeypatch, [])
    assert asked["seeds"] == list(range(1, cli.DEFAULT_SEEDS + 1))
    assert asked["by_kind"] is False
    assert _main(monkeypatch, ["--first", "7", "--seeds", "2"])["seeds"] == [7, 8]
