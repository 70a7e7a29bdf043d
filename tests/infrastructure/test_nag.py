"""cdk-nag runs as a validation plugin during synth: a finding fails the synth itself."""

from __future__ import annotations

import json

from tests.conftest import Synthesized


def test_synth_passes_cdk_nag_without_findings(synthesized: Synthesized) -> None:
    # build_app registers AwsSolutions and Serverless checks; synth raises on any unacknowledged finding,
    # so reaching here means it passed. The report, when written, must list no failure either.
    report = synthesized.outdir / "validation-report.json"
    if report.exists():
        body = json.loads(report.read_text())
        failures = [r for r in body.get("pluginReports", []) if r.get("summary", {}).get("status") == "failure"]
        assert failures == []


def test_a_nag_finding_fails_the_synth(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Guards the guard: if the packs stopped running, this would pass silently everywhere else."""
    import pytest
    from aws_cdk import aws_sqs as sqs

    from stacks.app_factory import STACK_NAME, build_app
    from tests.example_app import TRIAL_CONTEXT

    app = build_app({**TRIAL_CONTEXT, "aws:cdk:bundling-stacks": []}, outdir=str(tmp_path))
    sqs.Queue(app.node.find_child(STACK_NAME), "QueueWithoutDlqOrTls")
    with pytest.raises(RuntimeError, match="AwsSolutions-SQS3"):
        app.synth()


def test_the_example_deployed_with_an_alarm_email_passes_cdk_nag(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The deploy command of docs/operating.md (-c alarmEmail=...): its e-mail subscription once failed the
    Serverless pack."""
    from stacks.app_factory import build_app
    from tests.example_app import TRIAL_CONTEXT

    context = {k: v for k, v in TRIAL_CONTEXT.items() if k != "noAlarmSubscriber"}
    app = build_app({**context, "alarmEmail": "ops@example.com", "aws:cdk:bundling-stacks": []}, outdir=str(tmp_path))
    app.synth()  # raises on any unacknowledged finding
