"""One seed, start to end: boot the local runtime, run the schedule, drain, settle, check.

result = run_seed(42, stack)
result.violations   # [] when every invariant held
result.trace.render()
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta

from outbox.local.clock import VirtualClock
from outbox.local.runtime import LocalRuntime
from outbox.local.template import StackSpec, with_record_change_entities
from outbox.ops import Topology
from simulation.catalog import RUN_VARIABLE, WATCHED_ENTITIES, catalog_for
from simulation.chaos import Chaos
from simulation.determinism import seeded
from simulation.drawing import generate
from simulation.driver import Driver, client
from simulation.invariants import Violation, check_all, check_status
from simulation.invariants.liveness import check_liveness, liveness_bound
from simulation.invariants.workflows import check_given_back
from simulation.observations import Observations
from simulation.reach import reach_of, with_inbox_stream
from simulation.recorder import recording
from simulation.schedule import Schedule
from simulation.state import read_alarm_state, read_state
from simulation.trace import Trace
from simulation.workflows import with_simulated_workflow
from simulation.world import DeterministicIds, World, register, unregister

# Every function of the stack loads this catalog; clients in functions do not retry (a throttle reaches
# the engine, whose own handling is under test, and botocore's backoff would sleep in real time).
FUNCTION_ENVIRONMENT = {
    "SUBSCRIPTIONS": "simulation.catalog:build_catalog",
    "AWS_MAX_ATTEMPTS": "1",
    "AWS_RETRY_MODE": "standard",
}


@dataclass
class SeedResult:
    seed: int
    violations: list[Violation]
    trace: Trace
    faults_fired: Counter[str] = field(default_factory=Counter)
    error: BaseException | None = None  # the simulator itself failed (not an invariant)
    # The transitions of the pair's state machine the run reached ("STATE step"), read from the inbox's stream.
    reached: Counter[str] = field(default_factory=Counter)

    @property
    def ok(self) -> bool:
        return not self.violations and self.error is None


def run_seed(seed: int, stack: StackSpec, schedule: Schedule | None = None) -> SeedResult:
    """The seed's schedule, or ``schedule`` (one the seed drew, made smaller: ``simulation.shrink``): everything
    else the run draws (faults' decisions, ids, the operator's choices) still comes from the seed."""
    # The simulated application watches its own rows: the record-change pipe as it would deploy it.
    # Its durable function runs the simulator's workflow (sim.ship), in the schedules that have it.
    stack = with_simulated_workflow(with_inbox_stream(with_record_change_entities(stack, WATCHED_ENTITIES)))
    schedule = schedule if schedule is not None else generate(seed)
    clock = VirtualClock()
    trace = Trace(clock)
    chaos = Chaos(seed, schedule.faults, trace)
    world = World(seed, schedule, trace, chaos, DeterministicIds(clock, seed), clock=clock, sleep=clock.advance)
    world.service.before_effect = lambda key: _effect_applied(world, key)
    observations = Observations()
    environment = {**FUNCTION_ENVIRONMENT, RUN_VARIABLE: world.run_id}
    with quiet(), one_boto3_session(), seeded(world), registered(world):
        runtime = LocalRuntime(stack, clock=clock, environment=environment, function_log_level="CRITICAL")
        with runtime:
            world.data_table = runtime.output("DataTableName")
            world.reader = client(runtime, "dynamodb")
            world.catalog = catalog_for(world)
            driver = Driver(world, runtime, observations)
            world.function_timeout = driver.durable.function_timeout
            topology = Topology.from_outputs(runtime.outputs())
            try:
                violations = _run(world, runtime, driver, observations, topology)
                reach = reach_of(runtime, trace.key)
            except Exception as exc:  # the simulator failed: report it with the seed, like a violation
                trace.add("ERROR", f"{type(exc).__name__}: {exc}")
                return SeedResult(seed, [], trace, Counter(k.value for k in chaos.fired.elements()), exc)
    fired = Counter(k.value for k in chaos.fired.elements())
    violations += [Violation(20, change) for change in reach.forbidden]
    violations += check_given_back(world, reach.given_back)
    reached = Counter({f"{state} {step}": count for (state, step), count in reach.transitions.items()})
    return SeedResult(seed, violations, trace, fired, reached=reached)


def _run(
    world: World, runtime: LocalRuntime, driver: Driver, observations: Observations, topology: Topology
) -> list[Violation]:
    with recording(world, observations, driver.durable, runtime.pipes.values()), driver.faults():
        for action in world.schedule.actions:
            driver.perform(action)
        driver.drain()
    tenants = list(world.schedule.tenants)
    violations = _liveness(world, runtime, driver, observations, topology)
    if observations.dead_marks or driver.durable_dlq_depth() > 0:
        # The alarm state, before anyone acts on it: what is dead or parked must show in the status.
        with world.chaos.paused():
            before = read_alarm_state(runtime, driver.operations.dynamodb, tenants, driver.operations.status())
        violations += [
            Violation(v.invariant, f"before the operator acted: {v.message}") for v in check_status(before, topology)
        ]
    with recording(world, observations, driver.durable, runtime.pipes.values()):
        driver.settle()
        driver.age()
        if world.schedule.force_replay:
            driver.force_replay()
            runtime.run_until_idle()
        if world.schedule.tamper:
            driver.tamper()
            runtime.run_until_idle()  # the rewrite is a MODIFY on the stream: the relay must not pass it on
        if world.schedule.forge:
            driver.forge()
            runtime.run_until_idle()
        if world.schedule.forge_batch:
            driver.forge_batch()
            runtime.run_until_idle()
        if world.schedule.rewrite:
            driver.rewrite()
            runtime.run_until_idle()  # the tamper pipe and recorder see the MODIFYs; the relay must not
            if world.schedule.repair:
                driver.repair()
        driver.finish_workflows()  # a replay's execution, answered (the faults are healed) and its pair settled
    driver.record_executions()
    after = read_state(runtime, driver.operations.dynamodb, tenants, driver.operations.status())
    return violations + check_all(world, observations, after, topology)


def _effect_applied(world: World, key: str) -> None:
    world.effects_created[key] += 1
    world.trace.add("effect", f"{world.trace.key(key)} applied by the service")


@contextmanager
def one_boto3_session() -> Iterator[None]:
    """moto replaces boto3's default session on every start, and each new session parses the service
    models again (a tenth of a second per runtime); one session for the whole process is enough here."""
    from moto.core.config import default_user_config

    core = default_user_config.setdefault("core", {})
    previous = core.get("reset_boto3_session", True)
    core["reset_boto3_session"] = False
    try:
        yield
    finally:
        core["reset_boto3_session"] = previous


@contextmanager
def registered(world: World) -> Iterator[None]:
    register(world)
    try:
        yield
    finally:
        unregister(world)


def _liveness(
    world: World, runtime: LocalRuntime, driver: Driver, observations: Observations, topology: Topology
) -> list[Violation]:
    """Invariant 19, as the drain leaves the pipeline: idle, its faults stopped, no operator's settling yet."""
    assert world.reader is not None
    last_fault = world.chaos.last_fired_at
    idle_after = world.trace_clock() - last_fault if last_fault is not None else timedelta(0)
    attributes = client(runtime, "sqs").get_queue_attributes(
        QueueUrl=topology.durable_queue_url, AttributeNames=["RedrivePolicy"]
    )["Attributes"]
    redrive = json.loads(attributes["RedrivePolicy"])
    max_age = runtime.pipe("RelayPipeName").config.maximum_record_age_seconds
    bound = liveness_bound(
        driver.durable.visibility_timeout,
        int(redrive["maxReceiveCount"]),
        timedelta(seconds=max(max_age, 0)),
        len({receipt.message_id for receipt in observations.receipts}),
    )
    with world.chaos.paused():  # the check's own reads (the state, status's held orders) meet no fault
        idle = read_alarm_state(runtime, world.reader, list(world.schedule.tenants), None)
        return check_liveness(world, idle, topology, idle_after, bound)


@contextmanager
def quiet() -> Iterator[None]:
    """The engine logs every retry and crash at WARNING or ERROR: expected here, and the trace has them."""
    previous = logging.root.manager.disable
    logging.disable(logging.CRITICAL)
    try:
        yield
    finally:
        logging.disable(previous)
