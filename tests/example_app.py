"""The example app's CDK context as the tests synthesize it: a trial deployment, which says so."""

from __future__ import annotations

from typing import Any, Final

from aws_cdk import App

from stacks.settings import COMMERCE_SERVICES_CONTEXT, ExampleSettings

# What `cdk deploy -c commerceServices=fake` gives: the example's functions book into in-memory fakes. The
# local runtime points them at a FakeServiceServer instead (its environment wins over the template's).
TRIAL_CONTEXT: Final[dict[str, Any]] = {COMMERCE_SERVICES_CONTEXT: "fake"}


def settings_from(context: dict[str, Any]) -> ExampleSettings:
    """The settings a synth with ``context`` (on top of the trial's) reads; a throwaway app, no synth."""
    return ExampleSettings.from_context(App(context={**TRIAL_CONTEXT, **context}).node)
