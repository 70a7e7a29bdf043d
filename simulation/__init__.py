"""Deterministic fault-schedule simulation of the whole pipeline (``make simulate``).

One seed fixes a small workload and a fault schedule (``simulation.schedule``); the simulator runs them on
the local runtime (``simulation.runner``), drains the pipeline, lets an operator settle what is dead, and
checks the invariants (``simulation.invariants``). A failing seed replays exactly, with a trace of every
fault and delivery: ``make simulate SEED=<seed>``.
"""

from __future__ import annotations

from simulation.runner import SeedResult, run_seed

__all__ = ["SeedResult", "run_seed"]
