"""Drives one run: the workload's emits, the pipeline's steps, the injected faults and the operator.

Concurrent emitters are separate ``EventStore`` instances (as separate processes have) whose emits the
schedule interleaves, one at a time. The moment that matters for a race, between reading the chain head
and the transaction, is reached by the ``rival_emit`` fault, which commits another emitter's event right
there. No thread is involved, so a seed replays exactly.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import timedelta

from botocore.exceptions import ClientError

from outbox import Envelope
from outbox.local import faults
from outbox.local.runtime import LocalRuntime
from outbox.ops.ordering import order_book
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
from simulation.chaos_actor import FaultSeams
from simulation.driver_state import (
    DEDUPLICATION_WINDOW,
    DEPLOY_WAITS_FOR_DEAD_WORK,
    DEPLOY_WAITS_STEPS,
    REPLAY_ON_ALARM,
    SCHEDULED_EVENT,
    client,
)
from simulation.emitters import Emitter
from simulation.intruder_actor import Intrusions
from simulation.observations import Observations
from simulation.operator_actor import OperatorActions
from simulation.recorder import brief
from simulation.schedule import (
    DEPLOY_KINDS,
    ROUTE_DEPLOYS,
    Action,
    Deploy,
    Emit,
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
    Upgrade,
)
from simulation.upgrade_actor import Upgrades
from simulation.workflows import WorkflowActors
from simulation.world import EmitRecord, Import, World

__all__ = ["Driver", "client"]


class Driver(FaultSeams, OperatorActions, Intrusions, Upgrades, WorkflowActors):
    """One run's actors together: the workload's emits and deploys, the pipeline's steps and the read-only
    passes here; the faults, the operator, the intruder, the engine's upgrade and the workflow's carrier in their
    modules, all on one ``DriverState``."""

    def __init__(self, world: World, runtime: LocalRuntime, observations: Observations) -> None:
        super().__init__(world, runtime, observations)
        self._workflow_state()

    def perform(self, action: Action) -> None:
        if isinstance(action, Emit):
            self._emit(self.emitters[action.tenant][action.emitter], action, "workload")
        elif isinstance(action, Steps):
            for _ in range(action.count):
                self.runtime.step()
                self.carry()
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
        elif isinstance(action, Upgrade):
            self.upgrade()

    def drain(self) -> None:
        """Run the pipeline until it is idle, with the schedule's operator actions at their drain steps."""
        pending = list(self.world.schedule.during_drain)

        def on_step(step: int) -> None:
            while pending and pending[0][0] <= step:
                self.perform(pending.pop(0)[1])
            self.carry()
            self._respond_to_alarms()

        self.runtime.run_until_idle(on_step=on_step)
        for _, action in pending:  # the pipeline went idle before their step came
            self.perform(action)
        self.runtime.run_until_idle()
        while self._respond_to_alarms():  # an alarm raised by the pipeline's last steps
            self.runtime.run_until_idle(on_step=self._respond_each_step)
        self.finish_workflows()  # the executions still waiting on the carrier, answered, and their pairs settled

    def _respond_each_step(self, _step: int) -> None:
        self.carry()
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

    def deploy(self, kind: str) -> None:
        """A new version of the application goes out now, whatever is in flight: every function starts cold with
        the new catalog, every emitter and the operator's tools use it. After adding a subscription, the
        operator backfills it as docs/concepts.md says: ``reconcile --subscription S --since <the first event>``."""
        self._until_a_note_waits()
        if kind in ROUTE_DEPLOYS:
            self._until_dead_work_waits(kind)
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

    def _until_dead_work_waits(self, kind: str) -> None:
        """Before a deploy that changes a pair's route: the pipeline runs a few steps more, until the item the
        schedule's subscription refuses is dead (and, for the ledger, an event of its tenant deferred behind it),
        so that the deploy meets dead and deferred work; and, when the schedule says so, the operator replays the
        dead pair right before the switch, so that the replay's message reaches the new code."""
        schedule = self.world.schedule
        ledger = kind != "tally_to_local"
        operation = schedule.ledger_refuses if ledger else schedule.tally_refuses
        subscription = LEDGER if ledger else TALLY
        record = next((r for r in self.world.emits if r.operation == operation and r.envelope is not None), None)
        if record is None or record.envelope is None:
            return
        envelope = record.envelope
        dead = False
        for _ in range(DEPLOY_WAITS_FOR_DEAD_WORK):
            with self.chaos.paused():
                claim = self.operations.inbox.read_claim(envelope.id, subscription)
                dead = claim is not None and claim.status == "DEAD"
                book = order_book(self.operations)
                waiting = not ledger or bool(book.deferred(envelope.tenant, LEDGER, limit=1))
            if dead and waiting:
                break
            if not self.runtime.step():  # as run_until_idle does: time passes while messages wait to be visible
                runtime = self.runtime
                waits = [entry.visible_at for m in runtime.mappings.values() for entry in m.in_flight]
                waits += [p.next_retry_at for p in runtime.running_pipes() if p.next_retry_at is not None]
                if not waits:
                    break
                runtime.clock.advance(max(timedelta(0), min(waits) - runtime.clock()))
        if dead and schedule.replay_races_deploy:
            self.replay_pair(envelope, subscription)

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
        try:
            self.sqs.send_message_batch(QueueUrl=self.durable_queue_url, Entries=batch)
        except ClientError as exc:  # a batch SQS refused when the pipe first sent it (a body over its size)
            self.trace.add("pipe", f"redelivery refused as the first send was: {brief(str(exc))}")
            return
        self._record_sends(batch, "pipe redelivers" + (" after the deduplication window" if after_window else ""))

    def _jump(self, days: int) -> None:
        self.runtime.clock.advance(timedelta(days=days))
        swept = self.runtime.sweep_expired_items()
        if timedelta(days=days) >= self.operations.topology.inbox_retention:
            self.world.retention_passed = True
            self.world.retention_passed_at = self.runtime.clock()
        self.trace.add("time", f"{days} days pass; the TTL sweep deletes {sum(swept.values())} expired row(s)")
