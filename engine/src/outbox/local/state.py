"""A served runtime's state on disk: what ``outbox local serve`` keeps in the app's folder between runs.

What is kept is what AWS would keep while nothing runs: moto's tables (with their streams), queues (every
message, in flight or in a dead-letter queue, with its receive count and the time it becomes visible again),
the pipes' registrations (stopped or running), what the runtime's AWS fixes keep beside them (FIFO dedup
windows, ClientRequestTokens, message move tasks), each pipe's checkpoint in each shard, the virtual clock, and
the WORKFLOW lane's durable executions, ended or running, with their checkpoints (``outbox.local.durable_state``).
What is not kept is what a restart of AWS's pollers loses too: a pipe's batch under way is read again from its
checkpoint (the queue's dedup window absorbs a second send), a function's warm module is a cold start, and a
durable execution's invocation under way is invoked again from its last checkpoint, as Lambda does.

The file is a line of JSON (the ``Stamp``: the engine, moto and Python that wrote it, the stack, and the
digest of the resources it holds) and then the pickled state. A state whose stamp differs from the runtime's
is refused before anything is unpickled (``StateRefusedError``: its message says what to run), never half-loaded.
It is written to a temporary file beside it and renamed over it: a process killed while writing leaves the
previous state whole. Pickle runs code when it loads: the file is the app folder's own (mode 0600), as
trusted as the app's code, and never read from anywhere else.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import sys
import tempfile
import threading
from dataclasses import asdict, dataclass
from datetime import datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from outbox.local.durable_records import DurableState
from outbox.local.pipe_source import ShardPosition
from outbox.local.template import StackSpec
from outbox.local.workflows import durable_functions

__all__ = ["STATE_FILE", "SavedState", "ShardPosition", "Stamp", "StateRefusedError", "read_state", "write_state"]

# Where the state lives, relative to the app's folder.
STATE_FILE = Path(".local") / "state"
FORMAT = 2  # 2: with the durable executions


class StateRefusedError(Exception):
    """A saved state this runtime will not load: another engine, moto or Python, another stack or template, or
    a file that is not a state. The message says why and what to run."""


@dataclass(frozen=True)
class Stamp:
    """What a saved state must match to be loaded."""

    format: int
    engine: str
    moto: str
    python: str
    stack: str
    resources: str  # digest of the tables, queues, pipes, event source mappings and durable functions it holds

    @classmethod
    def of(cls, stack: StackSpec) -> Stamp:
        return cls(
            format=FORMAT,
            engine=_version("chained-outbox"),
            moto=_version("moto"),
            python=f"{sys.version_info.major}.{sys.version_info.minor}",
            stack=stack.name,
            resources=resources_digest(stack),
        )

    def differences(self, saved: Stamp) -> list[str]:
        """What differs, in words: ``saved`` against this (the running) one."""
        labels = {
            "format": "state format",
            "engine": "chained-outbox",
            "moto": "moto",
            "python": "Python",
            "stack": "stack",
            "resources": "template's resources (tables, queues, pipes, event source mappings, durable functions)",
        }
        mine, theirs = asdict(self), asdict(saved)
        return [
            f"{label} {theirs[name]} there, {mine[name]} here" if name != "resources" else f"the {label} changed"
            for name, label in labels.items()
            if mine[name] != theirs[name]
        ]


def resources_digest(stack: StackSpec) -> str:
    """The digest of what a state holds the contents of. A function's code or environment is not in it: a code
    change keeps the state; a new table, queue, pipe, mapping or durable function (a new lane), or a changed one,
    does not. A durable function is where its executions live: its logical id and its alias."""
    described = {
        "tables": {k: asdict(v) for k, v in sorted(stack.tables.items())},
        "queues": {k: asdict(v) for k, v in sorted(stack.queues.items())},
        "pipes": {k: asdict(v) for k, v in sorted(stack.pipes.items())},
        "mappings": {k: asdict(v) for k, v in sorted(stack.event_source_mappings.items())},
        "durable": sorted((spec.function, spec.alias_id, spec.alias) for spec in durable_functions(stack)),
    }
    return hashlib.sha256(json.dumps(described, sort_keys=True, default=str).encode()).hexdigest()[:16]


@dataclass
class SavedState:
    """What a snapshot holds, unpickled: the virtual clock, moto's region backends by service, what the fixes
    keep beside them, the pipes' positions by pipe (logical id) and shard, and the durable executions (None when
    the template has no durable function)."""

    clock: datetime
    backends: dict[str, Any]
    fixes: dict[str, Any]
    pipes: dict[str, dict[str, ShardPosition]]
    workflows: DurableState | None = None


class _Pickler(pickle.Pickler):
    """moto's queues hold a ``threading.Condition`` (with its lock): a new one is made when loaded."""

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, threading.Condition):
            return threading.Condition, ()
        if isinstance(obj, type(threading.RLock())):
            return threading.RLock, ()
        if isinstance(obj, type(threading.Lock())):
            return threading.Lock, ()
        return NotImplemented


def write_state(path: Path, stamp: Stamp, state: SavedState) -> int:
    """Write atomically: into a temporary file beside ``path``, flushed to disk, then renamed over it. Returns
    the size in bytes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(descriptor, "wb") as file:
            file.write(json.dumps(asdict(stamp), sort_keys=True).encode() + b"\n")
            _Pickler(file, protocol=pickle.HIGHEST_PROTOCOL).dump(state)
            file.flush()
            os.fsync(file.fileno())
            size = file.tell()
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return size


def read_stamp(path: Path) -> Stamp:
    """The stamp of the state at ``path``, read without unpickling anything."""
    try:
        with path.open("rb") as file:
            first = file.readline(4096)
        fields = json.loads(first)
        return Stamp(**fields)
    except (ValueError, TypeError) as exc:
        raise StateRefusedError(
            f"{path} is not a state this engine wrote ({exc}): run `outbox local serve --fresh` to start over "
            "(it replaces it)"
        ) from exc


def read_state(path: Path, expected: Stamp) -> SavedState:
    """The state at ``path``, when its stamp is ``expected``; else ``StateRefusedError`` with what differs and what
    to run, before anything is unpickled."""
    stamp = read_stamp(path)
    differences = expected.differences(stamp)
    if differences:
        raise StateRefusedError(
            f"the state in {path} was saved by another setup ({'; '.join(differences)}): it is not loaded, and "
            "not touched. Run `outbox local serve --fresh` to start over (it replaces the state), or serve it "
            "with the setup that saved it"
        )
    with path.open("rb") as file:
        file.readline(4096)
        try:
            state = pickle.load(file)  # the app folder's own file (write_state)
        except Exception as exc:
            raise StateRefusedError(
                f"the state in {path} cannot be read ({type(exc).__name__}: {exc}): run `outbox local serve "
                "--fresh` to start over"
            ) from exc
    if not isinstance(state, SavedState):
        raise StateRefusedError(f"{path} holds no saved state: run `outbox local serve --fresh` to start over")
    return state


def _version(distribution: str) -> str:
    try:
        return version(distribution)
    except PackageNotFoundError:
        return "unknown"
