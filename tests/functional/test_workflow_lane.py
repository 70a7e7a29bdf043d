"""The WORKFLOW lane end to end on moto: each pair is handed to exactly one durable execution, whatever is lost.

The durable consumer runs on the local event source mapping over a real FIFO queue; its Lambda client is a real
boto3 client answered by ``LocalDurableFunctions``, where the testing SDK runs the durable handler below. The faults
are the service's own seams (an answer lost after the start applied, the worker dying right after the start) and
the queue's (a duplicate delivery): nothing of the engine is patched. After every scenario: one execution per
(pair, attempt), and the pair ends COMPLETED or DEAD with a dead letter naming the execution.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import pytest
from aws_durable_execution_sdk_python import DurableContext, StepContext, durable_execution, durable_step

from outbox import Envelope, EventStore
from outbox.delivery.consumer import DurableConsumer
from outbox.inbox import Inbox
from outbox.local.clock import VirtualClock
from outbox.local.durable_functions import LocalDurableFunctions
from outbox.local.esm import SqsEventSourceMapping
from outbox.local.fault_count import FaultCount
from outbox.local.lambda_context import LocalLambdaContext
from outbox.pairs import State
from outbox.subscriptions import Lane, Subscription, SubscriptionRegistry
from outbox.workflows import WorkflowInput, execution_name, workflow
from outbox.workflows.ends import Settled, WorkflowEnds
from outbox.workflows.handoffs import Handoffs
from outbox.workflows.starter import WorkflowStarter
from tests.functional.inbox_harness import (
    INBOX_TABLE,
    VISIBILITY_TIMEOUT,
    Harness,
    HarnessFactory,
    build_harness,
    operator_context,
)

SUBSCRIPTION = "shipping.ship_order"
FUNCTION = "arn:aws:lambda:us-east-1:123456789012:function:ship-order:live"
# What the workflow below did, by event id: the steps it ran (a step the SDK replays is not run again).
STEPS: dict[tuple[str, int], list[str]] = {}
FAILING: set[str] = set()


@durable_step
def book(step: StepContext, order_id: str, attempt: int) -> str:
    STEPS.setdefault((order_id, attempt), []).append("book")
    if order_id in FAILING:
        raise RuntimeError("the carrier refused the booking")
    return f"label-{order_id}"


@durable_execution
def ship_order(event: dict[str, Any], context: DurableContext) -> dict[str, Any]:
    given = WorkflowInput.of(event)
    label = context.step(book(given.envelope.id, given.attempt), name="book")
    return {"label": label, "attempt": given.attempt}


@durable_execution
def ship_with_label(event: dict[str, Any], context: DurableContext) -> dict[str, Any]:
    """Books, then waits for the carrier's label callback (a test completes it, or stops the execution)."""
    given = WorkflowInput.of(event)
    context.step(book(given.envelope.id, given.attempt), name="book")
    label = context.create_callback(name="label")
    return {"label": label.result()}


