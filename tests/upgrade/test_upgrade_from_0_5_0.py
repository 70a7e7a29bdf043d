"""Upgrading from release 0.5.0, against the release itself: its engine, built from this repository's history
(conftest.py), runs the example stack on its own local runtime with the upgrade catalog (upgrade_catalog.py) in
a subprocess (release_workload.py) and leaves rows in every state: claims COMPLETED, DEAD (open dead letters),
PENDING (a worker died after its claim: the lease held), REPLAYING (a replay's re-send not consumed yet), a
resolved dead letter, an ordered subscription's watermark and DEFERRED pairs behind a dead event, a poison pill,
tamper findings, anchors, and a message in the durable DLQ. It writes every table's items and every queue's
messages to a file.

This release then boots the same stack with empty tables, imports the items and the messages, and runs the
upgrade the way a deploy meets it: every event row is written to the new events table, so its stream carries
each event again and the relay pipe sends every one of them, as a relay pipe that starts over at TRIM_HORIZON
would (a renamed or replaced pipe); the lease of the crashed worker lapses; the handlers are fixed and the
dead work replayed, one blocked order replayed and the other skipped; the DLQ redriven; reconcile, status,
verify-chain and an anchor reset asked. Every pair must finish exactly once (the handlers count their effects
in the data table), no dead letter may be a conflict, and status must report nothing but what is true.

The template: release 0.5.0's local runtime boots this release's synthesized example stack (the session's synth,
tests/conftest.py). The example synthesized from 2373484 has the same tables (keys, indexes, streams), queues,
pipes (names, filters, input templates, starting positions), event source mappings and function environments as
today's; 0.6.0 adds alarms, the control-plane watch's rules and DLQ, and changes policies (IAM, queues' send and
redrive-allow, the key's), the dashboard, the pipes' dependencies and the functions' code, none of which the local
runtime runs. So one synth serves both, and no 0.5.0 synth (another ten seconds) is needed, but for the WORKFLOW
lane the example gained after 0.6.0 (a durable function, its alias, its settle pass): 0.5.0 has no such lane, and
its runtime cannot resolve the alias the consumer is told of. Its workload boots the template without them
(``without_the_workflow_lane``), as 0.5.0 would have synthesized the example.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

from outbox.cli import CliContext, app
from outbox.local.clock import VirtualClock
from outbox.testing.pipeline import LocalPipeline
from stacks.app_factory import STACK_NAME
from tests.conftest import PROJECT_ROOT, Synthesized
from tests.upgrade import state, upgrade_catalog
from tests.upgrade.conftest import Release
from tests.upgrade.release_workload import CATALOG, TENANT_A, TENANT_B, TENANT_C, TENANT_D
from tests.upgrade.upgrade_catalog import DIRECT, LEASE, ORDERED

RELEASE_TIMEOUT_SECONDS = 300
# The example stack's durable queue and its DLQ (the local runtime names each resource by its logical id).
DURABLE_QUEUE, DURABLE_DLQ = "OutboxDurableQueueECEA96BD", "OutboxDurableDeadLettersQueue7136BE10"


@pytest.fixture(autouse=True)
def broken_handlers() -> Iterator[None]:
    """The catalog's handlers as deployed before the fix, and no run recorded; so again after the test."""
    upgrade_catalog.RUNS.clear()
    upgrade_catalog.FIXED = False
    yield
    upgrade_catalog.RUNS.clear()
    upgrade_catalog.FIXED = False


def without_the_workflow_lane(assembly: Path, into: Path) -> Path:
    """A copy of ``assembly`` whose template has no WORKFLOW lane: the lane's resources (``OutboxWorkflows...``)
    left out, and every function variable that names one of them (the consumer's ``WORKFLOW_FUNCTIONS``); the
    assets are the same files (linked)."""
    into.mkdir()
    for entry in assembly.iterdir():
        if entry.name != f"{STACK_NAME}.template.json":
            (into / entry.name).symlink_to(entry)
    template = json.loads((assembly / f"{STACK_NAME}.template.json").read_text())
    lane = {name for name in template["Resources"] if name.startswith("OutboxWorkflows")}
    template["Resources"] = {name: r for name, r in template["Resources"].items() if name not in lane}
    for resource in template["Resources"].values():
        variables = resource.get("Properties", {}).get("Environment", {}).get("Variables")
        if resource["Type"] == "AWS::Lambda::Function" and variables:
            for name in [name for name, value in variables.items() if any(id_ in json.dumps(value) for id_ in lane)]:
                del variables[name]
    (into / f"{STACK_NAME}.template.json").write_text(json.dumps(template))
    return into


