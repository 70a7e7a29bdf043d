"""Lambda functions run in-process, unmodified: their handler module is imported the way Lambda does,
once per "container", with the function's environment from the template."""

from __future__ import annotations

import importlib.util
import io
import itertools
import os
import sys
import threading
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, nullcontext, redirect_stdout
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

from outbox.local import deadline
from outbox.local.clock import VirtualClock
from outbox.local.lambda_context import LocalLambdaContext

LambdaHandler = Callable[[dict[str, Any], Any], Any]
_container_ids = itertools.count(1)


# os.environ is the process's, and Lambda gives each function its own: one function's environment at a time.
# Durable executions run on the testing SDK's threads while the pipeline's functions run on the caller's; a
# variable removed while another thread reads os.environ (botocore lists it for proxies) is a KeyError there.
_ENVIRONMENT_LOCK = threading.RLock()


@contextmanager
def environment(variables: Mapping[str, str]) -> Iterator[None]:
    """os.environ as the function sees it, restored afterwards (Lambda gives each function its own); other
    threads' functions wait for it (their environments would mix)."""
    with _ENVIRONMENT_LOCK:
        saved = dict(os.environ)
        os.environ.update(variables)
        try:
            yield
        finally:
            for name in set(os.environ) - set(saved):
                del os.environ[name]
            os.environ.update(saved)


class FunctionLog(io.TextIOBase):
    """What the function prints (Powertools logs and EMF metrics), kept like CloudWatch Logs would be."""

    def __init__(self, max_lines: int = 20_000) -> None:
        self.lines: deque[str] = deque(maxlen=max_lines)
        self._partial = ""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        *complete, self._partial = (self._partial + text).split("\n")
        self.lines.extend(complete)
        return len(text)


_running_log: ContextVar[FunctionLog | None] = ContextVar("running_log", default=None)


class _FunctionStdout(io.TextIOBase):
    """``sys.stdout`` while a function runs: what is written goes to the log of the function running now.

    A logging handler keeps the stream it found when it was created, and Powertools configures a service's
    logger once per process: a later container (a cold start, the next test's runtime) reuses that handler. It
    keeps this stream, not the first container's log, so each container's lines reach its own function's log.
    """

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        log = _running_log.get()
        return (log if log is not None else sys.__stdout__ or io.StringIO()).write(text)


_FUNCTION_STDOUT = _FunctionStdout()


@contextmanager
def function_output(log: FunctionLog) -> Iterator[None]:
    """Print into ``log``: the function's stdout, as Lambda sends it to CloudWatch Logs."""
    token = _running_log.set(log)
    try:
        with redirect_stdout(_FUNCTION_STDOUT):
            yield
    finally:
        _running_log.reset(token)


@dataclass
class LocalFunction:
    """One function's container: the handler module is imported on the first invocation (a cold start)
    inside the function's environment, then reused, as long as the container lives."""

    name: str
    handler_path: str  # "package.module.function": in code_root, or importable (the engine's handlers)
    code_root: Path
    timeout: timedelta
    env: dict[str, str]
    clock: VirtualClock
    override: LambdaHandler | None = None
    invocations: int = 0
    log: FunctionLog = field(default_factory=FunctionLog, repr=False)
    _handler: LambdaHandler | None = field(default=None, repr=False)
    # Called after each invocation, its environment left (the local durable service runs what it started).
    after_invoke: list[Callable[[], None]] = field(default_factory=list, repr=False)
    _module: str | None = field(default=None, repr=False)  # the container's private name in sys.modules

    def invoke(self, event: dict[str, Any], context: LocalLambdaContext | None = None) -> Any:
        """Run the handler on ``event``. ``context``: the invocation's, when its caller (an event source
        mapping) made it and runs the invocation's deadline; else this call is the invocation, with its own."""
        self.invocations += 1
        # One deadline per invocation: a fault that moves it (``deadline.extend``) moves the one its caller
        # judges the invocation by, so the two never disagree on whether it timed out.
        try:
            return self._invoke(event, context)
        finally:
            for hook in self.after_invoke:
                hook()

    def _invoke(self, event: dict[str, Any], context: LocalLambdaContext | None) -> Any:
        own = context is None
        context = context or LocalLambdaContext(self.name, self.timeout, self.clock)
        # stdout goes to the function's log, as Lambda sends it to CloudWatch Logs; the module is first
        # imported inside this redirect, so loggers created at import write there too.
        deadline.install()
        with (
            environment(self.env),
            code_on_path(self.code_root),
            function_output(self.log),
            deadline.invocation(context.deadline, self.clock, self.name) if own else nullcontext(),
        ):
            try:
                response = self._resolve()(event, context)
                deadline.enforce()  # Lambda answers "Task timed out" past the deadline, whatever the code returned
            except deadline.InvocationTimedOut:
                # Lambda resets the execution environment after a timeout: the next invocation is a cold start,
                # and nothing the module kept in memory survives (docs/aws-behaviour.md R6.5).
                self.new_container()
                raise
            return response

    def new_container(self) -> None:
        """Drop the warm module: the next invocation is a cold start (after a deploy, say). The module leaves
        sys.modules too, or every container a long-lived process ever made would keep all it reached."""
        self._handler = None
        if self._module is not None:
            sys.modules.pop(self._module, None)
            self._module = None

    def resolve(self) -> LambdaHandler:
        """The handler, imported now if this container has not yet (the module keeps what it made at import)."""
        return self._resolve()

    def _resolve(self) -> LambdaHandler:
        if self.override is not None:
            return self.override
        if self._handler is None:
            self._handler = getattr(self._import(), self.handler_path.rsplit(".", 1)[1])
        return self._handler

    def _import(self) -> ModuleType:
        module_path, _ = self.handler_path.rsplit(".", 1)
        source = self._handler_source(module_path)
        # A private module name per container, so two runtimes (or a cold start) never share globals.
        unique = f"_lambda_{self.name}_{next(_container_ids)}"
        spec = importlib.util.spec_from_file_location(unique, source)
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[unique] = module
        self._module = unique
        spec.loader.exec_module(module)
        return module

    def _handler_source(self, module_path: str) -> Path:
        """Where Lambda would find the module: the function code first, then the layer. The layer is the
        engine this process imports (it is built from that package), so it is looked up on sys.path."""
        source = self.code_root / (module_path.replace(".", "/") + ".py")
        if source.exists():
            return source
        try:
            spec = importlib.util.find_spec(module_path)
        except ModuleNotFoundError:
            spec = None
        if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
            raise FileNotFoundError(
                f"{self.name}: handler module {module_path} is neither in the function code ({self.code_root}) "
                "nor importable here (is the engine installed in this environment?)"
            )
        return Path(spec.origin)


@contextmanager
def code_on_path(code_root: Path) -> Iterator[None]:
    """The function code at the front of sys.path while it runs, as Lambda puts /var/task there."""
    entry = str(code_root)
    if entry in sys.path:
        yield
        return
    sys.path.insert(0, entry)
    try:
        yield
    finally:
        if entry in sys.path:
            sys.path.remove(entry)