@dataclass
class WorkflowLane:
    sqs: Any
    dynamodb: Any
    clock: VirtualClock
    store: EventStore
    inbox: Inbox
    queue_url: str
    esm: SqsEventSourceMapping
    durable: LocalDurableFunctions
    ends: WorkflowEnds
    harness: Harness

    def emit(self) -> Envelope:
        envelope = self.store.emit("order.paid", {"n": 1}, tenant="acme", actor="test")
        self.publish(envelope)
        return envelope

    def publish(self, envelope: Envelope, dedup: str | None = None) -> None:
        self.sqs.send_message(
            QueueUrl=self.queue_url,
            MessageBody=json.dumps(envelope.to_item()),
            MessageGroupId=envelope.tenant,
            MessageDeduplicationId=dedup or envelope.id,
        )

    def deliver(self) -> None:
        """Poll until the queue is empty, the clock moving past leases and visibility timeouts between polls."""
        for _ in range(12):
            self.esm.poll()
            self.clock.advance(VISIBILITY_TIMEOUT + timedelta(seconds=1))
        self.esm.poll()

    def status(self, envelope: Envelope) -> str | None:
        record = self.inbox.read_claim(envelope.id, SUBSCRIPTION)
        return None if record is None else record.status

    def executions_of(self, envelope: Envelope) -> dict[str, int]:
        """How many executions were started under each name of the pair (by the service's own count)."""
        function = FUNCTION.rpartition(":")[0]
        return {name: n for (f, name), n in self.durable.starts.items() if f == function and envelope.id in name}

    def settle_when_ended(self, envelope: Envelope) -> Settled:
        arn = self.claim_row(envelope)["execution_arn"]["S"]
        self.durable.wait(arn)
        return self.ends.settle(envelope.id, SUBSCRIPTION)

    def claim_row(self, envelope: Envelope) -> dict[str, Any]:
        item: dict[str, Any] = self.dynamodb.get_item(
            TableName=INBOX_TABLE, Key={"pk": {"S": f"CLAIM#{envelope.id}"}, "sk": {"S": SUBSCRIPTION}}
        )["Item"]
        return item


def shipping() -> Subscription:
    return Subscription(SUBSCRIPTION, "order.paid", Lane.WORKFLOW, workflow(f"{__name__}:ship_order"))


@pytest.fixture
def lane(aws: None, clock: VirtualClock) -> Iterator[WorkflowLane]:
    STEPS.clear()
    FAILING.clear()
    durable = LocalDurableFunctions()
    durable.register(FUNCTION, ship_order)
    starter = WorkflowStarter(durable.client(retries=1))
    h = build_harness(lambda _: [shipping()], clock, workflows=starter, workflow_functions={SUBSCRIPTION: FUNCTION})
    try:
        yield WorkflowLane(
            h.sqs, h.dynamodb, clock, h.store, h.inbox, h.queue_url, h.esm, durable, WorkflowEnds(h.inbox, starter), h
        )
    finally:
        durable.close()


def assert_one_execution_completed(lane: WorkflowLane, envelope: Envelope) -> None:
    name = execution_name(envelope.id, SUBSCRIPTION, 1)
    assert lane.executions_of(envelope) == {name: 1}, "one execution, under the pair's name"
    assert lane.status(envelope) == State.HANDED
    assert lane.claim_row(envelope)["execution_name"]["S"] == name
    assert lane.settle_when_ended(envelope) is Settled.COMPLETED
    assert lane.status(envelope) == State.COMPLETED
    assert STEPS[(envelope.id, 1)] == ["book"], "the workflow's step ran once"
    assert list(Handoffs(lane.inbox).running()) == [], "nothing is left listed as running"


@durable_step
def book_slowly(step: StepContext, order_id: str) -> str:
    time.sleep(0.3)  # real time: the caller's next calls would run meanwhile
    STEPS.setdefault((order_id, 1), []).append("book")
    return f"label-{order_id}"


@durable_execution
def ship_slowly(event: dict[str, Any], context: DurableContext) -> dict[str, Any]:
    return {"label": context.step(book_slowly(WorkflowInput.of(event).envelope.id), name="book")}


@pytest.mark.parametrize("settle_starts", [True, False])
def test_settled_starts_run_up_to_their_first_wait_when_their_invocation_ends(
    lane: WorkflowLane, settle_starts: bool
) -> None:
    """``settle_starts``, the simulator's one interleaving: the executions an invocation started run up to their first
    wait when it ends (``settle_started``, which the local runtime calls after each invocation), so their calls never
    meet the next invocation's in an order the threads choose (a seed replays exactly). Without it, as on AWS, an
    execution runs beside whatever comes next."""
    lane.durable.settle_starts = settle_starts
    lane.durable.replace_handler(FUNCTION, ship_slowly)
    envelope = lane.emit()
    lane.esm.poll()  # one receive: the pair is handed, its start answered
    lane.durable.settle_started()

    [execution] = lane.durable.executions()
    status = lane.durable.status(execution.arn)["Status"]
    if settle_starts:
        assert status == "SUCCEEDED", "the execution ran to its end before the invocation's end was over"
        assert STEPS[(envelope.id, 1)] == ["book"]
    else:
        assert status == "RUNNING", "the execution's slow step runs beside what comes next"
    assert lane.durable.wait(execution.arn) == "SUCCEEDED"


