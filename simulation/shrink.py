"""Shrinking: the smallest schedule a failing seed's schedule can be cut to while the same invariant still fails.

    python -m simulation --shrink 17     # prints the smallest schedule, its cuts and its trace

A schedule is cut, never rewritten: a fault kind left out or its budget lowered, an action, a drain-time or an
afterwards action left out, an end-of-run act (a tamper, a forger, a forced replay ...) left out. Whatever the run
draws besides the schedule (the faults' decisions, ids, the operator's choices) still comes from the seed, so a
seed and its cuts replay exactly, and the cuts are written down as one short line (``Cuts.render``) that
``simulation/regression_seeds.txt`` keeps beside the seed: CI runs the shrunk schedule, not the whole one.

The search is greedy, as property-based testers shrink: each pass tries every cut of the current schedule (the
biggest first: whole halves of the actions before single ones) and keeps the first that still fails the same way;
it stops when a whole pass keeps none, or after ``max_runs`` runs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from simulation.drawing import generate
from simulation.schedule import Fault, FaultRate, Schedule

# The end-of-run acts a cut may leave out, in the order they are tried; leaving one out leaves out what needs it.
END_ACTS = ("rewrite_after_reset", "repair", "rewrite", "forge_batch", "forge", "tamper", "force_replay")
NEEDS = {"rewrite": ("repair", "rewrite_after_reset"), "repair": ("rewrite_after_reset",)}


@dataclass(frozen=True)
class Cuts:
    """What was cut from a seed's schedule: positions are those of the schedule the seed draws."""

    faults: frozenset[str] = frozenset()  # fault kinds left out
    budgets: tuple[tuple[str, int], ...] = ()  # fault kinds whose budget was lowered, and to what
    actions: frozenset[int] = frozenset()
    drain: frozenset[int] = frozenset()
    aged: frozenset[int] = frozenset()
    acts: frozenset[str] = frozenset()  # END_ACTS left out

    def apply(self, schedule: Schedule) -> Schedule:
        budgets = dict(self.budgets)
        faults: dict[Fault, FaultRate] = {
            kind: dataclasses.replace(rate, budget=budgets.get(kind.value, rate.budget))
            for kind, rate in schedule.faults.items()
            if kind.value not in self.faults
        }
        acts_left_out: dict[str, Any] = {act: False for act in self.acts}
        return dataclasses.replace(
            schedule,
            faults=faults,
            actions=tuple(a for i, a in enumerate(schedule.actions) if i not in self.actions),
            during_drain=tuple(d for i, d in enumerate(schedule.during_drain) if i not in self.drain),
            aged=tuple(a for i, a in enumerate(schedule.aged) if i not in self.aged),
            **acts_left_out,
        )

    def size(self, schedule: Schedule) -> int:
        """How big the cut schedule is: what the shrinker makes smaller."""
        cut = self.apply(schedule)
        acts = sum(bool(getattr(cut, act)) for act in END_ACTS)
        budget = sum(rate.budget for rate in cut.faults.values())
        return len(cut.actions) + len(cut.during_drain) + len(cut.aged) + acts + len(cut.faults) + budget

    def render(self) -> str:
        """One line, ``Cuts.parse``'s input: ``faults=-a,-b budgets=c:1 actions=-3,-5 drain=-0 aged=-1 acts=-x``."""
        parts = []
        if self.faults:
            parts.append("faults=" + ",".join(f"-{kind}" for kind in sorted(self.faults)))
        if self.budgets:
            parts.append("budgets=" + ",".join(f"{kind}:{n}" for kind, n in sorted(self.budgets)))
        for name in ("actions", "drain", "aged"):
            cut: frozenset[int] = getattr(self, name)
            if cut:
                parts.append(f"{name}=" + ",".join(f"-{i}" for i in sorted(cut)))
        if self.acts:
            parts.append("acts=" + ",".join(f"-{act}" for act in sorted(self.acts)))
        return " ".join(parts)

    @classmethod
    def parse(cls, text: str) -> Cuts:
        faults: frozenset[str] = frozenset()
        acts: frozenset[str] = frozenset()
        budgets: tuple[tuple[str, int], ...] = ()
        positions: dict[str, frozenset[int]] = {}
        for part in text.split():
            name, _, value = part.partition("=")
            items = [item for item in value.split(",") if item]
            if name == "budgets":
                budgets = tuple(sorted((kind, int(n)) for kind, _, n in (i.partition(":") for i in items)))
            elif name == "faults":
                faults = frozenset(_minus(i) for i in items)
            elif name == "acts":
                acts = frozenset(_minus(i) for i in items)
            elif name in ("actions", "drain", "aged"):
                positions[name] = frozenset(int(_minus(i)) for i in items)
            else:
                raise ValueError(f"not a cut: {part!r} (faults=, budgets=, actions=, drain=, aged=, acts=)")
        unknown = (faults | {kind for kind, _ in budgets}) - {kind.value for kind in Fault}
        unknown |= acts - set(END_ACTS)
        if unknown:
            raise ValueError(f"no such fault kind or end-of-run act: {', '.join(sorted(unknown))}")
        return cls(faults=faults, budgets=budgets, acts=acts, **positions)


