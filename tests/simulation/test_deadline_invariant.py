"""Invariant 15 blames other tenants for a pair the deadline cut off only when their work took the time it needed.

The recorder times each pair's run per tenant within an invocation; a cut-off counts against the promise "one
tenant never costs another its attempts" only if the pair would have run to its end without the other tenants'
time: its own tenant's work before it, and its own run, fit the invocation.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest

from outbox.local import deadline
from outbox.local.deadline import InvocationTimedOut
from outbox.observing import AROUND, observed, observing
from simulation.invariants.deadline import check_deadline
from simulation.observations import CutOff, Invocation, Observations
from simulation.recorder import Recorder
from simulation.trace import Trace

START = datetime(2026, 12, 4, 12, tzinfo=UTC)
BUDGET = timedelta(seconds=60)


class _Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


def _recorder(durations: dict[str, float]) -> tuple[Recorder, Observations, _Clock]:
    clock = _Clock()
    world = SimpleNamespace(trace=Trace(clock), durations={key: timedelta(seconds=s) for key, s in durations.items()})
    durable = SimpleNamespace(handler=None, poll=None, clock=clock)
    observations = Observations()
    observations.invocations.append(Invocation(budget=BUDGET))
    return Recorder(world, observations, durable), observations, clock  # type: ignore[arg-type]


def _runs(recorder: Recorder, clock: _Clock, key: str, tenant: str, seconds: float) -> None:
    with recorder._cut_off_noted(key, tenant):
        clock.advance(seconds)


def _cut_off(recorder: Recorder, clock: _Clock, key: str, tenant: str, seconds: float) -> None:
    def stopped_at_the_deadline() -> None:
        with recorder._cut_off_noted(key, tenant):
            clock.advance(seconds)
            raise InvocationTimedOut

    with pytest.raises(InvocationTimedOut):
        stopped_at_the_deadline()


def test_a_pair_cut_off_after_another_tenants_long_run_is_blamed_on_it() -> None:
    recorder, observations, clock = _recorder({"e2:ledger": 20})
    _runs(recorder, clock, "e1:charge", "acme", 50)

    _cut_off(recorder, clock, "e2:ledger", "globex", 10)

    [cut] = observations.cut_offs
    assert cut.fits_without_others


def test_a_pair_cut_off_after_its_own_events_long_run_is_its_tenants_own() -> None:
    # seed 2062417: the same event's charge took 57.9 s of 60, then its ledger (5.1 s) met the deadline; the
    # other tenant's records before them took no time.
    recorder, observations, clock = _recorder({"e3:ledger": 5.1})
    _runs(recorder, clock, "e1:announce", "t0", 0)
    _runs(recorder, clock, "e3:charge", "t1", 57.9)

    _cut_off(recorder, clock, "e3:ledger", "t1", 2.1)

    [cut] = observations.cut_offs
    assert not cut.fits_without_others


def test_a_pair_that_would_not_fit_even_without_the_others_is_not_blamed_on_them() -> None:
    recorder, observations, clock = _recorder({"e2:ledger": 30})
    _runs(recorder, clock, "e1:charge", "acme", 20)
    _runs(recorder, clock, "e2:charge", "globex", 40)

    _cut_off(recorder, clock, "e2:ledger", "globex", 0)

    [cut] = observations.cut_offs
    assert not cut.fits_without_others


def test_a_run_nested_inside_another_is_charged_to_its_own_tenant_only() -> None:
    recorder, observations, clock = _recorder({"e3:ledger": 25})
    with recorder._cut_off_noted("e1:charge", "acme"):
        clock.advance(5)
        _runs(recorder, clock, "e2:charge", "globex", 40)

    assert observations.invocations[-1].spent == {"acme": 5, "globex": 40}
    _cut_off(recorder, clock, "e3:ledger", "globex", 15)

    [cut] = observations.cut_offs
    assert not cut.fits_without_others  # globex's own 40 s and the ledger's 25 s do not fit in 60


# -- each run of a handler is judged as it starts, on what the consumer learnt of earlier runs -------------


class _Run:
    """Stands for the engine's ``Run`` of ``pair``: its ``run_handler`` tells the recorder of each run, as the
    engine's does (``outbox.observing``), and runs ``run`` as the handler."""

    def __init__(self, pair: Any, run: Callable[[], Any]) -> None:
        self.pair = pair
        self.run = run

    @observed(AROUND["run"])
    def run_handler(self, key: str, attempt: int) -> None:
        self.run()


PAIR = SimpleNamespace(
    key="e1:archive", envelope=SimpleNamespace(id="e1"), subscription=SimpleNamespace(name="archive")
)


def _handler_runs(recorder: Recorder, clock: _Clock, *seconds: float) -> None:
    """A delivery of e1:archive whose handler runs once per figure, each taking that long."""
    with recorder._cut_off_noted(PAIR.key, "acme"):
        for took in seconds:
            with observing(recorder.observe):
                _Run(PAIR, lambda took=took: clock.advance(took)).run_handler(PAIR.key, 1)
            if clock() >= START + BUDGET:
                raise InvocationTimedOut


