"""Deterministic fault-schedule simulation of the whole pipeline (``make simulate``).

One seed fixes a small workload and a fault schedule (``simulation.schedule``); the simulator runs them on
the local runtime (``simulation.runner``), drains the pipeline, lets an operator settle what is dead, and
checks the invariants (``simulation.invariants``). A failing seed replays exactly, with a trace of every
fault and delivery: ``make simulate SEED=<seed>``.

The package imports nothing itself: ``make mutants`` loads its catalogue (``simulation.mutants``) before the
engine, so that a mutant's import hook is in place first.
"""