def test_a_pair_is_handed_to_one_execution_and_its_success_completes_it(lane: WorkflowLane) -> None:
    envelope = lane.emit()
    lane.deliver()
    [running] = Handoffs(lane.inbox).running()
    assert (running.event_id, running.subscription) == (envelope.id, SUBSCRIPTION)
    assert_one_execution_completed(lane, envelope)
    assert lane.ends.settle(envelope.id, SUBSCRIPTION) is Settled.NOT_HANDED, "a second notice changes nothing"


@pytest.mark.parametrize("lost", [1, 2, 100], ids=["resent-by-botocore", "retries-spent", "every-answer"])
def test_a_lost_start_answer_never_starts_a_second_execution(lane: WorkflowLane, lost: int) -> None:
    """The start applies and its answer is lost: botocore re-sends it (which finds the execution by its name and
    input), and once its re-sends are spent the consumer looks the execution up by its name
    instead of failing the attempt. With every answer lost, each attempt failed until the last one made the pair
    dead while its execution ran, and a replay then started a second one (soak seed 7340631)."""
    envelope = lane.emit()
    with lane.durable.lose_answers(FaultCount(lost)) as count:
        lane.deliver()
    # One receive: the start and botocore's re-sends (lost until the count runs out), then the look-up, if needed
    assert count.fired == min(lost, lane.durable.start_requests)
    assert_one_execution_completed(lane, envelope)
    assert lane.claim_row(envelope)["attempts"]["N"] == "1", "no attempt was failed for a lost answer"


def test_a_throttled_start_fails_its_attempt_and_the_next_receive_starts_the_one_execution(lane: WorkflowLane) -> None:
    """Lambda throttles the start before it applies, through botocore's re-sends: the look-up by name finds no
    execution, so the attempt fails (released, not dead) and the message's next receive starts it."""
    envelope = lane.emit()
    with lane.durable.throttle_starts(FaultCount(10)) as count:
        lane.esm.poll()
        assert count.fired > 1, "the start and botocore's re-sends, every one refused"
        assert lane.executions_of(envelope) == {}
        count.remaining = 0
        assert lane.status(envelope) == State.PENDING
        lane.deliver()
    assert_one_execution_completed(lane, envelope)
    assert lane.claim_row(envelope)["attempts"]["N"] == "2", "the throttled attempt counted, as a failed start does"


def test_a_crash_between_the_start_and_its_record_finds_the_same_execution(lane: WorkflowLane) -> None:
    envelope = lane.emit()
    with lane.durable.crash_after_start(FaultCount(1)) as count:
        lane.esm.poll()  # the worker dies with the execution started and nothing recorded
    assert count.fired == 1
    assert lane.status(envelope) == State.PENDING
    lane.deliver()  # the lease lapses, the message comes back: a take-over starts the same name
    assert_one_execution_completed(lane, envelope)


def test_a_running_execution_answering_already_started_is_found_by_its_name(lane: WorkflowLane) -> None:
    """While the execution runs (it waits for its label), Lambda answers a start of its name AlreadyStarted: the
    consumer takes that execution, found by its name, instead of failing the start until the pair is dead."""
    lane.durable.register(FUNCTION, ship_with_label)
    lane.durable.already_started_while_running = True
    envelope = lane.emit()
    with lane.durable.crash_after_start(FaultCount(1)):
        lane.esm.poll()
    lane.deliver()
    assert lane.status(envelope) == State.HANDED
    arn = lane.claim_row(envelope)["execution_arn"]["S"]
    assert lane.executions_of(envelope) == {execution_name(envelope.id, SUBSCRIPTION, 1): 1}
    lane.durable.send_callback_success(lane.durable.wait_for_callback(arn, name="label"), b'"label-1"')
    assert lane.settle_when_ended(envelope) is Settled.COMPLETED


