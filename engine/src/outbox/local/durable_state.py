"""A durable execution of the local durable service out and in: what a saved runtime keeps of the WORKFLOW lane.

What Lambda keeps of an execution is its checkpoints: a restart of its workers loses a handler invocation under way,
never an execution. So does this. ``record`` reads an execution as the AWS Durable Execution Testing SDK stores it
(its operations, checkpoints and end: ``Execution.to_json_dict``) on the execution's own lane, between two of its
checkpoints; ``relaunch`` puts it into a new runner's store and carries on as Lambda would after losing a worker:
an execution that ended stays ended (its status answers, the settle pass settles its pair); one still running is
invoked again, replaying its checkpoints (a completed step is not run again; a step under way at the save runs
again, as the SDK's at-least-once steps do after a lost invocation), with what was left of its execution timeout
and of each waiting callback's timeout (a heartbeat timeout starts a whole window at the restart).

The testing SDK has no restart of its own: these reach into its executor (its store, scheduler, completion events
and timers), the same objects its ``DurableFunctionTestRunner`` wires together. Imported only where the service
runs executions (the ``workflow`` extra).
"""

from __future__ import annotations

import dataclasses
import math
from datetime import datetime
from typing import Any

from aws_durable_execution_sdk_python.lambda_service import ErrorObject, OperationStatus, OperationType
from aws_durable_execution_sdk_python_testing.execution import Execution
from aws_durable_execution_sdk_python_testing.stores.memory import InMemoryExecutionStore
from aws_durable_execution_sdk_python_testing.worker.checkpoint_tasks import CallableTask

# How long a save waits for an execution's lane (a checkpoint under way) before it gives up.
LANE_WAIT = 30.0


class CountedStore(InMemoryExecutionStore):
    """The testing SDK's in-memory store, telling ``changed`` of every write (a start, a checkpoint, an end): a
    served runtime saves its state when something changed."""

    def __init__(self, changed: Any) -> None:
        super().__init__()
        self._changed = changed

    def save(self, execution: Execution) -> None:
        super().save(execution)
        self._changed()

    def update(self, execution: Execution) -> None:
        super().update(execution)
        self._changed()


def record(runner: Any, arn: str) -> dict[str, Any]:
    """The execution ``arn`` of ``runner`` as its store holds it, read whole: on its lane while it runs (no
    checkpoint is half applied), at once when it has ended (nothing changes it then)."""
    executor = runner._executor
    execution: Execution = runner._store.load(arn)
    if execution.is_complete:
        return execution.to_json_dict()
    future = executor._registry.submit(arn, CallableTask(lambda: runner._store.load(arn).to_json_dict()))
    result: dict[str, Any] = future.result(timeout=LANE_WAIT)
    return result


def relaunch(runner: Any, saved: dict[str, Any]) -> str:
    """Put the execution ``saved`` (``record``) into ``runner`` and carry it on; its ARN."""
    executor = runner._executor
    execution = Execution.from_json_dict(saved)
    arn = execution.durable_execution_arn
    runner._store.save(execution)
    ended = executor._scheduler.create_event()
    executor._completion_events[arn] = ended
    if execution.is_complete:
        ended.set()
        return arn
    now = executor._clock.now()
    timeout = execution.start_input.execution_timeout_seconds
    if timeout > 0:
        started = execution.get_operation_execution_started().start_timestamp

        def timed_out() -> None:
            executor.on_timed_out(arn, ErrorObject.from_message(f"Execution timed out after {timeout} seconds."))

        executor._execution_timeouts[arn] = executor._scheduler.call_later(
            timed_out, delay=left_of(timeout, started, now), completion_event=ended
        )
    for operation in execution.operations:
        if operation.operation_type is not OperationType.CALLBACK or operation.status is not OperationStatus.STARTED:
            continue
        options = next(
            (
                u.callback_options
                for u in execution.updates
                if u.operation_id == operation.operation_id and u.callback_options and u.action.value == "START"
            ),
            None,
        )
        if options is not None and operation.callback_details is not None:
            if options.timeout_seconds > 0:
                left = left_of(options.timeout_seconds, operation.start_timestamp, now)
                options = dataclasses.replace(options, timeout_seconds=math.ceil(left))  # whole seconds, as the API
            executor._schedule_callback_timeouts(arn, options, operation.callback_details.callback_id)
    executor._invoke_execution(arn)
    return arn


def left_of(seconds: float, since: datetime | None, now: datetime) -> float:
    """What is left of a timeout of ``seconds`` that started at ``since`` (all of it when unknown, or when the
    clock that stamped it ran ahead of this one: the testing SDK's clock skips waits); at least a moment, so a
    timeout that passed while nothing ran fires at once."""
    if since is None:
        return float(seconds)
    elapsed = max(0.0, (now - since).total_seconds())
    return max(0.001, float(seconds) - elapsed)
