"""`make demo` end to end, small: it must report nothing lost and every chain intact."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from outbox import EventStore
from outbox.local.clients import local_client
from tests.e2e.test_local_pipeline import PAYMENT
from tools import demo


def test_the_demo_loses_nothing_and_reports_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert demo.main(["--orders", "24", "--out", str(tmp_path)]) == 0

    report = json.loads((tmp_path / "demo-report.json").read_text())
    assert report["lost"] == 0
    assert all(report["chain_intact"].values())
    assert report["workload"]["injected_faults"]["worker crashes before completion"] == 3
    assert report["dead_letters"] == {"terminal": 2}
    assert report["poison_pills"] == 1
    assert set(report["queues"].values()) == {0}, "drained"
    assert report["completed_effects"]["sales.project_order"] == report["workload"]["orders_placed"]
    # The shipment's label workflow: one execution per booked shipment, each ended, each label announced once
    booked = report["events_emitted"]["shipment.booked"]
    assert booked == report["workload"]["payments_completed"]
    assert report["workflow_executions"] == {"SUCCEEDED": booked}
    assert report["completed_effects"]["shipping.print_label"] == booked
    assert report["events_emitted"]["shipment.labelled"] == booked
    # It ends with what happened in one sentence, and what to try next
    printed = " ".join(capsys.readouterr().out.split())
    [verdict] = printed.split("verdict: ")[1:]
    assert verdict.startswith("every effect happened once")
    assert f"the {sum(report['dead_letters'].values())} dead letters are the" in verdict
    assert "as expected" in verdict, "its dead letters are the injected terminal errors"
    assert "--serve 4566" in verdict
    assert "dead-letters groups" in verdict


@pytest.mark.parametrize(
    ("change", "says"),
    [({"lost": 2}, "2 (event, subscription) pairs are neither done"), ({"chain_intact": {"acme": False}}, "acme")],
)
def test_a_report_that_lost_something_says_so_first(change: dict[str, object], says: str) -> None:
    report = {
        "lost": 0,
        "chain_intact": {"acme": True},
        "dead_letters": {"terminal": 2},
        "completed_effects": {"a": 1},
        "workload": {"injected_faults": {"terminal handler errors": 2}},
        **change,
    }
    said = demo.verdict(report)
    assert said.startswith("verdict: NOT GOOD")
    assert says in said


def test_serving_prints_no_request_log_and_an_aws_command_that_works_as_printed(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    answered: list[subprocess.CompletedProcess[str]] = []

    def run_the_printed_command() -> None:  # while it serves: the command, from what it printed
        printed = capfd.readouterr()
        command = re.search(r"try `([^`]+)`", printed.out)
        assert command, printed.out
        without_aws_settings = {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}  # no ~/.aws, no AWS_*
        answered.append(subprocess.run(["bash", "-c", command[1]], env=without_aws_settings, capture_output=True,
                                       text=True, check=False))  # fmt: skip
        print(printed.out, end="")
        print(printed.err, end="", file=sys.stderr)

    monkeypatch.setattr(demo, "keep_serving", lambda *_: run_the_printed_command())
    assert demo.main(["--orders", "8", "--serve", str(port), "--out", str(tmp_path)]) == 0

    printed = capfd.readouterr()
    [listed] = answered
    assert listed.returncode == 0, listed.stderr
    assert "OutboxEngine" in listed.stdout or "Events" in listed.stdout
    assert "HTTP/1.1" not in printed.out + printed.err, "no access log line of the served requests"


def test_serving_keeps_the_pipeline_moving_and_says_it_keeps_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """While the demo serves, what reaches its endpoint is processed (an event emitted there is delivered, as a
    repair of `outbox --local replay` would be), and it says plainly that it keeps nothing across runs."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    stop = threading.Event()
    ended: list[int] = []
    serving = threading.Thread(
        target=lambda: ended.append(demo.main(["--orders", "8", "--serve", str(port), "--out", str(tmp_path)], stop)),
        daemon=True,
    )
    serving.start()
    try:
        topology = tmp_path / "topology.json"
        deadline = time.monotonic() + 300
        while not topology.exists() and serving.is_alive() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert topology.exists(), "the demo serves"
        served = json.loads(topology.read_text())
        dynamodb = local_client("dynamodb", served["endpoint_url"])
        store = EventStore(served["outputs"]["EventsTableName"], client=dynamodb, unchecked=True)
        event = store.emit("payment.completed", PAYMENT, tenant="served-t", actor="test")
        key = {"pk": {"S": f"CLAIM#{event.id}"}, "sk": {"S": "shipping.book_shipment"}}
        status, deadline = None, time.monotonic() + 60
        while status != "COMPLETED" and time.monotonic() < deadline:
            item = dynamodb.get_item(TableName=served["outputs"]["InboxTableName"], Key=key).get("Item")
            status = item["status"]["S"] if item else None
            time.sleep(0.2)
        assert status == "COMPLETED", "an event emitted while it serves is delivered"
    finally:
        stop.set()
        serving.join(60)
    assert ended == [0]
    assert demo.KEEPS_NOTHING in capsys.readouterr().out.replace("\n", " ").replace("  ", " ")
