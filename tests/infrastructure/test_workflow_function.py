"""The WORKFLOW lane's functions in the template: a durable function per WORKFLOW subscription, with its durable
configuration (execution timeout, retention, the pipeline's key), a published version under the alias the consumer
starts executions of, least-privilege grants both ways, and a synth that refuses a handler that is not durable.

Each case writes a small app (a catalog and a durable handler) into a code asset of its own, as
test_catalog_check does, and builds an ``OutboxPipeline`` on it.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import App, Duration, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk.assertions import Template
from cfnlint.api import lint

from outbox_cdk import Alarms, CatalogContractError, OutboxPipeline, WorkflowOptions
from outbox_cdk.workflow_function import EXECUTION_ACTIONS, FIND_ACTIONS, START_ACTIONS
from tests.infrastructure.template_queries import actions_on, listed, only_resource, role_statements

CATALOG_SOURCE = """
from pydantic import BaseModel

from outbox import Lane, Subscription
from outbox.catalog import Catalog, EventTypeSpec, Module
from outbox.workflows import workflow


class Paid(BaseModel):
    order_id: str
    fail: bool = False


def build():
    return Catalog(
        [
            Module(
                name="shop",
                code=(),
                event_types=(EventTypeSpec("shop.order_paid", Paid, emitted_by="the checkout API"),),
                subscriptions=(
                    Subscription(
                        "shop.ship_order", "shop.order_paid", Lane.WORKFLOW, workflow("PACKAGE.shipping:ship")
                    ),
                ),
            )
        ]
    )
"""
DURABLE_HANDLER = """
from aws_durable_execution_sdk_python import durable_execution


@durable_execution
def ship(event, context):
    return {"shipped": True}
"""
PLAIN_HANDLER = """
def ship(event, context):
    return {"shipped": True}
