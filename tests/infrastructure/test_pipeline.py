"""``OutboxPipeline`` as a user's stack meets it: its outputs are declared once (``outbox.outputs.StackOutput``),
the construct emits exactly those and ``Topology`` reads the same names; the record-change lane is optional;
props that would deploy a broken pipeline fail the synth; the timeouts carry through to the queues."""

from __future__ import annotations

from typing import Any

import pytest
from aws_cdk import App, Duration, Stack
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk.assertions import Template

from modules.services import SERVICES_VARIABLE
from outbox.ops import Topology
from outbox.outputs import RECORD_CHANGE_OUTPUTS, StackOutput
from outbox_cdk import Alarms, ConsumerOptions, OutboxPipeline, PipeLogs, RecordChanges
from stacks import outbox_stack
from tests.infrastructure.conftest import resources_of_type

# The example stack's own outputs, beside the pipeline's.
EXAMPLE_OUTPUTS = {"DataTableName", "PlaceOrderFunctionName"}


def test_the_example_stack_has_every_pipeline_output_and_its_own(stack_template: dict[str, Any]) -> None:
    assert set(stack_template["Outputs"]) == {output.value for output in StackOutput} | EXAMPLE_OUTPUTS


def test_the_topology_reads_only_declared_outputs() -> None:
    assert set(Topology.OUTPUTS.values()) <= set(StackOutput)


def test_the_application_environment_output_carries_the_functions_variables(stack_template: dict[str, Any]) -> None:
    joined = stack_template["Outputs"][StackOutput.APPLICATION_ENVIRONMENT]["Value"]["Fn::Join"]
    assert joined[1][0] == '{"DATA_TABLE_NAME":"'


# Who reads a throwaway pipeline's alarms: a test says why nobody, unless it names a subscriber itself.
NOBODY: dict[str, Any] = {"alarms": Alarms.nobody("a throwaway test stack"), "operators": [iam.AccountRootPrincipal()]}
# What the example's catalog reads at synth (and in every function): without it, the synth fails its contract.
APP_ENVIRONMENT = {"DATA_TABLE_NAME": "data", SERVICES_VARIABLE: "fake"}


def pipeline_stack(**options: Any) -> Stack:
    stack = Stack(App(context={"aws:cdk:bundling-stacks": []}), "Mine")
    example_pipeline(stack, **options)
    return stack


def example_pipeline(stack: Stack, **options: Any) -> OutboxPipeline:
    """The example's code and catalog as a pipeline of ``stack``; nobody reads its alarms unless ``options`` say."""
    return OutboxPipeline(
        stack,
        "Outbox",
        code=lambda_.Code.from_asset(str(outbox_stack.PROJECT_ROOT), exclude=outbox_stack.CODE_EXCLUDE),
        catalog=outbox_stack.CATALOG,
        **{"environment": APP_ENVIRONMENT, **NOBODY, **options},
    )


def orders_table(stack: Stack) -> dynamodb.Table:
    """A table ``Orders`` of ``stack`` with the stream the record-change lane reads."""
    return dynamodb.Table(
        stack,
        "Orders",
        partition_key=dynamodb.Attribute(name="pk", type=dynamodb.AttributeType.STRING),
        stream=dynamodb.StreamViewType.NEW_AND_OLD_IMAGES,
    )


def test_without_a_record_change_table_there_is_no_record_change_lane() -> None:
    template = Template.from_stack(pipeline_stack()).to_json()
    assert set(template["Outputs"]) == {output.value for output in StackOutput} - RECORD_CHANGE_OUTPUTS
    assert [logical_id for logical_id in template["Resources"] if "RecordChange" in logical_id] == []


