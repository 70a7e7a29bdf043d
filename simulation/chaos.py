"""Decides, at each opportunity, whether a scheduled fault fires: deterministically, from the seed.

Each kind of fault draws from its own ``random.Random(f"{seed}:{kind}")``, so the decisions of one kind
do not shift when another kind gets more or fewer opportunities, and a seed replays exactly as long as
the pipeline does the same thing in the same order (it does: one thread, the virtual clock, seeded ids).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime

from outbox.local.faults import FaultCount
from simulation.schedule import Fault, FaultRate
from simulation.trace import Trace


class Chaos:
    def __init__(self, seed: int, rates: Mapping[Fault, FaultRate], trace: Trace) -> None:
        self.rates = dict(rates)
        self.fired: Counter[Fault] = Counter()
        # Per (kind, lane): a lane spends a budget of its own (the operator's sends, beside the consumer's).
        self._spent: Counter[tuple[Fault, str]] = Counter()
        self.active = True
        self.healed = False
        self.last_fired_at: datetime | None = None  # when (virtual time) the last fault fired: liveness counts from it
        self._trace = trace
        self._random = {kind: random.Random(f"{seed}:{kind.value}") for kind in Fault}

    def fires(self, kind: Fault, subject: str = "", *, while_paused: bool = False, lane: str = "") -> bool:
        """Whether ``kind`` fires now; a fired fault is traced with its subject. ``while_paused``: a fault of
        the operator's own process, which may strike while the pipeline's faults are paused for an action,
        and after the causes are fixed (fixing the pipeline does not keep the operator's laptop awake).
        ``lane``: opportunities that spend a budget of their own, so that one kind of caller (the operator's
        many sends) cannot use up what another (the consumer's few wake-ups) would meet."""
        rate = self.rates.get(kind)
        live = True if while_paused else self.active
        if not live or rate is None or self._spent[kind, lane] >= rate.budget:
            return False
        if self._random[kind].random() >= rate.probability:
            return False
        self.fired[kind] += 1
        self._spent[kind, lane] += 1
        self.last_fired_at = self._trace.now()
        self._trace.add("FAULT", f"{kind.value} {self._subject(subject)}".rstrip())
        return True

    def can_fire(self, kind: Fault) -> bool:
        """Whether ``kind`` is scheduled, live and has budget left (so that looking for an opportunity is worth it)."""
        rate = self.rates.get(kind)
        return self.active and rate is not None and self._spent[kind, ""] < rate.budget

    def draw(self, kind: Fault) -> random.Random:
        """The random stream of ``kind``, for a fault that needs more than yes or no (a new order)."""
        return self._random[kind]

    def count(self, kind: Fault) -> ScheduledFault:
        """``kind`` as a ``outbox.local.faults`` count."""
        return ScheduledFault(self, kind)

    def heal(self) -> None:
        """The operator fixed the cause: no fault fires any more (the runbook's "fix, then redrive")."""
        self.active = False
        self.healed = True

    @contextmanager
    def paused(self) -> Iterator[None]:
        """No fault fires meanwhile (while an operator acts, and while the invariants are checked)."""
        was, self.active = self.active, False
        try:
            yield
        finally:
            self.active = was

    def _subject(self, subject: str) -> str:
        if ":" in subject:
            return self._trace.key(subject)
        return subject


class ScheduledFault(FaultCount):
    """A ``FaultCount`` that asks the chaos at each opportunity instead of counting down."""

    def __init__(self, chaos: Chaos, kind: Fault) -> None:
        super().__init__(remaining=0)
        self._chaos = chaos
        self._kind = kind

    def take(self, subject: str = "") -> bool:
        if not self._chaos.fires(self._kind, subject):
            return False
        self.fired += 1
        return True
