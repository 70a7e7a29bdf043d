"""Each lane's dispatcher runs exactly its lane's subscriptions; the operator endpoint and the server
mode work on the local runtime; the example commands are idempotent."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator

import boto3
import pytest

from local_runtime.fake_services import FakeServiceServer
from local_runtime.runtime import LocalRuntime
from modules.commerce import OrderConflictError
from tests.conftest import Synthesized
from tests.e2e import lane_catalog
from tests.e2e.backends import LocalBackend
from tests.e2e.test_pipeline import order_and_pay, unique

LANE_CATALOG = "tests.e2e.lane_catalog:build_catalog"


@pytest.fixture
def lanes_runtime(synthesized: Synthesized) -> Iterator[LocalRuntime]:
    lane_catalog.RUNS.clear()
    with LocalRuntime.from_assembly(
        synthesized.outdir, environment={"SUBSCRIPTIONS": LANE_CATALOG}, function_log_level="CRITICAL"
    ) as runtime:
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


def test_the_operator_endpoint_reports_chain_intact_and_dead_letters(local: LocalBackend) -> None:
    local.service("notifier").fail_next = 10**6
    tenant = unique("tenant")
    order_and_pay(local, tenant)
    local.settle()
    [endpoint] = [f for f in local.runtime.functions.values() if f.handler_path.startswith("lambdas.operator_api")]

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
        FakeServiceServer() as fakes,
        LocalRuntime.from_assembly(
            synthesized.outdir,
            port=port,
            environment={"COMMERCE_SERVICES_URL": fakes.url},
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
