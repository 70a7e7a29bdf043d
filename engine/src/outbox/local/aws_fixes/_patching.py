"""The mechanics of replacing a moto attribute and putting the original back, and the injected clock."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from outbox.local.clock import VirtualClock

_MISSING = object()


@dataclass(frozen=True)
class Patch:
    """One replaced attribute of a moto class or module, named after the rule it implements.

    ``rule`` cites the row of the "What moto does and does not do" table (M1…M21) or the AWS rule (R…)
    of docs/aws-behaviour.md that the replacement exists for.
    """

    owner: object
    name: str
    replacement: object
    rule: str


@dataclass
class PatchSet:
    """Applies patches in order and undoes them in reverse, restoring inherited attributes by deletion."""

    patches: list[Patch]
    _saved: list[tuple[Patch, object]] = field(default_factory=list)

    def apply(self) -> None:
        for patch in self.patches:
            own = vars(patch.owner).get(patch.name, _MISSING)
            self._saved.append((patch, own))
            setattr(patch.owner, patch.name, patch.replacement)

    def undo(self) -> None:
        while self._saved:
            patch, own = self._saved.pop()
            if own is _MISSING:
                delattr(patch.owner, patch.name)
            else:
                setattr(patch.owner, patch.name, own)


class Clock:
    """The virtual clock the fixes read, rebindable so that a second ``install`` can swap it in place."""

    def __init__(self, clock: VirtualClock) -> None:
        self.clock = clock

    def now(self) -> datetime:
        return self.clock()

    def now_ms(self) -> float:
        """Milliseconds since the epoch, the unit moto's SQS models keep their timestamps in."""
        return self.clock().timestamp() * 1000
