"""No silent fakes in a deployed example: which services the commerce module calls is said explicitly
(context ``commerceServices``: ``fake`` or a base URL), carried to every function as ``COMMERCE_SERVICES``,
and a function started without it fails at start with what to set."""

from __future__ import annotations

from typing import Any

import pytest

from modules import build_catalog
from modules.services import HttpService, Services, ServicesNotConfiguredError
from outbox.testing.services import FakeService
from outbox_cdk import OperatorTrust
from stacks.app_factory import build_app
from stacks.settings import RECORD_CHANGE_ENTITIES_CONTEXT, WATCHED_ENTITIES
from tests.example_app import TRIAL_OPERATOR, settings_from
from tests.infrastructure.conftest import resources_of_type


def test_a_synth_without_a_services_choice_stops_and_says_what_to_pass() -> None:
    with pytest.raises(ValueError, match=r"context commerceServices is missing: .*-c commerceServices=fake"):
        build_app({"noAlarmSubscriber": "a test", "aws:cdk:bundling-stacks": []})


@pytest.mark.parametrize("value", ["", "FAKE", "fakes", "api.example.com", "ftp://api.example.com", True, 1])
def test_a_services_choice_that_is_neither_fake_nor_a_url_is_refused(value: Any) -> None:
    with pytest.raises(ValueError, match="context commerceServices is"):
        settings_from({"commerceServices": value})


@pytest.mark.parametrize(
    ("value", "read"),
    [("fake", "fake"), ("https://api.example.com/", "https://api.example.com"), ("http://10.0.0.5:8080", None)],
)
def test_a_services_choice_is_read_as_given(value: str, read: str | None) -> None:
    assert settings_from({"commerceServices": value}).commerce_services == (read or value)


def test_every_function_of_the_trial_template_is_told_it_calls_fakes(stack_template: dict[str, Any]) -> None:
    functions = resources_of_type(stack_template, "AWS::Lambda::Function")
    told = {
        logical_id: resource["Properties"]["Environment"]["Variables"].get("COMMERCE_SERVICES")
        for logical_id, resource in functions.items()
        if "SUBSCRIPTIONS" in resource["Properties"].get("Environment", {}).get("Variables", {})
    }
    assert told, "the functions that build the catalog"
    assert set(told.values()) == {"fake"}, told


def test_a_function_started_without_the_choice_fails_at_start_with_what_to_set() -> None:
    with pytest.raises(ServicesNotConfiguredError, match="COMMERCE_SERVICES is not set: say which services"):
        build_catalog(environ={"DATA_TABLE_NAME": "data"})


def test_the_choice_decides_the_adapters() -> None:
    fakes = Services.from_env({"COMMERCE_SERVICES": "fake"})
    assert isinstance(fakes.carrier, FakeService)
    real = Services.from_env({"COMMERCE_SERVICES": "https://api.example.com/"})
    assert real.carrier == HttpService("https://api.example.com/carrier")


def test_the_example_says_who_reads_its_alarms_or_why_nobody() -> None:
    from aws_cdk import App

    from stacks.settings import ExampleSettings

    with pytest.raises(ValueError, match="context alarmEmail is missing: say who reads the alarms"):
        ExampleSettings.from_context(App(context={"commerceServices": "fake"}).node)
    with pytest.raises(ValueError, match="not both"):
        settings_from({"alarmEmail": "ops@example.com", "noAlarmSubscriber": "paged elsewhere"})
    assert settings_from({"alarmEmail": "ops@example.com"}).no_alarm_subscriber is None


