"""What every actor of a run shares: the world, the runtime and its clients, the emitters and the operator's
tools, and the state of the run (``DriverState``). The ``Driver`` (``simulation.driver``) composes the actors:
the faults (``simulation.chaos_actor``), the operator (``simulation.operator_actor``) and whoever alters the
log behind the engine's back (``simulation.intruder_actor``)."""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from outbox import Envelope, keys
from outbox.catalog import Catalog
from outbox.local.clients import local_client
from outbox.local.esm import SqsEventSourceMapping
from outbox.local.fault_count import FaultCount
from outbox.local.runtime import LocalRuntime
from outbox.log.envelope import format_timestamp
from outbox.ops import Operations
from simulation.catalog import legacy_catalog_for
from simulation.emitters import Emitter
from simulation.newer_engine import NewerSealing
from simulation.observations import Observations, Send
from simulation.operator_clients import Interrupting, OperatorDeath
from simulation.schedule import Action, Emit, Fault
from simulation.world import EmitRecord, World

if TYPE_CHECKING:
    from outbox.ops.groups import GroupPair

# What EventBridge's hourly rule sends the anchoring function (the pass reads nothing of it).
SCHEDULED_EVENT = {"source": "aws.events", "detail-type": "Scheduled Event", "detail": {}}

DEDUPLICATION_WINDOW = timedelta(minutes=5)
SHARD_REFRESH = timedelta(hours=1)
DEPLOY_WAITS_STEPS = 4  # at most, for a follow-up noted by the old code to wait for its consumer
# At most, before a deploy that changes a pair's route, for its dead work (and deferred work behind it) to be there.
DEPLOY_WAITS_FOR_DEAD_WORK = 30
# Before the operator reconciles while settling: long enough that a lease left by a lost message is stale.
RECONCILE_WAIT = timedelta(hours=2)
# The operator's process dies before one of the first this many changing calls of an action.
MAX_DEATH_CALL = 3
# How often the operator replays new dead letters at once (the cause may not be fixed yet).
REPLAY_ON_ALARM = 0.6
# How often a run's operator replays failure group by failure group (``outbox replay --group``), not per tenant.
REPLAY_BY_GROUP = 0.5
OPERATOR = "the simulator's operator"  # who an operator's skip says decided it
# Longer than any lease (the function's timeout and a margin), shorter than the queue's visibility timeout.
CRASHED_LEASES_RUN_OUT = timedelta(minutes=2)
# The receive-send-delete redrive receives with a visibility of 60 s (outbox.ops.redrive): what an interrupted
# one holds comes back after it.
REDRIVE_RECEIVE_VISIBILITY = timedelta(seconds=61)
MAX_REDRIVE_WAITS = 3


