"""Every metric an alarm watches or the dashboard draws is one that something publishes.

CloudWatch accepts an alarm or a widget on any namespace, name and dimensions, published or not: a typo, a
metric nobody emits or a dimension set the service never uses deploys fine and then shows nothing, and an
alarm on it never fires. So the synthesized template is walked here, every alarm (a plain metric or the
metrics of a math alarm) and every metric row and SEARCH of the dashboard, and each one must be either an AWS
metric of ``aws_metrics`` (the documentation's names and dimension sets) or one of the engine's own
Powertools metrics, published by the function whose ``service`` dimension it names.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import pytest

from outbox.audit.auditor import Metric as AuditorMetric
from outbox.best_effort.consumer import Metric as RecordChangeMetric
from outbox.delivery.consumer import Metric as DurableMetric
from outbox.workflows.ends import OLDEST_METRIC, SETTLED_METRICS
from outbox_cdk import audit, durable_consumer, record_change_consumer, workflow_settler
from outbox_cdk.lambda_defaults import METRICS_NAMESPACE
from tests.infrastructure.aws_metrics import AWS_METRICS
from tests.infrastructure.conftest import resources_of_type

# Which engine code publishes under which Powertools service: the function with that service name runs
# that handler, and the handler's consumer counts exactly the members of that enum.
# What the WORKFLOW lane's settle pass publishes (outbox.handlers.workflow_ends), as the others' enums say theirs.
WorkflowMetric = StrEnum("WorkflowMetric", {name: name for name in [*SETTLED_METRICS.values(), OLDEST_METRIC]})
PUBLISHED_BY_SERVICE: dict[str, tuple[str, type[StrEnum]]] = {
    durable_consumer.SERVICE_NAME: (durable_consumer.HANDLER, DurableMetric),
    record_change_consumer.SERVICE_NAME: (record_change_consumer.HANDLER, RecordChangeMetric),
    audit.ANCHOR_SERVICE: (audit.ANCHOR_HANDLER, AuditorMetric),
    audit.RECORDER_SERVICE: (audit.RECORDER_HANDLER, AuditorMetric),
    workflow_settler.SERVICE_NAME: (workflow_settler.HANDLER, WorkflowMetric),
}
# What a CloudFormation token (a Ref, a GetAtt) in the dashboard body is read as.
TOKEN = "<token>"
SEARCH = re.compile(r"SEARCH\(\s*'(?P<query>[^']*)'")
SEARCH_TERM = re.compile(r'(?P<key>Namespace|MetricName)\s*=\s*"(?P<value>[^"]*)"')


@dataclass(frozen=True)
class MetricUse:
    """One metric read by an alarm or a widget: where it is read, and what it names."""

    where: str
    namespace: str
    name: str
    dimensions: Mapping[str, Any]


@dataclass(frozen=True)
class SearchUse:
    """One SEARCH expression: the namespace and metric name it asks for (None when it does not say)."""

    where: str
    namespace: str | None
    name: str | None


# -- reading the template ------------------------------------------------------------------------------


def alarm_metrics(stack_template: dict[str, Any]) -> Iterator[MetricUse | SearchUse]:
    for alarm_id, alarm in resources_of_type(stack_template, "AWS::CloudWatch::Alarm").items():
        properties = alarm["Properties"]
        if "MetricName" in properties:
            dimensions = {d["Name"]: d["Value"] for d in properties.get("Dimensions", [])}
            yield MetricUse(f"alarm {alarm_id}", properties["Namespace"], properties["MetricName"], dimensions)
        for query in properties.get("Metrics", []):
            if "Expression" in query:
                yield from searches(f"alarm {alarm_id}", query["Expression"])
            else:
                metric = query["MetricStat"]["Metric"]
                dimensions = {d["Name"]: d["Value"] for d in metric.get("Dimensions", [])}
                yield MetricUse(f"alarm {alarm_id}", metric["Namespace"], metric["MetricName"], dimensions)


def dashboard_body(dashboard: dict[str, Any]) -> dict[str, Any]:
    """The body as JSON: an Fn::Join of text and tokens, each token read as ``TOKEN`` (tokens sit inside
    JSON strings here: queue, function, pipe and table names, the region)."""
    body = dashboard["Properties"]["DashboardBody"]
    if isinstance(body, str):
        parsed: dict[str, Any] = json.loads(body)
        return parsed
    separator, parts = body["Fn::Join"]
    assert separator == ""
    parsed = json.loads("".join(part if isinstance(part, str) else TOKEN for part in parts))
    return parsed


def dashboard_metrics(stack_template: dict[str, Any]) -> Iterator[MetricUse | SearchUse]:
    for dashboard_id, dashboard in resources_of_type(stack_template, "AWS::CloudWatch::Dashboard").items():
        for widget in dashboard_body(dashboard)["widgets"]:
            properties = widget.get("properties", {})
            where = f"dashboard {dashboard_id} widget {properties.get('title')!r}"
            yield from widget_metrics(where, properties.get("metrics", []))


def widget_metrics(where: str, rows: list[list[Any]]) -> Iterator[MetricUse | SearchUse]:
    """A widget's metric rows: ``[namespace, name, dimension, value, ..., {options}]``, where ``"."`` repeats
    the previous row's entry at that place, or ``[{"expression": ...}]``."""
    previous: list[Any] = []
    for row in rows:
        options = row[-1] if row and isinstance(row[-1], dict) else {}
        fields = row[:-1] if options else row
        if not fields:
            assert "expression" in options, f"{where}: a metric row with neither a metric nor an expression: {row}"
            yield from searches(where, options["expression"])
            continue
        fields = [previous[i] if field == "." else field for i, field in enumerate(fields)]
        previous = fields
        namespace, name, *pairs = fields
        assert len(pairs) % 2 == 0, f"{where}: dimensions must come in name/value pairs: {row}"
        yield MetricUse(where, namespace, name, dict(zip(pairs[::2], pairs[1::2], strict=True)))