"""
PACKAGES = (f"workflowshop{n}" for n in itertools.count())


def app_code(tmp_path: Path, handler: str = DURABLE_HANDLER) -> tuple[lambda_.Code, str]:
    package = next(PACKAGES)
    source = tmp_path / "src" / package
    source.mkdir(parents=True)
    (source / "__init__.py").write_text("")
    (source / "catalog.py").write_text(CATALOG_SOURCE.replace("PACKAGE", package))
    (source / "shipping.py").write_text(handler)
    return lambda_.Code.from_asset(str(tmp_path / "src")), package


def shop(app: App, tmp_path: Path, *, handler: str = DURABLE_HANDLER, key: bool = True, **options: Any) -> Stack:
    code, package = app_code(tmp_path, handler)
    stack = Stack(app, "Shop")
    OutboxPipeline(
        stack,
        "Outbox",
        code=code,
        catalog=f"{package}.catalog:build",
        alarms=Alarms.nobody("a test stack"),
        operators=[iam.AccountRootPrincipal()],
        encryption_key=kms.Key(stack, "Key", enable_key_rotation=True) if key else None,
        **options,
    )
    return stack


def synthesize(tmp_path: Path, **options: Any) -> dict[str, Any]:
    return Template.from_stack(shop(App(context={"aws:cdk:bundling-stacks": []}), tmp_path, **options)).to_json()


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return synthesize(
        tmp_path_factory.mktemp("workflow"),
        workflows=WorkflowOptions(execution_timeout=Duration.days(7), retention_days=14),
    )


def workflow_function(template: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    return only_resource(template, "AWS::Lambda::Function", "OutboxWorkflowsWorkflow")


def key_id(template: dict[str, Any]) -> str:
    return only_resource(template, "AWS::KMS::Key", "Key")[0]


def test_the_function_runs_the_durable_handler_with_its_durable_configuration(template: dict[str, Any]) -> None:
    _, function = workflow_function(template)
    properties = function["Properties"]
    assert properties["Handler"].endswith(".shipping.ship")
    assert properties["DurableConfig"] == {
        "ExecutionTimeout": 7 * 24 * 3600,
        "RetentionPeriodInDays": 14,
        "KMSKeyArn": {"Fn::GetAtt": [key_id(template), "Arn"]},
    }


def test_without_a_key_the_executions_use_lambdas_own(tmp_path: Path) -> None:
    template = synthesize(tmp_path, key=False)
    config = workflow_function(template)[1]["Properties"]["DurableConfig"]
    assert config == {"ExecutionTimeout": 30 * 24 * 3600, "RetentionPeriodInDays": 30}


def test_the_consumer_starts_executions_of_a_published_version_under_the_alias(template: dict[str, Any]) -> None:
    function_id, _ = workflow_function(template)
    alias_id, alias = only_resource(template, "AWS::Lambda::Alias", "Workflows")
    version_id = alias["Properties"]["FunctionVersion"]["Fn::GetAtt"][0]
    version = template["Resources"][version_id]
    assert version["Type"] == "AWS::Lambda::Version"
    assert version["Properties"]["FunctionName"] == {"Ref": function_id}
    assert alias["Properties"]["Name"] == "live"
    consumer = only_resource(template, "AWS::Lambda::Function", "OutboxDurableConsumer")[1]
    named = consumer["Properties"]["Environment"]["Variables"]["WORKFLOW_FUNCTIONS"]
    assert {"Ref": alias_id} in named["Fn::Join"][1], "the consumer is told the alias's (qualified) ARN"
    text = "".join(p if isinstance(p, str) else "<alias>" for p in named["Fn::Join"][1])
    assert json.loads(text) == {"shop.ship_order": {"arn": "<alias>", "execution_timeout": 7 * 24 * 3600}}


def _lambda_grants(statements: list[dict[str, Any]]) -> dict[str, list[Any]]:
    found: dict[str, list[Any]] = {}
    for statement in statements:
        assert statement["Effect"] == "Allow" or not any(a.startswith("lambda:") for a in listed(statement["Action"]))
        for action in listed(statement["Action"]):
            if action.startswith("lambda:"):
                found.setdefault(action, []).extend(listed(statement["Resource"]))
    return found


def test_the_consumer_may_start_and_find_that_functions_executions_and_nothing_else(
    template: dict[str, Any],
) -> None:
    function_id, _ = workflow_function(template)
    alias_id, _ = only_resource(template, "AWS::Lambda::Alias", "Workflows")
    consumer = only_resource(template, "AWS::Lambda::Function", "OutboxDurableConsumer")[1]
    grants = _lambda_grants(role_statements(template, consumer["Properties"]["Role"]["Fn::GetAtt"][0]))
    # Not GetDurableExecution: reading an execution's end is the settle pass's (tests/e2e/test_least_privilege).
    assert grants == {
        **{action: [{"Ref": alias_id}] for action in START_ACTIONS},
        **{action: [{"Fn::GetAtt": [function_id, "Arn"]}, {"Ref": alias_id}] for action in FIND_ACTIONS},
    }


def test_the_function_may_checkpoint_its_own_executions_only(template: dict[str, Any]) -> None:
    function_id, function = workflow_function(template)
    grants = _lambda_grants(role_statements(template, function["Properties"]["Role"]["Fn::GetAtt"][0]))
    executions = {"Fn::Join": ["", [{"Fn::GetAtt": [function_id, "Arn"]}, ":*"]]}
    assert grants == {action: [executions] for action in EXECUTION_ACTIONS}
    assert not any(
        s.get("Resource") == "*" and any(a.startswith("lambda:") for a in listed(s["Action"]))
        for s in role_statements(template, function["Properties"]["Role"]["Fn::GetAtt"][0])
    )


def test_the_function_may_emit_from_its_steps_and_put_only_their_step_rows_on_the_inbox(
    template: dict[str, Any],
) -> None:
    from outbox.workflows.emits import STEP_PARTITION_PREFIX
    from outbox_cdk.events_table import EMIT_ACTIONS

    _, function = workflow_function(template)
    variables = function["Properties"]["Environment"]["Variables"]
    events_id, _ = only_resource(template, "AWS::DynamoDB::Table", "OutboxEventsTable")
    inbox_id, _ = only_resource(template, "AWS::DynamoDB::Table", "OutboxInbox")
    assert (variables["EVENTS_TABLE_NAME"], variables["INBOX_TABLE_NAME"]) == ({"Ref": events_id}, {"Ref": inbox_id})
    statements = role_statements(template, function["Properties"]["Role"]["Fn::GetAtt"][0])
    assert actions_on(statements, "Allow", {"Fn::GetAtt": [events_id, "Arn"]}) == set(EMIT_ACTIONS)
    on_inbox = [s for s in statements if {"Fn::GetAtt": [inbox_id, "Arn"]} in listed(s["Resource"])]
    assert [(listed(s["Action"]), s["Condition"]["ForAllValues:StringLike"]) for s in on_inbox] == [
        (["dynamodb:PutItem"], {"dynamodb:LeadingKeys": [f"{STEP_PARTITION_PREFIX}*"]})
    ]


def test_the_completeness_pass_is_given_the_workflow_subscription_in_its_catalog_data(template: dict[str, Any]) -> None:
    from outbox.ops.completeness import catalog_from_data
    from outbox.pairs import DeployedCatalog
    from outbox.subscriptions import Lane
    from tests.infrastructure.test_liveness import anchoring_function

    variables = anchoring_function(template)[1]["Properties"]["Environment"]["Variables"]
    deployed = DeployedCatalog(catalog_from_data(variables["COMPLETENESS_CATALOG"]).registry)
    [flow] = deployed.consumed()
    assert (flow.name, flow.pattern, flow.lane) == ("shop.ship_order", "shop.order_paid", Lane.WORKFLOW)


def test_the_dashboard_graphs_the_workflows_running_and_the_oldest_s_age_and_shows_every_alarm(
    template: dict[str, Any],
) -> None:
    from outbox.workflows.ends import OLDEST_METRIC, SETTLED_METRICS, Settled
    from outbox_cdk.workflow_settler import SERVICE_NAME
    from tests.infrastructure.template_queries import resources_of_type

    _, dashboard = only_resource(template, "AWS::CloudWatch::Dashboard")
    body = json.dumps(dashboard["Properties"]["DashboardBody"])
    widgets = json.loads(
        "".join(p if isinstance(p, str) else "0" for p in dashboard["Properties"]["DashboardBody"]["Fn::Join"][1])
    )
    [running] = [w for w in widgets["widgets"] if w["properties"].get("title", "").startswith("Workflows: running")]
    metrics = running["properties"]["metrics"]
    assert [m[1] for m in metrics] == [SETTLED_METRICS[Settled.RUNNING], OLDEST_METRIC]
    assert all(m[2:4] == ["service", SERVICE_NAME] for m in metrics), "the settle pass's metrics"
    assert metrics[1][-1]["yAxis"] == "right"
    assert SETTLED_METRICS[Settled.DEAD] in body
    for alarm_id in resources_of_type(template, "AWS::CloudWatch::Alarm"):
        assert json.dumps({"Fn::GetAtt": [alarm_id, "Arn"]}) in body, alarm_id


def test_cfn_lint_accepts_the_durable_function(template: dict[str, Any]) -> None:
    matches = lint(json.dumps(template), regions=["us-east-1"])
    errors = [f"{m.rule.id}: {m.message}" for m in matches if m.rule.id.startswith("E")]
    assert errors == []


def test_a_workflow_handler_that_is_not_durable_fails_the_synth(tmp_path: Path) -> None:
    with pytest.raises(CatalogContractError, match="is not a durable handler: decorate it with @durable_execution"):
        synthesize(tmp_path, handler=PLAIN_HANDLER)


@pytest.mark.parametrize(
    ("timeout", "retention", "problem"),
    [
        (Duration.days(1), 0, "retention_days must be 1..90"),
        (Duration.days(1), 91, "retention_days must be 1..90"),
        (Duration.days(367), 30, "execution_timeout must be whole seconds"),
        (Duration.millis(1500), 30, "execution_timeout must be whole seconds"),
        (Duration.millis(500), 30, "execution_timeout must be whole seconds"),
    ],
)
def test_a_durable_configuration_lambda_refuses_is_refused_saying_its_bounds(
    timeout: Duration, retention: int, problem: str
) -> None:
    from outbox_cdk.workflow_function import check_durable_config

    with pytest.raises(ValueError, match=problem):
        check_durable_config("shop.ship_order", timeout, retention)
    assert check_durable_config("shop.ship_order", Duration.days(366), 90) == 31_622_400


def test_the_pipeline_refuses_a_durable_configuration_lambda_refuses(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"retention_days must be 1\.\.90"):
        synthesize(tmp_path, key=False, workflows=WorkflowOptions(retention_days=91))


def test_a_pipeline_with_a_workflow_passes_cdk_nag(tmp_path: Path) -> None:
    """The packs the example app runs (stacks.app_factory), on a stack with a durable function: synth raises on any
    finding not acknowledged with its reason."""
    from aws_cdk import Validations
    from cdk_nag import AwsSolutionsChecks, ServerlessChecks

    app = App(context={"aws:cdk:bundling-stacks": []}, outdir=str(tmp_path / "out"))
    Validations.of(app).add_plugins(AwsSolutionsChecks(app), ServerlessChecks(app))
    shop(app, tmp_path)
    app.synth()


# -- the settle pass --------------------------------------------------------------------------------------------


def settler(template: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    return only_resource(template, "AWS::Lambda::Function", "OutboxWorkflowsSettler")


def test_the_settle_pass_runs_the_engines_handler_every_minute_with_an_alarmed_dead_letter_queue(
    template: dict[str, Any],
) -> None:
    from outbox_cdk.workflow_settler import HANDLER
    from tests.infrastructure.conftest import assert_handler_in_layer

    function_id, function = settler(template)
    assert function["Properties"]["Handler"] == HANDLER
    assert_handler_in_layer(HANDLER)
    assert set(function["Properties"]["Environment"]["Variables"]) >= {
        "INBOX_TABLE_NAME",
        "INBOX_RETENTION_DAYS",
        "ERROR_DETAIL",
    }
    _, rule = only_resource(template, "AWS::Events::Rule", "OutboxWorkflowsSettler")
    assert rule["Properties"]["ScheduleExpression"] == "rate(1 minute)"
    [target] = rule["Properties"]["Targets"]
    assert target["Arn"] == {"Fn::GetAtt": [function_id, "Arn"]}
    dlq_id = target["DeadLetterConfig"]["Arn"]["Fn::GetAtt"][0]
    assert function["Properties"]["DeadLetterConfig"]["TargetArn"] == {"Fn::GetAtt": [dlq_id, "Arn"]}
    _, dead_alarm = only_resource(template, "AWS::CloudWatch::Alarm", "OutboxWorkflowsSettlerDeadAlarm")
    assert dead_alarm["Properties"]["MetricName"] == "WorkflowsDead", "a pair made dead alarms"
    assert dead_alarm["Properties"]["Threshold"] == 0


def test_the_settle_pass_may_read_executions_and_write_only_the_inbox_rows_it_settles(template: dict[str, Any]) -> None:
    from outbox_cdk.workflow_settler import INBOX_GRANTS

    function_id, _ = workflow_function(template)
    _, pass_function = settler(template)
    statements = role_statements(template, pass_function["Properties"]["Role"]["Fn::GetAtt"][0])
    executions = {"Fn::Join": ["", [{"Fn::GetAtt": [function_id, "Arn"]}, ":*"]]}
    assert _lambda_grants(statements) == {"lambda:GetDurableExecution": [executions]}
    inbox = {"Fn::GetAtt": [only_resource(template, "AWS::DynamoDB::Table", "OutboxInbox")[0], "Arn"]}
    on_inbox = [s for s in statements if inbox in listed(s["Resource"])]
    granted = {
        (tuple(sorted(listed(s["Action"]))), tuple(s["Condition"]["ForAllValues:StringLike"]["dynamodb:LeadingKeys"]))
        for s in on_inbox
    }
    assert granted == {
        (tuple(sorted(actions)), tuple(c["ForAllValues:StringLike"]["dynamodb:LeadingKeys"]))
        for actions, c in INBOX_GRANTS
    }
