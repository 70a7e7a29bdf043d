"""Finds every dead-letter target in a CloudFormation template and checks that each one is alarmed.

A function over the template dict, not over the CDK tree: it judges what would be deployed, whatever
construct (or lack of one) produced it, and it can be pointed at a deliberately broken template to
prove that it fails.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

DLQ_METRIC = "ApproximateNumberOfMessagesVisible"


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
