"""The WORKFLOW lane in a run: the stack's durable function running the simulator's workflow, and the actors around
its executions (the simulated carrier, the operator who stops one by hand, the notices of their ends).

The simulated stack is the example app's: its one durable function is that app's workflow. ``with_simulated_workflow``
makes it run ``simulation.shipping`` instead, named for ``sim.ship`` in the durable consumer's ``WORKFLOW_FUNCTIONS``,
as a synth of the simulated app would have (the pattern of ``with_record_change_entities``).

An execution runs in the testing SDK's threads; a seed still replays exactly because nothing of an execution runs
while the simulator is not waiting for it. The executions an invocation started run up to their wait on the carrier
as that invocation ends (the local durable service's ``settle_starts``; without it, their first steps ran beside the
next invocation, drew the chaos's faults in whatever order the threads met, and a seed's trace could differ from
one run to the next under load). The
workflow waits on the carrier (a callback), and the carrier answers only at the simulator's points between two
steps of the pipeline (``carry``), each in the order of the executions' names, each waited for until its execution
ends. At its first point, each execution's fate is drawn: answered
(SUCCEEDED), refused (FAILED: ``workflow_failed``), never answered until its timeout passes (TIMED_OUT:
``workflow_timed_out``), or stopped by the operator with StopDurableExecution (STOPPED: ``workflow_stopped``); and
after how many points. Once it ended, its end's notice settles its pair (``WorkflowEnds.settle``, as an event rule
on the execution's status change would), unless the notice is lost (``workflow_notice_lost``: the scheduled settle
pass must find the end) or comes twice (``workflow_notice_duplicated``: the second must change nothing). The lost
answer of a start and a worker's death right after one are the local durable service's own seams.
"""

from __future__ import annotations

import json
import random
import re
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, replace
from typing import Any

from outbox.inbox import Inbox
from outbox.local.durable_functions import TERMINAL, LocalDurableFunctions
from outbox.local.durable_records import LocalExecution
from outbox.local.fault_count import FaultCount
from outbox.local.template import StackSpec, TemplateError
from outbox.local.workflows import durable_functions
from outbox.outputs import StackOutput
from outbox.workflows import WORKFLOW_FUNCTIONS_VARIABLE, WorkflowInput
from outbox.workflows.ends import WorkflowEnds
from outbox.workflows.starter import WorkflowStarter
from simulation.catalog import SHIP
from simulation.driver_state import DriverState, client
from simulation.schedule import Fault
from simulation.shipping import REFUSED

HANDLER = "simulation.shipping.ship"
# At most this many of the simulator's points pass before the carrier (or the operator) acts on an execution.
MOST_POINTS_BEFORE = 2
# Real seconds an execution may take to reach the carrier's callback, or to end once answered (the testing SDK
# skips its waits' time: it takes milliseconds).
REAL_WAIT = 30.0


def with_simulated_workflow(stack: StackSpec) -> StackSpec:
    """``stack`` with its one durable function running ``simulation.shipping.ship``, named for ``sim.ship`` in every
    function's ``WORKFLOW_FUNCTIONS``: the stack as a synth of the simulated app would have made it."""
    specs = durable_functions(stack)
    if len(specs) != 1:
        raise TemplateError(f"the simulated stack needs one durable function to run sim.ship; it has {len(specs)}")
    functions = dict(stack.functions)
    durable = functions[specs[0].function]
    functions[durable.logical_id] = replace(durable, handler=HANDLER)
    for logical_id, function in stack.functions.items():
        named = function.environment.get(WORKFLOW_FUNCTIONS_VARIABLE)
        if named is not None:
            environment = {**function.environment, WORKFLOW_FUNCTIONS_VARIABLE: _renamed(named)}
            functions[logical_id] = replace(functions[logical_id], environment=environment)
    return replace(stack, functions=functions)


