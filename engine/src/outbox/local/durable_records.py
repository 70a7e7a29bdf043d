"""What the local runtime knows of a durable execution, and what a saved runtime keeps of every one.

Plain records, apart from ``outbox.local.durable_functions`` (the service that starts and answers executions) and
``outbox.local.durable_state`` (the testing SDK's state of one): the runtime's saved state reads them without
loading the testing SDK.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
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
