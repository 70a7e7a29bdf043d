"""The operator of a run: the repairs the runbook gives (redrive, replay, skip, reconcile, reset), run through
clients whose process may die mid-action, answered to alarms while the pipeline runs, and settling at the end."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from functools import partial

from botocore.exceptions import ClientError

from outbox import Envelope, keys
from outbox.ops import OperationRefusedError, order_status
from outbox.ops import ordering as ordering_ops
from outbox.ops.groups import failure_groups, replay_group
from outbox.pairs import Route
from simulation.catalog import ITEM_CREATED, LEDGER
from simulation.driver_state import (
    MAX_DEATH_CALL,
    MAX_REDRIVE_WAITS,
    OPERATOR,
    RECONCILE_WAIT,
    REDRIVE_RECEIVE_VISIBILITY,
    SCHEDULED_EVENT,
    DriverState,
)
from simulation.operator_clients import OperatorInterrupted
from simulation.recorder import brief
from simulation.schedule import ROUTE_DEPLOYS, Fault
from simulation.world import EmitRecord

# How often in a row an operator runs a command again after AWS's answer failed it, before they escalate.
OPERATOR_RUNS_AFTER_FAILURES = 10
# How many turns the operator takes at what outbox status names after a deploy that changed pairs' routes.
FOLLOW_STATUS_TURNS = 4


class OperatorActions(DriverState):
    def operator(self, name: str, action: Callable[[], str], *, hinted: bool = False) -> None:
        """Run an operator action with the pipeline's faults paused. If the operator's process dies in the
        middle, they run the same command again until it completes, as the runbook says (the fault's budget
        bounds the deaths). An answer of AWS that fails the command they read, and run it again, up to
        ``OPERATOR_RUNS_AFTER_FAILURES`` times in a row: a command that fails every time is broken (the faults'
        budgets bound the failures a healthy one meets). A ``hinted`` command is one outbox status (or the rule of a
        dead letter) named: its refusal is recorded (invariant 17)."""
        failures = 0
        with self.chaos.paused(), self._armed():
            while True:
                self._plan_death(name)
                try:
                    self.trace.add("operator", f"{name}: {action()}")
                    return
                except OperatorInterrupted as exc:
                    self.trace.add("operator", f"{name} interrupted: {exc}, runs it again")
                except ClientError as exc:  # what AWS answered the operator's tool: they read it and run it again
                    failures += 1
                    if failures > OPERATOR_RUNS_AFTER_FAILURES:
                        what = f"{name} failed {failures} times in a row, last: {brief(str(exc))}"
                        self.trace.add("operator", f"{what}; they stop and escalate")
                        self.world.operator_crashes.append(what)
                        return
                    self.trace.add("operator", f"{name} failed: {brief(str(exc))}, runs it again")
                except OperationRefusedError as exc:
                    self.trace.add("operator", f"{name} refused: {exc}")
                    if hinted:
                        self.world.hint_refusals.append(f"{name}: {brief(str(exc))}")
                    return
                except Exception as exc:  # what no runbook step answers: the command is broken (invariant 17)
                    what = f"{name}: {type(exc).__name__}: {brief(str(exc))}"
                    self.trace.add("operator", f"{what}; nothing the operator can do")
                    self.world.operator_crashes.append(what)
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

    def replay(self, *, settling: bool = False) -> None:
        """``outbox replay`` of every open dead letter: tenant by tenant, or (``_replays_by_group``) failure group by
        failure group, as ``outbox dead-letters groups`` lists them across tenants."""
        if self._replays_by_group:
            self.operator("replay by failure group", partial(self._replay_groups, settling=settling))
            return
        for tenant in self.world.schedule.tenants:
            self.operator(f"replay {tenant}", partial(self._replay_tenant, tenant))

    def _replay_groups(self, *, settling: bool) -> str:
        """The group runbook with the operator's reading time in it: the pairs each group's dry run showed at
        the operator's last turn are replayed now (``outbox replay --group ID --yes``), whatever died in the
        group since; then each group's dry run again (``--dry-run``), replayed at the next turn, or at once when
        settling."""
        replayed = self._replay_approved()
        for group in failure_groups(self.operations):
            plan = replay_group(self.operations, group.id, dry_run=True)
            if plan.planned:
                self._group_plans[group.id] = list(plan.planned)
        if settling:
            replayed += self._replay_approved()
        shown = ", ".join(f"{group_id} ({len(pairs)})" for group_id, pairs in self._group_plans.items())
        return "; ".join(replayed or ["nothing approved"]) + (f"; dry runs shown: {shown}" if shown else "")

    def _replay_approved(self) -> list[str]:
        """Each group's approved pairs replayed, the group's plan forgotten once its replay returned (a rerun
        after an interruption goes on with the groups left)."""
        replayed = []
        for group_id, pairs in list(self._group_plans.items()):
            keys = [f"{pair.event_id}:{pair.subscription}" for pair in pairs]
            self._record_repair(keys, replay=True)
            replay_group(self.operations, group_id, only=pairs)
            del self._group_plans[group_id]
            replayed.append(f"{group_id} ({', '.join(self.trace.key(key) for key in keys)})")
        return replayed

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
            calls = len(self.observations.dead_calls)
            self.observations.replay_counts.extend((key, calls, self.observations.attempt_counts(key)) for key in keys)

    def skip(self, tenant: str, seq: int, reason: str, subscription: str = LEDGER, *, hinted: bool = False) -> None:
        """The operator skips the event the ordered ledger waits for (``outbox skip``), or acknowledges a pair the
        deployed catalog no longer runs, recorded before it runs: an interrupted skip may have committed."""

        def run() -> str:
            if subscription == LEDGER:
                self.world.skips.append((tenant, seq))
            lowest = ordering_ops.order_book(self.operations).deferred(tenant, subscription, limit=1)
            result = ordering_ops.skip(self.operations, tenant, subscription, seq, by=OPERATOR, reason=reason)
            if lowest and lowest[0].seq != seq and lowest[0].waits_for <= seq and result.woke_seq is None:
                self.world.skips_that_woke_nothing.append(
                    f"skip of {tenant} seq {seq} for {subscription} woke nothing: seq {lowest[0].seq} waited for "
                    f"seq {lowest[0].waits_for} behind it, and nothing else will send it on"
                )
            woke = f", woke seq {result.woke_seq}" if result.woke_seq is not None else ""
            return f"{'already skipped' if result.already else 'skipped'}{woke}"

        self.operator(f"skip {tenant} seq {seq} for {subscription}", run, hinted=hinted)

    def skip_dead(self) -> None:
        """The runbook for a blocked ordered subscription, the skip way: each dead event it waits for is skipped."""
        with self.chaos.paused():
            blocked = order_status.blocked(self.operations, list(self.world.schedule.tenants))
        for waiting in blocked:
            if waiting.subscription == LEDGER and waiting.waits_for_state == "DEAD":
                self.skip(waiting.tenant, waiting.waits_for_seq, "dead, and not worth replaying")

    def reconcile(self, since: datetime | None, subscription: str | None = None, *, hinted: bool = False) -> None:
        """``outbox reconcile --since``, or ``--subscription S`` alone for an ordered S (from its watermark)."""

        def recorded(event_id: str, targets: list[str], _repair: str) -> None:
            # Recorded as it is sent: a reconcile cut short has still repaired what it sent.
            self._record_repair([f"{event_id}:{name}" for name in targets])

        def run() -> str:
            result = self.operations.reconcile(since, subscription=subscription)
            sent = ", ".join(map(self.trace.event, result.republished)) or "nothing"
            return f"scanned {result.scanned}, re-sent {sent}"

        self.operations.sending.append(recorded)
        try:
            name = "reconcile" + (f" --subscription {subscription}" if subscription else "")
            self.operator(name, run, hinted=hinted)
        finally:
            self.operations.sending.remove(recorded)

    def settle(self) -> None:
        """The runbook after the alarm: the cause is fixed, the DLQ redriven, (maybe) dead letters replayed."""
        self.chaos.heal()
        self.trace.add("operator", "the causes are fixed: no more faults")
        self.confirm_dry_runs()
        for round_ in range(3):
            if self.durable_dlq_depth() > 0:
                self.redrive("receive-send-delete")
            if round_ == 0 and self.world.schedule.skip_dead:
                self.skip_dead()
            if round_ == 0 and self.world.schedule.replay_at_the_end:
                self.replay(settling=True)
            if round_ == 0 and self.chaos.fired[Fault.MESSAGE_LOST]:
                self.runtime.clock.advance(RECONCILE_WAIT)
                self.reconcile(self._start)
                if self.world.schedule.ordered:
                    self.reconcile(None, LEDGER)  # a lost wake-up: what the status's hint for a DEFERRED wait says
            if round_ == 0 and self.world.schedule.deploy in ROUTE_DEPLOYS:
                self.follow_status()
                self.after_a_route_deploy()
            self.runtime.run_until_idle()
            if self.durable_dlq_depth() == 0:
                return

    def follow_status(self) -> None:
        """The runbook after a deploy that changed pairs' routes, turn after turn until nothing is named: what
        ``outbox status`` says holds an order up, and the commands its hints name (``reconcile --subscription``,
        ``skip`` to acknowledge a dead event the order no longer has); every open dead letter of a pair the
        deployed catalog no longer runs acknowledged (``skip``: a replay would be refused); then the dead work it
        does run replayed. Each command a hint or a dead letter's rule names must not be refused (invariant 17)."""
        tenants = list(self.world.schedule.tenants)
        for turn in range(FOLLOW_STATUS_TURNS):
            with self.chaos.paused():
                blocked = order_status.blocked(self.operations, tenants)
                left_out, runnable = self._open_letters(tenants)
            reconciled: set[str] = set()
            for waiting in blocked:
                self.trace.add("operator", f"status: {waiting.line}")
                if "outbox reconcile" in waiting.hint and waiting.subscription not in reconciled:
                    reconciled.add(waiting.subscription)
                    self.reconcile(None, waiting.subscription, hinted=True)
                if "acknowledge it with outbox skip" in waiting.hint:
                    left_out.add((waiting.tenant, waiting.subscription, waiting.waits_for_seq))
            for tenant, subscription, seq in sorted(left_out):
                self.skip(tenant, seq, "the deployed catalog no longer runs it", subscription, hinted=True)
            if runnable and turn == 0:
                self.replay(settling=True)
            if not (blocked or left_out):
                return
            self.runtime.run_until_idle()

    def after_a_route_deploy(self) -> None:
        """The runbook's last step after a deploy that changed pairs' routes: an hour on, a reconcile of a window
        that covers it, for runs the deploy cut short that nothing else will send a message for (their own,
        redelivered, no longer names them); then what status names again (their dead letters, acknowledged)."""
        self.runtime.run_until_idle()
        self.runtime.clock.advance(RECONCILE_WAIT)
        self.reconcile(self._start, hinted=True)
        self.runtime.run_until_idle()
        self.follow_status()

    def _open_letters(self, tenants: list[str]) -> tuple[set[tuple[str, str, int]], bool]:
        """(tenant, subscription, seq) of each open dead letter of a pair the deployed catalog no longer runs, and
        whether any other is open (conflicts aside: no repair runs those)."""
        left_out: set[tuple[str, str, int]] = set()
        runnable = False
        for tenant in tenants:
            for letter in self.operations.dead_letters(tenant):
                if letter.resolved is not None or letter.reason == "conflict":
                    continue
                where = self.operations.placement(tenant, letter.event_seq, letter.event_type, letter.subscription)
                if where.route is Route.LEFT_OUT:
                    left_out.add((tenant, letter.subscription, letter.event_seq))
                else:
                    runnable = True
        return left_out, runnable

    def replay_pair(self, envelope: Envelope, subscription: str) -> None:
        """``outbox replay --event-id ... --subscription ...`` of one dead pair."""

        def run() -> str:
            items = self.operations.plan_replay(event_ids=[envelope.id], subscription=subscription)
            self._record_repair([f"{item.event_id}:{item.subscription}" for item in items], replay=True)
            result = self.operations.replay(items)
            return f"republished {', '.join(map(self.trace.event, result.republished)) or 'nothing'}"

        self.operator(f"replay {self.trace.event(envelope.id)} for {subscription}", run)

    def age(self) -> None:
        """Days later (``Schedule.aged``): old messages arrive again and the operator repairs; nothing
        that completed may run again."""
        for action in self.world.schedule.aged:
            self.perform(action)
            self.runtime.run_until_idle()
            if self.confirm_dry_runs():
                self.runtime.run_until_idle()

    def confirm_dry_runs(self) -> bool:
        """The operator confirms the failure groups' dry runs they read at their last turn (``--yes``), so that a
        repair they planned is not left undone at the end of the run; True if there were any."""
        if not self._group_plans:
            return False
        self.operator("replay by failure group (confirmed)", lambda: "; ".join(self._replay_approved()))
        return True

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
            if self.world.schedule.rewrite_after_reset:
                self.rewrite_in_the_reset_second(tenant)
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

    def _repair_head(self, tenant: str) -> None:
        """The operator, told by ChainIntegrityError to run verify_chain, sets the head to the log's last event."""
        with self.chaos.paused():
            log = list(self.emitters[tenant][0].store.events(tenant))
            self._write_head(tenant, log)
        self.world.rolled_back.discard(tenant)
        self.trace.add("log", f"the operator sets {tenant}'s chain head to the log's last event, seq {len(log)}")
