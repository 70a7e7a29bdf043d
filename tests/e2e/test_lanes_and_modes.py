"""Each lane's dispatcher runs exactly its lane's subscriptions; the operator endpoint and the server
mode work on the local runtime; the example commands are idempotent."""

from __future__ import annotations

import json
import socket
import urllib.request
from collections.abc import Iterator
from decimal import Decimal

import boto3
import pytest
from boto3.dynamodb.types import TypeSerializer

from modules.commerce import OrderConflictError
from modules.services import SERVICE_NAMES, SERVICES_VARIABLE
from outbox import EventStore, InvalidEventError
from outbox.local.runtime import LocalRuntime
from outbox.local.template import load_stack, with_record_change_entities
from outbox.testing.services import FakeServiceServer
from outbox_cdk import operator_endpoint
from stacks.app_factory import STACK_NAME
from tests.conftest import Synthesized
from tests.e2e import lane_catalog
from tests.e2e.backends import LocalBackend
from tests.e2e.test_pipeline import order_and_pay, unique
from tests.unit.test_emit_validation import NoAwsClient

LANE_CATALOG = "tests.e2e.lane_catalog:build_catalog"


@pytest.fixture
def lanes_runtime(synthesized: Synthesized) -> Iterator[LocalRuntime]:
    lane_catalog.RUNS.clear()
    lane_catalog.RECEIVED.clear()
    # The lane catalog's application watches its own rows (LANEORDER), not the example's.
    stack = with_record_change_entities(load_stack(synthesized.outdir, STACK_NAME), lane_catalog.WATCHED_ENTITIES)
    with LocalRuntime(stack, environment={"SUBSCRIPTIONS": LANE_CATALOG}, function_log_level="CRITICAL") as runtime:
        yield runtime


def test_each_lane_is_run_by_its_one_dispatcher_and_no_other(lanes_runtime: LocalRuntime) -> None:
    data_table = lanes_runtime.output("DataTableName")
    store = lanes_runtime.event_store(catalog=lane_catalog.build_catalog(data_table))
    durable = lanes_runtime.output("DurableConsumerFunctionName")
    record_change = lanes_runtime.output("RecordChangeConsumerFunctionName")

    lane_catalog.place(store, data_table, "acme", "o-1")
    lanes_runtime.run_until_idle()

    assert sorted(lane_catalog.RUNS) == sorted(
        [
            ("INLINE", "lanes.inline", "caller"),
            ("LOCAL", "lanes.local", "caller"),
            ("DURABLE", "lanes.durable", durable),
            ("BEST_EFFORT", "lanes.best_effort", record_change),
        ]
    )


def test_every_dynamodb_type_reaches_the_best_effort_lane_as_written(lanes_runtime: LocalRuntime) -> None:
    data_table = lanes_runtime.output("DataTableName")
    row = {
        "pk": "LANEORDER#acme#typed",
        "sk": "ORDER",
        "n": Decimal("12.5"),
        "blob": b"\x00\xffpng",
        "names": {"a", "b"},
        "counts": {Decimal(1), Decimal("2.5")},
        "blobs": {b"x", b"\x01\x02"},
        "nested": {"inner": b"deep", "list": [Decimal(3), b"in-list"]},
        "items": ["s", True, None],
        "flag": False,
        "nothing": None,
    }
    serializer = TypeSerializer()
    lanes_runtime.client("dynamodb").put_item(
        TableName=data_table, Item={name: serializer.serialize(value) for name, value in row.items()}
    )

    lanes_runtime.run_until_idle()

    [change] = [received for name, received in lane_catalog.RECEIVED if name == "lanes.best_effort"]
    assert change.operation == "INSERT"
    assert change.new_image == {**row, "n": 12.5, "nested": {"inner": b"deep", "list": [3, b"in-list"]}}
    assert isinstance(change.new_image["blob"], bytes)
    assert (
        lanes_runtime.client("sqs").get_queue_attributes(
            QueueUrl=lanes_runtime.resources.queue_urls[_record_change_dlq(lanes_runtime)],
            AttributeNames=["ApproximateNumberOfMessages"],
        )["Attributes"]["ApproximateNumberOfMessages"]
        == "0"
    )


def test_every_json_type_reaches_the_durable_lane_as_emitted(lanes_runtime: LocalRuntime) -> None:
    data_table = lanes_runtime.output("DataTableName")
    store = lanes_runtime.event_store(catalog=lane_catalog.build_catalog(data_table))
    details = {"s": "text", "n": 12.5, "i": 7, "m": {"deep": [1, "two", None]}, "l": [True, False], "z": None}

    store.emit("lanes.placed", {"order_id": "o-typed", "details": details}, tenant="acme", actor="test")
    lanes_runtime.run_until_idle()

    [delivery] = [received for name, received in lane_catalog.RECEIVED if name == "lanes.durable"]
    assert delivery.envelope.payload == {"order_id": "o-typed", "details": details}