def test_the_example_names_its_operators_and_never_trusts_the_whole_account() -> None:
    from aws_cdk import App

    from stacks.settings import ExampleSettings

    # The operator role is the one role the event-row Deny exempts: a synth without operatorArns stops.
    without = {"commerceServices": "fake", "noAlarmSubscriber": "a test"}
    with pytest.raises(ValueError, match=r"context operatorArns is missing: .*-c operatorArns=arn:aws:iam::"):
        ExampleSettings.from_context(App(context=without).node)
    with pytest.raises(ValueError, match="context operatorArns is missing"):
        build_app({**without, "aws:cdk:bundling-stacks": []})
    arns = "arn:aws:iam::123456789012:role/oncall, arn:aws:iam::123456789012:user/ops"
    assert settings_from({"operatorArns": arns}).operator_arns == (
        "arn:aws:iam::123456789012:role/oncall",
        "arn:aws:iam::123456789012:user/ops",
    )
    with pytest.raises(ValueError, match="not an IAM role or user ARN: oncall"):
        settings_from({"operatorArns": "oncall"})


def test_the_trial_template_trusts_its_named_operator_and_not_the_account(stack_template: dict[str, Any]) -> None:
    roles = resources_of_type(stack_template, "AWS::IAM::Role")
    trusted = {
        logical_id: [s["Principal"] for s in role["Properties"]["AssumeRolePolicyDocument"]["Statement"]]
        for logical_id, role in roles.items()
        if logical_id.startswith(("OutboxEventsOperatorRole", "OutboxRunbookRole"))
    }
    assert len(trusted) == 2, trusted
    assert all(principals == [{"AWS": TRIAL_OPERATOR}] for principals in trusted.values()), trusted


def test_the_example_s_operators_assume_their_roles_with_mfa_unless_told_otherwise(
    stack_template: dict[str, Any],
) -> None:
    """The example shows one of OperatorTrust's conditions: every trust statement of the operator and runbook
    roles requires MFA; a principal tag instead, or nothing more, is chosen by context, and anything else is
    refused with what to pass."""
    roles = resources_of_type(stack_template, "AWS::IAM::Role")
    conditions = [
        statement.get("Condition")
        for logical_id, role in roles.items()
        if logical_id.startswith(("OutboxEventsOperatorRole", "OutboxRunbookRole"))
        for statement in role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    ]
    assert conditions == [{"Bool": {"aws:MultiFactorAuthPresent": "true"}}] * 2
    assert settings_from({"operatorTrust": "tag:team=oncall"}).operator_trust == OperatorTrust(
        principal_tag=("team", "oncall")
    )
    assert settings_from({"operatorTrust": "mfa"}).operator_trust == OperatorTrust(require_mfa=True)
    assert settings_from({"operatorTrust": "none"}).operator_trust is None
    for wrong in ("MFA", "tag:team", "tag:=oncall", True):
        with pytest.raises(ValueError, match=r"operatorTrust must be mfa|principal_tag must be"):
            settings_from({"operatorTrust": wrong})


def test_a_services_url_with_credentials_is_refused_before_it_reaches_the_outputs() -> None:
    with pytest.raises(ServicesNotConfiguredError, match="must not carry credentials"):
        Services.from_env({"COMMERCE_SERVICES": "https://user:secret@api.example.com"})


def test_a_synth_with_credentials_in_the_services_url_says_why_without_repeating_them() -> None:
    with pytest.raises(ValueError, match="must not carry credentials") as refused:
        settings_from({"commerceServices": "https://user:secret@api.example.com"})
    assert "secret" not in str(refused.value)


def test_the_example_carries_the_row_changes_its_catalog_watches_unless_told_otherwise() -> None:
    assert settings_from({}).record_change_entities == WATCHED_ENTITIES
    assert settings_from({RECORD_CHANGE_ENTITIES_CONTEXT: "*"}).record_change_entities is None
    assert settings_from({RECORD_CHANGE_ENTITIES_CONTEXT: "SIMITEM, ORDER"}).record_change_entities == (
        "SIMITEM",
        "ORDER",
    )
    with pytest.raises(ValueError, match="must name entities"):
        settings_from({RECORD_CHANGE_ENTITIES_CONTEXT: " , "})
