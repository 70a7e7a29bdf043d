"""A worker killed under a seed fails that seed loudly; the other seeds still run, and nothing hangs."""

from __future__ import annotations

import os
import signal
from functools import partial
from pathlib import Path

import pytest

from simulation.workers import DEATHS_PER_SEED, in_workers

KILLED = 13  # the seed whose worker the kernel kills, every time it runs


def run(seed: int) -> str:
    if seed == KILLED:
        os.kill(os.getpid(), signal.SIGKILL)  # as the OOM killer does: no exception, no goodbye
    return f"ran {seed}"


def died(seed: int) -> str:
    return f"died {seed}"


def test_a_seed_whose_worker_is_killed_is_reported_and_the_others_run() -> None:
    results = list(in_workers(run, range(10, 20), jobs=2, died=died))

    assert sorted(results) == sorted([*(f"ran {seed}" for seed in range(10, 20) if seed != KILLED), f"died {KILLED}"])


def once_then_fine(marker: Path, seed: int) -> str:
    if seed == KILLED and not marker.exists():
        marker.touch()
        os.kill(os.getpid(), signal.SIGKILL)
    return f"ran {seed}"


def test_a_worker_killed_by_chance_once_costs_no_seed(tmp_path: Path) -> None:
    assert DEATHS_PER_SEED > 1
    results = list(in_workers(partial(once_then_fine, tmp_path / "killed"), range(10, 16), jobs=2, died=died))

    assert sorted(results) == sorted(f"ran {seed}" for seed in range(10, 16))


def fails(seed: int) -> str:
    raise ValueError(f"seed {seed}")


def test_an_exception_of_the_seed_itself_reaches_the_caller() -> None:
    with pytest.raises(ValueError, match="seed 1"):
        list(in_workers(fails, [1], jobs=1, died=died))