def test_a_duplicate_delivery_of_a_handed_pair_starts_nothing(lane: WorkflowLane) -> None:
    envelope = lane.emit()
    lane.deliver()
    lane.publish(envelope, dedup=f"{envelope.id}-again")  # the relay's re-send, or a reconcile's
    lane.deliver()
    assert lane.status(envelope) == State.HANDED
    assert_one_execution_completed(lane, envelope)
    lane.publish(envelope, dedup=f"{envelope.id}-late")  # after it completed
    lane.deliver()
    assert lane.executions_of(envelope) == {execution_name(envelope.id, SUBSCRIPTION, 1): 1}


def test_a_failed_execution_is_a_dead_letter_naming_it_and_its_error(lane: WorkflowLane) -> None:
    envelope = lane.emit()
    FAILING.add(envelope.id)
    lane.deliver()
    assert lane.settle_when_ended(envelope) is Settled.DEAD
    assert lane.status(envelope) == State.DEAD
    [letter] = lane.inbox.dead_letters("acme")
    name = execution_name(envelope.id, SUBSCRIPTION, 1)
    assert name in letter.error
    assert "FAILED" in letter.error
    row = lane.dynamodb.get_item(
        TableName=INBOX_TABLE, Key={"pk": {"S": "TENANT#acme#DEAD"}, "sk": {"S": f"{envelope.id}#{SUBSCRIPTION}"}}
    )["Item"]
    assert row["execution_arn"]["S"] == lane.claim_row(envelope)["execution_arn"]["S"]
    assert list(Handoffs(lane.inbox).running()) == []


def test_an_execution_waiting_for_a_callback_is_running_until_it_comes(lane: WorkflowLane) -> None:
    lane.durable.register(FUNCTION, ship_with_label)
    envelope = lane.emit()
    lane.deliver()
    arn = lane.claim_row(envelope)["execution_arn"]["S"]
    callback = lane.durable.wait_for_callback(arn, name="label")
    handed_at = datetime.fromisoformat(lane.claim_row(envelope)["handed_at"]["S"])
    lane.clock.advance(timedelta(minutes=7))
    assert lane.ends.settle_all() == {Settled.RUNNING: 1}, "a running execution is an outcome in progress"
    assert lane.ends.oldest_running_seconds == (lane.clock() - handed_at).total_seconds() >= 7 * 60
    assert lane.status(envelope) == State.HANDED
    lane.durable.send_callback_success(callback, b'"label-1"')
    assert lane.settle_when_ended(envelope) is Settled.COMPLETED
    assert lane.ends.settle_all() == {}, "settled once, and listed no more"
    assert lane.ends.oldest_running_seconds == 0


def test_an_execution_stopped_by_hand_makes_the_pair_dead(lane: WorkflowLane) -> None:
    lane.durable.register(FUNCTION, ship_with_label)
    envelope = lane.emit()
    lane.deliver()
    arn = lane.claim_row(envelope)["execution_arn"]["S"]
    lane.durable.wait_for_callback(arn, name="label")
    lane.durable.stop(arn)
    assert lane.settle_when_ended(envelope) is Settled.DEAD
    [letter] = lane.inbox.dead_letters("acme")
    assert "ended STOPPED" in letter.error


