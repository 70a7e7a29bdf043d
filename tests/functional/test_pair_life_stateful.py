"""A pair's life under random sequences (``outbox.pairs``): the real consumer and operator tools on moto, driven by
Hypothesis through emits (late, duplicated, lost), deliveries, a handler that fails and is fixed, deploys that change
what the catalog does with the one subscription ``ledger.fold``, the engine's upgrade from the previous release (the
claim rows written so far hold the digest it wrote), and the repairs an operator runs.

After every step: no pair's effect doubled, nothing final carries an open dead letter, nothing dead lacks one, no
conflict is recorded (nobody sends other content), and each order's watermark counts exactly the events deferred
in it.
At the end (``teardown``): with the handler fixed and a final catalog deployed, the repairs status names (and the
operator's replays, reconciles and skips) leave every pair done, skipped, or left out by the catalog, with nothing
blocked and no dead letter open.
"""

from __future__ import annotations

import contextlib
import re
import sys
from collections import Counter
from datetime import datetime, timedelta
from typing import Any

from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from moto import mock_aws

from outbox import Envelope, TerminalError
from outbox.delivery.consumer import DurableConsumer
from outbox.exceptions import OperationRefusedError
from outbox.inbox import COMPLETED, DEAD, REPLAYING, SKIPPED, DeadLetter, DeadReason
from outbox.local import aws_fixes
from outbox.local.clock import VirtualClock
from outbox.ops.context import OperatorContext
from outbox.ops.order_status import blocked
from outbox.ops.ordering import skip
from outbox.ops.reconcile import reconcile
from outbox.ops.replay import plan_replay, replay
from outbox.pairs import Route
from outbox.pairs.order import OrderBook
from outbox.subscriptions import Delivery, Lane, Subscription, SubscriptionRegistry
from simulation.upgrade_actor import CLAIM_PREFIX, digest_of_0_6_0
from tests.functional.conftest import EVENTS_TABLE, ORDERS_TABLE
from tests.functional.inbox_harness import INBOX_TABLE, Harness, build_harness, operator_context

LEDGER = "ledger.fold"
TENANTS = ("acme", "globex")
TYPES = ("account.opened", "account.credited")
# The deployed catalog's variants of the ledger: the same name, each a deploy away from any other.
ORDERED, NARROWED, UNORDERED, SINCE, REMOVED, LOCAL = "ordered", "narrowed", "unordered", "since", "removed", "local"
VARIANTS = (ORDERED, NARROWED, UNORDERED, SINCE, REMOVED, LOCAL)
# What the handler does with an event until it is fixed.
OK, TERMINAL, RETRYABLE = "ok", "terminal", "retryable"
MODES = (OK, TERMINAL, RETRYABLE)
FIX = "fix"  # every event so far succeeds from now on
POLL, DRAIN, LAPSE = "poll", "drain", "lapse"
# How the relay gets an event to the queue: at once, later (in any order), twice, or never (the stream lost it:
# reconcile is what finds it).
NOW, LATE, TWICE, LOST = "now", "late", "twice", "lost"
MAX_EVENTS = 8
# One event: its tenant, type, what the handler does with it, how the relay sends it.
EMITS = st.tuples(
    st.sampled_from(TENANTS), st.sampled_from(TYPES), st.sampled_from(MODES), st.sampled_from((NOW, LATE, TWICE, LOST))
)
SETTLE_ROUNDS = 5
BY = "oncall@example.com"

# Commands in blocked()'s hints (outbox.ops.ordering._blocked): names end on a word character, before ":", "," or ".".
NAME = r"([\w.\-]*\w)"
REPLAY_HINT = re.compile(rf"outbox replay --tenant {NAME} --event-id (\w+) --subscription {NAME}")
SKIP_HINT = re.compile(rf"outbox skip --tenant {NAME} --subscription {NAME} --seq (\d+)")
RECONCILE_HINT = re.compile(rf"outbox reconcile --tenant {NAME} --subscription {NAME}")


