"""`make simulate` tells the operator of the simulator about a violation the moment its seed ends.

A survey of 150 seeds runs for minutes; a violation printed only at the end hides the one line that matters
behind the whole run. These tests drive `survey` with outcomes handed out one by one and check what was
printed before the next outcome was asked for.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from simulation import cli
from simulation.cli import Outcome


def _outcomes(printed: list[str], capsys: pytest.CaptureFixture[str]) -> Iterator[Outcome]:
    yield Outcome(3, ("effect doubled: order-1/ledger ran twice",), None, {"lost_answer": 1})
    printed.append(capsys.readouterr().out)
    yield Outcome(1, (), None, {"lost_answer": 2})
    printed.append(capsys.readouterr().out)
    yield Outcome(2, (), "boom", {})


def test_a_violation_is_printed_with_its_replay_command_before_the_next_seed_ends(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    printed: list[str] = []
    monkeypatch.setattr(cli, "run_many", lambda seeds, stack, jobs, cuts=None: _outcomes(printed, capsys))

    status = cli.survey([1, 2, 3], stack=None, jobs=2)  # type: ignore[arg-type]

    assert status == 1
    assert "seed 3: effect doubled: order-1/ledger ran twice  (replay: make simulate SEED=3)" in printed[0]
    assert printed[1] == ""
    tail = capsys.readouterr().out
    assert "seed 2: the simulator failed: boom" in tail
    assert "failing seeds: 2 3" in tail
    assert "lost_answer 3" in tail
    assert "violations: 2 across 3 schedules" in tail


def test_a_progress_line_is_printed_now_and_then(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(cli, "PROGRESS_EVERY", 0.0)
    monkeypatch.setattr(
        cli, "run_many", lambda seeds, stack, jobs, cuts=None: iter([Outcome(seed, (), None) for seed in seeds])
    )

    assert cli.survey([1, 2], stack=None, jobs=1) == 0  # type: ignore[arg-type]

    out = capsys.readouterr().out
    assert "... 1/2 schedules, 0 failing" in out
    assert "... 2/2 schedules, 0 failing" in out
    assert "violations: 0 across 2 schedules" in out
