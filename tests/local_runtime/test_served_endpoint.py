"""The served runtime (``outbox local serve``, ``make demo ARGS="--serve PORT"``) answers this machine's SDK
clients only, never a web page: no CORS (a page of another origin cannot read an answer, nor send what needs a
preflight), no request from another origin at all, and none whose ``Host`` is not the loopback address and port
it listens on (a page whose name was rebound to 127.0.0.1 sends its own name)."""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
import urllib.request
from collections.abc import Iterator, Mapping
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from outbox.local.clients import local_client
from outbox.local.loopback import RequestGate
from outbox.local.runtime import LocalRuntime
from tests.conftest import Synthesized

EVIL = "https://evil.example"


@pytest.fixture(scope="module")
def served(synthesized: Synthesized) -> Iterator[LocalRuntime]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with LocalRuntime.from_assembly(synthesized.outdir, port=port, function_log_level="CRITICAL") as runtime:
        yield runtime
        # moto's backends are the process's: leave none of this stack to the next server of the session
        urllib.request.urlopen(urllib.request.Request(f"{runtime.endpoint_url}/moto-api/reset", method="POST")).close()


def put_item(table: str, pk: str) -> bytes:
    """A DynamoDB PutItem as an SDK sends it (moto reads the service from the credential scope)."""
    return json.dumps({"TableName": table, "Item": {"pk": {"S": pk}, "sk": {"S": "A"}}}).encode()


def send(
    runtime: LocalRuntime, method: str, headers: Mapping[str, str], body: bytes = b""
) -> tuple[int, dict[str, str], str]:
    """One raw request to the served endpoint, with exactly these headers (``Host`` among them)."""
    connection = http.client.HTTPConnection("127.0.0.1", runtime.port, timeout=30)
    try:
        connection.putrequest(method, "/", skip_host=True, skip_accept_encoding=True)
        for name, value in {**headers, "Content-Length": str(len(body))}.items():
            connection.putheader(name, value)
        connection.endheaders(body)
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read().decode()
    finally:
        connection.close()


def dynamodb_headers(host: str, action: str, **extra: str) -> dict[str, str]:
    return {
        "Host": host,
        "Content-Type": "application/x-amz-json-1.0",
        "X-Amz-Target": f"DynamoDB_20120810.{action}",
        "Authorization": "AWS4-HMAC-SHA256 Credential=local/20260101/us-east-1/dynamodb/aws4_request, "
        "SignedHeaders=host, Signature=0",
        **extra,
    }


def stored(runtime: LocalRuntime, table: str, pk: str) -> bool:
    item = runtime.client("dynamodb").get_item(TableName=table, Key={"pk": {"S": pk}, "sk": {"S": "A"}})
    return "Item" in item


def cors_headers(headers: Mapping[str, str]) -> dict[str, str]:
    return {name: value for name, value in headers.items() if name.startswith("access-control-")}


def test_a_web_page_of_another_origin_gets_no_cors_answer(served: LocalRuntime) -> None:
    host = f"127.0.0.1:{served.port}"
    table = served.output("DataTableName")

    # A browser's preflight for an SDK call (its X-Amz-Target needs one) is allowed nothing
    status, headers, _ = send(
        served,
        "OPTIONS",
        {
            "Host": host,
            "Origin": EVIL,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization,content-type,x-amz-target",
        },
    )
    assert cors_headers(headers) == {}, (status, headers)

    # And a request that needs no preflight is neither answered to the page nor carried out
    status, headers, body = send(served, "POST", dynamodb_headers(host, "PutItem", Origin=EVIL), put_item(table, "p"))
    assert cors_headers(headers) == {}, (status, headers)
    assert status == 403, body
    assert not stored(served, table, "p")

    # Even the served endpoint's own origin is given no CORS header: nothing here is for a browser
    _, headers, _ = send(served, "POST", dynamodb_headers(host, "ListTables", Origin=f"http://{host}"), b"{}")
    assert cors_headers(headers) == {}, headers


