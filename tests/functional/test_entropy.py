"""The engine's random draws come from its published sources (``outbox.entropy``), drawn at the moment of use: a
store, an inbox or an operator's tools made before a ``using`` block draw from the block's sources inside it, and
from the real ones again after it. The simulator makes a seed repeatable this way, without reaching into the
modules that draw."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest

from outbox import entropy
from outbox.ops.context import repair_dedup_id
from tests.functional.inbox_harness import HarnessFactory, one_subscription

FIXED_ID = "01J00000000000000000000000"


def fixed() -> entropy.Sources:
    return entropy.Sources(
        event_id=lambda: FIXED_ID,
        owner_token=lambda: "owner-from-the-block",
        repair_token=lambda: "repair-token",
        backoff_rng=lambda: random.Random(7),
    )


def test_objects_made_before_a_block_draw_from_its_sources_inside_it_and_from_the_real_ones_after(
    make_harness: HarnessFactory,
) -> None:
    h = make_harness(one_subscription)  # the store and the inbox exist before the block

    with entropy.using(fixed()):
        event = h.emit("order.created")
        claimed = h.inbox.claim(event, "shipping.book", timedelta(minutes=5)).claim
        dedup = repair_dedup_id("replay", event.id)

    assert event.id == FIXED_ID
    assert claimed is not None
    assert claimed.owner == "owner-from-the-block"
    assert dedup == f"replay-{FIXED_ID}-repair-token"
    assert entropy.current() is entropy.REAL
    after = h.emit("order.created")
    assert after.id != FIXED_ID
    assert not repair_dedup_id("replay", after.id).endswith("repair-token")


def test_a_block_left_by_an_error_puts_the_sources_before_it_back() -> None:
    with pytest.raises(RuntimeError), entropy.using(fixed()):
        raise RuntimeError("a run that failed")
    assert entropy.current() is entropy.REAL


def test_blocks_nest() -> None:
    outer, inner = fixed(), fixed()
    with entropy.using(outer):
        with entropy.using(inner):
            assert entropy.current() is inner
        assert entropy.current() is outer
