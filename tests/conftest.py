"""Shared fixtures. The CDK app is synthesized once per test run (bundling skipped), shared by the xdist workers."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("JSII_SILENCE_WARNING_UNTESTED_NODE_VERSION", "1")
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
# moto and current botocore disagree on the account-based DynamoDB Streams endpoint.
os.environ.setdefault("AWS_ACCOUNT_ID_ENDPOINT_MODE", "disabled")
# Tests must never reach the X-Ray daemon; Powertools honours this.
os.environ.setdefault("POWERTOOLS_TRACE_DISABLED", "1")

PROJECT_ROOT = Path(__file__).resolve().parents[1]
CDK_JSON_CONTEXT: dict[str, Any] = json.loads((PROJECT_ROOT / "cdk.json").read_text())["context"]


@dataclass(frozen=True)
class Synthesized:
    """The cloud assembly of one synth: its folder and each stack's template as a dict."""

    outdir: Path
    templates: dict[str, dict[str, Any]]

    def template(self, stack_name: str) -> dict[str, Any]:
        return self.templates[stack_name]


@pytest.fixture(scope="session")
def synthesized(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> Synthesized:
    """One synth for the whole run: with pytest-xdist's workers, the first to ask synthesizes into their
    shared temporary folder and the others wait for it and read the same assembly."""
    if worker_id == "master":  # not under xdist
        return _synthesize(tmp_path_factory.mktemp("cdk.out"))
    shared = tmp_path_factory.getbasetemp().parent
    outdir, done = shared / "cdk.out", shared / "cdk.out.done"
    try:
        (shared / "cdk.out.lock").mkdir()  # atomic: exactly one worker wins
    except FileExistsError:
        deadline = time.monotonic() + SYNTH_WAIT_SECONDS
        while not done.exists():
            if time.monotonic() > deadline:
                raise RuntimeError(f"another worker did not finish synthesizing into {outdir}") from None
            time.sleep(0.2)
        return Synthesized(outdir=outdir, templates=json.loads(done.read_text()))
    synthesized = _synthesize(outdir)
    done.write_text(json.dumps(synthesized.templates))
    return synthesized


SYNTH_WAIT_SECONDS = 600


def _synthesize(outdir: Path) -> Synthesized:
    from stacks.app_factory import build_app
    from tests.example_app import TRIAL_CONTEXT

    outdir.mkdir(parents=True, exist_ok=True)
    # The CLI passes cdk.json's context (feature flags included) to app.py; do the same here, so the
    # tests see the template `cdk deploy` would. Skipping bundling keeps the suite offline and fast.
    # The example as a trial deployment (tests/example_app.py).
    context = {**CDK_JSON_CONTEXT, **TRIAL_CONTEXT, "aws:cdk:bundling-stacks": []}
    assembly = build_app(context, outdir=str(outdir)).synth()
    templates = {stack.stack_name: json.loads(Path(stack.template_full_path).read_text()) for stack in assembly.stacks}
    return Synthesized(outdir=outdir, templates=templates)


@pytest.fixture(scope="session")
def outbox_assembly(synthesized: Synthesized) -> Path:
    """What ``outbox.testing``'s ``outbox_pipeline`` fixture boots: the session's synthesized example app."""
    return synthesized.outdir


@pytest.fixture(scope="session")
def outbox_stack() -> str:
    from stacks.app_factory import STACK_NAME

    return STACK_NAME


@pytest.fixture
def aws_credentials() -> Iterator[None]:
    """Fake credentials so that no test can reach a real account."""
    saved = {k: os.environ.get(k) for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION")}
    os.environ.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1")
    yield
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
