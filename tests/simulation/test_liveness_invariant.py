"""Invariant 19 counts a deferred pair as told when the message that owes it its wake-up sits in the alarmed DLQ.

Soak seed 7340272: an ordered completion's wake-up was refused by SQS, so the batch failed the message that owed
it; that message had used its receives up (a broken deploy had crashed every invocation before), and SQS moved it
to the durable queue's dead-letter queue. The deferred event waited, its order named by ``outbox status`` ("its
wake-up is on its way, or in the durable DLQ"), the DLQ's alarm raised; the redrive ran the message again, found
its event applied and woke the deferred one. The invariant took the wake-up's debt for paid only when a fault had
lost the message for good, not when the message sat in the DLQ.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from simulation.invariants.liveness import _Told, _told_of
from simulation.state import State

DEFERRED_BEHIND_SEQ_7 = {"status": {"S": "DEFERRED"}, "waits_for": {"N": "7"}}


def _state() -> State:
    log = [SimpleNamespace(id=f"e{seq}", tenant="t0", seq=seq) for seq in (7, 8)]
    return State(logs={"t0": log})  # type: ignore[dict-item]


def _told(**sets: Any) -> _Told:
    told = _Told()
    for name, ids in sets.items():
        setattr(told, name, set(ids))
    return told


def test_a_deferred_pair_whose_predecessor_s_message_is_dead_lettered_is_told() -> None:
    told = _told(dead_lettered={"e7"})
    assert _told_of(told, _state(), "e8", "sim.ledger", DEFERRED_BEHIND_SEQ_7)


def test_a_deferred_pair_whose_predecessor_s_message_was_lost_is_told() -> None:
    assert _told_of(_told(lost={"e7"}), _state(), "e8", "sim.ledger", DEFERRED_BEHIND_SEQ_7)


def test_a_deferred_pair_nothing_will_wake_and_nobody_was_told_of_is_a_violation() -> None:
    # Another event's message in the DLQ owes this pair nothing
    assert not _told_of(_told(dead_lettered={"e3"}), _state(), "e8", "sim.ledger", DEFERRED_BEHIND_SEQ_7)
    assert not _told_of(_told(), _state(), "e8", "sim.ledger", DEFERRED_BEHIND_SEQ_7)
