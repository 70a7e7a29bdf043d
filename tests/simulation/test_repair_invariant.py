"""Invariant 2 holds a repair message to the selections made before it arrived.

A failure group's replay runs the pairs its dry run showed the operator; a pair that died in the group after
the dry run is the next dry run's to show. If the replay ran it anyway and the operator's next dry run then
listed it (it failed again), the later selection must not vouch for the message that ran it first.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

from simulation.invariants.delivery import _repairs_run_what_they_name
from simulation.observations import Observations, Receipt
from simulation.trace import Trace

START = datetime(2026, 12, 5, 12, tzinfo=UTC)
PAIR = "e1:sim.announce"


def _violations(
    selected: list[tuple[str, datetime]], received_at: datetime, wake_ups: tuple[str, ...] = ()
) -> list[str]:
    world = SimpleNamespace(trace=Trace(lambda: START), replays=selected, wake_ups=list(wake_ups))
    observations = Observations()
    observations.receipts.append(
        Receipt("t0", "e1", "m1", "d1", receive_count=1, at=received_at, targets=frozenset({"sim.announce"}))
    )
    return [str(v) for v in _repairs_run_what_they_name(world, observations)]  # type: ignore[arg-type]


def test_a_repair_message_received_after_its_pair_was_selected_is_the_repair() -> None:
    assert _violations([(PAIR, START)], received_at=START + timedelta(seconds=1)) == []
    assert _violations([(PAIR, START)], received_at=START) == []


def test_a_selection_after_the_message_arrived_does_not_vouch_for_it() -> None:
    [violation] = _violations([(PAIR, START + timedelta(minutes=5))], received_at=START)

    assert "was named by a repair message, but no repair had selected it yet" in violation


def test_a_message_naming_a_pair_no_repair_ever_selected_is_a_violation() -> None:
    [violation] = _violations([("e1:sim.other", START)], received_at=START + timedelta(seconds=1))

    assert "was named by a repair message, but no repair selected it" in violation


def test_a_wake_up_names_its_deferred_pair_without_a_repair() -> None:
    assert _violations([], received_at=START, wake_ups=(PAIR,)) == []