def test_a_replay_after_a_failure_starts_one_new_execution_and_keeps_the_old_one_in_history(lane: WorkflowLane) -> None:
    from outbox.ops.replay import plan_replay, replay

    envelope = lane.emit()
    FAILING.add(envelope.id)
    lane.deliver()
    assert lane.settle_when_ended(envelope) is Settled.DEAD
    failed = lane.claim_row(envelope)["execution_arn"]["S"]
    FAILING.clear()  # the fix is deployed
    context = operator_context(lane.harness)
    replay(context, plan_replay(context, tenant="acme"))
    lane.deliver()
    lane.deliver()  # and a duplicate of the replay's message finds the pair handed
    names = lane.executions_of(envelope)
    assert names == {execution_name(envelope.id, SUBSCRIPTION, 1): 1, execution_name(envelope.id, SUBSCRIPTION, 2): 1}
    row = lane.claim_row(envelope)
    assert row["workflow_attempt"]["N"] == "2"
    assert [item["S"] for item in row["execution_history"]["L"]] == [failed]
    assert lane.settle_when_ended(envelope) is Settled.COMPLETED
    assert STEPS[(envelope.id, 2)] == ["book"], "the new execution's step ran once"
    assert lane.inbox.dead_letters("acme") == [], "the replay's completion resolved the dead letter"


def test_a_consumer_whose_catalog_has_workflows_refuses_to_start_without_their_functions(lane: WorkflowLane) -> None:
    from outbox.exceptions import OutboxValidationError

    registry = SubscriptionRegistry.of([shipping()])
    with pytest.raises(OutboxValidationError, match="need workflows=WorkflowStarter"):
        DurableConsumer(registry, lane.inbox, lane.store)
    with pytest.raises(OutboxValidationError, match="no durable function is named for the WORKFLOW subscriptions"):
        DurableConsumer(registry, lane.inbox, lane.store, workflows=lane.ends.starter, workflow_functions={})