class PairLife(RuleBasedStateMachine):
    """One harness (tables, FIFO queue and DLQ, consumer) per example, on its own moto and virtual clock."""

    def __init__(self) -> None:
        super().__init__()
        self.clock = VirtualClock()
        self.t0 = self.clock()
        self.mock = mock_aws()
        self.mock.start()
        self.uninstall = aws_fixes.install(self.clock)
        self.h: Harness = build_harness(lambda _recorder: [], self.clock)
        self.h.recorder.behaviours[LEDGER] = self.behave
        self.context: OperatorContext = operator_context(self.h, [])
        self.variant = REMOVED
        self.final = REMOVED
        self.initialized = False
        self.fixed = False
        self.events: list[Envelope] = []
        self.mode: dict[str, str] = {}
        self.late: list[Envelope] = []
        self.copies = 0
        self.succeeded: Counter[str] = Counter()  # handler runs that returned (an external effect done), per event
        self.failed: Counter[str] = Counter()
        self.log: list[str] = []  # what the settling did, for a failure's message

    # -- the world ------------------------------------------------------------------------------------------------

    def behave(self, delivery: Delivery) -> None:
        event_id = delivery.envelope.id
        mode = OK if self.fixed else self.mode.get(event_id, OK)
        if mode == TERMINAL:
            self.failed[event_id] += 1
            raise TerminalError("unknown account")
        if mode == RETRYABLE:
            self.failed[event_id] += 1
            raise ConnectionError("ledger db 503")
        self.succeeded[event_id] += 1

    def catalog(self, variant: str) -> list[Subscription]:
        handler = self.h.recorder.handler
        if variant == ORDERED:
            return [Subscription(LEDGER, "account.*", Lane.DURABLE, handler, ordered=True)]
        if variant == NARROWED:
            return [Subscription(LEDGER, "account.credited", Lane.DURABLE, handler, ordered=True)]
        if variant == UNORDERED:
            return [Subscription(LEDGER, "account.*", Lane.DURABLE, handler)]
        if variant == SINCE:  # ordered from the deploy on: moved past every event so far
            self.clock.advance(1)
            since = self.clock()
            self.clock.advance(1)
            return [Subscription(LEDGER, "account.*", Lane.DURABLE, handler, ordered=True, ordered_since=since)]
        if variant == LOCAL:
            return [Subscription(LEDGER, "account.*", Lane.LOCAL, handler)]
        assert variant == REMOVED
        return []

    def deploy(self, variant: str) -> None:
        """The same tables and queue, with a consumer and operator tools of the variant's catalog."""
        deployed = self.catalog(variant)
        consumer = DurableConsumer(
            SubscriptionRegistry.of(deployed), self.h.inbox, self.h.store, wake_ups=self.h.consumer.wake_ups
        )
        self.h.esm.handler = consumer.handle
        self.h.consumer = consumer
        self.context = operator_context(self.h, deployed)
        self.variant = variant

    def publish_copy(self, envelope: Envelope) -> None:
        """Another copy of the event's message (the relay is at least once): a dedup id SQS has not seen."""
        self.copies += 1
        self.h.publish(envelope, dedup_id=f"{envelope.id}-copy-{self.copies}")

    def pick(self, index: int) -> Envelope:
        return self.events[index % len(self.events)]

    # -- rules: emits and the relay ---------------------------------------------------------------------------------

    @initialize(
        first=st.sampled_from(VARIANTS),
        final=st.sampled_from(VARIANTS),
        emits=st.lists(EMITS, min_size=1, max_size=4),
        delivered=st.booleans(),
    )
    def start(self, first: str, final: str, emits: list[tuple[str, str, str, str]], delivered: bool) -> None:
        """The first catalog, the one the settling deploys at the end, and the first events (delivered at once or
        not: the random steps start from work done, dead or waiting as often as from none)."""
        self.deploy(first)
        self.final = final
        self.initialized = True
        for emit in emits:
            self.emit_one(*emit)
        if delivered:
            self.h.esm.drain()

    @precondition(lambda self: len(self.events) < MAX_EVENTS)
    @rule(emits=st.lists(EMITS, min_size=1, max_size=2))
    def emit(self, emits: list[tuple[str, str, str, str]]) -> None:
        for emit in emits[: MAX_EVENTS - len(self.events)]:
            self.emit_one(*emit)

    def emit_one(self, tenant: str, event_type: str, mode: str, how: str) -> None:
        envelope = self.h.store.emit(event_type, {"amount": 1}, tenant=tenant, actor="test")
        self.events.append(envelope)
        self.mode[envelope.id] = mode
        if how in (NOW, TWICE):
            self.h.publish(envelope)
        if how == TWICE:
            self.publish_copy(envelope)
        if how == LATE:
            self.late.append(envelope)

    @precondition(lambda self: self.events)
    @rule(index=st.integers(0, MAX_EVENTS - 1))
    def relay(self, index: int) -> None:
        """The relay delivers a late event (in any order), or, once none is late, another copy of one."""
        if self.late:
            self.h.publish(self.late.pop(index % len(self.late)))
        else:
            self.publish_copy(self.pick(index))

    # -- rules: the handler and deliveries --------------------------------------------------------------------------

    @precondition(lambda self: self.events)
    @rule(index=st.integers(0, MAX_EVENTS - 1), mode=st.sampled_from((*MODES, FIX)))
    def handler(self, index: int, mode: str) -> None:
        """What the handler does with one event from now on; or the fix, for every event so far."""
        if mode == FIX:
            self.mode = dict.fromkeys(self.mode, OK)
        else:
            self.mode[self.pick(index).id] = mode

    @rule(how=st.sampled_from((POLL, DRAIN, LAPSE)))
    def deliver(self, how: str) -> None:
        """One batch; or until the queue is empty (retries and wake-ups included); or one batch once leases and
        visibility timeouts have run out."""
        if how == DRAIN:
            self.h.esm.drain()
            return
        if how == LAPSE:
            self.clock.advance(timedelta(hours=1).total_seconds())
        self.h.esm.poll()

    @rule(variant=st.sampled_from(VARIANTS))
    def redeploy(self, variant: str) -> None:
        self.deploy(variant)

    @rule()
    def upgrade(self) -> None:
        """The consumers ran the previous release (0.6.0) until now: every claim row written so far holds the digest
        that release wrote for its content (an event without a trace context digested with the context as null)."""
        events = {envelope.id: envelope for envelope in self.events}
        for row in self.scan(INBOX_TABLE):
            envelope = events.get(row["pk"]["S"].removeprefix(CLAIM_PREFIX))
            older = digest_of_0_6_0(envelope) if envelope is not None and "digest" in row else None
            if older is not None:
                self.h.dynamodb.put_item(TableName=INBOX_TABLE, Item={**row, "digest": {"S": older}})

    # -- rules: the operator's repairs --------------------------------------------------------------------------------
    # A repair may be followed at once by a deploy (``then``): the deploy lands while its message is on its way, the
    # race outbox.pairs exists for (a separate redeploy step would rarely fall there).

    @rule(tenant=st.sampled_from(TENANTS), then=st.none() | st.sampled_from(VARIANTS))
    def replay_dead(self, tenant: str, then: str | None) -> None:
        # A refusal is the answer: nothing the deployed catalog runs is dead, or the tenant has no events yet.
        with contextlib.suppress(OperationRefusedError):
            replay(self.context, plan_replay(self.context, tenant=tenant))
        if then is not None:
            self.deploy(then)

    @precondition(lambda self: self.events)
    @rule(index=st.integers(0, MAX_EVENTS - 1))
    def skip_event(self, index: int) -> None:
        envelope = self.pick(index)
        with contextlib.suppress(OperationRefusedError):
            skip(self.context, envelope.tenant, LEDGER, envelope.seq, by=BY, reason="the operator's decision")

    @rule(then=st.none() | st.sampled_from(VARIANTS))
    def reconcile_ledger(self, then: str | None) -> None:
        with contextlib.suppress(OperationRefusedError):  # removed, or on the LOCAL lane: nothing to reconcile
            reconcile(self.context, None, subscription=LEDGER)
        if then is not None:
            self.deploy(then)

    @rule(choice=st.integers(0, 2))
    def follow_hints(self, choice: int) -> None:
        for stuck in blocked(self.context):
            commands = self.commands(stuck.hint)
            if commands:
                self.run_command(commands[choice % len(commands)])

    # -- the commands status names -------------------------------------------------------------------------------

    @staticmethod
    def commands(hint: str) -> list[tuple[str, ...]]:
        """The commands a blocked order's hint names, in the order it names them (the replay before the skip)."""
        found: list[tuple[int, tuple[str, ...]]] = []
        for match in REPLAY_HINT.finditer(hint):
            found.append((match.start(), ("replay", *match.groups())))
        for match in SKIP_HINT.finditer(hint):
            found.append((match.start(), ("skip", *match.groups())))
        for match in RECONCILE_HINT.finditer(hint):
            found.append((match.start(), ("reconcile", *match.groups())))
        return [command for _start, command in sorted(found)]

    def run_command(self, command: tuple[str, ...]) -> bool:
        """Run one command of a hint as the CLI would; False when it is refused."""
        self.log.append(" ".join(command))
        try:
            if command[0] == "replay":
                _, tenant, event_id, subscription = command
                replay(
                    self.context,
                    plan_replay(self.context, tenant=tenant, event_ids=[event_id], subscription=subscription),
                )
            elif command[0] == "skip":
                _, tenant, subscription, seq = command
                skip(self.context, tenant, subscription, int(seq), by=BY, reason="named by status")
            else:
                _, tenant, subscription = command
                reconcile(self.context, None, tenant=tenant, subscription=subscription)
        except OperationRefusedError as exc:
            self.log.append(f"  refused: {exc}")
            return False
        return True

    # -- what the tables say -------------------------------------------------------------------------------------------

    def scan(self, table: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        request: dict[str, Any] = {"TableName": table, "ConsistentRead": True}
        while True:
            page = self.h.dynamodb.scan(**request)
            items += page["Items"]
            if "LastEvaluatedKey" not in page:
                return items
            request["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def pairs(self) -> list[dict[str, Any]]:
        """Each emitted event's ledger pair: its claim's status (None: no row), effect rows, open dead letter,
        and handler runs (those that returned and those that raised)."""
        inbox = self.scan(INBOX_TABLE)
        claims = {row["pk"]["S"]: row["status"]["S"] for row in inbox if row["sk"]["S"] == LEDGER}
        letters = {
            row["sk"]["S"]: row
            for row in inbox
            if row["pk"]["S"].endswith("#DEAD") and row["sk"]["S"].endswith(f"#{LEDGER}")
        }
        effects = Counter(row["pk"]["S"] for row in self.scan(ORDERS_TABLE))
        pairs = []
        for envelope in self.events:
            letter = letters.get(f"{envelope.id}#{LEDGER}")
            pairs.append(
                {
                    "tenant": envelope.tenant,
                    "seq": envelope.seq,
                    "type": envelope.type,
                    "id": envelope.id,
                    "status": claims.get(f"CLAIM#{envelope.id}"),
                    "effects": effects[f"EFFECT#{envelope.id}:{LEDGER}"],
                    "open_letter": None if letter is None or "resolved" in letter else letter["reason"]["S"],
                    "succeeded": self.succeeded[envelope.id],
                    "runs": self.h.runs(LEDGER, envelope),
                    "failed": self.failed[envelope.id],
                }
            )
        return pairs

    def open_letters(self) -> list[str]:
        """Open dead letters of every tenant other than conflicts: '<event id>#<subscription>: <reason>'."""
        return sorted(
            f"{row['sk']['S']}: {row['reason']['S']}"
            for row in self.scan(INBOX_TABLE)
            if row["pk"]["S"].endswith("#DEAD") and "resolved" not in row and row["reason"]["S"] != "conflict"
        )

    # -- invariants, after every step ------------------------------------------------------------------------------

    @invariant()
    def never_a_false_conflict(self) -> None:
        """Every message of an event carries the log's own content: a conflict would be a pair never run (or, done,
        a false alarm), as the previous release's claim rows were taken for other content after an upgrade."""
        conflicts = [row for row in self.scan(INBOX_TABLE) if row.get("reason", {}).get("S") == "conflict"]
        assert not conflicts, conflicts

    @invariant()
    def never_doubled_never_contradictory(self) -> None:
        quiet = self.queue_is_quiet()
        for pair in self.pairs():
            # 1. never doubled: one effect row at most, and a handler that returned at most once (runs beyond it
            # are failed attempts only)
            assert pair["effects"] <= 1, pair
            assert pair["runs"] == pair["succeeded"] + pair["failed"], pair
            assert pair["succeeded"] <= 1, f"the handler completed twice: {pair}"
            # an effect is a completion's: a pair whose effect is written never turns open work again
            if pair["effects"]:
                assert pair["status"] in (COMPLETED, SKIPPED), pair
            # 2. nothing final carries an open dead letter; and a DEAD pair has the letter the operator sees
            if pair["status"] in (COMPLETED, SKIPPED):
                assert pair["open_letter"] is None, pair
            if pair["status"] == DEAD:
                assert pair["open_letter"] is not None, pair
            # 3. REPLAYING says a replay's (or a reconcile's) message is on its way: once the queue holds none,
            # nothing is (a repair message for a pair the catalog left out makes it DEAD, with a letter)
            if pair["status"] == REPLAYING:
                assert not quiet, f"REPLAYING with no message on its way: {pair}"

    @invariant()
    def each_order_counts_what_waits_in_it(self) -> None:
        """A watermark's count of deferred events is the number of its deferred rows: a row that left the order
        without the count (or the reverse) would hold the order up, or make it look held up, for ever."""
        if not self.initialized:
            return
        book = OrderBook(INBOX_TABLE, EVENTS_TABLE, client=self.h.dynamodb, clock=self.clock)
        for tenant in TENANTS:
            rows = book.deferred(tenant, LEDGER)
            assert book.watermark(tenant, LEDGER).deferred == len(rows), (tenant, [row.seq for row in rows])

    def queue_is_quiet(self) -> bool:
        """No message on the durable queue: none visible, in flight or delayed."""
        attributes = self.h.sqs.get_queue_attributes(
            QueueUrl=self.h.queue_url,
            AttributeNames=[
                "ApproximateNumberOfMessages",
                "ApproximateNumberOfMessagesNotVisible",
                "ApproximateNumberOfMessagesDelayed",
            ],
        )["Attributes"]
        return not self.h.esm.in_flight and all(int(value) == 0 for value in attributes.values())

    # -- liveness, at the end --------------------------------------------------------------------------------------

    def teardown(self) -> None:
        try:
            if self.initialized and sys.exc_info()[0] is None:  # a step that failed is the failure to report
                self.settle()
        finally:
            self.uninstall()
            self.mock.stop()

    def settle(self) -> None:
        """Fix the handler, deploy the final catalog, let the relay deliver what it still owes, then run, for at
        most five rounds, what status names, a replay of dead work, reconcile, and a skip of what stays dead or
        left out: every pair ends in an outcome."""
        self.fixed = True
        self.deploy(self.final)
        self.log.append(f"deploy {self.final}")
        for envelope in self.late:
            self.h.publish(envelope)
        self.late.clear()
        self.h.esm.drain()
        self.clock.advance(timedelta(hours=2).total_seconds())  # the operator comes later: leases have lapsed
        for n in range(SETTLE_ROUNDS):
            self.h.esm.drain()
            if not self.unsettled():
                break
            self.log.append(f"-- round {n + 1}: {self.unsettled()}")
            for stuck in blocked(self.context):
                self.log.append(f"blocked: {stuck.line}")
                for command in self.commands(stuck.hint):  # the replay first; its skip only if it is refused
                    if self.run_command(command):
                        break
            self.h.esm.drain()
            for tenant in sorted({e.tenant for e in self.events}):
                self.run_replay(tenant)
            self.h.esm.drain()
            self.run_reconciles()
            self.h.esm.drain()
            self.skip_what_remains()
        self.h.esm.drain()
        problems = self.unsettled()
        assert not problems, "\n".join(["not settled:", *problems, "settling did:", *self.log])

    def run_replay(self, tenant: str) -> None:
        try:
            result = replay(self.context, plan_replay(self.context, tenant=tenant))
            self.log.append(f"replay --tenant {tenant}: {result.republished}")
        except OperationRefusedError as exc:
            self.log.append(f"replay --tenant {tenant} refused: {exc}")

    def run_reconciles(self) -> None:
        """The ledger's own reconcile (its order from the watermark, or what a deploy took out of an order), and
        the window reconcile for messages the stream lost (no claim where the catalog now runs the pair)."""
        for since, name in ((None, LEDGER), (self.t0, None)):
            try:
                result = reconcile(self.context, since, subscription=name)
                self.log.append(f"reconcile {name or ''} {since or ''}: {result.subscriptions}")
            except OperationRefusedError as exc:
                self.log.append(f"reconcile {name or ''} {since or ''} refused: {exc}")

    def skip_what_remains(self) -> None:
        """The operator's explicit decision, on what an operator sees: acknowledge each pair an open dead letter
        names (outbox dead-letters list), and each event the final catalog no longer runs (the deploy's diff and
        the log say which), lowest seq first, as an order skips its next event only. The tables' claims are not
        read here: a pair that needs a repair must show in a dead letter, in status, or to reconcile."""
        named = {(letter.tenant, letter.event_seq) for letter in self.open_dead_letters()}
        left_out = {(e.tenant, e.seq) for e in self.events if self.route_of(e) is Route.LEFT_OUT}
        for tenant, seq in sorted(named | left_out):
            self.run_command(("skip", tenant, LEDGER, str(seq)))

    def open_dead_letters(self) -> list[DeadLetter]:
        return [
            letter
            for tenant in self.context.tenants()
            for letter in self.context.inbox.dead_letters(tenant)
            if letter.resolved is None and letter.reason != DeadReason.CONFLICT and letter.subscription == LEDGER
        ]

    def route_of(self, envelope: Envelope) -> Route:
        return self.context.deployed.place(LEDGER, envelope.type, envelope.occurred_at).route

    def route(self, pair: dict[str, Any]) -> Route:
        return self.context.deployed.place(LEDGER, pair["type"], self.occurred_at(pair["id"])).route

    def occurred_at(self, event_id: str) -> datetime:
        return next(e.occurred_at for e in self.events if e.id == event_id)

    def unsettled(self) -> list[str]:
        """What is not an outcome: each pair COMPLETED with one effect, SKIPPED, or left out by the final catalog
        without ever having had a claim; no order blocked; no dead letter open (conflicts aside)."""
        problems = []
        for pair in self.pairs():
            status, route = pair["status"], self.route(pair)
            if status == COMPLETED and pair["effects"] == 1:
                continue
            if status == SKIPPED or (status is None and route is Route.LEFT_OUT):
                continue
            problems.append(f"pair {pair} is {status} under {self.final} (route {route.value})")
        problems += [f"blocked: {stuck.line}" for stuck in blocked(self.context)]
        problems += [f"open dead letter {letter}" for letter in self.open_letters()]
        return problems


def test_every_pair_ends_in_an_outcome_whatever_the_deploys_deliveries_and_repairs(aws_credentials: None) -> None:
    run_state_machine_as_test(
        PairLife,
        settings=settings(
            max_examples=50,
            stateful_step_count=20,
            deadline=None,
            derandomize=True,  # the same sequences in every run: CI reproduces what a developer saw
            database=None,
            # No explain phase: each example is a whole harness on moto (about a second), and shrinking alone
            # is bounded (five minutes) by Hypothesis.
            phases=(Phase.explicit, Phase.generate, Phase.shrink),
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
