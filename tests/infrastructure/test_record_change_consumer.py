"""The record-change consumer's own wiring (environment, the data table and nothing else), read from the
synthesized template.

What it shares with the durable consumer (function, mapping, role hygiene, Errors alarm, concurrency)
is in test_queue_consumers.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from aws_cdk import App, Stack
from aws_cdk import aws_sns as sns
from aws_cdk.assertions import Template

from outbox_cdk import record_change_consumer, timing
from outbox_cdk.record_change_consumer import RecordChangeConsumer
from outbox_cdk.record_change_queue import RecordChangeQueue
from stacks import outbox_stack
from stacks.data_table import DataTable
from tests.infrastructure.conftest import example_application
from tests.infrastructure.template_queries import listed, only_resource, role_statements


@pytest.fixture(scope="module")
def function(stack_template: dict[str, Any]) -> dict[str, Any]:
    return only_resource(stack_template, "AWS::Lambda::Function", "RecordChangeConsumer")[1]["Properties"]  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def statements(stack_template: dict[str, Any], function: dict[str, Any]) -> list[dict[str, Any]]:
    return role_statements(stack_template, function["Role"]["Fn::GetAtt"][0])


def test_the_function_runs_the_record_change_handler_within_the_lanes_timeout(function: dict[str, Any]) -> None:
    assert function["Handler"] == record_change_consumer.HANDLER == "outbox.handlers.record_change_consumer.handler"
    assert function["Timeout"] == timing.RECORD_CHANGE_CONSUMER_TIMEOUT_SECONDS


def test_the_environment_is_exactly_the_data_table_the_modules_and_powertools(
    stack_template: dict[str, Any], function: dict[str, Any]
) -> None:
    data_id, _ = only_resource(stack_template, "AWS::DynamoDB::Table", "DataTable")
    assert function["Environment"]["Variables"] == {
        "DATA_TABLE_NAME": {"Ref": data_id},
        "COMMERCE_SERVICES": "fake",
        "SUBSCRIPTIONS": outbox_stack.CATALOG,
        "POWERTOOLS_SERVICE_NAME": "record-change-consumer",
        "POWERTOOLS_METRICS_NAMESPACE": "OutboxEngine",
    }


def test_the_role_has_no_access_to_the_events_table_or_the_inbox(
    stack_template: dict[str, Any], statements: list[dict[str, Any]]
) -> None:
    # A row change is not an event (a best-effort handler does not emit), and the lane keeps no claims.
    for prefix in ("EventsTable", "InboxTable"):
        table_id, _ = only_resource(stack_template, "AWS::DynamoDB::Table", prefix)
        assert [s for s in statements if table_id in json.dumps(s["Resource"])] == [], prefix


def test_on_dynamodb_the_role_reaches_the_data_table_only(
    stack_template: dict[str, Any], statements: list[dict[str, Any]]
) -> None:
    data_id, _ = only_resource(stack_template, "AWS::DynamoDB::Table", "DataTable")
    dynamodb_resources = [
        resource
        for statement in statements
        if any(action.startswith("dynamodb:") for action in listed(statement["Action"]))
        for resource in listed(statement["Resource"])
    ]
    # The table's items only: no index, no stream (the explicit grant names the table's ARN alone).
    assert {json.dumps(r) for r in dynamodb_resources} == {json.dumps({"Fn::GetAtt": [data_id, "Arn"]})}


def test_the_construct_applies_its_concurrency() -> None:
    # Given a throwaway stack
    stack = Stack(App(), "RecordChangeConsumerProbe")
    topic = sns.Topic(stack, "Topic")
    RecordChangeConsumer(
        stack,
        "RecordChangeConsumer",
        queue=RecordChangeQueue(stack, "RecordChanges", alarm_topic=topic),
        data_tables=[DataTable(stack, "Data").table],
        application=example_application(stack),
        alarm_topic=topic,
        max_concurrency=200,
    )
    # Then its mapping is capped there
    _, mapping = only_resource(Template.from_stack(stack).to_json(), "AWS::Lambda::EventSourceMapping")
    assert mapping["Properties"]["ScalingConfig"] == {"MaximumConcurrency": 200}


def test_the_graphed_and_alarmed_metric_names_are_the_ones_the_consumer_publishes() -> None:
    from outbox.best_effort.consumer import Metric

    assert set(record_change_consumer.ROW_CHANGE_METRICS) == {metric.value for metric in Metric}
    assert record_change_consumer.FAILURES_METRIC == Metric.FAILURES
