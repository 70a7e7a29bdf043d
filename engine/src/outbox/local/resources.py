"""What the template declares, made on moto by the local runtime: tables (with their streams and TTL) and
queues (with their redrive policies) named by their logical ids, and the local values of the references the
template makes to them (``LocalResources``), as CloudFormation would resolve them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from outbox.local.clients import REGION
from outbox.local.template import Reference, StackSpec, TemplateError

ACCOUNT = "123456789012"


@dataclass
class LocalResources:
    """Local names of what the template declares, by logical id."""

    table_names: dict[str, str] = field(default_factory=dict)
    stream_arns: dict[str, str] = field(default_factory=dict)
    queue_urls: dict[str, str] = field(default_factory=dict)
    queue_arns: dict[str, str] = field(default_factory=dict)
    function_names: dict[str, str] = field(default_factory=dict)
    pipe_names: dict[str, str] = field(default_factory=dict)
    aliases: dict[str, str] = field(default_factory=dict)  # a durable function's alias: its qualified ARN

    def resolve(self, reference: Reference) -> str:
        """The local value of a Ref / Fn::GetAtt, as CloudFormation would resolve it."""
        logical_id, attribute = reference.logical_id, reference.attribute
        if logical_id in self.table_names:
            if attribute is None:
                return self.table_names[logical_id]
            if attribute == "StreamArn":
                return self.stream_arns[logical_id]
            if attribute == "Arn":
                return f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/{self.table_names[logical_id]}"
        if logical_id in self.function_names and attribute is None:
            return self.function_names[logical_id]
        if logical_id in self.pipe_names and attribute is None:
            return self.pipe_names[logical_id]
        if logical_id in self.aliases and attribute is None:
            return self.aliases[logical_id]
        if logical_id in self.queue_urls:
            if attribute is None:
                return self.queue_urls[logical_id]
            if attribute == "Arn":
                return self.queue_arns[logical_id]
            if attribute == "QueueName":
                return self.queue_urls[logical_id].rsplit("/", 1)[1]
        raise TemplateError(f"the local runtime cannot resolve {reference} (not a table or queue it created)")

    def value(self, raw: Any) -> str:
        reference = Reference.parse(raw)
        if reference is not None:
            return self.resolve(reference)
        if isinstance(raw, dict) and set(raw) == {"Fn::Join"}:
            separator, parts = raw["Fn::Join"]
            return str(separator).join(self.value(part) for part in parts)
        if isinstance(raw, (str, int, float, bool)):
            return str(raw).lower() if isinstance(raw, bool) else str(raw)
        raise TemplateError(f"the local runtime cannot resolve the value {raw!r}")


def create_tables(dynamodb: Any, stack: StackSpec, resources: LocalResources) -> None:
    """Every table of the template, with its stream and TTL, named by its logical id."""
    for spec in stack.tables.values():
        request: dict[str, Any] = {
            "TableName": spec.logical_id,
            "KeySchema": spec.key_schema,
            "AttributeDefinitions": spec.attribute_definitions,
            "BillingMode": "PAY_PER_REQUEST",
        }
        if spec.stream_view_type:
            request["StreamSpecification"] = {"StreamEnabled": True, "StreamViewType": spec.stream_view_type}
        description = dynamodb.create_table(**request)["TableDescription"]
        if spec.ttl_attribute:
            dynamodb.update_time_to_live(
                TableName=spec.logical_id,
                TimeToLiveSpecification={"Enabled": True, "AttributeName": spec.ttl_attribute},
            )
        resources.table_names[spec.logical_id] = spec.logical_id
        if spec.stream_view_type:
            resources.stream_arns[spec.logical_id] = description["LatestStreamArn"]


def create_queues(sqs: Any, stack: StackSpec, resources: LocalResources) -> None:
    """Every queue of the template, with its redrive policy; dead-letter queues first, since a redrive
    policy names its target's ARN."""
    ordered = sorted(stack.queues.values(), key=lambda q: q.dead_letter_queue is not None)
    for spec in ordered:
        attributes = {
            "VisibilityTimeout": str(spec.visibility_timeout),
            "MessageRetentionPeriod": str(spec.retention_seconds),
            "MaximumMessageSize": str(spec.maximum_message_size),
        }
        if spec.fifo:
            attributes["FifoQueue"] = "true"
            attributes["ContentBasedDeduplication"] = str(spec.content_based_deduplication).lower()
        if spec.dead_letter_queue:
            attributes["RedrivePolicy"] = (
                f'{{"deadLetterTargetArn": "{resources.queue_arns[spec.dead_letter_queue]}", '
                f'"maxReceiveCount": "{spec.max_receive_count}"}}'
            )
        url = sqs.create_queue(QueueName=spec.name, Attributes=attributes)["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        resources.queue_urls[spec.logical_id] = url
        resources.queue_arns[spec.logical_id] = arn


def find_tables(dynamodb: Any, stack: StackSpec, resources: LocalResources) -> None:
    """The template's tables in a restored state (``outbox.local.state``): there already, found, not made."""
    for spec in stack.tables.values():
        description = dynamodb.describe_table(TableName=spec.logical_id)["Table"]
        resources.table_names[spec.logical_id] = spec.logical_id
        if spec.stream_view_type:
            resources.stream_arns[spec.logical_id] = description["LatestStreamArn"]


def find_queues(sqs: Any, stack: StackSpec, resources: LocalResources) -> None:
    """The template's queues in a restored state, found, not made."""
    for spec in stack.queues.values():
        url = sqs.get_queue_url(QueueName=spec.name)["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        resources.queue_urls[spec.logical_id] = url
        resources.queue_arns[spec.logical_id] = arn