def _renamed(value: Any) -> Any:
    """``WORKFLOW_FUNCTIONS`` as the template has it (a JSON text joined with the alias's reference), its one
    subscription named ``sim.ship``."""
    if isinstance(value, str):
        return re.sub(r'^\{"[^"]+":', f'{{"{SHIP}":', value)
    if isinstance(value, dict) and "Fn::Join" in value:
        separator, parts = value["Fn::Join"]
        return {"Fn::Join": [separator, [_renamed(parts[0]), *parts[1:]]]}
    raise TemplateError(f"{WORKFLOW_FUNCTIONS_VARIABLE} in a form the simulator does not read: {value!r}")


@dataclass
class Fate:
    """What happens to one execution: ``how`` (answered, refused, timed out, stopped) after ``points`` more of the
    simulator's points."""

    how: str
    points: int


def _ended(service: LocalDurableFunctions, execution: LocalExecution) -> str:
    """Wait until the execution ended; its status. Polled with a pause, so the SDK's threads have the interpreter
    to themselves meanwhile (``LocalDurableFunctions.wait`` spins while an execution resumes)."""
    deadline = time.monotonic() + REAL_WAIT
    while (status := str(service.status(execution.arn)["Status"])) not in TERMINAL:
        if time.monotonic() > deadline:
            raise RuntimeError(f"the execution {execution.name} did not end once answered")
        time.sleep(0.002)
    return status


