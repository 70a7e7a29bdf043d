"""Run by the upgrade test under a previous release's engine (``python -m tests.upgrade.release_workload``, with
that release's ``outbox`` first on PYTHONPATH): boot the example stack on that release's local runtime with the
upgrade catalog, leave rows in every state the inbox has, and write the whole state to a JSON file.

    python -m tests.upgrade.release_workload <assembly dir> <stack> <engine dir> <state.json>

Only what release 0.5.0 has is used here: ``outbox.testing.pipeline.LocalPipeline``, ``outbox.local.faults``,
the ``outbox`` CLI (``CliContext.of``), ``EventStore``. What each step leaves is listed in the file's ``facts``:
the events by name, and each pair's claim status as that release read it.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

SCHEDULED_EVENT = {"source": "aws.events", "detail-type": "Scheduled Event", "detail": {}}
CATALOG = "tests.upgrade.upgrade_catalog:build_catalog"
# Tenants: t-a the unordered subscriptions' states; t-b and t-c an ordered subscription blocked behind a dead event
# (the upgrade replays one and skips the other); t-d a message that reached the durable DLQ.
TENANT_A, TENANT_B, TENANT_C, TENANT_D = "t-a", "t-b", "t-c", "t-d"


def main(assembly: Path, stack: str, engine_dir: Path, out: Path) -> None:
    import outbox

    if not Path(outbox.__file__).resolve().is_relative_to(engine_dir.resolve()):
        raise SystemExit(f"this must run the engine in {engine_dir}, and imported {outbox.__file__}")

    from outbox import EventStore
    from outbox.local import faults
    from outbox.testing.pipeline import LocalPipeline
    from tests.upgrade import state, upgrade_catalog
    from tests.upgrade.upgrade_catalog import LEASE, ORDERED, place, step

    environment = {"SUBSCRIPTIONS": CATALOG}
    with LocalPipeline.boot(assembly, stack, environment=environment, function_log_level="CRITICAL") as pipeline:
        runtime = pipeline.runtime
        dynamodb, events_table = runtime.client("dynamodb"), runtime.output("EventsTableName")
        store = EventStore(events_table, client=dynamodb, catalog=upgrade_catalog.build_catalog())
        ops = pipeline.operations
        events: dict[str, Any] = {}

        # t-d: the relay sends d1, and SQS moves it to the durable DLQ after its maxReceiveCount receives, none of
        # which got as far as a claim (what a consumer that dies before its claims leaves; receiving it bare
        # takes a fraction of the time the consumer's crashes would).
        events["d1"] = place(store, TENANT_D, 1)
        while runtime.pipe("RelayPipeName").poll() is not None:
            pass
        sqs, durable_queue = runtime.client("sqs"), runtime.output("DurableQueueUrl")
        for _ in range(1_000):
            if not sqs.receive_message(QueueUrl=durable_queue, VisibilityTimeout=0).get("Messages"):
                break

        # t-a: completed; dead (terminal); dead then replayed by this release (a resolved dead letter); dead and
        # replayed, the re-send not consumed yet (below: REPLAYING); every attempt failed (exhausted).
        events["a1"] = place(store, TENANT_A, 1)
        events["a2"] = place(store, TENANT_A, 2, lease="terminal")
        events["a3"] = place(store, TENANT_A, 3, lease="terminal-once")
        events["a4"] = place(store, TENANT_A, 4, lease="terminal-once", direct="terminal")
        events["a5"] = place(store, TENANT_A, 5, lease="retry")
        # t-b, t-c: the ordered subscription applies 1, dies on 2, and defers 3 and 4 behind it.
        for tenant, name in ((TENANT_B, "b"), (TENANT_C, "c")):
            events[f"{name}1"] = step(store, tenant, 1)
            events[f"{name}2"] = step(store, tenant, 2, ordered="terminal")
            events[f"{name}3"] = step(store, tenant, 3)
            events[f"{name}4"] = step(store, tenant, 4)
        pipeline.drain()
        cli(ops, "replay", "--event-id", events["a3"].id, "--subscription", LEASE, "--yes")
        pipeline.drain()

        # A poison pill: a message on the durable queue that is no event.
        runtime.client("sqs").send_message(
            QueueUrl=runtime.output("DurableQueueUrl"),
            MessageBody="this is no event",
            MessageGroupId=TENANT_A,
            MessageDeduplicationId="poison-1",
        )
        pipeline.drain()

        # A tamper finding: a1's row overwritten (PutItem), then put back as it was; the chain is intact again.
        [row] = [
            item
            for item in dynamodb.scan(TableName=events_table, ConsistentRead=True)["Items"]
            if item.get("event_id", {}).get("S") == events["a1"].id
        ]
        dynamodb.put_item(TableName=events_table, Item={**row, "actor": {"S": "mallory"}})
        dynamodb.put_item(TableName=events_table, Item=row)
        pipeline.drain()

        # The hourly anchoring pass, then more events above the anchors.
        anchored = runtime.function("AnchoringFunctionName").invoke(SCHEDULED_EVENT)
        events["a6"] = place(store, TENANT_A, 6)
        events["b5"] = step(store, TENANT_B, 5)
        pipeline.drain()

        # A crash right after a7's lease claim: its lease is still held when the state is taken (no time passes).
        events["a7"] = place(store, TENANT_A, 7)
        with faults.crash_after_claim(subscription=LEASE) as crashes:
            while runtime.step():
                pass
        assert crashes.fired == 1, "a7's claim did not crash"
        # a4's lease pair replayed: the re-send waits in the queue, behind a7's message (REPLAYING).
        cli(ops, "replay", "--event-id", events["a4"].id, "--subscription", LEASE, "--yes")

        claims = {
            f"{name}:{subscription}": claim.status
            for name, envelope in events.items()
            for subscription, claim in ops.claims(envelope.id).items()
        }
        findings = [f.kind.value for f in ops.findings([TENANT_A])]
        exported = state.export_state(runtime)
        exported["facts"] = {
            "engine": outbox.__file__,
            "events": {name: envelope.id for name, envelope in events.items()},
            "event_tenants": {name: envelope.tenant for name, envelope in events.items()},
            "claims": claims,
            "anchored": sorted(anchored.get("advanced", {})),
            "findings": findings,
            "dead_letters": {
                tenant: sorted(f"{letter.event_id}:{letter.subscription}:{letter.reason}" for letter in letters)
                for tenant in (TENANT_A, TENANT_B, TENANT_C, TENANT_D)
                if (letters := ops.dead_letters(tenant))
            },
            "poison_pills": len(ops.poison_pills()),
            "ordered": ORDERED,
        }
        state.write_state(exported, out)


def cli(ops: Any, *args: str) -> str:
    """The ``outbox`` command line of this release, on its operations; refuses to go on if it failed."""
    from rich.console import Console
    from typer.testing import CliRunner

    from outbox.cli import CliContext, app

    context = CliContext.of(ops, console=Console(width=250), err_console=Console(width=250, stderr=True))
    result = CliRunner().invoke(app, list(args), obj=context)
    if result.exit_code != 0:
        raise RuntimeError(f"outbox {' '.join(args)} exited {result.exit_code}: {result.output}") from result.exception
    return result.output


if __name__ == "__main__":
    assembly_dir, stack_name, engine, state_file = sys.argv[1:5]
    main(Path(assembly_dir), stack_name, Path(engine), Path(state_file))
