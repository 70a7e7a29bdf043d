"""Events a workflow's steps emit (``outbox.workflows.emits``): once per (execution, step), however often the step
runs. The step is run again by the durable execution SDK itself (the testing SDK's runner: its function raised
after the event committed, as an invocation that dies before its checkpoint does), and by hand, any number of
times; the log holds one event each time, under the id every run answers. On moto with the runtime's AWS fixes, so
a token re-sent with another request is refused as DynamoDB refuses it."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from outbox import EventStore, writes
from outbox.exceptions import CallerWriteConditionFailedError, InvalidEventError, OutboxValidationError
from outbox.log.envelope import ULID_PATTERN, Envelope
from outbox.workflows import WorkflowInput
from outbox.workflows.emits import WorkflowEmits, step_event_id, step_key
from tests.functional.conftest import EVENTS_TABLE, ORDERS_TABLE

EXECUTION = "arn:aws:lambda:us-east-1:123456789012:function:ship:live/durable-execution/name/1"


def started_by(store: EventStore) -> WorkflowInput:
    envelope = store.emit("order.paid", {"order_id": "o-1"}, tenant="acme", actor="test")
    return WorkflowInput(envelope, "shipping.ship_order", 1)


def log(store: EventStore) -> list[Envelope]:
    return list(store.events("acme"))


class _Execution:
    """What ``WorkflowEmits`` reads of a durable context: its execution's ARN; ``step`` runs the function every
    time, as a step whose checkpoint never landed is run again."""

    def __init__(self, arn: str = EXECUTION) -> None:
        self.execution_context = SimpleNamespace(durable_execution_arn=arn)

    def step(self, function: Any, name: str) -> Any:
        return function(None)


def emits_of(store: EventStore, given_input: WorkflowInput, execution: str = EXECUTION) -> WorkflowEmits:
    return WorkflowEmits(store, given_input, _Execution(execution), inbox_table=ORDERS_TABLE)


def test_a_step_run_again_after_its_event_committed_emits_it_once(store: EventStore, clock: Any) -> None:
    given_input = started_by(store)
    emitted = []
    for _ in range(3):  # within the token's 10 minutes, and after them
        emitted.append(emits_of(store, given_input).emit("shipment.booked", {"n": 1}, step="announce"))
        clock.advance(timedelta(seconds=200))
    events = log(store)
    assert [e.type for e in events] == ["order.paid", "shipment.booked"]
    booked = events[1]
    assert emitted == [booked.id] * 3
    cause = given_input.envelope
    assert (booked.tenant, booked.causation_id, booked.correlation_id) == ("acme", cause.id, cause.correlation_id)
    assert booked.actor == "workflow:shipping.ship_order"


def test_each_step_and_each_execution_emits_its_own(store: EventStore) -> None:
    given_input = started_by(store)
    emits = emits_of(store, given_input)
    first = emits.emit("shipment.booked", {"n": 1}, step="announce")
    second = emits.emit("shipment.booked", {"n": 2}, step="remind")
    third = emits_of(store, given_input, EXECUTION.replace("/1", "/2")).emit(
        "shipment.booked", {"n": 1}, step="announce"
    )
    assert len({first, second, third}) == 3
    assert [e.id for e in log(store)[1:]] == [first, second, third]
    with pytest.raises(OutboxValidationError, match="emits twice"):
        emits.emit("shipment.booked", {"n": 3}, step="announce")


def test_the_step_row_and_the_caller_s_writes_commit_with_the_event(store: EventStore, dynamodb: Any) -> None:
    given_input = started_by(store)
    order = writes.put(ORDERS_TABLE, {"pk": "ORDER#o-1", "sk": "SHIPPED"}, condition="attribute_not_exists(pk)")
    emits = emits_of(store, given_input)
    event_id = emits.emit("shipment.booked", {"n": 1}, step="announce", extra_writes=[order])
    row = dynamodb.get_item(TableName=ORDERS_TABLE, Key=writes.typed(step_key(event_id)))
    assert (row["Item"]["execution_arn"]["S"], row["Item"]["step"]["S"]) == (EXECUTION, "announce")
    # A caller's write whose condition fails is named by its own position, and nothing commits
    with pytest.raises(CallerWriteConditionFailedError) as failed:
        emits_of(store, given_input).emit_once("shipment.booked", {"n": 2}, "other", [order])
    assert failed.value.index == 0
    assert len(log(store)) == 2


@settings(max_examples=200, deadline=None)
@given(
    cause=st.from_regex(ULID_PATTERN, fullmatch=True),
    executions=st.lists(st.text(min_size=1, max_size=80), min_size=1, max_size=3, unique=True),
    steps=st.lists(st.text(min_size=1, max_size=40), min_size=1, max_size=4, unique=True),
)
def test_step_event_ids_are_ulids_one_per_execution_and_step(
    cause: str, executions: list[str], steps: list[str]
) -> None:
    ids = {(execution, step): step_event_id(cause, execution, step) for execution in executions for step in steps}
    assert len(set(ids.values())) == len(ids)
    for (execution, step), event_id in ids.items():
        assert re.fullmatch(ULID_PATTERN, event_id)
        assert event_id[:10] == cause[:10], "its time is the starting event's"
        assert step_event_id(cause, execution, step) == event_id


def test_an_emit_refuses_an_event_id_that_is_no_ulid_and_two_alike(store: EventStore) -> None:
    from outbox.log.store import NewEvent

    with pytest.raises(InvalidEventError, match="not a ULID"):
        store.emit("x.y", {}, tenant="acme", actor="test", event_id="not-an-id")
    same = "01J00000000000000000000000"
    with pytest.raises(InvalidEventError, match="same event_id"):
        store.emit_many([NewEvent("x.y", {}, event_id=same), NewEvent("x.y", {}, event_id=same)], tenant="a", actor="t")


# -- run again by the durable execution SDK ------------------------------------------------------------------


class _DiesAfterTheCommit:
    """A DynamoDB client whose first transaction commits and then ends the step (as an invocation that dies
    before the SDK checkpoints the step's result)."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.deaths = 0

    def transact_write_items(self, **request: Any) -> Any:
        answer = self._client.transact_write_items(**request)
        if self.deaths == 0:
            self.deaths += 1
            raise RuntimeError("the invocation ended before the step's checkpoint")
        return answer

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


def test_the_sdk_running_the_step_again_after_its_commit_emits_once(store: EventStore, dynamodb: Any) -> None:
    from aws_durable_execution_sdk_python import durable_execution
    from aws_durable_execution_sdk_python_testing.runner import DurableFunctionTestRunner

    given_input = started_by(store)
    dying = _DiesAfterTheCommit(dynamodb)
    workflow_store = EventStore(EVENTS_TABLE, client=dying, sleep=lambda _s: None, unchecked=True)

    @durable_execution
    def ship(event: Any, context: Any) -> str:
        return WorkflowEmits(workflow_store, WorkflowInput.of(event), context, inbox_table=ORDERS_TABLE).emit(
            "shipment.booked", {"order_id": "o-1"}, step="announce"
        )

    with DurableFunctionTestRunner(handler=ship) as runner:
        result = runner.run(input=given_input.payload().decode(), execution_timeout=60)
    assert result.status.value == "SUCCEEDED", result.error
    assert dying.deaths == 1, "the step's first run committed its event and died"
    events = log(store)
    assert [e.type for e in events] == ["order.paid", "shipment.booked"], "one event, though the step ran twice"
    assert json.loads(result.result) == events[1].id
    assert events[1].occurred_at <= datetime.now(UTC)
