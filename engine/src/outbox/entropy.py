"""Where the engine draws what is random: event ids, claim owners' tokens, repair messages' deduplication ids and
each store's backoff jitter.

Each is drawn through ``current()`` at the moment it is used, never bound when a module is imported or an object
made, so a whole run (the functions the local runtime builds from the template included) can be made repeatable by
giving it sources of its own with ``using``: the simulator seeds every one from its run's seed. Everywhere else
they are the real ones: ULIDs, uuid4 and an unseeded ``random.Random``.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from outbox import keys

__all__ = ["REAL", "Sources", "current", "using"]


@dataclass(frozen=True)
class Sources:
    """One source per kind of draw; each call is one draw."""

    event_id: Callable[[], str]  # a new event id (a ULID's text)
    owner_token: Callable[[], str]  # the token a claim's owner fences its writes with
    repair_token: Callable[[], str]  # what makes each repair message's deduplication id new
    backoff_rng: Callable[[], random.Random]  # the jitter source of one EventStore's backoffs


def _uuid_hex() -> str:
    return uuid.uuid4().hex


REAL = Sources(
    event_id=keys.new_event_id,
    owner_token=_uuid_hex,
    repair_token=lambda: _uuid_hex()[:12],
    backoff_rng=random.Random,
)

_current = REAL


def current() -> Sources:
    """The sources in use now (``REAL`` unless a ``using`` block is open)."""
    return _current


@contextmanager
def using(sources: Sources) -> Iterator[Sources]:
    """Draw from ``sources`` inside the block (process-wide: every thread's draws), and from what was in use before
    it afterwards."""
    global _current
    before, _current = _current, sources
    try:
        yield sources
    finally:
        _current = before
