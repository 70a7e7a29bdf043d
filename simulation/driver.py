"""Drives one run: the workload's emits, the pipeline's steps, the injected faults and the operator.

Concurrent emitters are separate ``EventStore`` instances (as separate processes have) whose emits the
schedule interleaves, one at a time. The moment that matters for a race, between reading the chain head
and the transaction, is reached by the ``rival_emit`` fault, which commits another emitter's event right
there. No thread is involved, so a seed replays exactly.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import partial
from typing import Any
from unittest import mock

from botocore.exceptions import ClientError

from outbox import Envelope, EventStore, chain, keys
from outbox.catalog import Catalog
from outbox.consumer import DurableConsumer
from outbox.delivery.ordered import OrderedGate
from outbox.envelope import format_timestamp
from outbox.inbox import PENDING, Claim, ClaimRecord
from outbox.local import faults
from outbox.local.clients import local_client
from outbox.local.esm import SqsEventSourceMapping
from outbox.local.faults import FaultCount, SecondWorker
from outbox.local.pipe import PipeFaults, PipeRecord, TargetInvocationError
from outbox.local.runtime import LocalRuntime
from outbox.ops import OperationRefusedError, Operations
from outbox.ops import ordering as ordering_ops
from outbox.ordering import Deferred, WakeUps, Watermark
from outbox.subscriptions import Lane, Subscription
from simulation.bodies import MALFORMED_BODIES
from simulation.catalog import (
    ARCHIVE,
    ITEM_CREATED,
    ITEM_NOTED,
    LEDGER,
    TALLY,
    NewItem,
    catalog_for,
    create_item,
    create_items,
    legacy_catalog_for,
)
from simulation.recorder import Observations, Send, brief
from simulation.schedule import (
    DEPLOY_KINDS,
    Action,
    Deploy,
    Emit,
    Fault,
    HeadRollback,
    LateRedelivery,
    Poison,
    ReadOnlyPass,
    Reconcile,
    Redeliver,
    Redrive,
    Replay,
    Steps,
    TimeJump,
)
from simulation.world import EmitRecord, Import, World

# What EventBridge's hourly rule sends the anchoring function (the pass reads nothing of it).
SCHEDULED_EVENT = {"source": "aws.events", "detail-type": "Scheduled Event", "detail": {}}

DEDUPLICATION_WINDOW = timedelta(minutes=5)
SHARD_REFRESH = timedelta(hours=1)
DEPLOY_WAITS_STEPS = 4  # at most, for a follow-up noted by the old code to wait for its consumer
IDS_KEPT = 8  # an emitter's recent ids: more than an import's events
# Before the operator reconciles while settling: long enough that a lease left by a lost message is stale.
RECONCILE_WAIT = timedelta(hours=2)
# The operator's process dies before one of the first this many changing calls of an action.
MAX_DEATH_CALL = 3
# How often the operator replays new dead letters at once (the cause may not be fixed yet).
REPLAY_ON_ALARM = 0.6
OPERATOR = "the simulator's operator"  # who an operator's skip says decided it
# Longer than any lease (the function's timeout and a margin), shorter than the queue's visibility timeout.
CRASHED_LEASES_RUN_OUT = timedelta(minutes=2)
# The receive-send-delete redrive receives with a visibility of 60 s (outbox.ops.redrive): what an interrupted
# one holds comes back after it.
REDRIVE_RECEIVE_VISIBILITY = timedelta(seconds=61)
MAX_REDRIVE_WAITS = 3


class OperatorInterrupted(BaseException):
    """The operator's process died in the middle of an action (a laptop lid, a lost SSH session)."""


# The calls that change something: an operator's process dying before one of them leaves an action half done.
MUTATING_CALLS = frozenset(
    {
        "send_message",
        "delete_message",
        "change_message_visibility",
        "start_message_move_task",
        "transact_write_items",
        "update_item",
        "delete_item",
        "put_item",
    }
)


@dataclass
class OperatorDeath:
    """When the operator's process dies during the action under way (the ``operator_interrupted`` fault):
    before its ``at``-th call that changes something, or never (None)."""

    at: int | None = None
    calls: int = 0
    # Decides ``at`` on the action's first changing call, so an action with nothing to change costs no fault.
    plan: Callable[[], tuple[int | None, bool]] | None = None
    # What the operator's clients did, in order: (call, request, answer or None if it raised). Read by the
    # invariants (a DLQ message the redrive deleted must have been sent back first).
    log: list[tuple[str, dict[str, Any], Any]] = field(default_factory=list)

    # Or: before the action's first send_message, the moment a repair hands its work to the queue.
    at_first_send: bool = False
    sent: bool = False
    # Whether SQS refuses a send of the operator's (``send_refused``): the action fails there, and is run again.
    refuse_send: Callable[[], bool] | None = None

    def before(self, name: str) -> None:
        if name == "send_message" and self.refuse_send is not None and self.refuse_send():
            raise _refused_send()
        if self.calls == 0 and self.plan is not None:
            self.at, self.at_first_send = self.plan()
        self.calls += 1
        first_send = name == "send_message" and not self.sent
        self.sent = self.sent or name == "send_message"
        if (self.at is not None and self.calls == self.at) or (self.at_first_send and first_send):
            raise OperatorInterrupted(f"the operator's process died before {name} (call {self.calls} of the action)")


class Interrupting:
    """An operator's AWS client whose process may die before a call of an action that changes something;
    the simulator's own reads through it (``armed`` False) never do. Both operator clients share one death."""

    def __init__(self, client: Any, death: OperatorDeath) -> None:
        self._client = client
        self._death = death
        self.armed = False

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._client, name)
        if not callable(attribute) or (name not in MUTATING_CALLS and name != "receive_message"):
            return attribute

        def call(**kwargs: Any) -> Any:
            if not self.armed:
                return attribute(**kwargs)
            if name in MUTATING_CALLS:
                self._death.before(name)
            answer = attribute(**kwargs)
            self._death.log.append((name, kwargs, answer))
            return answer

        return call


class RecordingIds:
    """An emitter's id source that remembers the ids it gave, so a failed emit's ids are known."""

    def __init__(self, world: World) -> None:
        self._world = world
        self.given = 0
        self.recent: list[str] = []  # the ids of the last emit (emit_many draws several)

    @property
    def last(self) -> str:
        return self.recent[-1] if self.recent else ""

    def __call__(self) -> str:
        event_id = self._world.ids()
        self.given += 1
        self.recent = [*self.recent[-(IDS_KEPT - 1) :], event_id]
        return event_id


class Emitter:
    """One writer process of one tenant, with an EventStore of its own."""

    def __init__(self, name: str, world: World, events_table: str, client: Any, catalog: Catalog) -> None:
        self.name = name
        self.ids = RecordingIds(world)
        self.store = EventStore(
            events_table,
            client=client,
            catalog=catalog,
            new_event_id=self.ids,
            rng=random.Random(f"{world.seed}:{name}"),
        )


