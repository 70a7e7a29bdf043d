"""The example app's CDK context as the tests synthesize it: a trial deployment, which says so."""

from __future__ import annotations

from typing import Any, Final

from aws_cdk import App

from stacks.settings import (
    ALARM_EMAIL_CONTEXT,
    COMMERCE_SERVICES_CONTEXT,
    NO_ALARM_SUBSCRIBER_CONTEXT,
    OPERATOR_ARNS_CONTEXT,
    ExampleSettings,
)

# The on-call role a trial names (the local runtime enforces no IAM; a real deploy names a role that exists).
TRIAL_OPERATOR: Final = "arn:aws:iam::123456789012:role/oncall"
# What `cdk deploy -c commerceServices=fake -c noAlarmSubscriber=... -c operatorArns=...` gives: the example's
# functions book into in-memory fakes (the local runtime points them at a FakeServiceServer instead: its
# environment wins over the template's), its alarms go to a topic nobody here subscribes to, which the template
# records, and its operator and runbook roles trust one named role.
TRIAL_CONTEXT: Final[dict[str, Any]] = {
    COMMERCE_SERVICES_CONTEXT: "fake",
    NO_ALARM_SUBSCRIBER_CONTEXT: "a test synth: nothing is deployed, nobody reads its alarms",
    OPERATOR_ARNS_CONTEXT: TRIAL_OPERATOR,
}


def settings_from(context: dict[str, Any]) -> ExampleSettings:
    """The settings a synth with ``context`` (on top of the trial's) reads; a throwaway app, no synth. A
    context with an alarm e-mail replaces the trial's reason for having none."""
    trial = dict(TRIAL_CONTEXT)
    if ALARM_EMAIL_CONTEXT in context:
        del trial[NO_ALARM_SUBSCRIBER_CONTEXT]
    return ExampleSettings.from_context(App(context={**trial, **context}).node)