def searches(where: str, expression: str) -> Iterator[SearchUse]:
    """The SEARCHes of a math expression; other expressions only combine metrics read on their own rows."""
    for search in SEARCH.finditer(expression):
        terms = {term["key"]: term["value"] for term in SEARCH_TERM.finditer(search["query"])}
        yield SearchUse(where, terms.get("Namespace"), terms.get("MetricName"))


def every_metric(stack_template: dict[str, Any]) -> list[MetricUse | SearchUse]:
    return [*alarm_metrics(stack_template), *dashboard_metrics(stack_template)]


# -- what is published ----------------------------------------------------------------------------------


def engine_services(stack_template: dict[str, Any]) -> dict[str, str]:
    """The Powertools service of each function told the engine's namespace, and the handler it runs."""
    services = {}
    for function in resources_of_type(stack_template, "AWS::Lambda::Function").values():
        variables = function["Properties"].get("Environment", {}).get("Variables", {})
        if variables.get("POWERTOOLS_METRICS_NAMESPACE") == METRICS_NAMESPACE:
            services[variables["POWERTOOLS_SERVICE_NAME"]] = function["Properties"]["Handler"]
    return services


def unpublished(use: MetricUse | SearchUse, services: Mapping[str, str]) -> str | None:
    """Why nothing publishes ``use``, or None when something does."""
    if isinstance(use, SearchUse):
        return _unpublished_search(use)
    if use.namespace == METRICS_NAMESPACE:
        return _unpublished_engine_metric(use, services)
    published = AWS_METRICS.get(use.namespace)
    if published is None:
        return f"{use.where}: nothing of the pipeline publishes into namespace {use.namespace!r}"
    if use.name not in published:
        return f"{use.where}: {use.namespace} publishes no metric {use.name!r}"
    if frozenset(use.dimensions) not in published[use.name]:
        return f"{use.where}: {use.namespace} {use.name} is never published with dimensions {sorted(use.dimensions)}"
    return None


def _unpublished_engine_metric(use: MetricUse, services: Mapping[str, str]) -> str | None:
    # Powertools publishes every metric with the service as its one dimension (no other default dimension).
    service = use.dimensions.get("service")
    if set(use.dimensions) != {"service"} or service not in PUBLISHED_BY_SERVICE:
        return f"{use.where}: {use.name} names no publishing service (dimensions {dict(use.dimensions)})"
    handler, metrics = PUBLISHED_BY_SERVICE[service]
    if services.get(service) != handler:
        return f"{use.where}: no function of the template is service {service!r} running {handler}"
    if use.name not in {metric.value for metric in metrics}:
        return f"{use.where}: service {service!r} publishes no {use.name!r} ({metrics.__module__}.{metrics.__name__})"
    return None


def _unpublished_search(use: SearchUse) -> str | None:
    if use.namespace is None or use.name is None:
        return f"{use.where}: a SEARCH must name its namespace and metric name"
    if use.namespace == METRICS_NAMESPACE:
        published = {metric.value for _, metrics in PUBLISHED_BY_SERVICE.values() for metric in metrics}
    else:
        published = set(AWS_METRICS.get(use.namespace, {}))
    if use.name not in published:
        return f"{use.where}: SEARCH for {use.namespace} {use.name!r}, which nothing publishes"
    return None


# -- the tests ------------------------------------------------------------------------------------------


