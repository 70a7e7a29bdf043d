"""Builds the CDK app. Used by app.py (cdk synth) and by the tests (one in-process synth per session)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aws_cdk import App, Validations
from cdk_nag import AwsSolutionsChecks, ServerlessChecks

from stacks.outbox_stack import OutboxStack

STACK_NAME = "OutboxEngine"


def build_app(context: Mapping[str, Any] | None = None, outdir: str | None = None) -> App:
    """Create the app with every stack and the cdk-nag packs; no AWS, git or network calls."""
    app = App(context=dict(context or {}), outdir=outdir)
    OutboxStack(app, STACK_NAME, description="Exactly-once effects on DynamoDB: outbox, relay and inbox")
    Validations.of(app).add_plugins(AwsSolutionsChecks(app), ServerlessChecks(app))
    return app