def _in_one_invocation(monkeypatch: pytest.MonkeyPatch) -> tuple[Recorder, Observations, _Clock]:
    recorder, observations, clock = _recorder({})
    recorder.world.slowest_runs = {}  # type: ignore[attr-defined]
    recorder.world.function_timeout = BUDGET  # type: ignore[attr-defined]
    observations.deadlines.append(START + BUDGET)
    monkeypatch.setattr(deadline, "remaining", lambda: START + BUDGET - clock())
    return recorder, observations, clock


def test_a_second_run_in_one_delivery_started_short_of_time_is_judged(monkeypatch: pytest.MonkeyPatch) -> None:
    recorder, observations, clock = _in_one_invocation(monkeypatch)

    # A direct run of 34 s whose commit found a row, then its lease's run with 26 s left, cut off.
    with pytest.raises(InvocationTimedOut):
        _handler_runs(recorder, clock, 34, 34)

    [too_late] = observations.started_too_late
    assert "started with 26.0 s left" in too_late


def test_a_second_worker_s_delivery_nested_in_a_run_leaves_the_first_its_own_judgement(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    recorder, observations, clock = _in_one_invocation(monkeypatch)
    recorder.world.slowest_runs = {"archive": timedelta(seconds=30)}  # type: ignore[attr-defined]
    clock.advance(40)  # 20 s left: too little for a 30 s run

    def nested_delivery_then_cut_off(*_args: object) -> None:
        _handler_runs(recorder, clock)  # the second worker's delivery of the same pair, which runs nothing
        clock.advance(25)
        raise InvocationTimedOut

    def delivery() -> None:
        with recorder._cut_off_noted(PAIR.key, "acme"), observing(recorder.observe):
            _Run(PAIR, nested_delivery_then_cut_off).run_handler(PAIR.key, 1)

    with pytest.raises(InvocationTimedOut):
        delivery()

    [too_late] = observations.started_too_late
    assert "started with 20.0 s left" in too_late


def test_a_run_is_known_by_the_time_from_its_start_to_its_end(monkeypatch: pytest.MonkeyPatch) -> None:
    recorder, _observations, clock = _in_one_invocation(monkeypatch)

    # 59.5 s, a second worker's invocation nested in it included: no invocation has time for that and a margin,
    # so the consumer starts the next run anyway, its deadline's problem (outbox.delivery.timing.RunTimes).
    _handler_runs(recorder, clock, 59.5)

    assert recorder.world.slowest_runs == {"archive": timedelta(seconds=59.5)}  # type: ignore[attr-defined]
    assert recorder._started_with_time("e2:archive", "archive") is None


# -- exhaustion is judged per replay: a replay starts a pair's attempts over --------------------------------

KEY = "e1:charge"
MAX_ATTEMPTS = 5


def _claims(observations: Observations, count: int, *, cut_for_others: bool) -> None:
    for _ in range(count):
        observations.claims[KEY] += 1
        if cut_for_others:
            observations.cut_offs.append(CutOff(KEY, "acme", fits_without_others=True))


def _dead_as_exhausted(observations: Observations, attempt: int) -> None:
    observations.dead_calls.append((KEY, attempt, "exhausted"))
    observations.dead_call_counts.append(observations.attempt_counts(KEY))


def _replayed(observations: Observations) -> None:
    observations.replay_counts.append((KEY, len(observations.dead_calls), observations.attempt_counts(KEY)))


def _judged(observations: Observations) -> list[str]:
    world = SimpleNamespace(too_slow=set(), trace=Trace(_Clock()))
    state = SimpleNamespace(max_attempts=MAX_ATTEMPTS)
    return [violation.message for violation in check_deadline(world, observations, state)]  # type: ignore[arg-type]


def test_a_replayed_pair_cut_off_for_others_every_time_is_blamed_though_it_failed_on_its_own_before() -> None:
    observations = Observations()
    _claims(observations, MAX_ATTEMPTS, cut_for_others=False)  # its own failures: dead, rightly
    _dead_as_exhausted(observations, MAX_ATTEMPTS)
    _replayed(observations)
    _claims(observations, MAX_ATTEMPTS, cut_for_others=True)  # then cut off for another tenant every time
    _dead_as_exhausted(observations, MAX_ATTEMPTS)

    [violation] = _judged(observations)
    assert f"{MAX_ATTEMPTS} of its {MAX_ATTEMPTS} attempt(s) were cut off" in violation


def test_a_pair_cut_off_for_others_then_replayed_and_failing_on_its_own_is_blamed_for_the_first_death_only() -> None:
    observations = Observations()
    _claims(observations, MAX_ATTEMPTS, cut_for_others=True)
    _dead_as_exhausted(observations, MAX_ATTEMPTS)
    _replayed(observations)
    _claims(observations, MAX_ATTEMPTS, cut_for_others=False)
    _dead_as_exhausted(observations, MAX_ATTEMPTS)

    assert len(_judged(observations)) == 1
