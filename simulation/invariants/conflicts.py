"""Invariant 2's conflicts: a copy with other content, and an event the log never held, is recorded as a conflict
(and never run); and nothing else is, whatever rows the previous release left (an upgrade mid-run)."""

from __future__ import annotations

from simulation.invariants.base import Violation
from simulation.invariants.log import rewritten_ids
from simulation.state import State
from simulation.world import World


def conflicts_are_recorded(world: World, state: State) -> list[Violation]:
    """A copy of an event with other content, or an event the log never held, is recorded as a conflict (and
    never run: an effect for no event of the log is a violation of its own)."""
    conflicts = {row.event_id for row in state.dead_letters if row.reason == "conflict"}
    found = [
        Violation(2, f"{world.trace.event(event_id)}: a copy with other content came, and no conflict was recorded")
        for event_id in sorted(set(world.conflicting_copies) - conflicts)
    ]
    found.extend(
        Violation(2, f"forged event {event_id}: the log never held it, and no conflict was recorded")
        for event_id in sorted(set(world.forged) - conflicts)
    )
    other_copies = {*world.conflicting_copies, *world.altered_in_transit}
    for event_id in sorted(rewritten_ids(world) & conflicts - other_copies):
        found.append(Violation(2, f"{world.trace.event(event_id)} was rewritten in the log and relayed again"))
    # A conflict is never a false alarm: an event nobody sent other content for (no copy, no forgery, no rewrite) is
    # the same content in every message and every claim row, also a row the previous release wrote (an upgrade).
    genuine = {r.envelope.id for r in world.emits if r.envelope is not None} - other_copies - rewritten_ids(world)
    found.extend(
        Violation(
            2,
            f"{world.trace.event(event_id)}: a conflict dead letter, though only the log's own content of it was ever "
            "sent" + (" (the engine was upgraded from 0.6.0 in the run)" if world.upgraded else ""),
        )
        for event_id in sorted(conflicts & genuine)
    )
    return found
