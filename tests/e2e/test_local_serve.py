"""``outbox local serve``: an app synthesized, booted and served, its consumers kept running.

Run as a user would, from a folder of their own: the app's command synthesizes it, the served runtime
processes what is emitted against its endpoint without anyone stepping it, the CLI's ``--local`` finds the
app's catalog in the topology the server wrote (no ``--catalog``, no ``PYTHONPATH``), and a repair the CLI
sends (a redrive of the DLQ) is processed, so that ``status`` afterwards tells the truth.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from modules.commerce import Commerce
from modules.services import Services
from outbox.local.clients import local_client
from outbox.log.store import EventStore
from outbox.messages import relay_body
from tests.e2e.test_pipeline import unique
from tests.example_app import TRIAL_OPERATOR

ROOT = Path(__file__).resolve().parents[2]
OUTBOX = Path(sys.executable).parent / "outbox"

pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def wait_for(condition: Callable[[], bool], what: str, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"waited {seconds} s for {what}"
        time.sleep(0.5)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, Any]]]:
    folder = tmp_path_factory.mktemp("served")
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PYTEST", "PYTHONPATH"))}
    command = [
        str(OUTBOX), "local", "serve", "--app", f"{sys.executable} {ROOT / 'app.py'}", "--port", str(free_port()),
        "-c", "commerceServices=fake", "-c", "alarmEmail=ops@example.com", "-c", f"operatorArns={TRIAL_OPERATOR}",
    ]  # fmt: skip
    server = subprocess.Popen(command, cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    topology = folder / ".local" / "topology.json"
    try:
        wait_for(lambda: topology.exists() or server.poll() is not None, "the server's topology")
        assert server.poll() is None, server.stdout.read() if server.stdout else ""
        yield folder, json.loads(topology.read_text())
    finally:
        server.send_signal(signal.SIGINT)
        try:
            output, _ = server.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            output, _ = server.communicate()
    assert " - - [" not in output, "no access log of every request on the terminal"
    assert "Found endpoint" not in output


def outbox(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PYTEST", "PYTHONPATH"))}
    return subprocess.run([str(OUTBOX), "--local", *args], cwd=folder, env=env, capture_output=True, text=True)


def depth(sqs: Any, url: str) -> int:
    names = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=names)["Attributes"]
    return sum(int(attributes[name]) for name in names)


def test_what_is_emitted_is_processed_and_a_redrive_from_the_cli_too(served: tuple[Path, dict[str, Any]]) -> None:
    folder, topology = served
    endpoint, outputs = topology["endpoint_url"], topology["outputs"]
    dynamodb, sqs = local_client("dynamodb", endpoint), local_client("sqs", endpoint)
    store = EventStore(outputs["EventsTableName"], client=dynamodb, unchecked=True)
    tenant = unique("tenant")

    # An order placed against the served endpoint is relayed and consumed with nobody stepping the runtime
    order = Commerce(outputs["DataTableName"], Services.fakes()).place_order(
        store, tenant=tenant, actor="serve", order_id=unique("order"), buyer_email="b@x.io",
        items=[{"sku": "tag", "quantity": 1, "unit_price_cents": 100}],
    )  # fmt: skip
    claims = lambda: outbox(folder, "--json", "dead-letters", "list", "--tenant", tenant)  # noqa: E731
    wait_for(lambda: depth(sqs, outputs["DurableQueueUrl"]) == 0 and claims().returncode == 0, "the order's delivery")

    # A copy of its message in the DLQ, redriven by the CLI, is processed too: both queues drain
    [event] = [e for e in store.events(tenant) if e.id == order.event_id]
    sqs.send_message(
        QueueUrl=outputs["DurableDeadLetterQueueUrl"], MessageBody=relay_body(event.to_item()),
        MessageGroupId=tenant, MessageDeduplicationId=f"dlq-{event.id}",
    )  # fmt: skip
    redriven = outbox(folder, "--json", "redrive", "--method", "receive-send-delete", "--yes")
    assert redriven.returncode == 0, redriven.stderr
    wait_for(
        lambda: depth(sqs, outputs["DurableQueueUrl"]) + depth(sqs, outputs["DurableDeadLetterQueueUrl"]) == 0,
        "the redriven message's delivery",
    )

    # And status, with the catalog found in the topology (no --catalog), tells the truth: nothing to do
    status = outbox(folder, "--json", "status")
    assert status.returncode == 0, status.stdout + status.stderr
    [row] = [t for t in json.loads(status.stdout)["tenants"] if t["tenant"] == tenant]
    assert (row["chain_intact"], row["dead_letters"]) == (True, 0)