class DriverState(ABC):
    """The run as its actors see it: built once, from the world and the runtime it drives."""

    def __init__(self, world: World, runtime: LocalRuntime, observations: Observations) -> None:
        self.world = world
        self.runtime = runtime
        self.observations = observations
        self.trace = world.trace
        self.chaos = world.chaos
        self.relay = runtime.pipe("RelayPipeName")
        for pipe in runtime.pipes.values():
            pipe.shard_refresh_interval = SHARD_REFRESH  # moto's streams never split: no need to ask each poll
        self.durable: SqsEventSourceMapping = next(
            mapping for mapping in runtime.mappings.values() if mapping.queue_url == runtime.output("DurableQueueUrl")
        )
        assert world.catalog is not None
        self.catalog = world.catalog
        events_table = runtime.output("EventsTableName")
        dynamodb = client(runtime, "dynamodb")
        legacy = legacy_catalog_for(world) if world.schedule.legacy else None

        def emitter_catalog(tenant: str, n: int) -> Catalog:
            return legacy if legacy is not None and (tenant, n) == (world.schedule.legacy, 0) else self.catalog

        # The workload may emit as a newer engine (``newer_emitter``): rivals and interlopers emit inside its emits.
        self.newer = NewerSealing(self.chaos, lambda: self._current)
        self.emitters = {
            tenant: [
                Emitter(f"{tenant}/emitter{n}", world, events_table, dynamodb, emitter_catalog(tenant, n), self.newer)
                for n in range(count)
            ]
            for tenant, count in world.schedule.emitters.items()
        }
        self.rivals = {
            tenant: Emitter(f"{tenant}/rival", world, events_table, dynamodb, self.catalog, self.newer)
            for tenant in world.schedule.tenants
        }
        # Who commits between a lost answer and its caller's retry: a writer of its own (it may interrupt the
        # rival itself, whose ids must not be mixed up with its own).
        self.interlopers = {
            tenant: Emitter(f"{tenant}/interloper", world, events_table, dynamodb, self.catalog, self.newer)
            for tenant in world.schedule.tenants
        }
        self.sqs = runtime.client("sqs")
        self._death = OperatorDeath(log=world.operator_calls)
        self._death.refuse_send = lambda: self.chaos.fires(
            Fault.SEND_REFUSED, "an operator's send", while_paused=True, lane="operator"
        )
        operator_sqs = Interrupting(self.sqs, self._death)
        self.operations: Operations = runtime.operations(self.catalog, sqs=operator_sqs)
        operator_dynamodb = Interrupting(self.operations.dynamodb, self._death)
        self.operations.dynamodb = operator_dynamodb
        self._operator_clients = (operator_sqs, operator_dynamodb)
        self.durable_queue_url = runtime.output("DurableQueueUrl")
        self.durable_dlq_url = runtime.output("DurableDeadLetterQueueUrl")
        self._random = random.Random(f"{world.seed}:driver")
        self._rival_serial = 0
        self._rivalling = False
        self._checking = False  # a read-only pass is reading the logs (emit_during_check may strike)
        self._reconciling = False  # the operator's reconcile runs inside a direct run (reconcile_during_run)
        self._current: EmitRecord | None = None  # the emit in progress (rivals commit inside it)
        self._poison_serial = 0
        self._start = runtime.clock()
        # What alarms make the operator do while the pipeline runs (a redrive once a broken deploy is fixed and
        # its messages reach the DLQ; now and then a replay of new dead letters), and the dead marks seen.
        self._dlq_alarm = False
        self._alarm_random = random.Random(f"{world.seed}:alarms")
        # Whether the operator replays dead letters tenant by tenant or failure group by failure group.
        self._replays_by_group = random.Random(f"{world.seed}:replay-by-group").random() < REPLAY_BY_GROUP
        # The pairs each failure group's last dry run showed, which the operator replays at their next turn.
        self._group_plans: dict[str, list[GroupPair]] = {}
        self._dead_seen = 0

    def _logs(self) -> Iterator[Envelope]:
        """Every tenant's log (workload events and follow-ups alike)."""
        for tenant in self.world.schedule.tenants:
            yield from self.emitters[tenant][0].store.events(tenant)

    def _record_sends(self, entries: Sequence[Mapping[str, Any]], verb: str) -> None:
        now = self.runtime.clock()
        sends = [Send(str(e["MessageGroupId"]), str(e["MessageDeduplicationId"]), now) for e in entries]
        self.observations.sends.extend(sends)
        names = ", ".join(f"{self.trace.event(s.event_id)}({s.tenant})" for s in sends)
        self.trace.add("pipe", f"{verb}: {names}")

    def _write_head(self, tenant: str, log: list[Envelope]) -> None:
        table, key = self.runtime.output("EventsTableName"), keys.head_key(tenant)
        dynamodb = self.operations.dynamodb
        if not log:
            dynamodb.delete_item(TableName=table, Key=key)
            return
        last = log[-1]
        item = {
            **key,
            "kind": {"S": "HEAD"},
            "tenant": {"S": tenant},
            "last_seq": {"N": str(last.seq)},
            "last_hash": {"S": last.hash},
            "last_event_id": {"S": last.id},
            "updated_at": {"S": format_timestamp(last.occurred_at)},
        }
        dynamodb.put_item(TableName=table, Item=item)

    # The actions of the Driver and the operator that other actors start (defined where they belong).

    @abstractmethod
    def perform(self, action: Action) -> None: ...

    @abstractmethod
    def _emit(self, emitter: Emitter, action: Emit, origin: str) -> None: ...

    @abstractmethod
    def skip(self, tenant: str, seq: int, reason: str) -> None: ...

    @abstractmethod
    def reconcile(self, since: datetime | None, subscription: str | None = None) -> None: ...

    @abstractmethod
    def rewrite_in_the_reset_second(self, tenant: str) -> None: ...

    @abstractmethod
    def lost_start_answers(self) -> AbstractContextManager[FaultCount]: ...

    @abstractmethod
    def crashes_after_start(self) -> AbstractContextManager[FaultCount]: ...

    @abstractmethod
    def throttled_starts(self) -> AbstractContextManager[FaultCount]: ...


def reseal(envelope: Envelope, payload: dict[str, Any]) -> Envelope:
    """``envelope`` with another payload and a hash that matches it (linked to the same previous hash)."""
    unsealed = envelope.model_copy(update={"payload": payload})
    return unsealed.model_copy(update={"hash": unsealed.computed_hash()})


def client(runtime: LocalRuntime, service: str) -> Any:
    """A client that does not retry: throttles reach the engine, whose own retries are under test (and
    botocore's backoff would sleep in real time)."""
    return local_client(service, runtime.endpoint_url, retries={"mode": "standard", "total_max_attempts": 1})
