"""Finds every dead-letter target in a CloudFormation template and checks that each one is alarmed: on its depth
(the first dead letter) and on every arrival after it.

A function over the template dict, not over the CDK tree: it judges what would be deployed, whatever
construct (or lack of one) produced it, and it can be pointed at a deliberately broken template to
prove that it fails.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from tests.infrastructure.metric_math import NotModelledError, Series, alarm_state

DLQ_METRIC = "ApproximateNumberOfMessagesVisible"
IN_FLIGHT_METRIC = "ApproximateNumberOfMessagesNotVisible"
# What an arrival alarm must tell apart, minute by minute as (visible, in flight), and the state it must be in at
# the last minute: a dead letter arriving in a queue that already holds one, and an operator's receive of both
# (the depth falls, the in-flight count rises) and their visibility timeout (back again). CloudWatch's range is
# not documented (R9.6): three minutes here, every probe's datapoints.
ARRIVAL_PROBES: list[tuple[str, dict[int, tuple[int, int]], str]] = [
    ("a second dead letter", {0: (1, 0), 1: (1, 0), 2: (2, 0)}, "ALARM"),
    ("a receive", {0: (2, 0), 1: (0, 2)}, "OK"),
    ("its visibility timeout", {0: (2, 0), 1: (0, 2), 2: (2, 0)}, "OK"),
]
PROBE_RANGE_MINUTES = 3


@dataclass(frozen=True)
class DeadLetterTarget:
    """One place in the template that names a dead-letter target."""

    owner: str  # logical id of the resource that sends its failures there
    path: str  # where in the owner's properties
    target: Any  # the ARN expression as written in the template


def dead_letter_targets(template: dict[str, Any]) -> list[DeadLetterTarget]:
    """Every dead-letter destination any resource in the template declares."""
    return [
        DeadLetterTarget(owner=logical_id, path=path, target=target)
        for logical_id, resource in template.get("Resources", {}).items()
        for path, target in _declared_targets(resource)
    ]


def unalarmed_dead_letter_targets(template: dict[str, Any]) -> list[str]:
    """One finding per dead-letter target that lacks a depth alarm at > 0 notifying an SNS topic.

    A target must be a queue of this template (a foreign ARN or a topic cannot be checked, so it is a
    finding too) with an alarm on ``ApproximateNumberOfMessagesVisible`` for that queue: threshold 0,
    ``GreaterThanThreshold``, one datapoint in one evaluation period, and an alarm action that is a
    topic of this template.
    """
    resources = template.get("Resources", {})
    findings = []
    for declared in dead_letter_targets(template):
        where = f"{declared.owner} {declared.path}"
        queue_id = _referenced_logical_id(declared.target)
        if queue_id is None or queue_id not in resources:
            findings.append(f"{where}: target {declared.target!r} is not a resource of this template")
            continue
        resource_type = resources[queue_id]["Type"]
        if resource_type != "AWS::SQS::Queue":
            findings.append(f"{where}: target {queue_id} is a {resource_type}, not a queue")
            continue
        if not any(_is_depth_alarm_for(alarm, queue_id, resources) for alarm in _alarms(resources)):
            findings.append(f"{where}: dead-letter queue {queue_id} has no alarm on its depth at > 0")
    return findings


def dead_letter_queues_without_arrival_alarm(template: dict[str, Any]) -> list[str]:
    """One finding per dead-letter queue (a queue some dead-letter target of the template names) that lacks an
    arrival alarm: a metric math alarm on that queue's visible and in-flight counts (maximum, one minute) that
    notifies a topic of this template, treats missing data as not breaching, and, evaluated on
    ``ARRIVAL_PROBES``, fires on a second dead letter and not on a receive or its visibility timeout."""
    resources = template.get("Resources", {})
    queues = {
        queue_id
        for declared in dead_letter_targets(template)
        if (queue_id := _referenced_logical_id(declared.target)) in resources
        and resources[queue_id]["Type"] == "AWS::SQS::Queue"
    }
    return [
        f"dead-letter queue {queue_id} has no alarm on each arrival"
        for queue_id in sorted(queues)
        if not any(_is_arrival_alarm_for(alarm, queue_id, resources) for alarm in _alarms(resources))
    ]


def probe(datapoints: dict[int, tuple[int, int]]) -> dict[str, Series]:
    """A probe's (visible, in flight) datapoints as the two SQS metrics' series."""
    return {
        DLQ_METRIC: {minute: float(visible) for minute, (visible, _) in datapoints.items()},
        IN_FLIGHT_METRIC: {minute: float(in_flight) for minute, (_, in_flight) in datapoints.items()},
    }


def _is_arrival_alarm_for(alarm: dict[str, Any], queue_id: str, resources: dict[str, Any]) -> bool:
    queue_dimension = {"Name": "QueueName", "Value": {"Fn::GetAtt": [queue_id, "QueueName"]}}
    stats = [query["MetricStat"] for query in alarm.get("Metrics", []) if "MetricStat" in query]
    reads_the_queue = sorted(stat["Metric"]["MetricName"] for stat in stats) == sorted(
        (DLQ_METRIC, IN_FLIGHT_METRIC)
    ) and all(
        stat["Metric"].get("Namespace") == "AWS/SQS"
        and stat["Metric"].get("Dimensions") == [queue_dimension]
        and stat.get("Stat") == "Maximum"
        and _number(stat.get("Period")) == 60
        for stat in stats
    )
    if not (
        reads_the_queue
        and alarm.get("TreatMissingData") == "notBreaching"
        and any(_is_topic(action, resources) for action in alarm.get("AlarmActions", []))
    ):
        return False
    try:
        return all(
            alarm_state(alarm, probe(datapoints), max(datapoints), evaluation_range=PROBE_RANGE_MINUTES) == expected
            for _, datapoints, expected in ARRIVAL_PROBES
        )
    except NotModelledError:
        return False


def _declared_targets(resource: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    properties = resource.get("Properties", {})
    resource_type = resource["Type"]
    if resource_type in ("AWS::SQS::Queue", "AWS::SNS::Subscription"):
        yield from _present("RedrivePolicy.deadLetterTargetArn", properties)
    elif resource_type == "AWS::Pipes::Pipe":
        for source_kind in properties.get("SourceParameters", {}):
            yield from _present(f"SourceParameters.{source_kind}.DeadLetterConfig.Arn", properties)
    elif resource_type in ("AWS::Lambda::EventSourceMapping", "AWS::Lambda::EventInvokeConfig"):
        yield from _present("DestinationConfig.OnFailure.Destination", properties)
    elif resource_type == "AWS::Lambda::Function":
        yield from _present("DeadLetterConfig.TargetArn", properties)
    elif resource_type == "AWS::Events::Rule":
        for index, _ in enumerate(properties.get("Targets", [])):
            yield from _present(f"Targets.{index}.DeadLetterConfig.Arn", properties)


def _present(path: str, properties: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    value: Any = properties
    for part in path.split("."):
        if isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        elif isinstance(value, dict) and part in value:
            value = value[part]
        else:
            return
    yield path, value


def _referenced_logical_id(arn: Any) -> str | None:
    """The logical id behind ``{"Fn::GetAtt": [id, "Arn"]}`` (queues) or ``{"Ref": id}`` (topics)."""
    if not isinstance(arn, dict):
        return None
    if "Fn::GetAtt" in arn:
        attribute = arn["Fn::GetAtt"]
        if isinstance(attribute, str):
            attribute = attribute.split(".", 1)
        if isinstance(attribute, list) and len(attribute) == 2 and attribute[1] == "Arn":
            return str(attribute[0])
    if "Ref" in arn and isinstance(arn["Ref"], str):
        return arn["Ref"]
    return None


def _alarms(resources: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for resource in resources.values():
        if resource["Type"] == "AWS::CloudWatch::Alarm":
            yield resource.get("Properties", {})


def _is_depth_alarm_for(alarm: dict[str, Any], queue_id: str, resources: dict[str, Any]) -> bool:
    queue_dimension = {"Name": "QueueName", "Value": {"Fn::GetAtt": [queue_id, "QueueName"]}}
    datapoints = alarm.get("DatapointsToAlarm", alarm.get("EvaluationPeriods"))
    return (
        alarm.get("Namespace") == "AWS/SQS"
        and alarm.get("MetricName") == DLQ_METRIC
        and alarm.get("Dimensions") == [queue_dimension]
        and _number(alarm.get("Threshold")) == 0
        and alarm.get("ComparisonOperator") == "GreaterThanThreshold"
        and _number(alarm.get("EvaluationPeriods")) == 1
        and _number(datapoints) == 1
        and any(_is_topic(action, resources) for action in alarm.get("AlarmActions", []))
    )


def _is_topic(action: Any, resources: dict[str, Any]) -> bool:
    topic_id = _referenced_logical_id(action)
    return topic_id is not None and resources.get(topic_id, {}).get("Type") == "AWS::SNS::Topic"


def _number(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None
