"""The durable consumer's outcomes reach its observers: the metrics its alarms and dashboard read, its log lines, and
a caller's own observers (``DurableConsumer(observers=...)``), each told once per outcome, after it is recorded."""

from __future__ import annotations

import logging
import re
from collections import Counter
from typing import Any

import pytest

from outbox import Delivery, TerminalError
from outbox.delivery.observers import LINE_OF, METRIC_OF, Telling, Told
from outbox.delivery.path import Metric
from outbox.local.clock import VirtualClock
from outbox.subscriptions import Subscription
from tests.functional.inbox_harness import Harness, Recorder, build_harness


class Metrics:
    """What the consumer uses of Powertools' ``Metrics``: ``add_metric``, summed by name."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    def add_metric(self, *, name: str, unit: str, value: float) -> None:
        assert unit == "Count"
        self.counts[name] += int(value)


def three_subscriptions(recorder: Recorder) -> list[Subscription]:
    def refuse(_delivery: Delivery) -> None:
        raise TerminalError("this order can never ship")

    failed: set[str] = set()

    def fail_once(delivery: Delivery) -> None:
        if delivery.envelope.id not in failed:
            failed.add(delivery.envelope.id)
            raise RuntimeError("the carrier timed out")

    recorder.behaviours.update({"broken": refuse, "flaky": fail_once})
    return [recorder.subscription(name) for name in ("ok", "broken", "flaky")]


@pytest.fixture
def told(aws: None, clock: VirtualClock) -> tuple[Harness, Metrics, list[Telling]]:
    metrics, tellings = Metrics(), []
    h = build_harness(three_subscriptions, clock, metrics=metrics, observers=[tellings.append])
    return h, metrics, tellings


def drain(h: Harness) -> None:
    for _ in range(4):  # the flaky subscription's message comes back after its visibility timeout
        h.esm.drain()
        h.clock.advance(400)


def test_each_outcome_is_counted_on_the_metric_its_alarm_or_graph_reads(
    told: tuple[Harness, Metrics, list[Telling]],
) -> None:
    h, metrics, _ = told
    h.emit()
    h.send("not a stream image", "acme", "poison-1")
    drain(h)

    assert metrics.counts[Metric.DEAD_LETTERS] == 1  # alarmed at zero: the terminal failure
    assert metrics.counts[Metric.POISON_PILLS] == 1  # alarmed at zero
    assert metrics.counts[Metric.RETRIES] == 1  # the flaky run's first attempt
    assert metrics.counts[Metric.COMPLETIONS] == 2  # ok, and flaky's second attempt
    assert metrics.counts[Metric.CONFLICTS] == 0


def test_a_caller_s_observer_is_told_each_outcome_once_with_the_pair_s_log_keys(
    told: tuple[Harness, Metrics, list[Telling]],
) -> None:
    h, _, tellings = told
    envelope = h.emit()
    drain(h)

    by_subscription: dict[str, list[Told]] = {}
    for telling in tellings:
        assert telling.log["event_id"] == envelope.id
        by_subscription.setdefault(telling.log["subscription"], []).append(telling.told)
    # A redelivery of the message (for the flaky run) finds the others done: told so, and counted as a skip.
    done = (Told.COMPLETED, Told.DEAD, Told.RETRYING)
    assert [t for t in by_subscription["ok"] if t in done] == [Told.COMPLETED]
    assert [t for t in by_subscription["broken"] if t in done] == [Told.DEAD]
    assert [t for t in by_subscription["flaky"] if t in done] == [Told.RETRYING, Told.COMPLETED]
    assert Told.DONE_ALREADY in by_subscription["ok"]
    dead = next(t for t in tellings if t.told is Told.DEAD)
    assert (dead.facts["key"], dead.facts["reason"]) == (f"{envelope.id}:broken", "terminal")
    assert h.claim_status("broken", envelope) == "DEAD"  # told after it was recorded


def test_the_log_says_each_outcome_in_words(
    told: tuple[Harness, Metrics, list[Telling]], caplog: pytest.LogCaptureFixture
) -> None:
    h, _, _ = told
    with caplog.at_level(logging.INFO, logger="outbox"):
        envelope = h.emit()
        h.send("not a stream image", "acme", "poison-1")
        drain(h)

    lines = [record.getMessage() for record in caplog.records if record.name.startswith("outbox")]
    assert f"dead-lettering {envelope.id}:broken (terminal): TerminalError" in "\n".join(lines)
    assert any(line.startswith(f"retrying {envelope.id}:flaky after: RuntimeError") for line in lines)
    assert any(line.startswith("poison pill ") for line in lines)
    dead = next(r for r in caplog.records if r.getMessage().startswith("dead-lettering"))
    assert (dead.levelno, dead.event_id, dead.subscription) == (logging.ERROR, envelope.id, "broken")  # type: ignore[attr-defined]


def test_every_outcome_counts_or_logs_and_every_line_formats_its_own_facts() -> None:
    assert set(METRIC_OF) | set(LINE_OF) == set(Told)
    for told, (level, text) in LINE_OF.items():
        facts: dict[str, Any] = {name: 7 for name in re.findall(r"%\((\w+)\)d", text)}
        facts |= {name: f"<{name}>" for name in re.findall(r"%\((\w+)\)s", text)}
        assert level in (logging.INFO, logging.WARNING, logging.ERROR), told
        assert "%(" not in text % facts, told


def test_an_observer_that_raises_changes_no_delivery(aws: None, clock: VirtualClock) -> None:
    """Raising at every outcome (right after a claim, too) neither holds a claim nor spends an attempt: each pair ends
    as it would unobserved, and the consumer's own counts still happen."""

    def broken(_telling: Telling) -> None:
        raise RuntimeError("the caller's dashboard is down")

    metrics = Metrics()
    h = build_harness(three_subscriptions, clock, metrics=metrics, observers=[broken])
    envelope = h.emit()
    drain(h)

    statuses = {name: h.claim_status(name, envelope) for name in ("ok", "broken", "flaky")}
    assert statuses == {"ok": "COMPLETED", "broken": "DEAD", "flaky": "COMPLETED"}
    assert h.runs("ok", envelope) == 1
    assert h.runs("flaky", envelope) == 2
    assert metrics.counts[Metric.DEAD_LETTERS] == 1
