"""``outbox.observing``: the moments a pair's run tells its observers, how observers nest, how a fault point raises,
and the seam's public surface, pinned as a library pins its API (a name removed or renamed breaks users' tests)."""

from __future__ import annotations

import dataclasses
import threading
from types import SimpleNamespace
from typing import Any

import pytest

from outbox import observing
from outbox.delivery.consumer import DurableConsumer
from outbox.delivery.direct import DirectPath
from outbox.delivery.ordered import OrderedGate
from outbox.delivery.run import Run
from outbox.inbox import Inbox
from outbox.log.store import EventStore
from outbox.observing import AROUND, Happening, Moment, observed, point
from outbox.observing import observing as observing_block
from outbox.pairs.order import OrderBook
from outbox.pairs.wake_ups import WakeUps


class Book:
    """A stand-in for an engine object with one observed call."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    @observed(AROUND["claim"])
    def claim(self, envelope: Any, subscription: str, lease: int = 30) -> str:
        self.calls.append(f"claim {envelope.id}:{subscription} for {lease}")
        if subscription == "broken":
            raise ConnectionError("refused")
        return "claimed"


ENVELOPE = SimpleNamespace(id="01E")


def recorder(log: list[str], name: str) -> observing.Observer:
    def observer(happening: Happening) -> None:
        log.append(f"{name} {happening.moment.value} {happening.key}")

    return observer


def test_nobody_observing_calls_straight_through() -> None:
    book = Book()
    assert book.claim(ENVELOPE, "mail") == "claimed"
    assert book.calls == ["claim 01E:mail for 30"]


def test_observers_nest_the_last_registered_outermost() -> None:
    log: list[str] = []
    book = Book()
    with observing_block(recorder(log, "inner")), observing_block(recorder(log, "outer")):
        assert book.claim(ENVELOPE, "mail") == "claimed"
    assert log == [
        "outer before_claim 01E:mail",
        "inner before_claim 01E:mail",
        "inner claimed 01E:mail",
        "outer claimed 01E:mail",
    ]


def test_a_happening_carries_the_call_its_arguments_and_its_result() -> None:
    seen: list[Happening] = []
    book = Book()
    with observing_block(seen.append):
        book.claim(ENVELOPE, "mail")
    before, done = seen
    assert before.detail.by is book
    assert before.detail.arguments == {
        "envelope": ENVELOPE,
        "subscription": "mail",
        "lease": 30,  # defaults filled in
    }
    assert (before.event_id, before.subscription, before.detail.result) == ("01E", "mail", None)
    assert (done.moment, done.detail.result, done.detail.error) == (Moment.CLAIMED, "claimed", None)


def test_a_call_that_raises_is_told_with_its_error() -> None:
    seen: list[Happening] = []
    with observing_block(seen.append), pytest.raises(ConnectionError):
        Book().claim(ENVELOPE, "broken")
    assert [h.moment for h in seen] == [Moment.BEFORE_CLAIM, Moment.CLAIM_RAISED]
    assert isinstance(seen[-1].detail.error, ConnectionError)


def test_a_fault_point_before_a_call_keeps_it_from_starting() -> None:
    log: list[str] = []
    book = Book()

    def crash(happening: Happening) -> None:
        if happening.moment is Moment.BEFORE_CLAIM:
            raise RuntimeError("crashed before claiming")

    with observing_block(recorder(log, "inner")), observing_block(crash), pytest.raises(RuntimeError, match="before"):
        book.claim(ENVELOPE, "mail")
    assert book.calls == []  # the call never started: the observers inside it were told nothing
    assert log == []


def test_a_fault_point_after_a_call_leaves_its_effect_seen_by_the_inner_observers() -> None:
    log: list[str] = []
    book = Book()

    def crash(happening: Happening) -> None:
        if happening.moment is Moment.CLAIMED:
            raise RuntimeError("crashed after claiming")

    inner, outer = recorder(log, "inner"), recorder(log, "outer")
    with observing_block(inner), observing_block(crash), observing_block(outer), pytest.raises(RuntimeError):
        book.claim(ENVELOPE, "mail")
    assert book.calls == ["claim 01E:mail for 30"]
    assert log == [
        "outer before_claim 01E:mail",
        "inner before_claim 01E:mail",
        "inner claimed 01E:mail",
        "outer claim_raised 01E:mail",  # outside the fault, the call raised
    ]


def test_an_observer_is_told_of_every_thread_s_calls_and_only_inside_its_block() -> None:
    log: list[str] = []
    book = Book()
    with observing_block(recorder(log, "any")):
        worker = threading.Thread(target=book.claim, args=(ENVELOPE, "mail"))
        worker.start()
        worker.join()
    book.claim(ENVELOPE, "mail")
    assert log == ["any before_claim 01E:mail", "any claimed 01E:mail"]
    assert observing._observers == ()


def test_registrations_from_threads_leave_each_other_in_place() -> None:
    first, second = recorder([], "first"), recorder([], "second")
    with observing_block(first):
        block = observing_block(second)
        block.__enter__()
    assert observing._observers == (second,)  # the first one's exit took itself out, not the later registration
    block.__exit__(None, None, None)
    assert observing._observers == ()


def test_a_point_is_told_outermost_first() -> None:
    log: list[str] = []
    pair = SimpleNamespace(envelope=ENVELOPE, subscription=SimpleNamespace(name="mail"))
    with observing_block(recorder(log, "inner")), observing_block(recorder(log, "outer")):
        point(Moment.HANDLER_STARTS, None, pair=pair)
    assert log == ["outer handler_starts 01E:mail", "inner handler_starts 01E:mail"]


# -- the public surface -----------------------------------------------------------------------------


def test_the_moments_are_pinned() -> None:
    assert [m.value for m in Moment] == [
        "before_claim", "claimed", "claim_raised",
        "before_run", "ran", "run_raised", "handler_starts",
        "before_completion", "completed", "completion_raised",
        "before_direct_commit", "direct_commit_done", "direct_commit_raised",
        "before_direct_run", "direct_ran", "direct_run_raised",
        "before_direct_apply", "direct_applied", "direct_apply_raised",
        "before_direct_failure", "direct_failed", "direct_failure_raised",
        "before_release", "released", "release_raised",
        "before_death", "dead", "death_raised",
        "before_deferral", "deferred", "deferral_raised",
        "before_forgiveness", "forgiven", "forgiveness_raised",
        "before_placing", "placed", "placing_raised",
        "before_advance", "advanced", "advance_raised",
        "before_wake_up", "wake_up_sent", "wake_up_raised",
        "before_woken_run", "woken", "woken_run_raised",
        "before_delivery", "delivered", "delivery_raised",
        "before_record", "record_done", "record_raised",
        "before_emit_commit", "emit_committed", "emit_commit_raised", "check_reads_head",
        "before_batch", "batch_done", "batch_raised",
    ]  # fmt: skip
    assert all(m.name == m.value.upper() for m in Moment)


def test_the_happening_and_its_detail_are_pinned() -> None:
    assert [f.name for f in dataclasses.fields(Happening)] == ["moment", "event_id", "subscription", "detail"]
    assert [f.name for f in dataclasses.fields(observing.Detail)] == ["by", "arguments", "result", "error"]
    assert Happening.__dataclass_params__.frozen  # type: ignore[attr-defined]
    assert set(observing.__all__) == {
        "AROUND", "Around", "Detail", "Happening", "Moment", "Observer", "observed", "observing", "point"
    }  # fmt: skip


# Each observed call of the engine by its step: the class whose method it is, and the arguments its happenings
# carry (the method's signature). The method's name is not pinned: a private method renamed inside the engine
# changes nothing here, nor in the simulator or the local runtime, which see the moments only.
OBSERVED = {
    "claim": (Inbox, ["envelope", "subscription", "lease", "digest", "may_create", "budget_ms"]),
    "release": (Inbox, ["claim", "error", "give_back", "still_unfinished"]),
    "defer": (Inbox, ["claim", "waits_for", "order"]),
    "forgive": (Inbox, ["claim"]),
    "die": (Inbox, ["claim", "envelope", "error", "error_type", "reason", "receive_count"]),
    "commit": (Run, ["claim", "result", "order"]),
    "commit_directly": (Run, ["result", "order"]),
    "fail_directly": (Run, ["exc", "terminal"]),
    "run": (Run, ["key", "attempt"]),
    "run_directly": (DirectPath, ["run"]),
    "apply_directly": (OrderedGate, ["run", "watermark"]),
    "place": (OrderedGate, ["claim", "envelope", "subscription", "watermark", "waits_for", "batch"]),
    "advance": (OrderBook, ["watermark", "envelope", "was_deferred", "skipped"]),
    "wake": (WakeUps, ["deferred", "applied_seq"]),
    "run_woken": (OrderedGate, ["subscription", "ready", "remaining_ms", "envelope", "batch"]),
    "deliver": (
        DurableConsumer,
        ["envelope", "subscription", "receive_count", "remaining_ms", "digest", "may_create", "repair", "batch"],
    ),
    "read_record": (DurableConsumer, ["record", "remaining_ms", "batch"]),
    "handle": (DurableConsumer, ["event", "context"]),
    "commit_emit": (EventStore, ["envelopes", "head", "writes", "token"]),
}


@pytest.mark.parametrize("step", list(OBSERVED))
def test_the_engine_s_observed_calls_are_pinned(step: str) -> None:
    import inspect

    owner, arguments = OBSERVED[step]
    methods = [m for m in vars(owner).values() if getattr(m, "observed", None) == AROUND[step]]
    assert len(methods) == 1, f"{owner.__name__} has {len(methods)} methods observed as {step!r}"
    assert list(inspect.signature(methods[0]).parameters)[1:] == arguments
    assert set(AROUND) == set(OBSERVED)
