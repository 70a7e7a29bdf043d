"""Your own code against a served app (``outbox local serve``), in one call: ``served_event_store()`` is an
``EventStore`` wired to the served endpoint, its events table, its region and credentials, the app's catalog
and the served virtual clock, all read from the ``.local/topology.json`` the server wrote.

    from outbox.local.served import served_event_store

    store = served_event_store()  # in the app's folder, while `outbox local serve` runs there
    store.emit("shop.order_placed", {"order_id": "o-1", "amount": 42}, tenant="t-1", actor="checkout")

Imports boto3 alone (no moto): the ``[cli]`` or ``[testing]`` extras are enough.
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.error
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from outbox.catalog import Catalog
from outbox.local.clients import local_client
from outbox.log.store import EventStore
from outbox.outputs import LOCAL_TOPOLOGY, StackOutput, application_environment
from outbox.settings import load_catalog

__all__ = ["ABOUT_PATH", "ServedAppError", "ServedClock", "read_topology", "served_catalog", "served_event_store"]

ABOUT_PATH = "/_outbox"  # GET on the served endpoint: its virtual clock and folder, as JSON


class ServedAppError(Exception):
    """No served app to reach: the message says what to run."""


def read_topology(folder: Path | str = ".") -> dict[str, Any]:
    """What ``outbox local serve`` wrote in ``folder``: the endpoint, the stack's outputs, the catalog and the
    folder of its code."""
    path = Path(folder) / LOCAL_TOPOLOGY
    try:
        topology: dict[str, Any] = json.loads(path.read_text())
    except FileNotFoundError:
        raise ServedAppError(f"no {path}: run `outbox local serve` in your app's folder first") from None
    except ValueError as exc:
        raise ServedAppError(f"{path} is not JSON ({exc}): run `outbox local serve` again") from exc
    return topology


class ServedClock:
    """The served runtime's virtual clock, read from its endpoint (``GET /_outbox``): read again when the last
    reading is ``refresh`` seconds old, and moved on by this machine's elapsed time in between (a command that
    asks for now a thousand times asks the endpoint once). It never goes back."""

    def __init__(self, endpoint_url: str, *, refresh: float = 1.0) -> None:
        self.endpoint_url = endpoint_url
        self.url = endpoint_url.rstrip("/") + ABOUT_PATH
        self.refresh = refresh
        self._read: tuple[datetime, float] | None = None  # the served time read, and when (monotonic)
        self._last: datetime | None = None

    def __call__(self) -> datetime:
        elapsed = None if self._read is None else time.monotonic() - self._read[1]
        if self._read is None or elapsed is None or elapsed >= self.refresh:
            self._read = (self._fetch(), time.monotonic())
            elapsed = 0.0
        now = self._read[0] + timedelta(seconds=elapsed)
        self._last = now if self._last is None or now > self._last else self._last
        return self._last

    def _fetch(self) -> datetime:
        try:
            with urllib.request.urlopen(self.url, timeout=10) as answer:  # the loopback endpoint of the topology
                about = json.loads(answer.read())
            return datetime.fromisoformat(about["clock"]).astimezone(UTC)
        except urllib.error.URLError as exc:
            raise ServedAppError(
                f"cannot reach {self.endpoint_url} ({exc.reason}): start `outbox local serve` in the app's folder; a "
                "stopped one leaves its .local/topology.json behind"
            ) from exc
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ServedAppError(
                f"the served runtime at {self.url} did not say its clock ({type(exc).__name__}: {exc}): is `outbox "
                "local serve` running in this folder?"
            ) from exc

    def now_ms(self) -> datetime:
        now = self()
        return now.replace(microsecond=now.microsecond - now.microsecond % 1000)


def served_catalog(topology: dict[str, Any]) -> Catalog:
    """The served app's catalog, built as its functions build it: its code on the import path, in its
    application environment (a variable already set in this process wins)."""
    code, reference = topology.get("code"), topology.get("catalog")
    if not reference:
        raise ServedAppError("the served app's topology names no catalog: run `outbox local serve` again")
    if code and code not in sys.path:
        sys.path.insert(0, code)
    for name, value in application_environment(topology["outputs"]).items():
        os.environ.setdefault(name, value)
    return load_catalog(reference)


def served_event_store(folder: Path | str = ".", **options: Any) -> EventStore:
    """An ``EventStore`` of the app served from ``folder`` (``outbox local serve``): its events table at the
    served endpoint, in the runtime's region with its credentials, checking each event against the app's
    catalog, its events stamped with the served virtual clock. ``options`` go to ``EventStore``."""
    topology = read_topology(folder)
    endpoint = topology["endpoint_url"]
    options.setdefault("catalog", served_catalog(topology))
    options.setdefault("clock", ServedClock(endpoint).now_ms)
    return EventStore(
        topology["outputs"][StackOutput.EVENTS_TABLE], client=local_client("dynamodb", endpoint), **options
    )