def test_a_request_for_another_host_is_refused_and_changes_nothing(served: LocalRuntime) -> None:
    table = served.output("DataTableName")

    # A page whose name was rebound to 127.0.0.1 sends its own name as the Host
    status, _, body = send(
        served, "POST", dynamodb_headers(f"evil.example:{served.port}", "PutItem"), put_item(table, "rebound")
    )

    assert status == 403
    assert "'evil.example" in body, body
    assert f"http://127.0.0.1:{served.port}" in body, "it says where to point the client instead"
    assert not stored(served, table, "rebound")

    # The loopback names it listens on are served (the same request, as the SDK sends it, is carried out)
    for host in (f"127.0.0.1:{served.port}", f"localhost:{served.port}", f"[::1]:{served.port}"):
        status, _, body = send(served, "POST", dynamodb_headers(host, "PutItem"), put_item(table, host))
        assert status == 200, (host, body)
        assert stored(served, table, host)


@pytest.mark.parametrize("name", ["127.0.0.1", "localhost"])
def test_the_sdk_s_clients_of_the_loopback_endpoint_are_served(served: LocalRuntime, name: str) -> None:
    endpoint = f"http://{name}:{served.port}"
    dynamodb: Any = local_client("dynamodb", endpoint)
    sqs: Any = local_client("sqs", endpoint)

    assert served.output("DataTableName") in dynamodb.list_tables()["TableNames"]
    assert sqs.list_queues()["QueueUrls"]


@pytest.mark.parametrize("service", ["dynamodb", "sqs", "pipes"])
@pytest.mark.parametrize("region", ["eu-west-1", "us-west-2", "ap-southeast-2"])
def test_a_client_of_another_region_is_refused_saying_which_region_rather_than_answered_empty(
    served: LocalRuntime, service: str, region: str
) -> None:
    client = boto3.client(
        service,
        region_name=region,
        endpoint_url=served.endpoint_url,
        aws_access_key_id="local",
        aws_secret_access_key="local",
        config=Config(account_id_endpoint_mode="disabled", retries={"max_attempts": 0}),
    )
    listing = {"dynamodb": "list_tables", "sqs": "list_queues", "pipes": "list_pipes"}[service]

    with pytest.raises(ClientError) as refused:
        getattr(client, listing)()

    message = refused.value.response["Error"]["Message"]
    assert f"this request is for region {region}; the local runtime serves region us-east-1 only" in message
    assert "--region us-east-1" in message


def test_the_served_endpoint_says_its_clock_and_what_it_was_given(served: LocalRuntime) -> None:
    with urllib.request.urlopen(f"{served.endpoint_url}/_outbox") as answer:
        about = json.loads(answer.read())
    assert about == {"clock": served.clock().isoformat()}


def test_the_request_gate_holds_new_requests_and_waits_for_those_under_way_while_it_is_closed() -> None:
    gate = RequestGate()
    order: list[str] = []
    entered, release = threading.Event(), threading.Event()

    def request(name: str, *, hold: bool = False) -> None:
        with gate.request(outside=True):
            order.append(f"{name} in")
            if hold:
                entered.set()
                release.wait(5)
            order.append(f"{name} out")

    under_way = threading.Thread(target=request, args=("first",), kwargs={"hold": True})
    under_way.start()
    entered.wait(5)
    closer = threading.Thread(target=lambda: _closed(gate, order))
    closer.start()
    time.sleep(0.1)
    late = threading.Thread(target=request, args=("late",))
    late.start()
    time.sleep(0.1)
    assert order == ["first in"], "the gate waits for the request under way, and holds the late one"
    release.set()
    for thread in (under_way, closer, late):
        thread.join(5)

    assert order == ["first in", "first out", "closed", "late in", "late out"]
    assert gate.changes == 2


def _closed(gate: RequestGate, order: list[str]) -> None:
    with gate.closed():
        order.append("closed")


def test_a_served_runtime_starts_from_none_of_what_an_earlier_one_of_the_process_left(
    synthesized: Synthesized,
) -> None:
    from tests.e2e.test_local_serve import free_port

    # Given a served runtime of this process that stopped without emptying moto's process-wide backends
    with LocalRuntime.from_assembly(synthesized.outdir, port=free_port(), function_log_level="CRITICAL"):
        pass

    # When another starts in the same process, then it creates the stack's tables: none was left to collide with
    with LocalRuntime.from_assembly(synthesized.outdir, port=free_port(), function_log_level="CRITICAL") as runtime:
        assert runtime.output("EventsTableName") in runtime.client("dynamodb").list_tables()["TableNames"]
        urllib.request.urlopen(urllib.request.Request(f"{runtime.endpoint_url}/moto-api/reset", method="POST")).close()
