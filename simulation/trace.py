"""The trace of one run: every fault that fired and every delivery, in order, on the virtual clock.

Event ids, owner tokens and message ids are long and random-looking; the trace names them by order of
first appearance (``e1``, ``w1``, ``m1``), so two runs of one seed print the same text.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime


@dataclass
class _Names:
    prefix: str
    names: dict[str, str] = field(default_factory=dict)

    def __call__(self, value: str) -> str:
        name = self.names.get(value)
        if name is None:
            name = self.names[value] = f"{self.prefix}{len(self.names) + 1}"
        return name


class Trace:
    def __init__(self, clock: Callable[[], datetime]) -> None:
        self._clock = clock
        self._start = clock()
        self.lines: list[str] = []
        self.event = _Names("e")
        self.owner = _Names("w")
        self.message = _Names("m")

    def key(self, idempotency_key: str) -> str:
        """``<event_id>:<subscription>`` with the event's short name."""
        event_id, _, subscription = idempotency_key.partition(":")
        return f"{self.event(event_id)}:{subscription}"

    def now(self) -> datetime:
        return self._clock()

    def add(self, kind: str, text: str) -> None:
        elapsed = (self._clock() - self._start).total_seconds()
        self.lines.append(f"{elapsed:10.3f}s  {kind:<9} {text}")

    def render(self) -> str:
        return "\n".join(self.lines)

    def digest(self) -> str:
        """Equal digests: the two runs did the same thing in the same order."""
        return hashlib.sha256(self.render().encode()).hexdigest()[:16]
