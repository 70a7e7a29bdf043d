"""Lambda's deadline, applied as Lambda applies it: at its timeout an invocation is stopped where it is.

On AWS nothing an invocation does after its timeout takes effect: the process is frozen, its requests are
never sent, and the event source mapping treats the batch as failed (its messages come back after their
visibility timeout). The local runtime runs functions in process on a virtual clock, so it applies the same
rule at the one place every effect leaves a function: an AWS request. While an invocation runs
(``invocation``), every request its code makes (any boto3 client, created before or during it) first checks
the virtual clock; at or past the deadline it raises ``InvocationTimedOut``, a ``BaseException`` that no
handler's ``except Exception`` swallows, and the request is never sent. A fake external service checks the
same way (``enforce``).

Faults that stand for a worker outliving its lease (clock skew, a visibility timeout configured shorter than
the function) move its deadline along with the clock (``extend``): the worker is still alive, and it is the
others who see its lease as expired.

Example
-------
>>> from datetime import timedelta
>>> from outbox.local.clock import VirtualClock
>>> clock = VirtualClock()
>>> with invocation(clock() + timedelta(seconds=60), clock, "consumer"):
...     clock.advance(61)
...     enforce()  # doctest: +IGNORE_EXCEPTION_DETAIL
Traceback (most recent call last):
InvocationTimedOut: consumer timed out ...
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

__all__ = ["InvocationTimedOut", "enforce", "extend", "install", "invocation", "remaining"]


class InvocationTimedOut(BaseException):
    """Lambda stopped the invocation at its timeout: not an Exception, so no handler code catches it, and the
    event source mapping fails the whole batch."""


@dataclass
class _Running:
    deadline: datetime
    clock: Callable[[], datetime]
    function_name: str


# The invocation under way in this thread of execution (a nested one, such as a second worker's poll inside a
# handler, stacks on it and restores it when it ends).
_current: ContextVar[_Running | None] = ContextVar("outbox_local_invocation", default=None)


@contextmanager
def invocation(deadline: datetime, clock: Callable[[], datetime], function_name: str) -> Iterator[None]:
    """Everything run inside is part of an invocation that Lambda stops at ``deadline``."""
    token = _current.set(_Running(deadline, clock, function_name))
    try:
        yield
    finally:
        _current.reset(token)


@contextmanager
def outside() -> Iterator[None]:
    """The Lambda service's own requests (an event source mapping's receives and deletes): no invocation's
    deadline applies to them, even when the runtime runs a second worker inside a first one's handler."""
    token = _current.set(None)
    try:
        yield
    finally:
        _current.reset(token)


def enforce() -> None:
    """Raise ``InvocationTimedOut`` if the invocation under way has reached its deadline (no-op outside one)."""
    running = _current.get()
    if running is not None and running.clock() >= running.deadline:
        raise InvocationTimedOut(
            f"{running.function_name} timed out: its deadline {running.deadline.isoformat()} has passed, and "
            "Lambda stops an invocation there (nothing it does afterwards takes effect)"
        )


def remaining() -> timedelta | None:
    """The time left to the invocation under way (None outside one)."""
    running = _current.get()
    return None if running is None else running.deadline - running.clock()


def extend(delta: timedelta) -> None:
    """Move the deadline of the invocation under way by ``delta``: a fault that lets virtual time jump while
    a worker is alive (skew, a misconfigured visibility timeout) keeps that worker alive through the jump."""
    running = _current.get()
    if running is not None:
        running.deadline += delta


_install_lock = threading.Lock()
_installed = False


def install() -> None:
    """Check the deadline before every AWS request any botocore client sends (idempotent; outside an
    invocation the check does nothing, so it stays in place for the life of the process)."""
    global _installed
    from botocore.endpoint import Endpoint

    with _install_lock:
        if _installed:
            return
        original = Endpoint.make_request

        def make_request(endpoint: Any, operation_model: Any, request_dict: Any) -> Any:
            enforce()
            return original(endpoint, operation_model, request_dict)

        Endpoint.make_request = make_request
        _installed = True
