"""The shipping workflow's part of a schedule (``simulation.drawing`` draws the rest): whether the application has the
WORKFLOW subscription ``sim.ship``, and the faults of its lane. A stream of their own, so a schedule without the
workflow runs as it did before it existed."""

from __future__ import annotations

import random

from simulation.schedule import Fault, FaultRate

WORKFLOW_CHANCE = 0.5
# Each fault of the lane: how often a schedule with the workflow has it, the range of its rate and of its budget.
WORKFLOW_FAULTS: dict[Fault, tuple[float, tuple[float, float], tuple[int, int]]] = {
    Fault.WORKFLOW_START_LOST: (0.4, (0.3, 0.8), (1, 2)),
    Fault.WORKFLOW_START_CRASH: (0.3, (0.3, 0.8), (1, 1)),
    Fault.WORKFLOW_FAILED: (0.4, (0.2, 0.6), (1, 2)),
    Fault.WORKFLOW_TIMED_OUT: (0.3, (0.2, 0.6), (1, 1)),
    Fault.WORKFLOW_STOPPED: (0.3, (0.2, 0.6), (1, 1)),
    Fault.WORKFLOW_NOTICE_LOST: (0.4, (0.3, 0.8), (1, 3)),
    Fault.WORKFLOW_NOTICE_DUPLICATED: (0.4, (0.3, 0.8), (1, 3)),
    # Drawn last, after the others: a schedule drawn before it came has its other faults as it had them.
    Fault.WORKFLOW_START_THROTTLED: (0.4, (0.3, 0.8), (1, 2)),
}


def draw_workflow(rng: random.Random, faults: dict[Fault, FaultRate]) -> bool:
    """Whether the application has the shipping workflow; its faults are added to ``faults``."""
    if rng.random() >= WORKFLOW_CHANCE:
        return False
    for kind, (chance, (low, high), (fewest, most)) in WORKFLOW_FAULTS.items():
        if rng.random() < chance:
            faults[kind] = FaultRate(round(rng.uniform(low, high), 2), rng.randint(fewest, most))
    return True