def run_release(release: Release, assembly: Path, out: Path) -> dict[str, Any]:
    """The previous release's workload, in its own process; the state it wrote."""
    environment = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(release.engine), str(PROJECT_ROOT)]),
        "AWS_ACCOUNT_ID_ENDPOINT_MODE": "disabled",
        "POWERTOOLS_TRACE_DISABLED": "1",
        "PYTHONWARNINGS": "ignore",
    }
    command = [sys.executable, "-m", "tests.upgrade.release_workload", str(assembly), STACK_NAME, str(release.engine)]
    done = subprocess.run(
        [*command, str(out)],
        cwd=PROJECT_ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=RELEASE_TIMEOUT_SECONDS,
    )
    assert done.returncode == 0, f"release {release.version}'s workload failed:\n{done.stdout}\n{done.stderr}"
    return state.read_state(out)


def cli(pipeline: LocalPipeline, *args: str, exit_code: int = 0) -> str:
    """This release's ``outbox`` command line on the upgraded pipeline."""
    context = CliContext.of(
        pipeline.operations, console=Console(width=250), err_console=Console(width=250, stderr=True)
    )
    result = CliRunner().invoke(app, list(args), obj=context)
    assert result.exit_code == exit_code, f"outbox {' '.join(args)} exited {result.exit_code}:\n{result.output}"
    return result.stdout


def import_state(pipeline: LocalPipeline, exported: dict[str, Any]) -> None:
    """The release's rows, then its events (each a stream record the relay sends again), then its messages."""
    runtime = pipeline.runtime
    events_table = runtime.output("EventsTableName")
    for table, items in exported["tables"].items():
        if table != events_table:
            state.import_items(runtime, table, items)
    # In the log's order, heads and events as they are: the relay pipe sends each EVENT row's insert.
    events = sorted(exported["tables"][events_table], key=lambda item: (item["pk"]["S"], item["sk"]["S"]))
    state.import_items(runtime, events_table, events)
    for queue, messages in exported["queues"].items():
        state.import_messages(runtime, queue, messages)


def effects(pipeline: LocalPipeline) -> dict[str, int]:
    """What the handlers counted: ``<event id>:<subscription>`` -> effects applied."""
    client, table = pipeline.runtime.client("dynamodb"), pipeline.runtime.output("DataTableName")
    items = client.query(
        TableName=table,
        KeyConditionExpression="pk = :pk",
        ExpressionAttributeValues={":pk": {"S": upgrade_catalog.EFFECTS_PK}},
        ConsistentRead=True,
    )["Items"]
    return {item["sk"]["S"]: int(item["effects"]["N"]) for item in items}


def every_dead_letter(pipeline: LocalPipeline, tenants: list[str]) -> list[Any]:
    """Open and resolved."""
    return [letter for tenant in tenants for letter in pipeline.inbox.dead_letters(tenant, include_resolved=True)]


def conflicts(pipeline: LocalPipeline, tenants: list[str], names: dict[str, str]) -> list[str]:
    """Every conflict dead letter, open or resolved: ``<event name>:<subscription> (<what it says>)``."""
    return [
        f"  {names.get(letter.event_id, letter.event_id)}:{letter.subscription} ({letter.error})"
        for letter in every_dead_letter(pipeline, tenants)
        if letter.reason == "conflict"
    ]


