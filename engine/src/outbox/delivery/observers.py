"""What a consumer's runs tell their observers, and the two observers every consumer has: its metrics and its log.

A path or a pair's ``Run`` says what happened, once, as a ``Told`` with its facts (``Runs.tell``); what each
observer makes of it lives here, not beside the inbox writes: the Powertools metric it counts (``METRIC_OF``) and
the line it logs (``LINE_OF``). A caller adds its own observers with ``DurableConsumer(observers=...)``: to count per
subscription, say, or to send dead letters to its own tools. An observer is told after the transition it describes
is recorded (a dead letter after its row is written), in the thread that ran it; one that raises is logged and
passed over, so a broken observer never holds a claim or spends a pair's attempts.

These are the outcomes of a pair's transitions. The transitions themselves (each write of the inbox, each run of a
handler) are ``outbox.observing``'s moments, the seams the simulator and the fault points use.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from outbox.delivery.path import Metric

__all__ = ["LINE_OF", "METRIC_OF", "LogLines", "MetricCounts", "RunObserver", "Telling", "Told"]

logger = logging.getLogger(__name__)


class Told(StrEnum):
    """Each outcome a consumer's runs tell."""

    CLAIMED = "claimed"  # the lease-claim write took the pair
    HELD_ELSEWHERE = "held_elsewhere"  # another worker holds a live lease: the message comes back
    DONE_ALREADY = "done_already"  # the claim found the pair done (``outcome``: how)
    DUPLICATE = "duplicate"  # a direct run found the pair completed or dead already
    BELOW_WATERMARK = "below_watermark"  # an ordered pair at or below its watermark, past the inbox's memory
    COMPLETED = "completed"  # committed: under the lease, or directly
    RETRYING = "retrying"  # a failed attempt released, to run again on the next receive
    DEAD = "dead"  # a dead letter: terminal, or its attempts used up
    UNVERIFIABLE = "unverifiable"  # older than the inbox remembers: dead work, never run
    LEFT_OUT = "left_out"  # a repair's pair a deploy left out: dead, with its letter
    CONFLICT = "conflict"  # another content than the pair's row holds: a conflict dead letter
    REFUSED = "refused"  # an event the log does not hold, refused (once per message)
    REFUSED_PAIR = "refused_pair"  # ... and its conflict dead letter, one per subscription it would have run
    POISON_PILL = "poison_pill"  # a message no one can read
    UNMATCHED = "unmatched"  # an event no durable subscription matches
    LEASE_LOST = "lease_lost"  # another owner took the claim over (a write fenced on this one's token failed)
    LEASE_LOST_BEFORE_COMPLETING = "lease_lost_before_completing"
    LEASE_LOST_RECORDING_FAILURE = "lease_lost_recording_failure"
    NO_TIME_LEFT = "no_time_left"  # not started: it would not fit in what is left of the invocation
    UNFINISHED_WAITS = "unfinished_waits"  # not run: its last attempt had as much time and did not end
    DEFERRED = "deferred"  # an ordered pair put aside behind its predecessor
    RUN_AFTER_PREDECESSOR = "run_after_predecessor"  # a deferred pair run in place, right after its predecessor
    WAKE_UP_SENT = "wake_up_sent"  # a deferred pair sent back to the queue
    WAKE_FAILED = "wake_failed"  # could not wake the next deferred pair: the message comes back to do it
    DIRECT_COMPLETION_FAILED = "direct_completion_failed"  # an ordered direct commit failed: placed under a lease
    HANDED = "handed"  # a WORKFLOW pair handed to its durable execution


# The metric each outcome counts (one per telling); an outcome missing here counts nothing.
METRIC_OF: Mapping[Told, Metric] = {
    Told.CLAIMED: Metric.CLAIMS,
    Told.HELD_ELSEWHERE: Metric.SKIPS,
    Told.DONE_ALREADY: Metric.SKIPS,
    Told.DUPLICATE: Metric.SKIPS,
    Told.BELOW_WATERMARK: Metric.SKIPS,
    Told.COMPLETED: Metric.COMPLETIONS,
    Told.RETRYING: Metric.RETRIES,
    Told.DEAD: Metric.DEAD_LETTERS,
    Told.UNVERIFIABLE: Metric.DEAD_LETTERS,
    Told.LEFT_OUT: Metric.DEAD_LETTERS,
    Told.CONFLICT: Metric.CONFLICTS,
    Told.REFUSED_PAIR: Metric.CONFLICTS,
    Told.POISON_PILL: Metric.POISON_PILLS,
    Told.UNMATCHED: Metric.UNMATCHED,
    Told.LEASE_LOST: Metric.LEASES_LOST,
    Told.LEASE_LOST_BEFORE_COMPLETING: Metric.LEASES_LOST,
    Told.LEASE_LOST_RECORDING_FAILURE: Metric.LEASES_LOST,
    Told.NO_TIME_LEFT: Metric.NO_TIME_LEFT,
    Told.UNFINISHED_WAITS: Metric.NO_TIME_LEFT,
    Told.DEFERRED: Metric.DEFERRALS,
    Told.RUN_AFTER_PREDECESSOR: Metric.RUN_AFTER_PREDECESSOR,
    Told.WAKE_UP_SENT: Metric.WAKE_UPS,
}

