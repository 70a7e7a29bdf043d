"""What the local runtime knows of a durable execution, and what a saved runtime keeps of every one.

Plain records, apart from ``outbox.local.durable_functions`` (the service that starts and answers executions) and
``outbox.local.durable_state`` (the testing SDK's state of one): the runtime's saved state reads them without
loading the testing SDK.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from functools import wraps
from typing import Any


@dataclass
class LocalExecution:
    """One execution: its name, input and function, the testing SDK's ARN of it, and how it was started."""

    arn: str
    name: str
    function: str  # the unqualified function ARN
    qualifier: str
    payload: bytes
    started_at: datetime


@dataclass
class SavedExecution:
    """An execution as a saved runtime keeps it: how it was started, and its state in the testing SDK's store."""

    execution: LocalExecution
    record: dict[str, Any]  # outbox.local.durable_state.record


@dataclass
class DurableState:
    """Every execution of a service, and its ``starts``."""

    executions: list[SavedExecution]
    starts: dict[tuple[str, str], int]


@dataclass
class InvocationTimes:
    """The real seconds each invocation of an execution's handler ran, by the execution's ARN: what Lambda bills.

    The testing SDK stamps its own record of an invocation with the clock that skips durable waits, so its start
    and end of one invocation can span another execution's skipped wait of hours: that is no measure of time."""

    seconds: dict[str, list[float]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def timed(self, handler: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
        """``handler``, its every invocation timed (the testing SDK invokes on threads of its own)."""

        @wraps(handler)
        def timed(invocation: Any, context: Any) -> Any:
            started = time.perf_counter()
            try:
                return handler(invocation, context)
            finally:
                took = time.perf_counter() - started
                with self._lock:
                    self.seconds.setdefault(invocation.durable_execution_arn, []).append(took)

        return timed


class AnswerBody:
    """What botocore reads an answer's body from (the local durable service's answers)."""

    def __init__(self, body: bytes) -> None:
        self._body = body

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self._body