class WorkflowActors(DriverState):
    """The carrier, the operator's stops and the notices of the executions' ends."""

    def _workflow_state(self) -> None:
        self._fates: dict[str, Fate] = {}
        self._ended: set[str] = set()
        self._carrier_random = random.Random(f"{self.world.seed}:carrier")
        self._notices: WorkflowEnds | None = None
        if (service := self.durable_service) is not None:
            service.settle_starts = True  # an execution's first steps never interleave with the consumer's calls

    @property
    def durable_service(self) -> LocalDurableFunctions | None:
        workflows = self.runtime.workflows
        return workflows.service if workflows is not None and self.world.schedule.workflow else None

    # -- the start's faults: the local durable service's own seams --------------------------------------------

    def lost_start_answers(self) -> AbstractContextManager[FaultCount]:
        return self._service_seam("lose_answers", Fault.WORKFLOW_START_LOST)

    def crashes_after_start(self) -> AbstractContextManager[FaultCount]:
        return self._service_seam("crash_after_start", Fault.WORKFLOW_START_CRASH)

    def throttled_starts(self) -> AbstractContextManager[FaultCount]:
        return self._service_seam("throttle_starts", Fault.WORKFLOW_START_THROTTLED)

    @contextmanager
    def _service_seam(self, seam: str, kind: Fault) -> Iterator[FaultCount]:
        service = self.durable_service
        count = self.chaos.count(kind)
        if service is None:
            yield count
            return
        with getattr(service, seam)(count):
            yield count

    # -- the simulator's points -------------------------------------------------------------------------------

    def carry(self) -> bool:
        """One point of the run: each execution not ended yet (in the order of their names) waits for the carrier,
        and those whose turn came are answered, refused, timed out or stopped; then each of them is waited for
        until it ended (in that order: the testing SDK runs them meanwhile), and its end's notice is sent. True
        when an execution ended."""
        service = self.durable_service
        if service is None:
            return False
        ending: list[tuple[LocalExecution, str | None]] = []
        for execution in sorted(service.executions(), key=lambda e: e.name):
            if execution.name in self._ended:
                continue
            if not self._waits_for_the_carrier(service, execution):
                ending.append((execution, None))  # it ended on its own (stopped before it reached the carrier)
                continue
            fate = self._fates.get(execution.name)
            if fate is None:
                fate = self._fates[execution.name] = self._drawn_fate(execution)
            if fate.points > 0:
                fate.points -= 1
                continue
            self._act(service, execution, fate.how)
            ending.append((execution, fate.how))
        for execution, how in ending:
            if how is not None:
                status = _ended(service, execution)
                self.trace.add(
                    "workflow", f"{self.trace.key(self._key(execution))} {execution.name[27:]}: {how}, {status}"
                )
            self._end(execution)
        return bool(ending)

    def finish_workflows(self) -> None:
        """Once the faults stopped: every execution still running is answered (its fate drawn while the faults were
        live stands), and the pipeline runs until their ends are settled."""
        service = self.durable_service
        if service is None:
            return
        while any(e.name not in self._ended for e in service.executions()):
            for fate in self._fates.values():
                fate.points = 0
            self.carry()
            self.runtime.run_until_idle(on_step=self._carry_each_step)

    def _carry_each_step(self, _step: int) -> None:
        self.carry()

    def _waits_for_the_carrier(self, service: LocalDurableFunctions, execution: LocalExecution) -> bool:
        """Wait until the execution waits on the carrier (True), or ended (False)."""
        deadline = time.monotonic() + REAL_WAIT
        while execution.arn not in self.world.workflow_waiting:
            if service.status(execution.arn)["Status"] in TERMINAL:
                return False
            if time.monotonic() > deadline:
                raise RuntimeError(f"the execution {execution.name} never reached the carrier")
            time.sleep(0.002)
        return service.status(execution.arn)["Status"] not in TERMINAL

    def _drawn_fate(self, execution: LocalExecution) -> Fate:
        key = self._key(execution)
        if self.chaos.fires(Fault.WORKFLOW_STOPPED, key):
            how = "stopped"
        elif self.chaos.fires(Fault.WORKFLOW_TIMED_OUT, key):
            how = "timed out"
        elif self.chaos.fires(Fault.WORKFLOW_FAILED, key):
            how = "refused"
        else:
            how = "answered"
        return Fate(how, self._carrier_random.randint(0, MOST_POINTS_BEFORE))

    def _act(self, service: LocalDurableFunctions, execution: LocalExecution, how: str) -> None:
        callback = self.world.workflow_waiting[execution.arn]
        if how == "answered":
            service.send_callback_success(callback, json.dumps("accepted").encode())
        elif how == "refused":
            service.send_callback_success(callback, json.dumps(REFUSED).encode())
        elif how == "timed out":  # the carrier never answers: the execution's timeout passes
            service.time_out(execution.arn)
        else:  # the operator stops it by hand, as the console or the CLI does
            service.client(retries=0).stop_durable_execution(DurableExecutionArn=execution.arn)

    def _end(self, execution: LocalExecution) -> None:
        """The execution ended: its notice settles its pair, unless it is lost; a duplicated one comes twice."""
        self._ended.add(execution.name)
        key = self._key(execution)
        if self.chaos.fires(Fault.WORKFLOW_NOTICE_LOST, key):
            return
        notices = 2 if self.chaos.fires(Fault.WORKFLOW_NOTICE_DUPLICATED, key) else 1
        event_id, _, subscription = key.partition(":")
        for _ in range(notices):
            try:
                self._notice().settle(event_id, subscription)
            except Exception as exc:  # the notice's run failed (a throttle, a lost answer): the settle pass remains
                self.trace.add("workflow", f"the notice of {self.trace.key(key)} failed: {type(exc).__name__}")

    def _notice(self) -> WorkflowEnds:
        """What settles a pair on an end's notice: the engine's ``WorkflowEnds``, as a function an event rule on the
        executions' status changes would run."""
        if self._notices is None:
            service = self.durable_service
            assert service is not None
            inbox = Inbox(
                self.runtime.output(StackOutput.INBOX_TABLE),
                client=client(self.runtime, "dynamodb"),
                max_attempts=1,  # it claims nothing
                retention=self.operations.topology.inbox_retention,  # what a completion keeps its row for
                clock=self.runtime.clock,
            )
            self._notices = WorkflowEnds(inbox, WorkflowStarter(service.client(retries=0)))
        return self._notices

    def _key(self, execution: LocalExecution) -> str:
        return WorkflowInput.of(execution.payload).idempotency_key

    def record_executions(self) -> None:
        """What the invariant reads of the durable service: every execution, its input's pair and attempt, and its
        status (the world keeps them once the runtime is gone)."""
        service = self.durable_service
        if service is None:
            return
        for execution in service.executions():
            given = WorkflowInput.of(execution.payload)
            status = service.status(execution.arn)["Status"]
            self.world.workflow_executions.append(
                (execution.name, execution.arn, given.idempotency_key, given.attempt, status)
            )
        self.world.workflow_starts.update(service.starts)
