"""What every invariant module shares: a violation, the invariants' names, and how a pair is named in one."""

from __future__ import annotations

from dataclasses import dataclass

from simulation.world import World

NAMES = {
    1: "the log",
    2: "exactly once",
    3: "external effects",
    4: "fencing",
    5: "failed emits",
    6: "FIFO order",
    7: "status",
    8: "best-effort lane",
    9: "poison pills",
    10: "dead stays dead",
    11: "the local runtime as strict as AWS",
    12: "tamper evidence",
    13: "schema versions",
    14: "ordered subscriptions",
    15: "the deadline",
    16: "read-only passes",
    17: "operator commands finish",
    18: "completeness",
    19: "liveness",
    20: "the pair's state machine",
    21: "the WORKFLOW lane",
}


@dataclass(frozen=True)
class Violation:
    invariant: int
    message: str

    def __str__(self) -> str:
        return f"invariant {self.invariant} ({NAMES[self.invariant]}): {self.message}"


def key_of(key: dict[str, str]) -> tuple[str, str]:
    return key["pk"], key["sk"]


def name_of(world: World, key: str) -> str:
    return world.trace.key(key)
