"""``outbox local serve``: your CDK app on the local runtime, served, with its consumers running.

It synthesizes the app (the command of your ``cdk.json``, run with ``CDK_OUTDIR`` and the engine layer's pip
build skipped), boots the stack on moto served at ``127.0.0.1:PORT``, checks it as the test fixture does (the
catalog's contract, the durable consumer's start), writes ``.local/topology.json`` (the endpoint, the stack's
outputs, the catalog and where its code is) for ``outbox --local``, and then keeps the pipeline moving: every
``interval`` its pipes and consumers run until nothing moves, so what the CLI's replay, reconcile and redrive
send is processed, and ``outbox --local status`` afterwards tells the truth.

The state (tables, queues with their messages, the pipes' checkpoints, the virtual clock, the durable executions:
``outbox.local.state``) is kept in ``.local/state`` and picked up by the next start (``fresh``: start over). It is
written after every round that changed something and when serving stops, atomically. The app's folder is watched:
a change to its code is synthesized again and served by the same runtime, its state kept; a change that needs new
tables, queues, pipes, mappings or durable functions is said, with what to run, and the running code stays.
"""

from __future__ import annotations

import fcntl
import fnmatch
import json
import logging
import os
import shlex
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from outbox.local import saving, setup
from outbox.local.clock import VirtualClock
from outbox.local.reload import reload_code
from outbox.local.runtime import LocalRuntime
from outbox.local.served import ABOUT_PATH
from outbox.local.state import STATE_FILE, Stamp, StateRefusedError, read_state, resources_digest
from outbox.local.template import load_manifest_stacks, load_stack
from outbox.local.terminal import terminal_width, wrapped
from outbox.outputs import LOCAL_TOPOLOGY

__all__ = ["LOCAL_TOPOLOGY", "STATE_FILE", "ServeError", "Served", "StateRefusedError", "serve", "synthesize_app"]

logger = logging.getLogger(__name__)

LOCK_FILE = Path(".local") / "serve.lock"
# While serving, the state is written at most this often (seconds); always when serving stops. A serve killed
# outright (SIGKILL) comes back as it was at its last save: the tables, queues and checkpoints together.
SAVE_EVERY = 5.0
# Never watched: the runtime's own output, dependencies, caches, and every hidden folder (.venv, .git, .local).
NEVER_WATCHED = frozenset({"cdk.out", "node_modules", "__pycache__"})


class ServeError(Exception):
    """The app could not be synthesized or booted: the message says what to fix."""


class PortTakenError(ServeError):
    """The port is in use: by another served runtime (``folder`` says where it serves from) or another program."""

    def __init__(self, port: int, folder: str | None) -> None:
        who = f"another `outbox local serve`, of {folder}" if folder else "another program"
        super().__init__(f"127.0.0.1:{port} is in use by {who}: stop it, or serve on another port with --port PORT")
        self.port = port
        self.folder = folder