# The line each outcome logs, at its level, formatted with the telling's facts; an outcome missing here logs nothing.
LINE_OF: Mapping[Told, tuple[int, str]] = {
    Told.HELD_ELSEWHERE: (logging.INFO, "skipped %(subscription)s for now: in progress elsewhere"),
    Told.DONE_ALREADY: (logging.INFO, "skipped %(subscription)s: %(outcome)s"),
    Told.DUPLICATE: (logging.INFO, "skipped %(subscription)s: a duplicate delivery"),
    Told.BELOW_WATERMARK: (logging.INFO, "skipped %(subscription)s: seq %(seq)d is at or below its watermark"),
    Told.RETRYING: (logging.WARNING, "retrying %(key)s after: %(error)s"),
    Told.DEAD: (logging.ERROR, "dead-lettering %(key)s (%(reason)s): %(error)s"),
    Told.UNVERIFIABLE: (logging.ERROR, "not running %(subscription)s: older than the inbox remembers"),
    Told.LEFT_OUT: (logging.ERROR, "repair of %(key)s not run: %(why)s"),
    Told.CONFLICT: (logging.ERROR, "event %(event_id)s conflicts with the content already claimed"),
    Told.REFUSED: (logging.ERROR, "refused event %(event_id)s: %(why)s"),
    Told.POISON_PILL: (logging.ERROR, "poison pill %(message_id)s: %(error)s"),
    Told.UNMATCHED: (logging.WARNING, "event %(event_id)s of type %(type)s matched no durable subscription"),
    Told.LEASE_LOST_BEFORE_COMPLETING: (
        logging.WARNING,
        "lost the lease on %(key)s before completing; the new owner finishes it",
    ),
    Told.LEASE_LOST_RECORDING_FAILURE: (logging.WARNING, "lost the lease on %(key)s while recording a failure"),
    Told.NO_TIME_LEFT: (
        logging.INFO,
        "not starting %(subscription)s with %(remaining_ms)d ms left: it comes back with the rest of its group",
    ),
    Told.UNFINISHED_WAITS: (
        logging.INFO,
        "not running %(subscription)s with %(remaining_ms)d ms left: its last attempt had %(had)d ms and did not end",
    ),
    Told.DEFERRED: (logging.INFO, "deferred %(key)s: seq %(seq)d waits for seq %(waits_for)d"),
    Told.WAKE_FAILED: (logging.WARNING, "could not wake the next deferred event of %(subscription)s: %(error)s"),
    Told.DIRECT_COMPLETION_FAILED: (
        logging.WARNING,
        "the direct completion of %(key)s failed, placed again under a lease: %(error)s",
    ),
    Told.HANDED: (logging.INFO, "handed %(key)s to the workflow execution %(execution)s"),
}


@dataclass(frozen=True)
class Telling:
    """One outcome told: what (``told``), its facts by name (what the log line formats), and the structured keys a
    log line carries (``log``: the pair's event id, subscription, tenant, ...)."""

    told: Told
    facts: Mapping[str, Any] = field(default_factory=dict)
    log: Mapping[str, Any] = field(default_factory=dict)


class RunObserver(Protocol):
    """Told of each outcome of a consumer's runs."""

    def __call__(self, telling: Telling, /) -> None: ...


class MetricCounts:
    """Counts each outcome's metric (``METRIC_OF``) on a Powertools ``Metrics`` (none: counts nothing)."""

    def __init__(self, metrics: Any | None = None) -> None:
        self.metrics = metrics

    def __call__(self, telling: Telling) -> None:
        metric = METRIC_OF.get(telling.told)
        if metric is not None and self.metrics is not None:
            self.metrics.add_metric(name=metric.value, unit="Count", value=1)


class LogLines:
    """Logs each outcome's line (``LINE_OF``) with its structured keys."""

    def __call__(self, telling: Telling) -> None:
        line = LINE_OF.get(telling.told)
        if line is not None:
            level, text = line
            logger.log(level, text, dict(telling.facts), extra=dict(telling.log))  # every line formats a fact
