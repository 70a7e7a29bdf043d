"""The durable consumer's own wiring (inbox, events table, dead-work alarms), read from the synthesized template.

What it shares with the record-change consumer (function, mapping, role hygiene, Errors alarm,
concurrency) is in test_queue_consumers.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from aws_cdk import App, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_sns as sns
from aws_cdk.assertions import Template

from outbox import keys
from outbox_cdk import durable_consumer, timing
from outbox_cdk.durable_consumer import (
    INBOX_ACTIONS,
    ORDERED_INBOX_ACTIONS,
    ORDERED_INBOX_CONDITIONS,
    ORDERED_LOG_ACTIONS,
    DurableConsumer,
)
from outbox_cdk.durable_queue import DurableQueue
from outbox_cdk.events_table import CONFIRM_ACTIONS, EMIT_ACTIONS, EVENT_ROW_MUTATIONS, EventsTable
from outbox_cdk.inbox_table import InboxTable
from outbox_cdk.lambda_defaults import METRICS_NAMESPACE
from stacks import outbox_stack
from stacks.data_table import DataTable
from tests.infrastructure.conftest import example_application, resources_of_type
from tests.infrastructure.template_queries import (
    actions_on,
    assert_fires_on_the_first_one,
    listed,
    only_resource,
    role_statements,
)


@pytest.fixture(scope="module")
def function(stack_template: dict[str, Any]) -> dict[str, Any]:
    return only_resource(stack_template, "AWS::Lambda::Function", "DurableConsumer")[1]["Properties"]  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def environment(function: dict[str, Any]) -> dict[str, Any]:
    return function["Environment"]["Variables"]  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def statements(stack_template: dict[str, Any], function: dict[str, Any]) -> list[dict[str, Any]]:
    return role_statements(stack_template, function["Role"]["Fn::GetAtt"][0])


# --- the environment ------------------------------------------------------------------------------


def test_the_environment_points_at_this_stacks_tables_and_modules(
    stack_template: dict[str, Any], environment: dict[str, Any]
) -> None:
    events_id, _ = only_resource(stack_template, "AWS::DynamoDB::Table", "EventsTable")
    inbox_id, _ = only_resource(stack_template, "AWS::DynamoDB::Table", "InboxTable")
    data_id, _ = only_resource(stack_template, "AWS::DynamoDB::Table", "DataTable")
    assert environment["EVENTS_TABLE_NAME"] == {"Ref": events_id}
    assert environment["INBOX_TABLE_NAME"] == {"Ref": inbox_id}
    assert environment["DATA_TABLE_NAME"] == {"Ref": data_id}
    assert environment["INBOX_RETENTION_DAYS"] == str(timing.minimum_inbox_retention_days())
    assert environment["SUBSCRIPTIONS"] == outbox_stack.CATALOG
    assert environment["POWERTOOLS_SERVICE_NAME"] == "durable-consumer"
    assert environment["POWERTOOLS_METRICS_NAMESPACE"] == "OutboxEngine"


def test_the_queues_redrive_count_is_a_backstop_derived_from_the_claims_attempts(
    stack_template: dict[str, Any], environment: dict[str, Any]
) -> None:
    # Given the consumer's attempts per (event, subscription) and the mapping's batch size
    attempts = int(environment["MAX_ATTEMPTS"])
    _, queue = only_resource(stack_template, "AWS::SQS::Queue", "DurableQueue")

    # Then SQS gives up on a message only long after every message ahead of it in a batch used its attempts
    count = queue["Properties"]["RedrivePolicy"]["maxReceiveCount"]
    assert attempts == timing.MAX_ATTEMPTS
    assert count == timing.durable_max_receive_count(attempts, timing.CONSUMER_BATCH_SIZE)
    assert count >= attempts * timing.CONSUMER_BATCH_SIZE


def test_the_metrics_namespace_is_the_one_the_dashboard_reads(
    stack_template: dict[str, Any], environment: dict[str, Any]
) -> None:
    _, dashboard = only_resource(stack_template, "AWS::CloudWatch::Dashboard")
    assert environment["POWERTOOLS_METRICS_NAMESPACE"] == METRICS_NAMESPACE
    assert METRICS_NAMESPACE in json.dumps(dashboard["Properties"]["DashboardBody"])


# --- the role -------------------------------------------------------------------------------------


def test_the_role_may_write_the_inbox_as_the_engines_inbox_does(
    stack_template: dict[str, Any], statements: list[dict[str, Any]]
) -> None:
    inbox_id, _ = only_resource(stack_template, "AWS::DynamoDB::Table", "InboxTable")
    allowed = actions_on(statements, "Allow", {"Fn::GetAtt": [inbox_id, "Arn"]})
    # What the engine's Inbox calls (a transaction is authorised per item as Put/Update), and, since the example
    # has an ordered subscription, what the order book reads and deletes (outbox.pairs.order).
    assert set(INBOX_ACTIONS) == {"dynamodb:PutItem", "dynamodb:UpdateItem"}
    assert allowed == {*INBOX_ACTIONS, *ORDERED_INBOX_ACTIONS}
    assert actions_on(statements, "Deny", {"Fn::GetAtt": [inbox_id, "Arn"]}) == set()


def test_the_role_queries_and_deletes_only_an_ordered_subscription_s_partitions_of_the_inbox(
    stack_template: dict[str, Any], statements: list[dict[str, Any]]
) -> None:
    # A claim, a dead letter or a poison pill is never queried or deleted by the consumer: a compromised consumer
    # cannot remove the record of dead work (it can still overwrite one: docs/security.md, "not caught")
    inbox_id, _ = only_resource(stack_template, "AWS::DynamoDB::Table", "InboxTable")
    on_the_inbox = [s for s in statements if s["Resource"] == {"Fn::GetAtt": [inbox_id, "Arn"]}]
    for statement in on_the_inbox:
        if {"dynamodb:Query", "dynamodb:DeleteItem"} & set(listed(statement["Action"])):
            assert statement["Condition"] == ORDERED_INBOX_CONDITIONS
    assert ORDERED_INBOX_CONDITIONS["ForAllValues:StringLike"]["dynamodb:LeadingKeys"] == ["TENANT#*#ORDER#*"]
    assert keys.order_partition("acme", "ledger.journal") == "TENANT#acme#ORDER#ledger.journal"


def test_without_ordered_subscriptions_the_role_neither_reads_the_inbox_nor_sends_to_its_queue() -> None:
    probe = _probe()
    [role_id] = [i for i in resources_of_type(probe, "AWS::IAM::Role") if i.startswith("DurableConsumer")]
    inbox_id, _ = only_resource(probe, "AWS::DynamoDB::Table", "Inbox")
    events_id, _ = only_resource(probe, "AWS::DynamoDB::Table", "Events")
    statements = role_statements(probe, role_id)
    assert actions_on(statements, "Allow", {"Fn::GetAtt": [inbox_id, "Arn"]}) == set(INBOX_ACTIONS)
    assert actions_on(statements, "Allow", {"Fn::GetAtt": [events_id, "Arn"]}) == {*EMIT_ACTIONS, *CONFIRM_ACTIONS}
    assert not [a for s in statements for a in listed(s["Action"]) if a == "sqs:SendMessage"]
    _, function = only_resource(probe, "AWS::Lambda::Function", "DurableConsumer")
    assert "DURABLE_QUEUE_URL" not in function["Properties"]["Environment"]["Variables"]


def test_with_ordered_subscriptions_the_function_knows_its_queue_and_may_send_to_it_only(
    stack_template: dict[str, Any], environment: dict[str, Any], statements: list[dict[str, Any]]
) -> None:
    queue_id, _ = only_resource(stack_template, "AWS::SQS::Queue", "OutboxDurableQueue")
    assert environment["DURABLE_QUEUE_URL"] == {"Ref": queue_id}
    sends = [s for s in statements if "sqs:SendMessage" in listed(s["Action"])]
    assert [s["Resource"] for s in sends] == [{"Fn::GetAtt": [queue_id, "Arn"]}]


def test_on_the_events_table_the_role_may_only_emit_and_never_mutate_event_rows(
    stack_template: dict[str, Any], statements: list[dict[str, Any]]
) -> None:
    events_id, _ = only_resource(stack_template, "AWS::DynamoDB::Table", "EventsTable")
    table_arn = {"Fn::GetAtt": [events_id, "Arn"]}
    # Ordered subscriptions (the example has one) add the query that finds an event's predecessor.
    assert actions_on(statements, "Allow", table_arn) == {*EMIT_ACTIONS, *CONFIRM_ACTIONS, *ORDERED_LOG_ACTIONS}
    assert actions_on(statements, "Deny", table_arn) == set(EVENT_ROW_MUTATIONS)
    # Nothing else anywhere on the events table: no stream, no index, no wildcard.
    mentions = [s for s in statements if events_id in json.dumps(s["Resource"])]
    assert all(listed(s["Resource"]) == [table_arn] for s in mentions)


# --- dead-work alarms -----------------------------------------------------------------------------


@pytest.mark.parametrize("metric_name", ["DeadLetters", "Conflicts", "PoisonPills"])
def test_dead_work_in_the_inbox_alarms_at_the_first_one(
    stack_template: dict[str, Any], environment: dict[str, Any], metric_name: str
) -> None:
    # A terminal error becomes a dead-letter row, not an SQS dead letter: without these, it would be silent.
    topic_id, _ = only_resource(stack_template, "AWS::SNS::Topic")
    alarms = [
        alarm["Properties"]
        for alarm in resources_of_type(stack_template, "AWS::CloudWatch::Alarm").values()
        if alarm["Properties"].get("Namespace") == environment["POWERTOOLS_METRICS_NAMESPACE"]
        and alarm["Properties"].get("MetricName") == metric_name
    ]
    assert len(alarms) == 1
    # Powertools publishes every metric with the service as its one default dimension.
    assert alarms[0]["Dimensions"] == [{"Name": "service", "Value": environment["POWERTOOLS_SERVICE_NAME"]}]
    assert_fires_on_the_first_one(alarms[0], topic_id)


def test_the_alarmed_and_graphed_metric_names_are_the_ones_the_consumer_publishes() -> None:
    from outbox.delivery.consumer import Metric

    published = {metric.value for metric in Metric}
    assert set(durable_consumer.DEAD_WORK_METRICS) | set(durable_consumer.CLAIM_METRICS) == published
    assert durable_consumer.RETRIES_METRIC == Metric.RETRIES


# --- the construct (throwaway stacks, no main-app synth) ------------------------------------------


def _probe(**options: Any) -> dict[str, Any]:
    stack = Stack(App(), "ConsumerProbe")
    topic = sns.Topic(stack, "Topic")
    DurableConsumer(
        stack,
        "DurableConsumer",
        queue=DurableQueue(stack, "Durable", alarm_topic=topic),
        events=EventsTable(stack, "Events", operators=[iam.AccountRootPrincipal()]),
        inbox=InboxTable(stack, "Inbox", retention_days=options.pop("retention_days", 30)),
        data_tables=[DataTable(stack, "Data").table],
        application=example_application(stack),
        alarm_topic=topic,
        **options,
    )
    return Template.from_stack(stack).to_json()


def test_the_construct_applies_its_concurrency_and_the_inbox_retention() -> None:
    probe = _probe(max_concurrency=50, retention_days=45)
    _, mapping = only_resource(probe, "AWS::Lambda::EventSourceMapping")
    _, function = only_resource(probe, "AWS::Lambda::Function", "DurableConsumer")
    assert mapping["Properties"]["ScalingConfig"] == {"MaximumConcurrency": 50}
    assert function["Properties"]["Environment"]["Variables"]["INBOX_RETENTION_DAYS"] == "45"


def test_the_construct_rejects_a_concurrency_lambda_would() -> None:
    with pytest.raises(ValueError, match="concurrency"):
        _probe(max_concurrency=1)


def test_the_stack_outputs_the_inbox_table(stack_template: dict[str, Any]) -> None:
    inbox_id, _ = only_resource(stack_template, "AWS::DynamoDB::Table", "InboxTable")
    assert stack_template["Outputs"]["InboxTableName"]["Value"] == {"Ref": inbox_id}
