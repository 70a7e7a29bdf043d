"""Shrinking (``simulation.shrink``): cuts as one line and back, and the greedy search, against a stand-in run
that fails exactly when given parts of the schedule are left (no pipeline: the search is what is tested here;
``python -m simulation --shrink`` runs it against the real one)."""

from __future__ import annotations

import pytest

from simulation.cli import main
from simulation.drawing import generate
from simulation.schedule import Emit, Fault, Schedule
from simulation.shrink import Cuts, shrink

SEED = 17


def kind_of(violation: str) -> str:
    return violation.split(":")[0]


def test_cuts_read_back_what_they_write() -> None:
    cuts = Cuts(
        faults=frozenset({"lease_expiry", "throttle"}),
        budgets=(("retryable_error", 1),),
        actions=frozenset({0, 3}),
        drain=frozenset({1}),
        aged=frozenset({0}),
        acts=frozenset({"tamper"}),
    )
    assert Cuts.parse(cuts.render()) == cuts
    assert Cuts.parse("") == Cuts()


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("faults=-nothing_like_it", "no such fault kind"),
        ("acts=-everything", "no such fault kind or end-of-run act"),
        ("actions=3", "a cut leaves something out"),
        ("tenants=-t0", "not a cut"),
    ],
)
def test_a_bad_cut_says_what_is_wrong(text: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        Cuts.parse(text)


def test_cuts_leave_out_only_what_they_name() -> None:
    schedule = generate(SEED)
    kind = next(iter(schedule.faults))
    cut = Cuts(faults=frozenset({kind.value}), actions=frozenset({0})).apply(schedule)
    assert kind not in cut.faults
    assert cut.actions == schedule.actions[1:]
    assert {k: r for k, r in schedule.faults.items() if k is not kind} == cut.faults
    assert (cut.tenants, cut.during_drain, cut.aged) == (schedule.tenants, schedule.during_drain, schedule.aged)


def failing_when(action_index: int, fault: Fault, budget: int) -> tuple[object, Schedule]:
    """A stand-in run that fails while the seed's action at ``action_index`` and ``fault`` with at least
    ``budget`` are in the schedule (and, so that the search must keep to one kind, fails otherwise in
    another way while the schedule still has its first action)."""
    whole = generate(SEED)
    needed = whole.actions[action_index]

    def run(schedule: Schedule) -> tuple[str, ...]:
        found = []
        rate = schedule.faults.get(fault)
        if needed in schedule.actions and rate is not None and rate.budget >= budget:
            found.append("invariant 2: the bug")
        if whole.actions[0] in schedule.actions:
            found.append("invariant 7: another")
        return tuple(found)

    return run, whole


def test_shrinking_keeps_exactly_what_the_failure_needs() -> None:
    whole = generate(SEED)
    fault = next(kind for kind, rate in whole.faults.items() if rate.budget >= 2)
    index = max(i for i, action in enumerate(whole.actions) if isinstance(action, Emit))
    run, _ = failing_when(index, fault, 2)
    shrunk = shrink(SEED, run, kind_of)  # type: ignore[arg-type]
    cut = shrunk.cuts.apply(whole)
    assert shrunk.kind == "invariant 2"
    assert cut.actions == (whole.actions[index],)
    assert list(cut.faults) == [fault]
    assert cut.faults[fault].budget == 2
    assert not any(getattr(cut, act) for act in ("tamper", "forge", "rewrite", "forge_batch", "force_replay"))
    assert shrunk.sizes[1] < shrunk.sizes[0]
    assert shrunk.violations == ("invariant 2: the bug",)


def test_shrinking_stops_at_its_run_budget() -> None:
    run, _ = failing_when(0, next(iter(generate(SEED).faults)), 1)
    assert shrink(SEED, run, kind_of, max_runs=3).runs == 3  # type: ignore[arg-type]


def test_a_passing_seed_is_not_shrunk() -> None:
    with pytest.raises(ValueError, match="nothing to shrink"):
        shrink(SEED, lambda _schedule: (), kind_of)


def test_bad_cuts_on_the_command_line_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--seed", "1", "--cuts", "faults=-nothing_like_it", "--assembly", "/nonexistent"])
    assert exit_.value.code == 2
    assert "--cuts: no such fault kind" in capsys.readouterr().err