def test_the_scheduled_pass_settles_what_ended_with_its_own_lambda_client(
    lane: WorkflowLane, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The deployed pass (outbox.handlers.workflow_ends) as Lambda runs it: its settings from the environment, its
    clients made by itself; the durable service answers its Lambda client through the default session."""
    ended, running = lane.emit(), lane.emit()
    lane.deliver()
    lane.durable.wait(lane.claim_row(ended)["execution_arn"]["S"])
    monkeypatch.setenv("INBOX_TABLE_NAME", INBOX_TABLE)
    monkeypatch.setenv("INBOX_RETENTION_DAYS", "30")
    monkeypatch.setenv("ERROR_DETAIL", "redacted")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("POWERTOOLS_METRICS_NAMESPACE", "test")  # before the handler's module: read at its import
    from outbox.handlers import workflow_ends

    workflow_ends.ends.cache_clear()
    with lane.durable.serving_default_session():
        lane.durable.wait(lane.claim_row(running)["execution_arn"]["S"])
        context = LocalLambdaContext("workflow-ends", timedelta(minutes=1), lane.clock)
        capsys.readouterr()
        counts = workflow_ends.handler({}, context)
        published = [json.loads(line) for line in capsys.readouterr().out.splitlines() if '"_aws"' in line]
        # A pass with nothing to count publishes no metric at all (an idle stack pays for none)
        idle = workflow_ends.handler({}, context)
        assert '"_aws"' not in capsys.readouterr().out
    workflow_ends.ends.cache_clear()
    assert counts["completed"] == 2
    assert idle == {"running": 0, "completed": 0, "dead": 0, "not_handed": 0}
    assert [(m["WorkflowsCompleted"], "WorkflowsRunning" in m) for m in published] == [([2.0], False)]
    assert lane.status(ended) == lane.status(running) == State.COMPLETED


@pytest.mark.parametrize("by_subscription", [False, True], ids=["window", "subscription"])
def test_a_workflow_event_the_stream_lost_is_reconciled_into_one_execution(
    lane: WorkflowLane, by_subscription: bool
) -> None:
    from outbox.ops.reconcile import reconcile

    envelope = lane.store.emit("order.paid", {"n": 1}, tenant="acme", actor="test")  # never relayed
    lane.clock.advance(timedelta(hours=2))
    context = operator_context(lane.harness)
    since = lane.clock() - timedelta(days=1)
    result = reconcile(context, since, tenant="acme", subscription=SUBSCRIPTION if by_subscription else None)
    assert result.subscriptions == {envelope.id: [SUBSCRIPTION]}
    lane.deliver()
    again = reconcile(context, since, tenant="acme")
    assert again.republished == [], "a handed pair is not re-sent"
    assert_one_execution_completed(lane, envelope)


def test_status_lists_running_workflows_oldest_first_with_their_age(lane: WorkflowLane) -> None:
    from outbox.ops.status import read_status

    lane.durable.register(FUNCTION, ship_with_label)  # they wait for their labels: still running
    first = lane.emit()
    lane.deliver()
    lane.clock.advance(timedelta(hours=3))
    second = lane.emit()
    lane.deliver()
    status = read_status(operator_context(lane.harness))
    assert [(w.event_id, w.subscription) for w in status.workflows] == [
        (first.id, SUBSCRIPTION),
        (second.id, SUBSCRIPTION),
    ]
    assert status.workflows[0].age_seconds - status.workflows[1].age_seconds >= 3 * 3600
    assert status.problems() == [], "a running execution is an outcome in progress, not a problem"
    assert status.as_dict()["workflows"][0]["execution_arn"] == lane.claim_row(first)["execution_arn"]["S"]


@pytest.mark.parametrize(
    ("seconds", "said"),
    [(0, "0s"), (59, "59s"), (60, "1m 0s"), (3_605, "1h 0m"), (7_300, "2h 1m"), (400_000, "4d 15h")],
)
def test_a_workflows_age_is_said_in_its_two_largest_units(seconds: int, said: str) -> None:
    from outbox.ops.workflows import duration

    assert duration(seconds) == said


def test_skip_acknowledges_a_dead_workflow_pair_and_refuses_a_running_one(lane: WorkflowLane) -> None:
    from outbox.exceptions import OperationRefusedError
    from outbox.ops.ordering import skip
    from outbox.ops.replay import plan_replay

    context = operator_context(lane.harness)
    lane.durable.register(FUNCTION, ship_with_label)
    running = lane.emit()
    lane.deliver()
    with pytest.raises(OperationRefusedError, match="handed to a workflow"):
        skip(context, "acme", SUBSCRIPTION, running.seq, by="ops", reason="no longer needed")
    with pytest.raises(OperationRefusedError, match="handed to a workflow: its durable execution is running"):
        plan_replay(context, event_ids=[running.id], subscription=SUBSCRIPTION)
    lane.durable.stop(lane.claim_row(running)["execution_arn"]["S"])
    assert lane.settle_when_ended(running) is Settled.DEAD
    skip(context, "acme", SUBSCRIPTION, running.seq, by="ops", reason="the order was cancelled")
    assert lane.status(running) == State.SKIPPED
    assert lane.inbox.dead_letters("acme") == [], "its dead letter is resolved with who and why"
    assert lane.executions_of(running) == {execution_name(running.id, SUBSCRIPTION, 1): 1}


def test_a_workflow_unsettled_past_its_execution_timeout_is_a_problem_status_names(
    clock: VirtualClock, aws: None
) -> None:
    """The pair's own bound: Lambda ends an execution at its timeout, and the pass settles it within a minute; one
    still listed long after says the pass is not doing its work (its end would otherwise never come back)."""
    from outbox.ops.status import read_status
    from outbox.ops.workflows import SETTLE_MARGIN

    durable = LocalDurableFunctions()
    durable.register(FUNCTION, ship_with_label)
    starter = WorkflowStarter(durable.client(retries=1))
    functions = {SUBSCRIPTION: {"arn": FUNCTION, "execution_timeout": 3600}}
    h = build_harness(lambda _: [shipping()], clock, workflows=starter, workflow_functions=functions)
    try:
        envelope = h.store.emit("order.paid", {"n": 1}, tenant="acme", actor="test")
        h.publish(envelope)
        h.esm.poll()
        context = operator_context(h)
        clock.advance(timedelta(hours=1) + SETTLE_MARGIN - timedelta(seconds=1))
        assert read_status(context).problems() == [], "within its bound: an outcome in progress"
        clock.advance(timedelta(seconds=2))
        [problem] = read_status(context).problems()
        assert envelope.id in problem
        assert "past its execution timeout and not settled" in problem
        assert "is the settle pass running?" in problem
    finally:
        durable.close()


def test_a_deferred_pair_whose_subscription_moved_to_workflow_leaves_its_order_when_handed(
    make_harness: HarnessFactory,
) -> None:
    """An ordered DURABLE subscription's pair waits DEFERRED; a deploy moves the subscription to WORKFLOW (unordered):
    the pair is handed to one execution, and its deferred row leaves the order with its count, as the lease path's
    claim of such a pair does (outbox.pairs: DEFERRED, UNORDERED)."""
    from outbox.ops.reconcile import reconcile
    from tests.functional.test_ordered_subscriptions import LEDGER
    from tests.functional.test_pairs_across_deploys import assert_counted, dead_then_deferred

    h, _applied, _first, second = dead_then_deferred(make_harness)
    durable = LocalDurableFunctions()
    durable.register(FUNCTION, ship_order)
    try:
        moved = Subscription(LEDGER, "account.*", Lane.WORKFLOW, workflow(f"{__name__}:ship_order"))
        h.consumer = DurableConsumer(
            SubscriptionRegistry.of([moved]),
            h.inbox,
            h.store,
            wake_ups=h.consumer.wake_ups,
            workflows=WorkflowStarter(durable.client()),
            workflow_functions={LEDGER: FUNCTION},
        )
        h.esm.handler = h.consumer.handle
        reconcile(operator_context(h, [moved]), None, subscription=LEDGER)
        h.esm.drain()
        assert h.claim_status(LEDGER, second) == State.HANDED
        assert_counted(h)
        assert sum(durable.starts.values()) == 1
    finally:
        durable.close()


def test_failed_executions_of_one_cause_are_one_failure_group_whose_replay_starts_one_new_execution_each(
    lane: WorkflowLane,
) -> None:
    from outbox.ops.groups import failure_groups, replay_group

    # Given two events whose executions fail alike (the carrier refuses both bookings)
    first, second = lane.emit(), lane.emit()
    FAILING.update({first.id, second.id})
    lane.deliver()
    assert {lane.settle_when_ended(first), lane.settle_when_ended(second)} == {Settled.DEAD}
    context = operator_context(lane.harness)
    # Then they are one failure group of the workflow's subscription, naming no execution of its own
    [group] = failure_groups(context)
    assert (group.subscription, group.count, group.tenants) == (SUBSCRIPTION, 2, ["acme"])
    assert first.id not in group.where, "what varies between the two (the event, its execution) is blanked"
    assert group.repair == f"outbox replay --group {group.id} --dry-run"
    # When the fix is deployed and the group is replayed as its dry run showed
    FAILING.clear()
    shown = replay_group(context, group.id, dry_run=True)
    repaired = replay_group(context, group.id, only=shown.planned)
    assert sorted(pair.event_id for pair in repaired.sent) == sorted([first.id, second.id])
    lane.deliver()
    lane.deliver()  # a duplicate of the replay's message finds each pair handed
    # Then each pair has one new execution, which completes it, and the group is gone
    for envelope in (first, second):
        assert lane.executions_of(envelope) == {
            execution_name(envelope.id, SUBSCRIPTION, 1): 1,
            execution_name(envelope.id, SUBSCRIPTION, 2): 1,
        }
        assert lane.settle_when_ended(envelope) is Settled.COMPLETED
    assert failure_groups(context) == []
