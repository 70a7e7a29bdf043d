"""Lambda's durable executions, locally: the API the engine calls, in process, with the testing SDK running them.

moto has no durable functions. ``LocalDurableFunctions`` answers the calls the WORKFLOW lane makes of Lambda, sent
by a real boto3 ``lambda`` client (its request built and its answer parsed by botocore, as on AWS) through
botocore's ``before-send`` event instead of the network:

- ``Invoke`` with ``DurableExecutionName`` (asynchronous, of a qualified ARN) starts an execution, named as asked,
  with the payload as its input. A name already used with the same input answers that execution, as Lambda
  documents; with other input, or while one of that name runs when ``already_started_while_running`` is set,
  ``DurableExecutionAlreadyStartedException``.
- ``ListDurableExecutionsByFunction`` (by name), ``GetDurableExecution`` and ``StopDurableExecution``.

Each function's handler runs in the AWS Durable Execution Testing SDK (``DurableFunctionTestRunner``): its steps,
waits and callbacks as the SDK runs them, its end (SUCCEEDED, FAILED, TIMED_OUT, STOPPED) as the SDK reports it.
``snapshot`` and ``restore`` carry every execution over a restart of the runtime (``outbox.local.durable_state``:
what a served runtime saves with its tables and queues).
The faults of the lane are seams of this service, not patches of the engine: ``lose_answers`` (the start applied,
its answer lost), ``crash_after_start`` (the worker dies right after the answer arrives).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from botocore.awsrequest import AWSResponse

from outbox.local.clients import local_client
from outbox.local.durable_records import AnswerBody, DurableState, InvocationTimes, LocalExecution, SavedExecution
from outbox.local.fault_count import FaultCount, WorkerCrash

ENDPOINT = "https://lambda.local.invalid"
TERMINAL = frozenset({"SUCCEEDED", "FAILED", "TIMED_OUT", "STOPPED"})


@dataclass
class _Function:
    handler: Callable[..., Any]
    runner: Any  # DurableFunctionTestRunner
    execution_timeout: int


@dataclass
class LocalDurableFunctions:
    """The durable functions of a local pipeline, by qualified ARN (``register``), and a client of them
    (``client``). ``starts`` counts every execution started (not found again), by (function, name); ``changes``,
    every write of an execution's state (a start, a checkpoint, an end); ``start_requests``, every start asked for
    (found again by its name, or throttled, too); ``lookups``, every list of executions (a look-up by name, say);
    ``invocation_times``, how long each invocation of a handler ran."""

    already_started_while_running: bool = False
    # Started executions run to their first wait at ``settle_started`` (after each invocation), never beside the next.
    settle_starts: bool = False
    starts: dict[tuple[str, str], int] = field(default_factory=dict)
    changes: int = 0
    start_requests: int = 0
    lookups: int = 0
    invocation_times: InvocationTimes = field(default_factory=InvocationTimes)
    _functions: dict[str, _Function] = field(default_factory=dict)
    _executions: dict[str, LocalExecution] = field(default_factory=dict)
    _names: dict[tuple[str, str], str] = field(default_factory=dict)
    _lost_answers: FaultCount = field(default_factory=lambda: FaultCount(0))
    _crashes: FaultCount = field(default_factory=lambda: FaultCount(0))
    _throttles: FaultCount = field(default_factory=lambda: FaultCount(0))
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _answered: set[str] = field(default_factory=set)  # callbacks sent: their executions run on, whatever history says
    _unsettled: list[str] = field(default_factory=list)  # started since the last settle_started, with settle_starts

    # -- the functions -----------------------------------------------------------------------------------------

    def register(self, qualified_arn: str, handler: Callable[..., Any], *, execution_timeout: int = 300) -> None:
        """``handler`` (a ``@durable_execution`` function) as the function at ``qualified_arn``."""
        from aws_durable_execution_sdk_python_testing.runner import DurableFunctionTestRunner

        from outbox.local.durable_state import CountedStore

        function, _, qualifier = qualified_arn.rpartition(":")
        if not qualifier:
            raise ValueError(f"{qualified_arn!r} is not qualified: a durable start needs a version or an alias")
        runner = DurableFunctionTestRunner(
            handler=self.invocation_times.timed(handler),
            execution_timeout=execution_timeout,
            store=CountedStore(self._changed),
        )
        self._functions[function] = _Function(handler, runner, execution_timeout)

    def replace_handler(self, qualified_arn: str, handler: Callable[..., Any]) -> None:
        """``handler`` for the function at ``qualified_arn`` from its executions' next invocations on."""
        entry = self._functions[qualified_arn.rpartition(":")[0]]
        entry.handler = handler
        entry.runner._invoker.handler = self.invocation_times.timed(
            handler
        )  # what the testing SDK's in-process invoker calls

    def _changed(self) -> None:
        self.changes += 1

    def close(self) -> None:
        for function in self._functions.values():
            function.runner.close()

    def client(self, *, retries: int = 3) -> Any:
        """A boto3 ``lambda`` client answered by this service (``retries``: botocore's, on a lost answer)."""
        client = local_client("lambda", ENDPOINT, retries={"mode": "standard", "max_attempts": retries + 1})
        client.meta.events.register("before-send.lambda", self._answer)
        return client

    @contextmanager
    def serving_default_session(self) -> Iterator[None]:
        """Every ``boto3.client("lambda")`` made meanwhile (a handler's own, as on AWS) is answered here: the
        variable ``AWS_ENDPOINT_URL_LAMBDA`` names this service, and boto3's default session hooks it."""
        import os

        import boto3

        boto3.setup_default_session(region_name="us-east-1")
        events = boto3.DEFAULT_SESSION._session.get_component("event_emitter")
        events.register("before-send.lambda", self._answer)
        previous = os.environ.get("AWS_ENDPOINT_URL_LAMBDA")
        os.environ["AWS_ENDPOINT_URL_LAMBDA"] = ENDPOINT
        try:
            yield
        finally:
            events.unregister("before-send.lambda", self._answer)
            if previous is None:
                os.environ.pop("AWS_ENDPOINT_URL_LAMBDA", None)
            else:
                os.environ["AWS_ENDPOINT_URL_LAMBDA"] = previous

    # -- what a test or the runtime does with an execution ----------------------------------------------------

    def executions(self) -> list[LocalExecution]:
        return list(self._executions.values())

    def status(self, arn: str) -> dict[str, Any]:
        """``GetDurableExecution``'s answer for ``arn``."""
        execution = self._executions[arn]
        runner = self._functions[execution.function].runner
        details = runner._executor.get_execution_details(arn)
        answer: dict[str, Any] = {
            "DurableExecutionArn": arn,
            "DurableExecutionName": execution.name,
            "FunctionArn": f"{execution.function}:{execution.qualifier}",
            "Status": details.status,
            "StartTimestamp": execution.started_at.timestamp(),
        }
        if details.error is not None:
            answer["Error"] = {"ErrorType": details.error.type or "", "ErrorMessage": details.error.message or ""}
        if details.end_timestamp is not None:
            answer["EndTimestamp"] = details.end_timestamp.timestamp()
        return answer

    def wait(self, arn: str, timeout: int = 30) -> str:
        """Wait until the execution ends (the testing SDK skips its waits' time), or ``timeout`` passes; its status.
        Polled: the SDK's own wait can return while an execution a callback resumed still runs."""
        execution = self._executions[arn]
        runner = self._functions[execution.function].runner
        deadline = time.monotonic() + timeout
        while self.status(arn)["Status"] == "RUNNING" and (left := deadline - time.monotonic()) > 0:
            runner._executor.wait_until_complete(arn, min(0.05, left))
        return str(self.status(arn)["Status"])

    def waits_for_callback(self, arn: str) -> bool:
        """Whether the execution waits on a callback not answered yet (its history may show an answer a moment late)."""
        from aws_durable_execution_sdk_python_testing.runner import _get_callback_id_from_events

        runner = self._functions[self._executions[arn].function].runner
        try:
            waiting = _get_callback_id_from_events(runner._executor.get_execution_history(arn).events)
        except Exception:  # the history of one that just started may not read yet: not waiting on anything
            return False
        return waiting is not None and waiting not in self._answered

    def wait_for_running(self, timeout: float = 30.0, poll: float = 0.02, only: str | None = None) -> bool:
        """Wait until every execution (``only``: this one) that runs and waits on no callback has ended (the testing
        SDK skips its waits' time): True when one ended meanwhile. One still running at ``timeout`` is left running."""
        deadline = time.monotonic() + timeout
        ended = False
        for execution in [self._executions[only]] if only else self.executions():
            runner = self._functions[execution.function].runner
            running = False
            while self.status(execution.arn)["Status"] == "RUNNING" and not self.waits_for_callback(execution.arn):
                running = True
                if time.monotonic() >= deadline:
                    return ended
                runner._executor.wait_until_complete(execution.arn, poll)
            ended = ended or (running and self.status(execution.arn)["Status"] != "RUNNING")
        return ended

    def settle_started(self) -> None:
        """With ``settle_starts``: run each execution started since the last call up to its first wait (or its end)."""
        while self._unsettled:
            self.wait_for_running(only=self._unsettled.pop(0))

    def stop(self, arn: str) -> None:
        execution = self._executions[arn]
        self._functions[execution.function].runner._executor.stop_execution(arn)

    def time_out(self, arn: str) -> None:
        """Its timeout passes now: the execution ends TIMED_OUT whatever it waits on, as at its ``execution_timeout``
        (the testing SDK's timer counts real seconds: a caller on a virtual clock says when); one that ended stays."""
        from aws_durable_execution_sdk_python.lambda_service import ErrorObject

        function = self._functions[self._executions[arn].function]
        if self.status(arn)["Status"] in TERMINAL:
            return
        message = f"Execution timed out after {function.execution_timeout} seconds."
        function.runner._executor.on_timed_out(arn, ErrorObject.from_message(message))

    def wait_for_callback(self, arn: str, name: str | None = None, timeout: int = 30) -> str:
        """The callback id a running execution waits on (its ``create_callback``/``wait_for_callback``)."""
        runner = self._functions[self._executions[arn].function].runner
        return str(runner.wait_for_callback(arn, name=name, timeout=timeout))

    def send_callback_success(self, callback_id: str, result: bytes = b"") -> None:
        self._send_callback(callback_id, lambda runner: runner.send_callback_success(callback_id, result))

    def send_callback_failure(self, callback_id: str, error_type: str, message: str) -> None:
        """What ``SendDurableExecutionCallbackFailure`` sends: the execution's wait raises it as a ``CallbackError``."""
        from aws_durable_execution_sdk_python.lambda_service import ErrorObject

        error = ErrorObject(message=message, type=error_type, data=None, stack_trace=None)
        self._send_callback(callback_id, lambda runner: runner.send_callback_failure(callback_id, error))

    def _send_callback(self, callback_id: str, send: Callable[[Any], None]) -> None:
        self._answered.add(callback_id)
        for function in self._functions.values():
            try:
                return send(function.runner)
            except Exception:  # another function's callback: try the next runner
                continue
        raise KeyError(callback_id)

    # -- a restart ------------------------------------------------------------------------------------------------

    def snapshot(self) -> DurableState:
        """Every execution, ended or running, as a saved runtime keeps it (each read between two checkpoints)."""
        from outbox.local.durable_state import record

        with self._lock:
            executions, starts = list(self._executions.values()), dict(self.starts)
        return DurableState(
            [SavedExecution(e, record(self._functions[e.function].runner, e.arn)) for e in executions], starts
        )

    def restore(self, state: DurableState) -> None:
        """The executions of ``state`` (``snapshot``), of the functions registered here: an ended one answers as
        it ended, a running one carries on from its checkpoints (``outbox.local.durable_state.relaunch``)."""
        from outbox.local.durable_state import relaunch

        unknown = sorted({s.execution.function for s in state.executions} - set(self._functions))
        if unknown:
            raise ValueError(f"saved executions of durable functions this template has not: {', '.join(unknown)}")
        with self._lock:
            for saved in state.executions:
                execution = saved.execution
                relaunch(self._functions[execution.function].runner, saved.record)
                self._executions[execution.arn] = execution
                self._names[(execution.function, execution.name)] = execution.arn
            self.starts.update(state.starts)

    # -- faults ---------------------------------------------------------------------------------------------

    def lose_answers(self, count: FaultCount) -> AbstractContextManager[FaultCount]:
        """A start applies, and its answer is lost (a 500): botocore re-sends it, then the caller sees the error."""
        return self._fault("_lost_answers", count)

    def throttle_starts(self, count: FaultCount) -> AbstractContextManager[FaultCount]:
        """Lambda refuses a start before it applies (429 ``TooManyRequestsException``): botocore re-sends it, then
        the caller sees the throttle, and no execution of its name exists."""
        return self._fault("_throttles", count)

    def crash_after_start(self, count: FaultCount) -> AbstractContextManager[FaultCount]:
        """A start applies, and the worker that sent it dies before it reads the answer (``WorkerCrash``)."""
        return self._fault("_crashes", count)

    @contextmanager
    def _fault(self, attribute: str, count: FaultCount) -> Iterator[FaultCount]:
        previous = getattr(self, attribute)
        setattr(self, attribute, count)
        try:
            yield count
        finally:
            setattr(self, attribute, previous)

    # -- the API ------------------------------------------------------------------------------------------------

    def _answer(self, request: Any, **_: Any) -> AWSResponse:
        try:
            return self._route(request)
        except _NotFoundError as exc:
            return self._error(404, "ResourceNotFoundException", f"no durable execution {exc}")

    def _route(self, request: Any) -> AWSResponse:
        url = urlsplit(request.url)
        path = [unquote(part) for part in url.path.strip("/").split("/")]
        query = {name: values[0] for name, values in parse_qs(url.query).items()}
        headers = {
            name.lower(): value.decode() if isinstance(value, bytes) else str(value)
            for name, value in request.headers.items()
        }
        if request.method == "POST" and path[-1] == "invocations":
            return self._invoke(path[-2], query, headers, request.body or b"")
        if request.method == "GET" and path[-1] == "durable-executions":
            return self._list(path[-2], query)
        if path[1:2] == ["durable-executions"] and request.method == "GET":
            return self._json(200, self.status(self._known("/".join(path[2:]))))
        if path[1:2] == ["durable-executions"] and path[-1] == "stop":
            arn = self._known("/".join(path[2:-1]))
            self.stop(arn)
            return self._json(200, {"StopTimestamp": datetime.now().timestamp()})
        return self._error(400, "InvalidRequestContentException", f"not served locally: {request.method} {url.path}")

    def _known(self, arn: str) -> str:
        if arn not in self._executions:
            raise _NotFoundError(arn)
        return arn

    def _invoke(self, function_name: str, query: dict[str, str], headers: dict[str, str], body: Any) -> AWSResponse:
        payload = body if isinstance(body, bytes) else str(body).encode()
        name = headers.get("x-amz-durable-execution-name")
        qualifier = query.get("Qualifier") or function_name.rpartition(":")[2]
        function = function_name.rpartition(":")[0] if "Qualifier" not in query else function_name
        if name is None or function not in self._functions:
            return self._error(404, "ResourceNotFoundException", f"no durable function {function_name}")
        if headers.get("x-amz-invocation-type") != "Event":
            return self._error(400, "InvalidParameterValueException", "a durable start here is asynchronous")
        with self._lock:
            self.start_requests += 1  # whatever the answer: a hand-off may follow it, after a look-up by name
        if self._throttles.take(name):
            return self._error(429, "TooManyRequestsException", "Rate exceeded")
        with self._lock:
            existing = self._names.get((function, name))
            if existing is not None:
                execution = self._executions[existing]
                running = self.status(existing)["Status"] not in TERMINAL
                if execution.payload != payload or (self.already_started_while_running and running):
                    return self._error(
                        409, "DurableExecutionAlreadyStartedException", f"an execution named {name} exists"
                    )
                arn = existing
            else:
                arn = self._start(function, qualifier, name, payload)
        if self.settle_starts and arn not in self._unsettled:
            self._unsettled.append(arn)
        if self._crashes.take(name):
            raise WorkerCrash(f"the worker died right after starting {name}")
        if self._lost_answers.take(name):
            return self._error(500, "ServiceException", "the answer was lost")
        return AWSResponse(ENDPOINT, 202, {"X-Amz-Durable-Execution-Arn": arn}, AnswerBody(b""))

    def _start(self, function: str, qualifier: str, name: str, payload: bytes) -> str:
        entry = self._functions[function]
        arn: str = entry.runner.run_async(
            input=payload.decode(),
            execution_timeout=entry.execution_timeout,
            function_name=function.rpartition(":")[2],
            execution_name=name,
        )
        self._executions[arn] = LocalExecution(arn, name, function, qualifier, payload, datetime.now())
        self._names[(function, name)] = arn
        self.starts[(function, name)] = self.starts.get((function, name), 0) + 1
        return arn

    def _list(self, function_name: str, query: dict[str, str]) -> AWSResponse:
        function = function_name.rpartition(":")[0] if function_name.count(":") == 7 else function_name
        wanted = query.get("DurableExecutionName")
        self.lookups += 1  # a hand-off may follow it (a start whose answer was lost or throttled, found by name)
        found = [
            {
                key: self.status(e.arn)[key]
                for key in ("DurableExecutionArn", "DurableExecutionName", "FunctionArn", "Status", "StartTimestamp")
            }
            for e in self._executions.values()
            if e.function == function and (wanted is None or e.name == wanted)
        ]
        return self._json(200, {"DurableExecutions": found})

    @staticmethod
    def _json(status: int, body: dict[str, Any]) -> AWSResponse:
        return AWSResponse(
            ENDPOINT, status, {"Content-Type": "application/json"}, AnswerBody(json.dumps(body).encode())
        )

    @classmethod
    def _error(cls, status: int, code: str, message: str) -> AWSResponse:
        response = cls._json(status, {"Type": "User", "Message": message})
        response.headers["X-Amzn-ErrorType"] = code
        return response


class _NotFoundError(Exception):
    pass
