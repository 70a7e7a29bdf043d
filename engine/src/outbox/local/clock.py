"""A virtual clock: visibility timeouts, leases and record ages pass instantly, and a seed gives one run."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta


class VirtualClock:
    """Time that moves only when told to. Callable, so it can be injected wherever ``now()`` is expected."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime(2026, 1, 1, tzinfo=UTC)
        self._lock = threading.Lock()

    def __call__(self) -> datetime:
        with self._lock:
            return self._now

    def now_ms(self) -> datetime:
        """The current time truncated to milliseconds (the envelope's precision)."""
        now = self()
        return now.replace(microsecond=now.microsecond - now.microsecond % 1000)

    def advance(self, delta: timedelta | float) -> datetime:
        step = delta if isinstance(delta, timedelta) else timedelta(seconds=delta)
        if step < timedelta(0):
            raise ValueError("time does not run backwards")
        with self._lock:
            self._now += step
            return self._now

    def sleep(self, seconds: float) -> None:
        """A ``time.sleep`` replacement: backoff in the engine costs no wall-clock time."""
        self.advance(seconds)
