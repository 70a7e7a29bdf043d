"""The simulator must catch the two bugs of the seed article. Each test puts one back (a monkeypatch
here, never a switch in the engine) and runs the CI seeds until the simulator reports it.

The violations looked for are ones the engine as it is never produces on the default seeds: "lost"
(bug 1: a stale PENDING claim blocks every redelivery) and "a retryable error was not retried" (bug 2).
Two more mutants check that the fencing (4) and FIFO (6) invariants are not vacuous.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest

from outbox.local.template import StackSpec
from simulation.runner import run_seed
from tests.simulation.mutants import (
    introduce_dead_on_first_error,
    introduce_left_out_run_in_place,
    introduce_plain_claim,
    introduce_reversed_receive,
    introduce_unfenced_completion,
)


# The seeds that catch each mutant, found with `make mutants` and simulation/mutants.py's catalogue (which
# measures the default seed set as a whole): CI replays only those, so a change that blinds the simulator to
# one of these bugs fails here in seconds. A schedule change renumbers them: find new ones with make mutants.
def first_seed_reporting(stack: StackSpec, signature: str, seeds: Sequence[int]) -> tuple[int, str] | None:
    for seed in seeds:
        found = [str(v) for v in run_seed(seed, stack).violations if signature in str(v)]
        if found:
            return seed, found[0]
    return None


@pytest.mark.slow
@pytest.mark.parametrize(
    ("introduce", "signature", "seeds"),
    [
        pytest.param(introduce_plain_claim, ": lost: no effect and no dead letter", (1, 2), id="claim-is-a-plain-put"),
        pytest.param(
            introduce_dead_on_first_error, "a retryable error was not retried", (8, 25), id="dead-on-first-error"
        ),
        # Not bugs of the seed article: machinery whose failure only invariants 4 and 6 would notice.
        pytest.param(
            introduce_unfenced_completion, "which no longer owned it", (17, 20), id="completion-without-fencing"
        ),
        pytest.param(introduce_reversed_receive, "but first received as", (1, 2), id="fifo-order-broken"),
        # A narrowing deploy's left-out pairs (invariant 2): none runs once the deploy went out.
        pytest.param(
            introduce_left_out_run_in_place, "run after a deploy left it out", (65, 26), id="left-out-run-in-place"
        ),
    ],
)
def test_the_simulator_catches_the_bug(
    introduce: Callable[[pytest.MonkeyPatch], None],
    signature: str,
    seeds: Sequence[int],
    stack: StackSpec,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    introduce(monkeypatch)

    caught = first_seed_reporting(stack, signature, seeds)

    assert caught is not None, f"no seed of {seeds} reported {signature!r}"
    print(f"caught by seed {caught[0]}: {caught[1]}")