def test_every_alarmed_and_charted_metric_is_published(stack_template: dict[str, Any]) -> None:
    services = engine_services(stack_template)
    uses = every_metric(stack_template)

    assert [reason for use in uses if (reason := unpublished(use, services)) is not None] == []


def test_the_walk_sees_every_alarm_and_the_whole_dashboard(stack_template: dict[str, Any]) -> None:
    # A walk that silently read nothing would pass the test above: it sees each alarm, and every widget's rows.
    alarms = resources_of_type(stack_template, "AWS::CloudWatch::Alarm")
    alarm_wheres = {use.where for use in alarm_metrics(stack_template)}
    assert alarm_wheres == {f"alarm {alarm_id}" for alarm_id in alarms}
    [dashboard] = resources_of_type(stack_template, "AWS::CloudWatch::Dashboard").values()
    graphs = [w for w in dashboard_body(dashboard)["widgets"] if w["type"] == "metric"]
    charted = {use.where.partition(" widget ")[2] for use in dashboard_metrics(stack_template)}
    assert charted == {repr(w["properties"]["title"]) for w in graphs}


def test_each_publishing_service_the_check_knows_is_a_function_of_the_template(stack_template: dict[str, Any]) -> None:
    # The other functions (the operator endpoint, the example's producer) share the namespace but publish nothing.
    services = engine_services(stack_template)
    assert {service: services.get(service) for service in PUBLISHED_BY_SERVICE} == {
        service: handler for service, (handler, _) in PUBLISHED_BY_SERVICE.items()
    }


@pytest.mark.parametrize(
    ("rows", "reason"),
    [
        # The widget main once had: nothing publishes EventsEmitted (emit() runs in the caller's process).
        (
            [[{"expression": "SUM(SEARCH('Namespace=\"OutboxEngine\" MetricName=\"EventsEmitted\"', 'Sum', 300))"}]],
            "which nothing publishes",
        ),
        ([[METRICS_NAMESPACE, "EventsEmitted", "service", durable_consumer.SERVICE_NAME]], "publishes no"),
        ([[METRICS_NAMESPACE, "RowChangeFailures", "service", durable_consumer.SERVICE_NAME]], "publishes no"),
        ([[METRICS_NAMESPACE, "Retries"]], "names no publishing service"),
        (
            [["AWS/SQS", "ApproximateAgeOfOldestMessage", "QueueName", TOKEN], [".", "AgeOfOldest", ".", "."]],
            "no metric",
        ),
        ([["AWS/DynamoDB", "ThrottledRequests", "TableName", TOKEN]], "never published with dimensions"),
        ([["AWS/EventBridge/Pipes", "Concurrency", "PipeName", TOKEN]], "never published with dimensions"),
        ([["AWS/Events", "Invocations", "RuleName", TOKEN]], "nothing of the pipeline publishes"),
        ([[{"expression": "SEARCH('{AWS/SQS,QueueName} queue', 'Sum', 300)"}]], "must name its namespace"),
    ],
)
def test_the_check_refuses_what_nothing_publishes(
    stack_template: dict[str, Any], rows: list[list[Any]], reason: str
) -> None:
    services = engine_services(stack_template)
    reasons = [found for use in widget_metrics("probe", rows) if (found := unpublished(use, services)) is not None]

    assert len(reasons) == 1
    assert reason in reasons[0]


def test_the_check_reads_the_metrics_of_a_math_alarm(stack_template: dict[str, Any]) -> None:
    def stat(namespace: str, name: str, dimension: str, value: Any) -> dict[str, Any]:
        metric = {"Namespace": namespace, "MetricName": name, "Dimensions": [{"Name": dimension, "Value": value}]}
        return {"Metric": metric, "Period": 60, "Stat": "Sum"}

    probe = {
        "Resources": {
            "Probe": {
                "Type": "AWS::CloudWatch::Alarm",
                "Properties": {
                    "Metrics": [
                        {"Id": "total", "Expression": "sent + emitted"},
                        {
                            "Id": "sent",
                            "MetricStat": stat("AWS/SQS", "NumberOfMessagesSent", "QueueName", {"Ref": "Q"}),
                        },
                        {
                            "Id": "emitted",
                            "MetricStat": stat(METRICS_NAMESPACE, "EventsEmitted", "service", "durable-consumer"),
                        },
                    ]
                },
            }
        }
    }
    services = engine_services(stack_template)
    reasons = [found for use in alarm_metrics(probe) if (found := unpublished(use, services)) is not None]

    assert len(reasons) == 1
    assert reasons[0].startswith("alarm Probe: service 'durable-consumer' publishes no 'EventsEmitted'")
