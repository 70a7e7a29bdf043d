"""What an invocation's time allows: how long a lease lasts, and whether a run may start with what is left.

Lambda stops an invocation at its timeout, wherever it is; a run cut off there spends an attempt and brings the
whole batch back. So a pair starts only while its subscription's slowest run seen in this container fits in
what is left, and optional work (an ordered event run in place after its predecessor) only with room to spare.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta

from outbox.delivery.path import RemainingMs
from outbox.subscriptions import Subscription

# An event deferred behind one that just completed runs in the same invocation, once the batch's own records are
# done, while at least this much of it is left, and at least twice the slowest run of its subscription this
# container has seen (else it goes back to the queue): sending it back puts it behind the tenant's other
# messages, which would then be deferred behind it in turn, one queue round trip each.
WAKE_HERE_MIN_REMAINING_MS = 10_000
# A pair starts only while its subscription's slowest run seen in this container, and this much more, is left of
# the invocation: one that cannot finish would be stopped at the deadline, spending an attempt (and bringing
# back the whole batch) for what the records before it took. It comes back instead, its attempt unspent.
RUN_MARGIN_MS = 1_000


@dataclass(frozen=True)
class LeasePolicy:
    """A lease lasts as long as the invocation can (so a live handler is never taken over), plus a margin
    for clock skew; the floor covers a remaining time that reads 0 right at the deadline."""

    floor: timedelta = timedelta(seconds=5)
    margin: timedelta = timedelta(seconds=5)

    def lease_for(self, remaining_ms: int) -> timedelta:
        return max(timedelta(milliseconds=remaining_ms), self.floor) + self.margin


class RunTimes:
    """The longest run of each subscription this container has seen, and what the invocation under way had."""

    def __init__(self) -> None:
        self._slowest_run_ms: dict[str, int] = {}
        # What the invocation under way had when it started (None outside one): a pair that needs more than a
        # whole invocation is started anyway (holding it back would hold it for ever).
        self._invocation_ms: int | None = None

    @contextmanager
    def invocation(self, remaining_ms: RemainingMs) -> Iterator[None]:
        """The span of one invocation; a second worker's invocation nested in a handler restores the outer."""
        outer, self._invocation_ms = self._invocation_ms, remaining_ms()
        try:
            yield
        finally:
            self._invocation_ms = outer

    def invocation_budget_ms(self) -> int | None:
        """What the invocation under way had when it started (None outside one)."""
        return self._invocation_ms

    def has_time_for(self, subscription: Subscription, remaining_ms: RemainingMs, *, in_place: bool = False) -> bool:
        """Whether a run of ``subscription`` fits in what is left of the invocation: its slowest run seen in this
        container and ``RUN_MARGIN_MS``; ``in_place`` (optional work, done with the batch's own records done),
        with room to spare: at least ``WAKE_HERE_MIN_REMAINING_MS`` and twice its slowest run. A run cut off by
        the deadline would spend an attempt, and fail the whole batch and bring every message of it back."""
        slowest = self._slowest_run_ms.get(subscription.name, 0)
        if in_place:
            return remaining_ms() >= max(WAKE_HERE_MIN_REMAINING_MS, 2 * slowest)
        needed = slowest + RUN_MARGIN_MS
        if self._invocation_ms is None or needed > self._invocation_ms:
            return True  # no invocation would have more time for it: it is its own deadline's problem
        return remaining_ms() >= needed

    def note_run(self, subscription: Subscription, started_ms: int, ended_ms: int) -> None:
        """Remember how long a run took; a run that reached the deadline (nothing left when it ended) measured
        nothing but the time there was."""
        took_ms = started_ms - ended_ms
        if ended_ms > 0 and took_ms > self._slowest_run_ms.get(subscription.name, 0):
            self._slowest_run_ms[subscription.name] = took_ms