@pytest.mark.slow
def test_an_upgrade_from_0_5_0_finishes_every_pair_exactly_once(
    release_0_5_0: Release, synthesized: Synthesized, tmp_path: Path
) -> None:
    # Given everything release 0.5.0 leaves behind
    release_assembly = without_the_workflow_lane(synthesized.outdir, tmp_path / "0.5.0-assembly")
    exported = run_release(release_0_5_0, release_assembly, tmp_path / "state.json")
    facts = exported["facts"]
    assert Path(facts["engine"]).is_relative_to(release_0_5_0.engine), facts["engine"]
    ids: dict[str, str] = facts["events"]
    names = {event_id: name for name, event_id in ids.items()}
    tenants = sorted({TENANT_A, TENANT_B, TENANT_C, TENANT_D})
    claims_before = facts["claims"]
    assert set(claims_before.values()) == {"COMPLETED", "DEAD", "PENDING", "REPLAYING", "DEFERRED"}, claims_before
    assert (claims_before["a7:upg.lease"], claims_before["a4:upg.lease"]) == ("PENDING", "REPLAYING")
    assert (facts["poison_pills"], facts["findings"], facts["anchored"]) == (1, ["modified", "modified"], tenants)
    assert len(exported["queues"][DURABLE_DLQ]) == 1, "no message reached the durable DLQ"

    clock = VirtualClock(datetime.fromisoformat(exported["clock"]))
    environment = {"SUBSCRIPTIONS": CATALOG}
    with LocalPipeline.boot(
        synthesized.outdir, STACK_NAME, environment=environment, function_log_level="CRITICAL", clock=clock
    ) as pipeline:
        # When this release takes over its tables and queues, and the relay sends every event again
        import_state(pipeline, exported)
        runtime = pipeline.runtime
        while runtime.pipe("RelayPipeName").poll() is not None:
            pass
        depth = runtime.client("sqs").get_queue_attributes(
            QueueUrl=runtime.output("DurableQueueUrl"), AttributeNames=["ApproximateNumberOfMessages"]
        )["Attributes"]["ApproximateNumberOfMessages"]
        assert int(depth) == len(exported["queues"][DURABLE_QUEUE]) + len(ids), "the relay did not send every event"
        pipeline.drain()  # the crashed worker's lease lapses meanwhile

        # Then nothing 0.5.0 claimed is other content now, and no pair that was done or dead ran again
        found = conflicts(pipeline, tenants, names)
        assert not found, f"{len(found)} CONFLICT dead letters after the upgrade:\n" + "\n".join(found)
        done_before = {pair for pair, status in claims_before.items() if status in ("COMPLETED", "DEAD", "DEFERRED")}
        # A DynamoDB-only subscription may run a dead pair's handler before its commit meets the pair's row (the
        # ordered one does, for the next event of its order): refused, the run has no effect (Effects.DYNAMODB).
        # Nothing else that was done, dead or waiting may run.
        may_run = {pair for pair in done_before if claims_before[pair] == "DEAD" and not pair.endswith(LEASE)}
        ran_again = [f"{names[event_id]}:{sub}" for event_id, sub in upgrade_catalog.RUNS]
        assert [pair for pair in ran_again if pair in done_before - may_run] == []
        status_of = _claims(pipeline, ids)
        assert status_of["a7:upg.lease"] == "COMPLETED", "the crashed worker's claim was not taken over"
        assert pipeline.claim(ids["a7"], LEASE).attempts == 2  # type: ignore[union-attr]
        assert status_of["a4:upg.lease"] == "COMPLETED", "0.5.0's replay was not run"
        assert [status_of[f"b{n}:{ORDERED}"] for n in range(1, 6)] == [
            "COMPLETED",
            "DEAD",
            "DEFERRED",
            "DEFERRED",
            "DEFERRED",
        ]

        # When the handlers are fixed and the dead work replayed, one blocked order replayed, the other skipped
        upgrade_catalog.FIXED = True
        cli(pipeline, "replay", "--tenant", TENANT_A, "--yes")
        cli(pipeline, "replay", "--tenant", TENANT_B, "--yes")
        cli(pipeline, "skip", "--tenant", TENANT_C, "--subscription", ORDERED, "--seq", "2", "--reason", "t", "--yes")
        pipeline.drain()
        # ... the message 0.5.0 left in the durable DLQ redriven
        cli(pipeline, "redrive", "--dlq", "durable-dlq", "--yes")
        pipeline.drain()

        # Then every pair finished exactly once (the skipped one never ran), with no conflict on the way
        found = conflicts(pipeline, tenants, names)
        assert not found, f"{len(found)} CONFLICT dead letters after the repairs:\n" + "\n".join(found)
        expected = {
            f"{name}:{subscription}": 0 if name == "c2" else 1
            for name in ids
            for subscription in ((LEASE, DIRECT) if name[0] in "ad" else (ORDERED,))
        }
        counted = {f"{names[key.split(':')[0]]}:{key.split(':')[1]}": n for key, n in effects(pipeline).items()}
        assert {pair: counted.get(pair, 0) for pair in expected} == expected
        assert set(counted) <= set(expected)
        claims_after = _claims(pipeline, ids)
        assert Counter(claims_after.values()) == Counter({"COMPLETED": len(expected) - 1, "SKIPPED": 1}), claims_after
        assert claims_after[f"c2:{ORDERED}"] == "SKIPPED"
        assert [letter for tenant in tenants for letter in pipeline.dead_letters(tenant)] == []

        # ... reconcile finds nothing unhandled, and re-sends nothing
        reconciled = json.loads(cli(pipeline, "reconcile", "--since", "7d", "--dry-run", "--json"))
        assert reconciled["republished"] == [], reconciled
        # ... the chains verify against 0.5.0's anchors
        cli(pipeline, "verify-chain", "--all")
        # ... status tells the truth: 0.5.0's tamper findings, until an anchor reset deals with them, and the
        # poison pill on its day; no other problem
        report = json.loads(cli(pipeline, "status", "--json", exit_code=1))
        tampered = f"tenant {TENANT_A}: 2 tamper findings: outbox findings --tenant {TENANT_A}"
        assert [line for line in report["problems"] if "poison pill" not in line] == [tampered]
        reset = ["--tenant", TENANT_A, "--reset", "--reason", "upgrade test", "--by", "test", "--yes", "--json"]
        cli(pipeline, "anchor", *reset)
        report = json.loads(cli(pipeline, "status", "--json", exit_code=1 if _pills_today(pipeline) else 0))
        assert [line for line in report["problems"] if "poison pill" not in line] == []
        assert all(row["chain_intact"] and row["dead_letters"] == 0 for row in report["tenants"]), report["tenants"]
        assert report["blocked"] == []


def _claims(pipeline: LocalPipeline, ids: dict[str, str]) -> dict[str, str]:
    return {
        f"{name}:{subscription}": claim.status
        for name, event_id in ids.items()
        for subscription, claim in pipeline.operations.claims(event_id).items()
    }


def _pills_today(pipeline: LocalPipeline) -> int:
    return len(pipeline.operations.poison_pills())