def test_two_pipelines_in_one_stack_are_refused_with_the_reason() -> None:
    stack = pipeline_stack()
    with pytest.raises(ValueError, match="one OutboxPipeline per stack"):
        OutboxPipeline(stack, "Second", code=lambda_.Code.from_inline("x"), catalog="a.b:c", **NOBODY)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"environment": {"SUBSCRIPTIONS": "x"}}, "may not set"),
        ({"alarms": Alarms.email("ops")}, "e-mail address"),
        ({"pipe_logs": PipeLogs(level="LOUD")}, r"PipeLogs\(level=\.\.\.\) must be one of"),  # type: ignore[arg-type]
        ({"inbox_retention_days": 3}, "inbox retention"),
        ({"durable_consumer": ConsumerOptions(max_concurrency=1)}, "max concurrency"),
        ({"durable_consumer": ConsumerOptions(timeout=Duration.seconds(5))}, "whole seconds from 10 to 900"),
    ],
)
def test_props_that_would_deploy_a_broken_pipeline_fail_the_synth(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        pipeline_stack(**options)


def test_a_record_change_table_without_a_stream_is_refused() -> None:
    stack = Stack(App(), "Mine")
    table = dynamodb.Table.from_table_name(stack, "Imported", "orders")
    with pytest.raises(ValueError, match="has no stream"):
        OutboxPipeline(
            stack,
            "Outbox",
            code=lambda_.Code.from_inline("x"),
            catalog="a.b:c",
            record_changes=RecordChanges(table),
            **NOBODY,
        )


def test_a_catalog_that_is_not_a_function_reference_is_refused() -> None:
    stack = Stack(App(), "Mine")
    with pytest.raises(ValueError, match=r"package\.module:function"):
        OutboxPipeline(stack, "Outbox", code=lambda_.Code.from_inline("x"), catalog="modules.build_catalog", **NOBODY)


def test_a_consumer_timeout_sets_the_function_the_queue_visibility_and_the_alarms() -> None:
    template = Template.from_stack(
        pipeline_stack(
            data_tables=[],
            durable_consumer=ConsumerOptions(timeout=Duration.minutes(2)),
        )
    ).to_json()
    resources = template["Resources"]

    def only(kind: str, prefix: str) -> dict[str, Any]:
        [found] = [r["Properties"] for i, r in resources.items() if r["Type"] == kind and i.startswith(prefix)]
        return found

    assert only("AWS::Lambda::Function", "OutboxDurableConsumer")["Timeout"] == 120
    assert only("AWS::SQS::Queue", "OutboxDurableQueue")["VisibilityTimeout"] == 6 * 120
    age_alarm = only("AWS::CloudWatch::Alarm", "OutboxMonitoringQueueAge")
    assert age_alarm["Threshold"] == 2 * 6 * 120
    # The retries alarm's period follows the queue's visibility timeout (in whole minutes, plus one).
    retries = only("AWS::CloudWatch::Alarm", "OutboxDurableConsumerRetriesAlarm")
    assert _counted_periods(retries) == [(12 + 1) * 60]


def record_change_pipeline(
    entities: list[str] | None = None, consumer: ConsumerOptions | None = None, **options: Any
) -> OutboxPipeline:
    """A throwaway pipeline with both lanes: its record changes come from a table ``Orders`` of the stack (of
    ``entities``, to a consumer with ``consumer``'s options)."""
    stack = Stack(App(context={"aws:cdk:bundling-stacks": []}), "Mine")
    lane = RecordChanges(orders_table(stack), entities=entities, consumer=consumer or ConsumerOptions())
    return example_pipeline(stack, record_changes=lane, **options)


def test_a_record_change_timeout_sets_its_queue_visibility_and_its_failures_alarm() -> None:
    template = Template.from_stack(
        record_change_pipeline(consumer=ConsumerOptions(timeout=Duration.seconds(45))).stack
    ).to_json()

    [queue] = [
        r["Properties"]
        for i, r in resources_of_type(template, "AWS::SQS::Queue").items()
        if i.startswith("OutboxRecordChangesQueue")
    ]
    [failures] = [
        r["Properties"]
        for i, r in resources_of_type(template, "AWS::CloudWatch::Alarm").items()
        if i.startswith("OutboxRecordChangeConsumerFailuresAlarm")
    ]
    assert queue["VisibilityTimeout"] == 6 * 45 == 270
    assert _counted_periods(failures) == [(5 + 1) * 60]
    with pytest.raises(ValueError, match="timeout must be whole seconds from 10 to 900"):
        record_change_pipeline(consumer=ConsumerOptions(timeout=Duration.minutes(20)))


def _counted_periods(alarm: dict[str, Any]) -> list[int]:
    return [query["MetricStat"]["Period"] for query in alarm["Metrics"] if "MetricStat" in query]


def durable_consumer_variables(template: dict[str, Any]) -> dict[str, Any]:
    [variables] = [
        resource["Properties"]["Environment"]["Variables"]
        for resource in template["Resources"].values()
        if resource["Type"] == "AWS::Lambda::Function"
        and resource["Properties"].get("Handler") == "outbox.handlers.durable_consumer.handler"
    ]
    return variables


def test_failures_are_redacted_unless_the_stack_asks_for_full_text(stack_template: dict[str, Any]) -> None:
    from outbox.redaction import ErrorDetail

    assert durable_consumer_variables(stack_template)["ERROR_DETAIL"] == "redacted"
    full = Template.from_stack(pipeline_stack(error_detail=ErrorDetail.FULL)).to_json()
    assert durable_consumer_variables(full)["ERROR_DETAIL"] == "full"
    with pytest.raises(ValueError, match=r"error_detail must be ErrorDetail\.REDACTED, ErrorDetail\.FULL"):
        pipeline_stack(error_detail="everything")


def test_a_pipeline_whose_alarms_would_notify_nobody_is_refused_with_what_to_pass() -> None:
    stack = Stack(App(), "Mine")
    with pytest.raises(ValueError, match=r"say who reads the alarms: alarms=Alarms\.email.*Alarms\.nobody\('why'\)"):
        OutboxPipeline(stack, "Outbox", code=lambda_.Code.from_inline("x"), catalog="a.b:c")


@pytest.mark.parametrize(
    ("alarms", "message"),
    [
        (Alarms(email_address="ops@example.com", no_subscriber_reason="paged elsewhere"), "not an email and nobody"),
        (Alarms.nobody("  "), "must say why nobody subscribes"),
        (Alarms(), "names nobody"),
        ("ops@example.com", "alarms must be Alarms.email"),
    ],
)
def test_one_answer_to_who_reads_the_alarms(alarms: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        pipeline_stack(alarms=alarms)


def test_declining_a_subscriber_is_recorded_on_the_topic_in_the_template() -> None:
    from outbox_cdk.alarm_topic import NO_SUBSCRIBER_METADATA

    template = Template.from_stack(pipeline_stack(alarms=Alarms.nobody("paged by our on-call tool"))).to_json()
    [topic] = [r for r in template["Resources"].values() if r["Type"] == "AWS::SNS::Topic"]
    assert topic["Metadata"][NO_SUBSCRIBER_METADATA] == "paged by our on-call tool"
    assert [r for r in template["Resources"].values() if r["Type"] == "AWS::SNS::Subscription"] == []


def operator_trust(template: dict[str, Any]) -> list[Any]:
    [role] = [
        r["Properties"]
        for logical_id, r in template["Resources"].items()
        if r["Type"] == "AWS::IAM::Role" and "OperatorRole" in logical_id
    ]
    return [statement["Principal"]["AWS"] for statement in role["AssumeRolePolicyDocument"]["Statement"]]


def test_only_the_operators_given_may_assume_the_operator_role() -> None:
    oncall = "arn:aws:iam::123456789012:role/oncall"
    template = Template.from_stack(pipeline_stack(operators=[iam.ArnPrincipal(oncall)])).to_json()
    assert operator_trust(template) == [oncall]


def test_a_pipeline_without_operators_is_refused_with_what_to_pass() -> None:
    stack = Stack(App(), "Mine")
    with pytest.raises(ValueError, match=r"say who may assume the operator role.*iam\.ArnPrincipal"):
        OutboxPipeline(
            stack, "Outbox", code=lambda_.Code.from_inline("x"), catalog="a.b:c", alarms=Alarms.nobody("a test")
        )
    with pytest.raises(ValueError, match="must be IAM principals"):
        pipeline_stack(operators=["arn:aws:iam::123456789012:role/oncall"])
