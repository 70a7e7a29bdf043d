"""Watchers of the local runtime's AWS parts (an SQS poller's ``PollWatcher``, a pipe's ``PipeWatcher``): each part
keeps a list of them and tells them in order; a watcher is on that list for the duration of a block."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TypeVar

W = TypeVar("W")


@contextmanager
def registered(watchers: list[W], watcher: W) -> Iterator[W]:
    """``watcher`` on ``watchers`` for the duration of the block (told after those already there)."""
    watchers.append(watcher)
    try:
        yield watcher
    finally:
        watchers.remove(watcher)