def synthesize_app(app: str, outdir: Path, context: Mapping[str, str]) -> Path:
    """Run the app's command (``python app.py``) as the CDK CLI would: the assembly goes to ``outdir``."""
    env = {
        **os.environ,
        "CDK_OUTDIR": str(outdir),
        # The engine layer's pip build is for Lambda's platform: the local runtime imports this process's engine.
        "CDK_CONTEXT_JSON": json.dumps({**context, "aws:cdk:bundling-stacks": []}),
    }
    result = subprocess.run(shlex.split(app), env=env, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise ServeError(f"{app} failed (exit {result.returncode}):\n{result.stderr[-4000:]}")
    return outdir


@dataclass
class Served:
    """A booted runtime and what keeps it moving: ``settle()`` runs the pipeline until nothing moves (from the
    serving loop only: one thread steps the runtime; the CLI's requests reach moto's server, not the runtime).
    ``resumed``: whether it started from a saved state; ``state``: where the state is kept."""

    runtime: LocalRuntime
    state: Path
    resumed: bool = False
    _saved_changes: int = field(default=-1, repr=False)
    _dirty: bool = field(default=True, repr=False)
    _saved_at: float = field(default=float("-inf"), repr=False)

    def settle(self, stop: threading.Event | None = None) -> int:
        def interrupted(_step: int) -> None:
            if stop is not None and stop.is_set():
                raise _StoppedError

        return self.runtime.run_until_idle(on_step=interrupted)

    def catch_up(self) -> None:
        catch_up(self.runtime.clock)

    def save(self, *, changed: bool = True, every: float = 0.0) -> int | None:
        """Write the state when something changed since the last save (a round that moved something, or a
        request from outside) and the last save is ``every`` seconds old or more (a big state takes a while to
        write, and requests wait meanwhile); the bytes written, or None when it was not written."""
        outside = saving.outside_changes(self.runtime)
        self._dirty = self._dirty or changed or outside != self._saved_changes
        self._saved_changes = outside
        if not self._dirty or time.monotonic() - self._saved_at < every:
            return None
        size = saving.save_state(self.runtime, self.state)
        self._dirty, self._saved_at = False, time.monotonic()
        return size


def catch_up(clock: VirtualClock) -> None:
    """The virtual clock never lags this machine's: while nothing waits it moves with it (and over the time
    serving was stopped, as AWS's time passes while nothing polls). It runs ahead where the pipeline skipped
    a wait (a visibility timeout, a backoff), which ``outbox --local`` reads from ``GET /_outbox`` and says."""
    behind = datetime.now(UTC) - clock()
    if behind.total_seconds() > 0:
        clock.advance(behind)


class _StoppedError(Exception):
    """Serving was asked to stop (Ctrl-C, SIGTERM) between two steps of the pipeline."""


def serve(
    app: str,
    port: int,
    *,
    stack: str | None = None,
    context: Mapping[str, str] | None = None,
    interval: float = 1.0,
    workdir: Path | None = None,
    ready: Callable[[Served], None] | None = None,
    stop: threading.Event | None = None,
    fresh: bool = False,
    watch: bool = True,
    say: Callable[[str], None] | None = None,
) -> None:
    """Synthesize, boot (from the saved state, unless ``fresh``) and serve until ``stop`` is set (Ctrl-C or
    SIGTERM, from the command line); the state is saved as it changes and when serving stops. ``say``: where the
    lines for the person go (code reloads, changes that need a new template)."""
    # No access log of every request on the terminal, nor botocore's notes on each client it makes.
    for noisy in ("werkzeug", "botocore", "boto3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    say = say or _stderr
    workdir = (workdir or Path.cwd()).resolve()
    check_port(port)
    stop = stop or threading.Event()
    with _folder_lock(workdir / LOCK_FILE), _stop_on_signals(stop):
        assembly = synthesize_app(app, workdir / ".local" / "cdk.out", context or {})
        spec = load_stack(assembly, stack or _only_stack(assembly))
        state = workdir / STATE_FILE
        for left in state.parent.glob(f".{state.name}.*.tmp"):  # what a serve killed while saving left behind
            left.unlink(missing_ok=True)
        saved = None if fresh or not state.exists() else read_state(state, Stamp.of(spec))
        runtime = LocalRuntime(
            spec,
            port=port,
            clock=VirtualClock(saved.clock if saved else datetime.now(UTC).replace(microsecond=0)),
            function_log_level="ERROR",
            saved=saved,
            about={"folder": str(workdir), "pid": os.getpid()},
        )
        with runtime:
            setup.check_setup(runtime)
            write_topology(workdir / LOCAL_TOPOLOGY, runtime, setup.durable_consumer(runtime))
            served = Served(runtime, state, resumed=saved is not None)
            served.save()
            if ready is not None:
                ready(served)
            watcher = CodeWatcher(workdir) if watch else None
            try:
                while not stop.wait(interval):
                    served.catch_up()
                    try:
                        moved = served.settle(stop) > 1
                    except _StoppedError:
                        break
                    except Exception:  # a failing invocation is the pipeline's business (its DLQ); keep serving
                        logger.exception("the served pipeline could not settle")
                        moved = True
                    served.save(changed=moved, every=SAVE_EVERY)
                    if watcher is not None and watcher.changed():
                        _reload(served, app, workdir, context or {}, say)
            finally:
                served.save()


def check_port(port: int) -> None:
    """``PortTakenError`` when 127.0.0.1:``port`` cannot be served, saying by whom when it is a served runtime."""
    if port == 0:
        return
    with socket.socket() as probe:
        # As the server binds: a port whose last connections wait out TIME_WAIT is free, a listening one is not.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
            return
        except OSError:
            pass
    raise PortTakenError(port, _served_folder(port))


def _served_folder(port: int) -> str | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{ABOUT_PATH}", timeout=2) as answer:
            folder = json.loads(answer.read()).get("folder")
    except (OSError, ValueError, AttributeError):
        return None
    return folder if isinstance(folder, str) else None


@contextmanager
def _folder_lock(path: Path) -> Iterator[None]:
    """One served runtime per folder: two would write one state over the other's."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a+") as file:
        try:
            fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            file.seek(0)
            holder = file.read().strip() or "another process"
            raise ServeError(
                f"another `outbox local serve` ({holder}) serves this folder ({path.parent.parent}) and keeps its "
                "state: stop it first, or serve from another folder"
            ) from None
        file.seek(0)
        file.truncate()
        file.write(f"pid {os.getpid()}\n")
        file.flush()
        try:
            yield
        finally:
            fcntl.flock(file, fcntl.LOCK_UN)


@contextmanager
def _stop_on_signals(stop: threading.Event) -> Iterator[None]:
    """Ctrl-C and SIGTERM stop serving between two steps, and the state is saved; a second Ctrl-C stops at once.
    Only from the main thread (where Python takes signals); elsewhere ``stop`` is the caller's."""
    import signal

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def asked(signum: int, _frame: Any) -> None:
        if stop.is_set() and signum == signal.SIGINT:
            raise KeyboardInterrupt
        stop.set()

    previous = {sig: signal.signal(sig, asked) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


class CodeWatcher:
    """The app's folder, as ``cdk watch`` sees it (``watch`` of ``cdk.json``: ``include`` and ``exclude``
    globs; else everything), less hidden folders, ``cdk.out``, ``node_modules`` and caches. ``changed()`` is
    True once a change has stood still for one look (an editor's save is several writes)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.include, self.exclude = _watch_globs(folder / "cdk.json")
        self._seen = self._fingerprint()
        self._pending: frozenset[tuple[str, int, int]] | None = None

    def changed(self) -> bool:
        now = self._fingerprint()
        if now == self._seen:
            self._pending = None
            return False
        if now != self._pending:  # still changing: look again next round
            self._pending = now
            return False
        self._seen, self._pending = now, None
        return True

    def _fingerprint(self) -> frozenset[tuple[str, int, int]]:
        found = set()
        for root, folders, files in os.walk(self.folder):
            folders[:] = [f for f in folders if not f.startswith(".") and f not in NEVER_WATCHED]
            for name in files:
                path = Path(root, name)
                relative = path.relative_to(self.folder).as_posix()
                if self._watched(relative):
                    try:
                        status = path.stat()
                    except OSError:
                        continue
                    found.add((relative, status.st_mtime_ns, status.st_size))
        return frozenset(found)

    def _watched(self, relative: str) -> bool:
        parts = relative.split("/")
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        if any(fnmatch.fnmatch(prefix, glob) for glob in self.exclude for prefix in prefixes):
            return False
        return any(fnmatch.fnmatch(relative, glob) for glob in self.include)


def _watch_globs(cdk_json: Path) -> tuple[list[str], list[str]]:
    try:
        watch = json.loads(cdk_json.read_text()).get("watch", {})
    except (OSError, ValueError, AttributeError):
        watch = {}
    include = watch.get("include", ["**"]) if isinstance(watch, dict) else ["**"]
    exclude = watch.get("exclude", []) if isinstance(watch, dict) else []
    return _globs(include) or ["**"], _globs(exclude)


def _globs(value: Any) -> list[str]:
    return [value] if isinstance(value, str) else [v for v in value if isinstance(v, str)]


def _reload(served: Served, app: str, workdir: Path, context: Mapping[str, str], say: Callable[[str], None]) -> None:
    """Synthesize the changed app; serve its code in the running runtime, state kept, when its tables, queues,
    pipes and mappings are the same; else say what to run, and keep the running code."""
    runtime = served.runtime
    try:
        assembly = synthesize_app(app, workdir / ".local" / "cdk.out", context)
        changed = load_stack(assembly, runtime.stack.name)
    except Exception as exc:
        say(f"code changed, but the app did not synthesize; still serving the code before it: {exc}")
        return
    if resources_digest(changed) != resources_digest(runtime.stack):
        say(
            "code changed, and with it the template's tables, queues, pipes, event source mappings or durable "
            "functions (a new lane, say): the saved state cannot follow. Still serving the code before it; to serve "
            "the change, stop (Ctrl-C) and run `outbox local serve --fresh` (it starts from empty tables and queues)"
        )
        return
    previous = runtime.stack
    reload_code(runtime, changed)
    try:
        setup.check_setup(runtime)
    except setup.PipelineSetupError as exc:
        reload_code(runtime, previous)
        say(f"code changed, but it cannot run: {exc}. Still serving the code before it")
        return
    write_topology(workdir / LOCAL_TOPOLOGY, runtime, setup.durable_consumer(runtime))
    say("code changed: reloaded (the next invocation of each function is a cold start); state kept")


def _stderr(line: str) -> None:
    stream: TextIO = sys.stderr
    print(wrapped(line, terminal_width(stream)), file=stream, flush=True)


def write_topology(path: Path, runtime: LocalRuntime, consumer: Any) -> None:
    """What ``outbox --local`` and ``served_event_store`` read: written whole (a reload rewrites it while the
    CLI may be reading it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    topology = {
        "endpoint_url": runtime.endpoint_url,
        "outputs": runtime.outputs(),
        "catalog": consumer.env.get("SUBSCRIPTIONS"),
        "code": str(consumer.code_root),
    }
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(json.dumps(topology, indent=2) + "\n")
    os.replace(temporary, path)


def _only_stack(assembly: Path) -> str:
    stacks = load_manifest_stacks(assembly)
    if len(stacks) != 1:
        raise ServeError(f"the app has {len(stacks)} stacks ({', '.join(stacks) or 'none'}): name one with --stack")
    return stacks[0]