def test_the_largest_event_emit_accepts_is_relayed_and_delivered(lanes_runtime: LocalRuntime) -> None:
    data_table = lanes_runtime.output("DataTableName")
    catalog = lane_catalog.build_catalog(data_table)
    checker = EventStore("events", client=NoAwsClient(), catalog=catalog)

    def payload(size: int) -> dict[str, object]:
        return {"order_id": "o-big", "details": {"blob": "é" * size}}  # two bytes each in UTF-8

    low, high = 0, 200 * 1024
    while low < high:  # the largest payload emit() lets through to AWS
        middle = (low + high + 1) // 2
        try:
            checker.emit("lanes.placed", payload(middle), tenant="acme", actor="test")
        except InvalidEventError:
            high = middle - 1
        except AssertionError:
            low = middle
    store = lanes_runtime.event_store(catalog=catalog)

    store.emit("lanes.placed", payload(low), tenant="acme", actor="test")
    lanes_runtime.run_until_idle()

    [delivery] = [received for name, received in lane_catalog.RECEIVED if name == "lanes.durable"]
    assert delivery.envelope.payload == payload(low)
    relay_dlq = _queue_depth(lanes_runtime, "RelayDeadLetters")
    assert relay_dlq == 0, "the relay carried it: nothing went to the pipe's dead-letter queue"


def _queue_depth(runtime: LocalRuntime, prefix: str) -> int:
    [queue] = [q for q in runtime.stack.queues.values() if q.logical_id.removeprefix("Outbox").startswith(prefix)]
    attributes = runtime.client("sqs").get_queue_attributes(
        QueueUrl=runtime.resources.queue_urls[queue.logical_id], AttributeNames=["ApproximateNumberOfMessages"]
    )["Attributes"]
    return int(attributes["ApproximateNumberOfMessages"])


def _record_change_dlq(runtime: LocalRuntime) -> str:
    [queue] = [
        q for q in runtime.stack.queues.values() if "RecordChanges" in q.logical_id and "DeadLetters" in q.logical_id
    ]
    return queue.logical_id


def test_the_operator_endpoint_reports_chain_intact_and_dead_letters(local: LocalBackend) -> None:
    local.service("notifier").fail_next = 10**6
    tenant = unique("tenant")
    order_and_pay(local, tenant)
    local.settle()
    [endpoint] = [f for f in local.runtime.functions.values() if f.handler_path == operator_endpoint.HANDLER]

    status = endpoint.invoke(function_url_event("/status"))
    chain = endpoint.invoke(function_url_event(f"/tenants/{tenant}/chain"))
    missing = endpoint.invoke(function_url_event("/tenants/nobody/chain"))

    assert status["statusCode"] == 200
    body = json.loads(status["body"])
    [row] = [t for t in body["tenants"] if t["tenant"] == tenant]
    assert (row["chain_intact"], row["dead_letters"]) == (True, 2)
    assert body["queues"]["durable-dlq"]["visible"] == 0, "dead work is acknowledged: its record is the dead letter"
    assert json.loads(chain["body"])["intact"] is True
    assert missing["statusCode"] == 404
    groups = json.loads(endpoint.invoke(function_url_event("/dead-letters/groups"))["body"])
    assert [(group["subscription"], group["count"], group["tenants"]) for group in groups] == [
        ("notify.buyer", 1, [tenant]),
        ("notify.shipment_booked", 1, [tenant]),
    ]


def function_url_event(path: str) -> dict[str, object]:
    return {
        "version": "2.0",
        "rawPath": path,
        "rawQueryString": "",
        "headers": {"host": "local"},
        "requestContext": {"http": {"method": "GET", "path": path, "sourceIp": "127.0.0.1"}, "stage": "$default"},
        "isBase64Encoded": False,
    }


def test_server_mode_serves_the_tables_and_queues_to_any_client(synthesized: Synthesized) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with (
        FakeServiceServer(SERVICE_NAMES) as fakes,
        LocalRuntime.from_assembly(
            synthesized.outdir,
            port=port,
            environment={SERVICES_VARIABLE: fakes.url},
            function_log_level="CRITICAL",
        ) as runtime,
    ):
        backend = LocalBackend(runtime, fakes)
        tenant = unique("tenant")
        order_and_pay(backend, tenant)
        runtime.run_until_idle()

        outsider = boto3.client(
            "dynamodb",
            endpoint_url=f"http://127.0.0.1:{port}",
            region_name="us-east-1",
            aws_access_key_id="any",
            aws_secret_access_key="any",
        )
        tables = outsider.list_tables()["TableNames"]
        assert runtime.output("EventsTableName") in tables
        sales = outsider.get_item(
            TableName=runtime.output("DataTableName"), Key={"pk": {"S": f"SALES#{tenant}"}, "sk": {"S": "TOTALS"}}
        )
        assert sales["Item"]["orders"] == {"N": "1"}
        # moto's backends are the process's: leave none of this stack to the next server of the session
        urllib.request.urlopen(urllib.request.Request(f"{runtime.endpoint_url}/moto-api/reset", method="POST")).close()


def test_placing_the_same_order_twice_returns_the_existing_result_and_different_content_fails(
    local: LocalBackend,
) -> None:
    store, commerce, tenant = local.store(), local.commerce(), unique("tenant")
    items = [{"sku": "tag", "quantity": 1, "unit_price_cents": 900}]
    first = commerce.place_order(store, tenant=tenant, actor="t", order_id="o-1", buyer_email="a@b.io", items=items)
    again = commerce.place_order(store, tenant=tenant, actor="t", order_id="o-1", buyer_email="a@b.io", items=items)

    assert (first.created, again.created) == (True, False)
    with pytest.raises(OrderConflictError):
        commerce.place_order(
            store, tenant=tenant, actor="t", order_id="o-1", buyer_email="a@b.io", items=[{**items[0], "quantity": 2}]
        )
    assert [e.type for e in store.events(tenant)] == ["order.created"], "one event for one order"