class Driver:
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

        self.emitters = {
            tenant: [
                Emitter(f"{tenant}/emitter{n}", world, events_table, dynamodb, emitter_catalog(tenant, n))
                for n in range(count)
            ]
            for tenant, count in world.schedule.emitters.items()
        }
        self.rivals = {
            tenant: Emitter(f"{tenant}/rival", world, events_table, dynamodb, self.catalog)
            for tenant in world.schedule.tenants
        }
        # Who commits between a lost answer and its caller's retry: a writer of its own (it may interrupt the
        # rival itself, whose ids must not be mixed up with its own).
        self.interlopers = {
            tenant: Emitter(f"{tenant}/interloper", world, events_table, dynamodb, self.catalog)
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
        self._current: EmitRecord | None = None  # the emit in progress (rivals commit inside it)
        self._poison_serial = 0
        self._start = runtime.clock()
        # What alarms make the operator do while the pipeline runs (a redrive once a broken deploy is fixed and
        # its messages reach the DLQ; now and then a replay of new dead letters), and the dead marks seen.
        self._dlq_alarm = False
        self._alarm_random = random.Random(f"{world.seed}:alarms")
        self._dead_seen = 0

    # -- the faults ---------------------------------------------------------------------------------

    @contextmanager
    def faults(self) -> Iterator[None]:
        """Every fault of the schedule, armed; each fires when ``Chaos`` says so."""
        armed = self.world.schedule.faults
        chaos, clock = self.chaos, self.runtime.clock
        seams: dict[Fault, Callable[[], AbstractContextManager[FaultCount]]] = {
            Fault.CRASH_BEFORE_CLAIM: lambda: faults.crash_before_claim(count=chaos.count(Fault.CRASH_BEFORE_CLAIM)),
            Fault.CRASH_AFTER_CLAIM: lambda: faults.crash_after_claim(count=chaos.count(Fault.CRASH_AFTER_CLAIM)),
            Fault.CRASH_AFTER_EFFECT: lambda: faults.crash_after_external_effect(
                self.world.service, count=chaos.count(Fault.CRASH_AFTER_EFFECT)
            ),
            Fault.CRASH_BEFORE_COMPLETION: lambda: faults.crash_before_completion(
                count=chaos.count(Fault.CRASH_BEFORE_COMPLETION)
            ),
            Fault.CRASH_AFTER_COMPLETION: lambda: faults.crash_after_completion(
                count=chaos.count(Fault.CRASH_AFTER_COMPLETION)
            ),
            Fault.THROTTLE: lambda: faults.throttle_dynamodb_calls(chaos.count(Fault.THROTTLE)),
            Fault.RIVAL_EMIT: lambda: faults.rival_emit_before_commit(
                self.rival_emit, count=chaos.count(Fault.RIVAL_EMIT)
            ),
            Fault.LEASE_EXPIRY: lambda: faults.expire_lease_while_running(
                clock, None, count=chaos.count(Fault.LEASE_EXPIRY)
            ),
            Fault.VISIBILITY_TIMEOUT: lambda: faults.visibility_timeout_during_handler(
                self.durable, count=chaos.count(Fault.VISIBILITY_TIMEOUT), second_worker=self._second_worker
            ),
            Fault.LOST_ANSWER: lambda: faults.lose_answers_after_commit(
                chaos.count(Fault.LOST_ANSWER), after=self._after_lost_answer, resent=self._sdk_resends
            ),
            Fault.MESSAGE_LOST: self._losing_messages,
            Fault.EARLY_REDELIVERY: self._redelivering_early,
            Fault.BROKEN_DEPLOY: self._broken_deploy,
            Fault.CONFLICTING_COPY: self._conflicting_copies,
            Fault.WATERMARK_RACE: self._racing_skips,
            Fault.EMIT_DURING_CHECK: self._emits_during_checks,
            Fault.UNPROCESSED_KEYS: lambda: faults.leave_keys_unprocessed(chaos.count(Fault.UNPROCESSED_KEYS)),
            Fault.SEND_REFUSED: self._refusing_wake_ups,
        }
        self.relay.faults = PipeFaults(
            before_send=self._before_send, duplicate_delivery=self._duplicate_delivery, reorder=self._reorder
        )
        with ExitStack() as stack:
            for kind, seam in seams.items():
                if kind in armed:
                    stack.enter_context(seam())
            yield

    @contextmanager
    def _refusing_wake_ups(self) -> Iterator[FaultCount]:
        """SQS refuses the SendMessage of a consumer's wake-up (``send_refused``): the deferred event it was for
        must be woken again, by the redelivery of the message that owed it. (The operator's sends fail through
        ``OperatorDeath``, under the same fault.)"""
        send = WakeUps.send

        def refused(wake_ups: WakeUps, deferred: Deferred, applied_seq: int) -> None:
            if self.chaos.fires(Fault.SEND_REFUSED, f"the wake-up of {self.trace.event(deferred.event_id)}"):
                raise _refused_send()
            send(wake_ups, deferred, applied_seq)

        with mock.patch.object(WakeUps, "send", refused):
            yield self.chaos.count(Fault.SEND_REFUSED)

    @contextmanager
    def _emits_during_checks(self) -> Iterator[FaultCount]:
        """While a read-only pass reads a tenant's log (``_checking``), another writer of the tenant commits an
        event between the pass's read of the rows and its read of the chain head (``emit_during_check``)."""
        read_head = chain.read_head

        def reading(client: Any, table_name: str, tenant: str) -> Any:
            racing = self._checking and not self._rivalling and tenant in self.rivals
            if racing and self.chaos.fires(Fault.EMIT_DURING_CHECK, tenant, while_paused=True):
                self._rivalling = True
                try:
                    self.rival_emit(tenant)
                finally:
                    self._rivalling = False
            return read_head(client, table_name, tenant)

        with mock.patch.object(chain, "read_head", reading):
            yield self.chaos.count(Fault.EMIT_DURING_CHECK)

    @contextmanager
    def _racing_skips(self) -> Iterator[FaultCount]:
        """An ordered delivery has read the watermark and found the event it must wait for; before it writes
        (the deferral, or the completion), the operator skips that event (``outbox skip``, acting on a status
        read a moment ago): the delivery's write must see that the watermark moved (``watermark_race``)."""
        place = OrderedGate.place

        def racing(gate: OrderedGate, claim: Claim, envelope: Envelope, sub: Subscription, watermark: Watermark) -> Any:
            if self.chaos.can_fire(Fault.WATERMARK_RACE):
                with self.chaos.paused():
                    waits_for = self._skippable(gate, envelope, sub, watermark)
                if waits_for is not None and self.chaos.fires(Fault.WATERMARK_RACE, claim.idempotency_key):
                    self.skip(envelope.tenant, waits_for, "it blocks the ledger (a race with a delivery)")
            return place(gate, claim, envelope, sub, watermark)

        with mock.patch.object(OrderedGate, "place", racing):
            yield self.chaos.count(Fault.WATERMARK_RACE)

    def _skippable(self, gate: OrderedGate, envelope: Envelope, sub: Subscription, watermark: Watermark) -> int | None:
        """The seq ``envelope`` waits for, if the operator may skip it now: the next in order after the
        watermark, and not running (dead, deferred, or its message not arrived yet)."""
        book = gate.order
        waits_for = book.predecessor(envelope, sub, watermark.applied_seq)
        if waits_for is None:
            return None
        before = Envelope.from_item(self.operations.event_image(envelope.tenant, waits_for))
        if book.predecessor(before, sub, watermark.applied_seq) is not None:
            return None
        claim = self.operations.inbox.read_claim(before.id, sub.name)
        lease = claim.lease_expires_at if claim is not None and claim.status == PENDING else None
        return None if lease is not None and lease > self.runtime.clock() else waits_for

    def _after_lost_answer(self, subject: str, _request: dict[str, Any]) -> None:
        """Between a lost answer and the caller's retry, another writer of the tenant commits first."""
        _, _, partition = subject.partition(" ")
        tenant = partition.removeprefix("TENANT#").removesuffix("#HEAD")
        if partition.endswith("#HEAD") and tenant in self.interlopers and not self._rivalling:
            self._rivalling = True
            try:
                self._rival_serial += 1
                serial = self._rival_serial
                action = Emit(f"rival{serial}", tenant, -1, f"rival-item{serial}", serial, False)
                self._emit(self.interlopers[tenant], action, "rival")
            finally:
                self._rivalling = False

    @contextmanager
    def _losing_messages(self) -> Iterator[FaultCount]:
        """After an invocation failed as a whole, one of its messages may be gone for good (the
        ``message_lost`` fault): what its claim left, or nothing, is all that remains."""
        poll = self.durable.poll

        def lossy() -> Any:
            result = poll()
            if result is None or result.crashed is None or not self.durable.in_flight:
                return result
            entry = self.durable.in_flight[0]
            if not self._recoverable(entry.message_id):
                return result  # only a message reconcile can send again (an event as logged) may be lost for good
            if self.chaos.fires(Fault.MESSAGE_LOST, self.trace.message(entry.message_id)):
                self.durable.in_flight.pop(0)
                self.sqs.delete_message(QueueUrl=self.durable_queue_url, ReceiptHandle=entry.receipt_handle)
            return result

        with mock.patch.object(self.durable, "poll", lossy):
            yield self.chaos.count(Fault.MESSAGE_LOST)

    def _recoverable(self, message_id: str) -> bool:
        """Whether a message carries a logged event as the log holds it: not a malformed body, an event altered in
        transit, a copy with other content or a forged event (the queue held those alone: nothing sends them again)."""
        receipt = next((r for r in self.observations.receipts if r.message_id == message_id), None)
        if receipt is None or receipt.event_id is None:
            return False
        made_here = ("poison-", "copy-", "forged-")
        return not receipt.deduplication_id.startswith(made_here) and receipt.event_id not in self.world.forged

    @contextmanager
    def _conflicting_copies(self) -> Iterator[FaultCount]:
        """After an invocation failed as a whole, its crashed worker's claims wait for their leases to run out;
        then (``conflicting_copy``) a copy of one of its events arrives with other content under the same id
        and a hash that matches that content, in another message group, before the original comes back."""
        poll = self.durable.poll

        def copying() -> Any:
            result = poll()
            if result is None or result.crashed is None:
                return result
            if not self.chaos.can_fire(Fault.CONFLICTING_COPY):
                return result
            with self.chaos.paused():  # the simulator's own reads are not the pipeline's: no fault for them
                event_id = self._event_with_a_waiting_claim(result.received)
            if event_id is not None and self.chaos.fires(Fault.CONFLICTING_COPY, self.trace.event(event_id)):
                self.runtime.clock.advance(CRASHED_LEASES_RUN_OUT)
                with self.chaos.paused():
                    self._send_conflicting_copy(event_id)
            return result

        with mock.patch.object(self.durable, "poll", copying):
            yield self.chaos.count(Fault.CONFLICTING_COPY)

    def _event_with_a_waiting_claim(self, message_ids: Sequence[str]) -> str | None:
        """An event of these messages whose every durable pair has a claim row (so no pair of it can go to the copy
        first: the first content to claim a pair wins it), one of them PENDING, or now and then all of them done
        or dead already."""
        by_message = {r.message_id: r for r in self.observations.receipts if r.event_id and r.event_type}
        # What each message's body says, not the log: this runs after every failed invocation, and a copy of
        # an event the log does not hold as sent is refused before any claim, whatever its claims say.
        pairs = [
            (str(r.event_id), [s.name for s in self.catalog.registry.matching(str(r.event_type), Lane.DURABLE)])
            for r in (by_message[m] for m in message_ids if m in by_message)
        ]
        found = self._claim_statuses([(event_id, name) for event_id, names in pairs for name in names])
        for event_id, names in pairs:
            statuses = [found[(event_id, name)] for name in names if (event_id, name) in found]
            # Mostly while a pair waits; now and then when its pairs are done or dead already.
            settled = self.chaos.draw(Fault.CONFLICTING_COPY).random() < 0.3
            if names and len(statuses) == len(names) and ("PENDING" in statuses or settled):
                return event_id
        return None

    def _claim_statuses(self, pairs: Sequence[tuple[str, str]]) -> dict[tuple[str, str], str]:
        """The status of each (event, subscription) pair's claim that exists, in as few requests as BatchGetItem
        allows (this runs after every failed invocation: one query per event made long seeds slow)."""
        table = self.operations.topology.inbox_table
        statuses: dict[tuple[str, str], str] = {}
        wanted = [keys.claim_key(event_id, name) for event_id, name in dict.fromkeys(pairs)]
        while wanted:
            request: dict[str, Any] = {table: {"Keys": wanted[:100], "ConsistentRead": True}}
            wanted = wanted[100:]
            while request:
                answer = self.operations.dynamodb.batch_get_item(RequestItems=request)
                for item in answer["Responses"].get(table, []):
                    claim = ClaimRecord.from_item(item)
                    statuses[(claim.event_id, claim.subscription)] = claim.status
                request = answer.get("UnprocessedKeys") or {}
        return statuses

    def _logs(self) -> Iterator[Envelope]:
        """Every tenant's log (workload events and follow-ups alike)."""
        for tenant in self.world.schedule.tenants:
            yield from self.emitters[tenant][0].store.events(tenant)

    def _send_conflicting_copy(self, event_id: str) -> None:
        envelope = next((e for e in self._logs() if e.id == event_id), None)
        if envelope is None:  # a message of an event the log does not hold (a forged one): no copy of it
            return
        forged = reseal(envelope, {**envelope.payload, "amount": int(envelope.payload["amount"]) + 1000})
        self.world.conflicting_copies.append(event_id)
        self.sqs.send_message(
            QueueUrl=self.durable_queue_url,
            MessageBody=json.dumps(forged.to_item()),
            MessageGroupId=f"{envelope.tenant}-copy",
            MessageDeduplicationId=f"copy-{event_id}-{len(self.world.conflicting_copies)}",
        )
        self.trace.add("sqs", f"a copy of {self.trace.event(event_id)} with other content lands in another group")

    def _second_worker(self, key: str) -> SecondWorker:
        """How a handler outlives its message's visibility: after the queue's visibility timeout, a second
        worker runs the message to the end, or dies holding the claim while the first worker completes, fails
        retryably or fails terminally (all of which its lost claim must fence out); or, with a visibility
        timeout shorter than the handler, a second worker arrives while the first one's lease is live (and
        must leave the claim alone)."""
        draw = self.chaos.draw(Fault.VISIBILITY_TIMEOUT)
        endings = ("second completes", "completes", "retryable", "terminal", "shorter visibility")
        ending = draw.choices(endings, weights=(1, 2, 1, 2, 2))[0]
        name = self.trace.key(key)
        if ending == "second completes":
            return SecondWorker()
        if ending == "shorter visibility":
            after = timedelta(seconds=draw.randint(15, 45))
            self.trace.add("FAULT", f"{name}: its message is visible again after {after.seconds} s, while it runs")
            return SecondWorker(after=after)
        if ending != "completes":
            self.world.stale_owner_failure[key] = ending
        self.trace.add("FAULT", f"the second worker of {name} dies holding it; the first {ending}")
        return SecondWorker(dies=True)

    def _sdk_resends(self, subject: str) -> bool:
        """Some lost answers are retried by the caller's SDK at once (botocore re-sends a 500): the
        caller sees the answer to the second send, and must recognise its own write in it."""
        resent = self.chaos.draw(Fault.LOST_ANSWER).random() < 0.4
        if resent:
            self.trace.add("FAULT", f"the SDK re-sends {subject}")
        return resent

    @contextmanager
    def _broken_deploy(self) -> Iterator[FaultCount]:
        """A deploy that cannot start (``broken_deploy``): for as many invocations as the queue's backstop,
        every batch fails before any claim, so its messages reach the DLQ; then the fix is deployed."""
        handle, failing = DurableConsumer.handle, {"left": 0}
        backstop = self.runtime.stack.queues[self.runtime.stack.output_reference("DurableQueueUrl").logical_id]
        window = (backstop.max_receive_count or 0) + 1

        def deploy(consumer: DurableConsumer, event: Any, context: Any) -> Any:
            if failing["left"] == 0 and self.chaos.fires(Fault.BROKEN_DEPLOY, "the durable consumer"):
                failing["left"] = window
                self._dlq_alarm = True  # once its messages reach the DLQ, the operator redrives them
            if failing["left"] > 0:
                failing["left"] -= 1
                raise faults.WorkerCrash("the deployed consumer fails at start")
            return handle(consumer, event, context)

        with mock.patch.object(DurableConsumer, "handle", deploy):
            yield self.chaos.count(Fault.BROKEN_DEPLOY)

    @contextmanager
    def _redelivering_early(self) -> Iterator[FaultCount]:
        """After an invocation failed as a whole, its messages are visible again at once (a visibility timeout
        shorter than the lease): a copy arrives while a crashed worker's lease is still live."""
        poll = self.durable.poll

        def early() -> Any:
            result = poll()
            crashed = result is not None and result.crashed is not None and self.durable.in_flight
            if crashed and self.chaos.fires(Fault.EARLY_REDELIVERY, f"{len(self.durable.in_flight)} message(s)"):
                faults.redeliver(self.durable)
            return result

        with mock.patch.object(self.durable, "poll", early):
            yield self.chaos.count(Fault.EARLY_REDELIVERY)

    def _before_send(self, entries: Sequence[Mapping[str, Any]]) -> None:
        names = ", ".join(
            f"{self.trace.event(str(e['MessageDeduplicationId']))}({e['MessageGroupId']})" for e in entries
        )
        if self.chaos.fires(Fault.PIPE_SEND_FAILURE, names):
            raise TargetInvocationError("injected: SendMessageBatch failed")
        self._record_sends(entries, "pipe sends")
        self.observations.sent_batches.append([dict(entry) for entry in entries])

    def _duplicate_delivery(self, _records: Sequence[PipeRecord]) -> bool:
        if not self.chaos.fires(Fault.PIPE_DUPLICATE_BATCH):
            return False
        self._record_sends(self.observations.sent_batches[-1], "pipe sends again")
        return True

    def _reorder(self, records: list[PipeRecord]) -> list[PipeRecord]:
        """Any order of the batch's items; one item's records keep theirs (stream order is per item)."""
        if len(records) < 2 or not self.chaos.fires(Fault.STREAM_REORDER, f"a batch of {len(records)}"):
            return records
        by_item: dict[str, list[PipeRecord]] = {}
        for record in records:
            by_item.setdefault(record.item_key, []).append(record)
        items = list(by_item.values())
        self.chaos.draw(Fault.STREAM_REORDER).shuffle(items)
        return [record for item in items for record in item]

    def _record_sends(self, entries: Sequence[Mapping[str, Any]], verb: str) -> None:
        now = self.runtime.clock()
        sends = [Send(str(e["MessageGroupId"]), str(e["MessageDeduplicationId"]), now) for e in entries]
        self.observations.sends.extend(sends)
        names = ", ".join(f"{self.trace.event(s.event_id)}({s.tenant})" for s in sends)
        self.trace.add("pipe", f"{verb}: {names}")

    def rival_emit(self, tenant: str) -> None:
        """Another writer of ``tenant`` commits an item first (the ``rival_emit`` fault)."""
        self._rival_serial += 1
        serial = self._rival_serial
        self._emit(
            self.rivals[tenant], Emit(f"rival{serial}", tenant, -1, f"rival-item{serial}", serial, False), "rival"
        )

    # -- the ordered actions ------------------------------------------------------------------------

    def perform(self, action: Action) -> None:
        if isinstance(action, Emit):
            self._emit(self.emitters[action.tenant][action.emitter], action, "workload")
        elif isinstance(action, Steps):
            for _ in range(action.count):
                self.runtime.step()
                self._respond_to_alarms()
        elif isinstance(action, Redeliver):
            self.trace.add("sqs", f"redelivers {faults.redeliver(self.durable)} message(s) in flight now")
        elif isinstance(action, LateRedelivery):
            self._late_redelivery(action.after_window)
        elif isinstance(action, Redrive):
            self.redrive(action.method)
        elif isinstance(action, Replay):
            self.replay()
        elif isinstance(action, Reconcile):
            self.reconcile(self.runtime.clock() - timedelta(days=action.days))
        elif isinstance(action, Poison):
            self._send_poison(action)
        elif isinstance(action, TimeJump):
            self._jump(action.days)
        elif isinstance(action, HeadRollback):
            self._roll_back_head(action.tenant)
        elif isinstance(action, ReadOnlyPass):
            self.read_only_pass()
        elif isinstance(action, Deploy):
            self.deploy(action.kind)

    def drain(self) -> None:
        """Run the pipeline until it is idle, with the schedule's operator actions at their drain steps."""
        pending = list(self.world.schedule.during_drain)

        def on_step(step: int) -> None:
            while pending and pending[0][0] <= step:
                self.perform(pending.pop(0)[1])
            self._respond_to_alarms()

        self.runtime.run_until_idle(on_step=on_step)
        for _, action in pending:  # the pipeline went idle before their step came
            self.perform(action)
        self.runtime.run_until_idle()
        while self._respond_to_alarms():  # an alarm raised by the pipeline's last steps
            self.runtime.run_until_idle(on_step=self._respond_each_step)

    def _respond_each_step(self, _step: int) -> None:
        self._respond_to_alarms()

    def _respond_to_alarms(self) -> bool:
        """The operator answers the alarms raised since the last step, as the runbook says; True if they acted."""
        acted = False
        if self._dlq_alarm and self.durable_dlq_depth() > 0:
            self._dlq_alarm = False
            # The loop more often than the move task: it is the method an interruption can cut in two.
            self.redrive(self._alarm_random.choices(("move-task", "receive-send-delete"), weights=(1, 2))[0])
            acted = True
        dead = len(self.observations.dead_marks)
        if dead > self._dead_seen:
            self._dead_seen = dead
            if self._alarm_random.random() < REPLAY_ON_ALARM:
                self.replay()
                acted = True
        return acted

    def _emit(self, emitter: Emitter, action: Emit, origin: str) -> None:
        emits = (action, *action.imported_with)
        records = [EmitRecord(e.operation, e.tenant, e.item_id, "", origin, size=e.size) for e in emits]
        self.world.emits.extend(records)
        record = records[0]
        outer, self._current = self._current, record
        try:
            if action.imported_with:
                self._import(emitter, emits, records)
            else:
                self._create(emitter, action, record)
        finally:
            self._current = outer
        for other in records[1:]:
            other.rivals = record.rivals  # one emit_many: one turn at the head for all of them
        if record.committed and outer is not None and outer.tenant == record.tenant:
            outer.rivals += 1  # a writer that moved the head under the emit in progress
        if outer is None and action.tenant in self.world.rolled_back:
            self._repair_head(action.tenant)

    # -- deploys ------------------------------------------------------------------------------------

    def deploy(self, kind: str) -> None:
        """A new version of the application goes out now, whatever is in flight: every function starts cold with
        the new catalog, every emitter and the operator's tools use it. After adding a subscription, the
        operator backfills it as docs/concepts.md says: ``reconcile --subscription S --since <the first event>``."""
        self._until_a_note_waits()
        clock = self.runtime.clock
        clock.advance(timedelta(seconds=1))
        self.world.deployed_at = clock.now_ms()  # every event emitted so far occurred before the switch
        clock.advance(timedelta(seconds=1))
        catalog = catalog_for(self.world)
        self.world.catalog = self.catalog = self.operations.catalog = catalog
        legacy = legacy_catalog_for(self.world) if self.world.schedule.legacy else None
        for tenant, emitters in self.emitters.items():
            for number, emitter in enumerate(emitters):
                last_years = legacy is not None and (tenant, number) == (self.world.schedule.legacy, 0)
                emitter.store.catalog = legacy if last_years else catalog
        for emitter in (*self.rivals.values(), *self.interlopers.values()):
            emitter.store.catalog = catalog
        for function in self.runtime.functions.values():
            function.new_container()
        self.world.slowest_runs.clear()  # new containers: the slowest runs the old ones saw are not known to them
        self.trace.add("deploy", f"{DEPLOY_KINDS[kind]}; sim.item_noted goes to version 2 (noted_by)")
        if kind == "added":
            self.reconcile(self._start, TALLY)

    def _until_a_note_waits(self) -> None:
        """Let the pipeline run a few steps, until a follow-up the old code noted (``sim.item_noted`` at version
        1) waits for its DynamoDB-only consumer: the deploy then goes out with it in flight."""
        for _ in range(DEPLOY_WAITS_STEPS):
            with self.chaos.paused():
                archived = {key for key, _ in self.world.handler_runs}
                waiting = any(e.type == ITEM_NOTED and f"{e.id}:{ARCHIVE}" not in archived for e in self._logs())
            if waiting:
                return
            self.runtime.step()

    # -- the log's own integrity --------------------------------------------------------------------

    def read_only_pass(self) -> None:
        """The hourly anchoring pass, then the on-call's status and verify-chain of every tenant, while other
        writers may commit (``emit_during_check``). Each break any of them reports, or finding the pass records,
        is noted: nobody alters a log before the run's end (a head set back is put right first)."""
        if self.world.rolled_back:
            self.trace.add("check", "a chain head is set back: the pass waits for the operator to put it right")
            return
        tenants = [tenant for tenant in self.world.schedule.tenants if self.world.emitted(tenant)]
        with self.chaos.paused(), self._checking_logs():
            self.runtime.function("AnchoringFunctionName").invoke(SCHEDULED_EVENT)
            status = self.operations.status()
            reports = [self.operations.verify(tenant) for tenant in tenants]
        for tenant in status.tenants:
            if not tenant.chain_intact:
                self.world.false_breaks.append(f"status: {tenant.tenant} broken at seq {tenant.first_broken_seq}")
        for report in reports:
            if not report.intact:
                self.world.false_breaks.append(f"verify-chain: {report.tenant} {report.reason}: {report.detail}")
        self.trace.add("check", f"anchoring pass, status and verify-chain of {', '.join(tenants) or 'no tenant'}")

    @contextmanager
    def _checking_logs(self) -> Iterator[None]:
        self._checking = True
        try:
            yield
        finally:
            self._checking = False

    def _roll_back_head(self, tenant: str) -> None:
        """The tenant's head goes back one event, as a restore from an older backup would set it: the next
        emit must refuse to write over the event at the seq it thinks is free."""
        with self.chaos.paused():
            log = list(self.emitters[tenant][0].store.events(tenant))
            if not log:
                return
            self._write_head(tenant, log[:-1])
        self.world.rolled_back.add(tenant)
        self.trace.add("log", f"{tenant}'s chain head is set back to seq {len(log) - 1}")

    def _repair_head(self, tenant: str) -> None:
        """The operator, told by ChainIntegrityError to run verify_chain, sets the head to the log's last event."""
        with self.chaos.paused():
            log = list(self.emitters[tenant][0].store.events(tenant))
            self._write_head(tenant, log)
        self.world.rolled_back.discard(tenant)
        self.trace.add("log", f"the operator sets {tenant}'s chain head to the log's last event, seq {len(log)}")

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

    def tamper(self) -> None:
        """Someone with write access to the events table rewrites an event in the middle of a tenant's log,
        with a hash that matches its new content (the row after it still links to the old hash)."""
        for tenant in self.world.schedule.tenants:
            log = list(self.emitters[tenant][0].store.events(tenant))
            if len(log) < 2:
                continue
            victim = log[self._random.randrange(len(log) - 1)]
            payload = {**victim.payload, "amount": int(victim.payload["amount"]) + 1}
            rewritten = reseal(victim, payload)
            self.operations.dynamodb.put_item(
                TableName=self.runtime.output("EventsTableName"), Item=rewritten.to_item()
            )
            self.world.tampered[tenant] = victim
            self.trace.add("log", f"{tenant} seq {victim.seq} is rewritten with a recomputed hash")
            return

    def rewrite(self) -> None:
        """The hourly anchoring pass runs; then a role that may emit rewrites a tenant's log from some seq to its
        end with ``PutItem``, every hash recomputed and the head row moved to the new last hash: verification
        from genesis finds nothing. The anchored row (the head when the pass ran) is among the rewritten."""
        with self.world.chaos.paused():
            self.runtime.function("AnchoringFunctionName").invoke(SCHEDULED_EVENT)
        for tenant in self.world.schedule.tenants:
            log = list(self.emitters[tenant][0].store.events(tenant))
            if tenant in self.world.tampered or not log:
                continue
            start = self._random.randrange(len(log))
            table = self.runtime.output("EventsTableName")
            prev_hash = log[start].prev_hash
            for index, victim in enumerate(log[start:]):
                changes: dict[str, Any] = {"prev_hash": prev_hash}
                if index == 0:
                    changes["payload"] = {**victim.payload, "amount": int(victim.payload["amount"]) + 7}
                unsealed = victim.model_copy(update=changes)
                forged = unsealed.model_copy(update={"hash": unsealed.computed_hash()})
                self.operations.dynamodb.put_item(TableName=table, Item=forged.to_item())
                prev_hash = forged.hash
            head = self.operations.dynamodb.get_item(TableName=table, Key=keys.head_key(tenant), ConsistentRead=True)
            self.operations.dynamodb.put_item(TableName=table, Item={**head["Item"], "last_hash": {"S": prev_hash}})
            self.world.rewritten[tenant] = log[start:]
            self.trace.add(
                "log", f"{tenant} seqs {log[start].seq}..{log[-1].seq} rewritten, hashes recomputed, head moved"
            )
            return

    def repair(self) -> None:
        """The runbook for a rewritten log: the anchoring pass records the break; the operator restores the rows
        as they were (from a backup) and the head with them, then resets the tenant's anchor, recorded with who
        and why. Status must be healthy again, the findings kept as history (invariants 7, 12)."""
        anchoring = self.runtime.function("AnchoringFunctionName")
        table = self.runtime.output("EventsTableName")
        for tenant, originals in self.world.rewritten.items():
            with self.chaos.paused():
                anchoring.invoke(SCHEDULED_EVENT)
                for envelope in originals:
                    self.operations.dynamodb.put_item(TableName=table, Item=envelope.to_item())
                head = self.operations.dynamodb.get_item(
                    TableName=table, Key=keys.head_key(tenant), ConsistentRead=True
                )["Item"]
                last = originals[-1]
                restored = {**head, "last_hash": {"S": last.hash}}
                self.operations.dynamodb.put_item(TableName=table, Item=restored)
            self.runtime.run_until_idle()  # the restore's own MODIFYs reach the tamper recorder
            self.runtime.clock.advance(timedelta(seconds=1))
            self.operator(f"anchor --reset {tenant}", partial(self._reset_anchor, tenant))
            with self.chaos.paused():
                anchoring.invoke(SCHEDULED_EVENT)
            self.world.repaired.add(tenant)
            self.trace.add("log", f"{tenant}'s rewritten rows restored and its anchor reset")

    def force_replay(self) -> None:
        """The operator forces a replay of an event the ordered ledger applied (by id, ``--force``). If the
        engine takes it, the pair is recorded as repaired and must run again (invariant 2)."""
        for record in self.world.emits:
            if (
                record.envelope is None
                or record.envelope.type != ITEM_CREATED
                or not self.world.in_order(record.envelope)
            ):
                continue
            claim = self.operations.inbox.read_claim(record.envelope.id, LEDGER)
            if claim is not None and claim.status == "COMPLETED":
                self.operator(f"replay --force {self.trace.event(record.envelope.id)}", partial(self._force, record))
                return

    def _force(self, record: EmitRecord) -> str:
        assert record.envelope is not None
        items = self.operations.plan_replay(event_ids=[record.envelope.id], subscription=LEDGER, force=True)
        keys = [f"{item.event_id}:{item.subscription}" for item in items]
        self._record_repair(keys, replay=True)
        self.world.forced.extend((key, len(self.world.handler_runs)) for key in keys)
        result = self.operations.replay(items)
        return f"republished {', '.join(map(self.trace.event, result.republished))}"

    def _reset_anchor(self, tenant: str) -> str:
        anchor = self.operations.reset_anchor(tenant, who=OPERATOR, reason="rows restored from the backup")
        return f"anchored at seq {anchor.seq}"

    def forge(self) -> None:
        """Someone the durable queue admits (or a policy that admits too much) sends it a tenant's next event:
        linked to the head's hash, sealed with a hash that matches, of a type with durable subscriptions. Only
        the log can tell it from a real one: it never held it."""
        for tenant in self.world.schedule.tenants:
            log = list(self.emitters[tenant][0].store.events(tenant))
            created = [event for event in log if event.type == ITEM_CREATED]
            if not created:
                continue
            event_id = self.world.ids()
            unsealed = created[-1].model_copy(
                update={
                    "id": event_id,
                    "seq": log[-1].seq + 1,
                    "prev_hash": log[-1].hash,
                    "correlation_id": event_id,
                    "causation_id": None,
                    "actor": "forger",
                    "payload": {**created[-1].payload, "amount": int(created[-1].payload["amount"]) + 1000},
                }
            )
            forged = unsealed.model_copy(update={"hash": unsealed.computed_hash()})
            self.world.forged.append(event_id)
            self.sqs.send_message(
                QueueUrl=self.durable_queue_url,
                MessageBody=json.dumps(forged.to_item()),
                MessageGroupId=tenant,
                MessageDeduplicationId=f"forged-{event_id}",
            )
            self.trace.add("sqs", f"{tenant}'s next event, seq {forged.seq}, forged: the log never held it")
            return

    def _create(self, emitter: Emitter, action: Emit, record: EmitRecord) -> None:
        spec = emitter.store.catalog.spec(ITEM_CREATED) if emitter.store.catalog is not None else None
        record.version = spec.version if spec is not None else record.version
        try:
            record.envelope = create_item(
                emitter.store,
                self.world.data_table,
                tenant=action.tenant,
                actor=emitter.name,
                operation=action.operation,
                item_id=action.item_id,
                amount=action.amount,
                reject=action.reject,
                size=action.size,
            )
        except Exception as exc:  # every failure is an outcome to check, not a reason to stop
            record.error = exc
        record.event_id = emitter.ids.last
        outcome = (
            f"committed at seq {record.envelope.seq}"
            if record.envelope is not None
            else f"failed: {brief(f'{type(record.error).__name__}: {record.error}')}"
        )
        self.trace.add(
            "emit",
            f"{action.operation} {self.trace.event(record.event_id)} by {emitter.name}: {action.item_id} {outcome}",
        )

    def _import(self, emitter: Emitter, emits: Sequence[Emit], records: Sequence[EmitRecord]) -> None:
        """Several items of one tenant in one ``emit_many``: every row and event commits, or none does."""
        spec = emitter.store.catalog.spec(ITEM_CREATED) if emitter.store.catalog is not None else None
        items = [NewItem(e.operation, e.item_id, e.amount, e.reject, e.size) for e in emits]
        given = emitter.ids.given
        self.world.importing = Import(emitter.name, len(items))
        envelopes: list[Envelope] = []
        try:
            envelopes = create_items(
                emitter.store, self.world.data_table, tenant=emits[0].tenant, actor=emitter.name, items=items
            )
        except Exception as exc:  # every failure is an outcome to check, not a reason to stop
            for record in records:
                record.error = exc
        finally:
            self.world.importing = None
        made = emitter.ids.recent[-(emitter.ids.given - given) :] if emitter.ids.given > given else []
        for index, record in enumerate(records):
            record.version = spec.version if spec is not None else record.version
            record.event_id = made[index] if index < len(made) else ""
            if envelopes:
                record.envelope = envelopes[index]
                record.event_id = envelopes[index].id
        first = records[0]
        outcome = (
            f"committed at seqs {envelopes[0].seq}..{envelopes[-1].seq}"
            if envelopes
            else f"failed: {brief(f'{type(first.error).__name__}: {first.error}')}"
        )
        events = ", ".join(self.trace.event(r.event_id) for r in records if r.event_id)
        what = f"{first.operation} imports {len(records)} items ({events})"
        self.trace.add("emit", f"{what} by {emitter.name}: {outcome}")

    def _late_redelivery(self, after_window: bool) -> None:
        """The pipe delivers a batch it already delivered (Pipes is at-least-once), possibly after SQS
        stopped deduplicating it."""
        batches = self.observations.sent_batches
        if not batches:
            return
        batch = batches[self._random.randrange(len(batches))]
        if after_window:
            self.runtime.clock.advance(DEDUPLICATION_WINDOW + timedelta(seconds=1))
        self.sqs.send_message_batch(QueueUrl=self.durable_queue_url, Entries=batch)
        self._record_sends(batch, "pipe redelivers" + (" after the deduplication window" if after_window else ""))

    def _send_poison(self, action: Poison) -> None:
        self._poison_serial += 1
        self.world.poison_sent += 1
        body = MALFORMED_BODIES[action.kind] or self._altered_event(action.tenant)
        self.sqs.send_message(
            QueueUrl=self.durable_queue_url,
            MessageBody=body,
            MessageGroupId=action.tenant,
            MessageDeduplicationId=f"poison-{self._poison_serial}",
        )
        self.trace.add("sqs", f"a malformed body ({action.kind}) lands in {action.tenant}'s group")

    def _altered_event(self, tenant: str) -> str:
        """A real event row of ``tenant`` with its amount changed and its hash kept: tampered in transit."""
        rows = self.operations.dynamodb.query(
            TableName=self.runtime.output("EventsTableName"),
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": {"S": keys.event_partition(tenant)}},
            Limit=1,
        )["Items"]
        if not rows:
            return json.dumps({"kind": {"S": "EVENT"}})
        row = rows[0]
        self.world.altered_in_transit.add(row["event_id"]["S"])
        payload = row["payload"]["M"]
        if "amount" in payload:
            payload["amount"] = {"N": str(int(payload["amount"]["N"]) + 1)}
        else:
            payload["tampered"] = {"BOOL": True}
        return json.dumps(row)

    def _jump(self, days: int) -> None:
        self.runtime.clock.advance(timedelta(days=days))
        swept = self.runtime.sweep_expired_items()
        if timedelta(days=days) >= self.operations.topology.inbox_retention:
            self.world.retention_passed = True
            self.world.retention_passed_at = self.runtime.clock()
        self.trace.add("time", f"{days} days pass; the TTL sweep deletes {sum(swept.values())} expired row(s)")

    # -- the operator -------------------------------------------------------------------------------

    def operator(self, name: str, action: Callable[[], str]) -> None:
        """Run an operator action with the pipeline's faults paused. If the operator's process dies in the
        middle, they run the same command again until it completes, as the runbook says (the fault's budget
        bounds the deaths)."""
        with self.chaos.paused(), self._armed():
            while True:
                self._plan_death(name)
                try:
                    self.trace.add("operator", f"{name}: {action()}")
                    return
                except OperatorInterrupted as exc:
                    self.trace.add("operator", f"{name} interrupted: {exc}, runs it again")
                except ClientError as exc:  # what AWS answered the operator's tool: they read it and run it again
                    self.trace.add("operator", f"{name} failed: {brief(str(exc))}, runs it again")
                except OperationRefusedError as exc:
                    self.trace.add("operator", f"{name} refused: {exc}")
                    return

    def _plan_death(self, name: str) -> None:
        """Whether the operator's process dies during this run of the action, and before which of its calls
        that change something: any of the first few, or the first message it sends (after a repair marked its
        pairs and before it handed them to the queue)."""

        def plan() -> tuple[int | None, bool]:
            if not self.chaos.fires(Fault.OPERATOR_INTERRUPTED, name, while_paused=True):
                return None, False
            draw = self.chaos.draw(Fault.OPERATOR_INTERRUPTED)
            if draw.random() < 0.5:
                return None, True
            return draw.randint(1, MAX_DEATH_CALL), False

        death = self._death
        death.calls, death.at, death.at_first_send, death.sent, death.plan = 0, None, False, False, plan

    @contextmanager
    def _armed(self) -> Iterator[None]:
        for client in self._operator_clients:
            client.armed = True
        try:
            yield
        finally:
            for client in self._operator_clients:
                client.armed = False

    def redrive(self, method: str) -> None:
        def run() -> str:
            result = self.operations.redrive(method=method)
            return f"moved {result.moved}, {result.remaining} left in the DLQ"

        self.operator(f"redrive ({method})", run)
        # As the CLI says when a DLQ's messages are all in flight (an interrupted redrive received them): they
        # are visible again within a minute, run it again then.
        for _ in range(MAX_REDRIVE_WAITS):
            visible, in_flight = self.durable_dlq_counts()
            if visible or not in_flight:
                return
            self.runtime.clock.advance(REDRIVE_RECEIVE_VISIBILITY)
            self.trace.add("operator", f"the DLQ's {in_flight} message(s) are in flight: waits a minute and redrives")
            self.operator(f"redrive ({method})", run)

    def replay(self) -> None:
        for tenant in self.world.schedule.tenants:
            self.operator(f"replay {tenant}", partial(self._replay_tenant, tenant))

    def _replay_tenant(self, tenant: str) -> str:
        if not self.operations.dead_letters(tenant):
            return "no dead letters"
        items = self.operations.plan_replay(tenant=tenant)
        self._record_repair([f"{item.event_id}:{item.subscription}" for item in items], replay=True)
        self.operations.replay(items)
        return ", ".join(self.trace.key(f"{item.event_id}:{item.subscription}") for item in items)

    def _record_repair(self, keys: list[str], *, replay: bool = False) -> None:
        """``keys`` repaired now; a ``replay`` gives their claims every attempt back (a reconcile of a stale
        claim leaves its count as it is)."""
        now, position = self.runtime.clock(), len(self.world.handler_runs)
        self.world.replays.extend((key, now) for key in keys)
        self.world.replay_positions.extend((key, position) for key in keys)
        if replay:
            self.world.replay_serials.extend((key, self.world.claims_recorded) for key in keys)

    def skip(self, tenant: str, seq: int, reason: str) -> None:
        """The operator skips the event the ordered ledger waits for (``outbox skip``), recorded before it runs:
        an interrupted skip may have committed."""

        def run() -> str:
            self.world.skips.append((tenant, seq))
            result = ordering_ops.skip(self.operations, tenant, LEDGER, seq, by=OPERATOR, reason=reason)
            woke = f", woke seq {result.woke_seq}" if result.woke_seq is not None else ""
            return f"{'already skipped' if result.already else 'skipped'}{woke}"

        self.operator(f"skip {tenant} seq {seq} for {LEDGER}", run)

    def skip_dead(self) -> None:
        """The runbook for a blocked ordered subscription, the skip way: each dead event it waits for is skipped."""
        with self.chaos.paused():
            blocked = ordering_ops.blocked(self.operations, list(self.world.schedule.tenants))
        for waiting in blocked:
            if waiting.subscription == LEDGER and waiting.waits_for_state == "DEAD":
                self.skip(waiting.tenant, waiting.waits_for_seq, "dead, and not worth replaying")

    def reconcile(self, since: datetime | None, subscription: str | None = None) -> None:
        """``outbox reconcile --since``, or ``--subscription S`` alone for an ordered S (from its watermark)."""
        publish = self.operations.publish

        def recorded(image: dict[str, Any], tenant: str, dedup_id: str, *, targets: Any) -> None:
            # Recorded as it is sent: a reconcile cut short has still repaired what it sent.
            self._record_repair([f"{image['event_id']['S']}:{name}" for name in targets])
            publish(image, tenant, dedup_id, targets=targets)

        def run() -> str:
            result = self.operations.reconcile(since, subscription=subscription)
            sent = ", ".join(map(self.trace.event, result.republished)) or "nothing"
            return f"scanned {result.scanned}, re-sent {sent}"

        with mock.patch.object(self.operations, "publish", recorded):
            self.operator("reconcile" + (f" --subscription {subscription}" if subscription else ""), run)

    def settle(self) -> None:
        """The runbook after the alarm: the cause is fixed, the DLQ redriven, (maybe) dead letters replayed."""
        self.chaos.heal()
        self.trace.add("operator", "the causes are fixed: no more faults")
        for round_ in range(3):
            if self.durable_dlq_depth() > 0:
                self.redrive("receive-send-delete")
            if round_ == 0 and self.world.schedule.skip_dead:
                self.skip_dead()
            if round_ == 0 and self.world.schedule.replay_at_the_end:
                self.replay()
            if round_ == 0 and self.chaos.fired[Fault.MESSAGE_LOST]:
                self.runtime.clock.advance(RECONCILE_WAIT)
                self.reconcile(self._start)
                if self.world.schedule.ordered:
                    self.reconcile(None, LEDGER)  # a lost wake-up: what the status's hint for a DEFERRED wait says
            self.runtime.run_until_idle()
            if self.durable_dlq_depth() == 0:
                return

    def age(self) -> None:
        """Days later (``Schedule.aged``): old messages arrive again and the operator repairs; nothing
        that completed may run again."""
        for action in self.world.schedule.aged:
            self.perform(action)
            self.runtime.run_until_idle()

    def durable_dlq_counts(self) -> tuple[int, int]:
        attributes = self.sqs.get_queue_attributes(
            QueueUrl=self.durable_dlq_url,
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        )["Attributes"]
        return int(attributes["ApproximateNumberOfMessages"]), int(attributes["ApproximateNumberOfMessagesNotVisible"])

    def durable_dlq_depth(self) -> int:
        attributes = self.sqs.get_queue_attributes(
            QueueUrl=self.durable_dlq_url,
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        )["Attributes"]
        return sum(int(value) for value in attributes.values())


def _refused_send() -> ClientError:
    """What SQS answers a SendMessage it will not take right now."""
    return ClientError(
        {"Error": {"Code": "ServiceUnavailable", "Message": "injected: SQS refused the send"}}, "SendMessage"
    )


def reseal(envelope: Envelope, payload: dict[str, Any]) -> Envelope:
    """``envelope`` with another payload and a hash that matches it (linked to the same previous hash)."""
    unsealed = envelope.model_copy(update={"payload": payload})
    return unsealed.model_copy(update={"hash": unsealed.computed_hash()})


def client(runtime: LocalRuntime, service: str) -> Any:
    """A client that does not retry: throttles reach the engine, whose own retries are under test (and
    botocore's backoff would sleep in real time)."""
    return local_client(service, runtime.endpoint_url, retries={"mode": "standard", "total_max_attempts": 1})
