"""The WORKFLOW lane on the local runtime: a synthesized app with a WORKFLOW subscription runs its durable function in
the testing SDK, its steps once per event, and the settle pass brings each execution's end back to the inbox.

The app is written into a code asset of its own (a catalog and a durable handler), synthesized with
``OutboxPipeline`` (bundling skipped: the engine's handlers come from this environment), and run from its cloud
assembly as the example app is.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from aws_cdk import App, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_

from outbox.local.runtime import LocalRuntime
from outbox_cdk import OutboxPipeline
from tests.infrastructure.test_workflow_function import CATALOG_SOURCE

HANDLER = """
from aws_durable_execution_sdk_python import durable_execution, durable_step

from outbox.workflows import WorkflowInput

STEPS = STEPS_FILE


@durable_step
def book(step, order_id, fail):
    with open(STEPS, "a") as steps:
        steps.write(order_id + "\\n")
    if fail:
        raise RuntimeError("the carrier refused it")
    return "label-" + order_id


@durable_execution
def ship(event, context):
    given = WorkflowInput.of(event)
    payload = given.envelope.payload
    return {"label": context.step(book(payload["order_id"], payload.get("fail", False)), name="book")}
"""
PACKAGES = (f"localworkflowshop{n}" for n in itertools.count())


@pytest.fixture
def runtime(tmp_path: Path) -> LocalRuntime:
    package = next(PACKAGES)
    source = tmp_path / "src" / package
    source.mkdir(parents=True)
    (source / "__init__.py").write_text("")
    (source / "catalog.py").write_text(CATALOG_SOURCE.replace("PACKAGE", package))
    (source / "shipping.py").write_text(HANDLER.replace("STEPS_FILE", repr(str(tmp_path / "steps.txt"))))
    outdir = tmp_path / "cdk.out"
    app = App(outdir=str(outdir), context={"aws:cdk:bundling-stacks": []})
    OutboxPipeline(
        Stack(app, "Shop"),
        "Outbox",
        code=lambda_.Code.from_asset(str(tmp_path / "src")),
        catalog=f"{package}.catalog:build",
        no_alarm_subscriber="a test stack",
        operators=[iam.AccountRootPrincipal()],
    )
    app.synth()
    return LocalRuntime.from_assembly(outdir, "Shop")


def claim(runtime: LocalRuntime, event_id: str) -> dict[str, str]:
    item = runtime.client("dynamodb").get_item(
        TableName=runtime.output("InboxTableName"),
        Key={"pk": {"S": f"CLAIM#{event_id}"}, "sk": {"S": "shop.ship_order"}},
    )["Item"]
    return {name: value.get("S", value.get("N", "")) for name, value in item.items()}


def test_a_workflow_runs_its_steps_once_per_event_and_its_end_settles_each_pair(
    runtime: LocalRuntime, tmp_path: Path
) -> None:
    with runtime:
        assert runtime.workflows is not None, "the template's durable function is run by the testing SDK"
        store = runtime.event_store(unchecked=True)
        done = store.emit("shop.order_paid", {"order_id": "o1"}, tenant="acme", actor="test")
        failed = store.emit("shop.order_paid", {"order_id": "o2", "fail": True}, tenant="acme", actor="test")
        runtime.run_until_idle()
        ends = runtime.workflows.wait_for_ends()
        runtime.run_until_idle()
        assert sorted(ends.values()) == ["FAILED", "SUCCEEDED"]
        assert claim(runtime, done.id)["status"] == "COMPLETED"
        assert claim(runtime, failed.id)["status"] == "DEAD"
        assert sum(runtime.workflows.service.starts.values()) == 2, "one execution per pair"
    steps = (tmp_path / "steps.txt").read_text().split()
    assert steps.count("o1") == 1, "the step of the execution that succeeded ran once"
    assert json.dumps(sorted(set(steps))) == '["o1", "o2"]'