def _minus(item: str) -> str:
    if not item.startswith("-"):
        raise ValueError(f"a cut leaves something out: -{item}, not {item}")
    return item[1:]


@dataclass
class Shrunk:
    seed: int
    cuts: Cuts
    kind: str  # the kind of violation kept failing
    runs: int
    sizes: tuple[int, int]  # the schedule's size before and after
    violations: tuple[str, ...] = field(default_factory=tuple)


# A run of a cut schedule: its violations (and a simulator error, as one), as text.
Run = Callable[[Schedule], tuple[str, ...]]


def shrink(seed: int, run: Run, kind_of: Callable[[str], str], *, max_runs: int = 200) -> Shrunk:
    """Cut ``seed``'s schedule while a run still shows the first kind of violation the whole schedule showed."""
    schedule = generate(seed)
    first = run(schedule)
    if not first:
        raise ValueError(f"seed {seed} keeps every invariant: there is nothing to shrink")
    kind = kind_of(first[0])
    cuts, violations, runs = Cuts(), first, 1
    progress = True
    while progress and runs < max_runs:
        progress = False
        for candidate in _candidates(schedule, cuts):
            if runs >= max_runs:
                break
            runs += 1
            found = run(candidate.apply(schedule))
            if any(kind_of(v) == kind for v in found):
                cuts, violations, progress = candidate, found, True
                break
    before = Cuts().size(schedule)
    return Shrunk(seed, cuts, kind, runs, (before, cuts.size(schedule)), violations)


def _candidates(schedule: Schedule, cuts: Cuts) -> Iterator[Cuts]:
    """Every cut one step smaller than ``cuts``, the biggest steps first."""
    kept = [i for i in range(len(schedule.actions)) if i not in cuts.actions]
    for chunk in _chunks(kept):
        yield dataclasses.replace(cuts, actions=cuts.actions | frozenset(chunk))
    for act in END_ACTS:
        if getattr(schedule, act) and act not in cuts.acts:
            yield dataclasses.replace(cuts, acts=cuts.acts | {act, *NEEDS.get(act, ())})
    for name in ("aged", "drain"):
        taken: frozenset[int] = getattr(cuts, name)
        size = len(schedule.aged if name == "aged" else schedule.during_drain)
        for i in range(size):
            if i not in taken:
                cut: dict[str, Any] = {name: taken | {i}}
                yield dataclasses.replace(cuts, **cut)
    budgets = dict(cuts.budgets)
    for kind, rate in schedule.faults.items():
        if kind.value in cuts.faults:
            continue
        yield dataclasses.replace(cuts, faults=cuts.faults | {kind.value})
        budget = budgets.get(kind.value, rate.budget)
        if budget > 1:
            lowered = {**budgets, kind.value: budget - 1}
            yield dataclasses.replace(cuts, budgets=tuple(sorted(lowered.items())))


def _chunks(kept: list[int]) -> Iterator[list[int]]:
    """Halves, then quarters ... then single positions (ddmin's order): big cuts first, while they still fail."""
    size = len(kept) // 2
    while size >= 1:
        for start in range(0, len(kept), size):
            yield kept[start : start + size]
        size //= 2
