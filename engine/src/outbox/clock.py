"""The engine's one source of time. In Lambda it is the system clock; the local runtime swaps in its
virtual clock so that leases, retention and backoff follow simulated time, with handlers unmodified."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

_now: Callable[[], datetime] = lambda: datetime.now(UTC)  # noqa: E731 - swapped by use()
_sleep: Callable[[float], None] = time.sleep


def now() -> datetime:
    return _now()


def now_ms() -> datetime:
    """Now, truncated to the millisecond precision that envelopes carry."""
    moment = _now()
    return moment.replace(microsecond=moment.microsecond - moment.microsecond % 1000)


def sleep(seconds: float) -> None:
    _sleep(seconds)


@contextmanager
def use(source: Callable[[], datetime], sleeper: Callable[[float], None]) -> Iterator[None]:
    """Route every engine time read and backoff sleep through ``source`` / ``sleeper`` for a while."""
    global _now, _sleep
    saved = (_now, _sleep)
    _now, _sleep = source, sleeper
    try:
        yield
    finally:
        _now, _sleep = saved
