"""Reads the synthesized CloudFormation template: the one source of truth for what the runtime builds.

Only what the runtime emulates is read (tables, queues, pipes, Python functions, event source mappings,
outputs): custom resources, and CDK's Node.js function that runs them, are not. References between resources
(``Ref``, ``Fn::GetAtt``) are kept as logical ids and resolved against the local resources when the runtime
creates them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from outbox.best_effort.changes import entity_filter
from outbox.outputs import StackOutput


class TemplateError(ValueError):
    """The template lacks something the runtime needs, or uses a form it does not understand."""


@dataclass(frozen=True)
class Reference:
    """A ``Ref`` or ``Fn::GetAtt`` to another resource of the stack."""

    logical_id: str
    attribute: str | None = None  # None for Ref

    @classmethod
    def parse(cls, value: Any) -> Reference | None:
        if isinstance(value, Mapping) and "Ref" in value:
            return cls(str(value["Ref"]))
        if isinstance(value, Mapping) and "Fn::GetAtt" in value:
            logical_id, attribute = value["Fn::GetAtt"]
            return cls(str(logical_id), str(attribute))
        return None


def _reference(value: Any, where: str) -> Reference:
    reference = Reference.parse(value)
    if reference is None:
        raise TemplateError(f"{where} must reference a resource of the stack, got {value!r}")
    return reference


@dataclass(frozen=True)
class TableSpec:
    logical_id: str
    key_schema: list[dict[str, str]]
    attribute_definitions: list[dict[str, str]]
    stream_view_type: str | None
    ttl_attribute: str | None


@dataclass(frozen=True)
class QueueSpec:
    logical_id: str
    fifo: bool
    content_based_deduplication: bool
    visibility_timeout: int
    retention_seconds: int
    dead_letter_queue: str | None  # logical id
    max_receive_count: int | None
    maximum_message_size: int = 262_144  # bytes; SQS's documented default when the template says nothing

    @property
    def name(self) -> str:
        return f"{self.logical_id}.fifo" if self.fifo else self.logical_id


@dataclass(frozen=True)
class PipeSpec:
    logical_id: str
    source_table: str  # logical id of the table whose stream is the source
    target_queue: str
    filter_patterns: list[str]
    input_template: str | None
    message_group_id: str | None
    message_deduplication_id: str | None
    batch_size: int
    maximum_retry_attempts: int
    maximum_record_age_seconds: int
    starting_position: str
    dead_letter_queue: str | None
    log_level: str
    automatic_bisect: bool = False  # OnPartialBatchItemFailure: AUTOMATIC_BISECT


@dataclass(frozen=True)
class FunctionSpec:
    logical_id: str
    handler: str  # "package.module.function", as Lambda reads it
    timeout_seconds: int
    memory_mb: int
    environment: dict[str, Any]  # raw CloudFormation values, references unresolved
    asset_path: str | None  # the staged code directory in the cloud assembly


@dataclass(frozen=True)
class EventSourceMappingSpec:
    logical_id: str
    function: str
    queue: str
    batch_size: int
    report_batch_item_failures: bool
    maximum_concurrency: int | None
    batching_window_seconds: int


@dataclass
class StackSpec:
    name: str
    assembly_dir: Path
    tables: dict[str, TableSpec] = field(default_factory=dict)
    queues: dict[str, QueueSpec] = field(default_factory=dict)
    pipes: dict[str, PipeSpec] = field(default_factory=dict)
    functions: dict[str, FunctionSpec] = field(default_factory=dict)
    event_source_mappings: dict[str, EventSourceMappingSpec] = field(default_factory=dict)
    outputs: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)  # the template's Metadata section

    def output_reference(self, name: str) -> Reference:
        if name not in self.outputs:
            raise TemplateError(f"the stack has no output {name!r}; it has {sorted(self.outputs)}")
        return _reference(self.outputs[name]["Value"], f"output {name}")


def load_manifest_stacks(assembly_dir: Path | str) -> list[str]:
    """The stacks of a cloud assembly (``manifest.json``), by the name ``load_stack`` takes."""
    manifest_path = Path(assembly_dir) / "manifest.json"
    if not manifest_path.exists():
        raise TemplateError(f"no cloud assembly at {assembly_dir}: synthesize the app first (cdk synth)")
    artifacts = json.loads(manifest_path.read_text()).get("artifacts", {})
    return sorted(
        artifact["properties"]["templateFile"].removesuffix(".template.json")
        for artifact in artifacts.values()
        if artifact.get("type") == "aws:cloudformation:stack"
    )


def with_record_change_entities(stack: StackSpec, entities: Sequence[str]) -> StackSpec:
    """``stack`` as it would have been synthesized with ``RecordChanges(..., entities=entities)`` for its
    record-change lane: its record-change pipe filtered on those entities' rows. For an application of your own
    (a test's catalog, the simulator's) run on a stack synthesized for another, without a second synth."""
    pipe_id = stack.output_reference(StackOutput.RECORD_CHANGE_PIPE).logical_id
    pattern = json.dumps(entity_filter(entities))
    pipes = {**stack.pipes, pipe_id: replace(stack.pipes[pipe_id], filter_patterns=[pattern])}
    return replace(stack, pipes=pipes)


def load_stack(assembly_dir: Path | str, stack_name: str) -> StackSpec:
    """Read ``<assembly_dir>/<stack_name>.template.json`` (a ``cdk synth`` output folder)."""
    assembly = Path(assembly_dir)
    path = assembly / f"{stack_name}.template.json"
    if not path.exists():
        raise TemplateError(f"no template at {path}: run the synth first (make synth, or the runtime's synth())")
    template = json.loads(path.read_text())
    stack = StackSpec(
        name=stack_name,
        assembly_dir=assembly,
        outputs=template.get("Outputs", {}),
        metadata=template.get("Metadata", {}),
    )
    for logical_id, resource in template["Resources"].items():
        kind = resource["Type"]
        if kind == "AWS::DynamoDB::Table":
            stack.tables[logical_id] = _table(logical_id, resource)
        elif kind == "AWS::SQS::Queue":
            stack.queues[logical_id] = _queue(logical_id, resource)
        elif kind == "AWS::Pipes::Pipe":
            stack.pipes[logical_id] = _pipe(logical_id, resource)
        elif kind == "AWS::Lambda::Function" and _runs_python(resource):
            stack.functions[logical_id] = _function(logical_id, resource)
        elif kind == "AWS::Lambda::EventSourceMapping":
            stack.event_source_mappings[logical_id] = _event_source_mapping(logical_id, resource)
    return stack


def _table(logical_id: str, resource: Mapping[str, Any]) -> TableSpec:
    properties = resource["Properties"]
    stream = properties.get("StreamSpecification") or {}
    ttl = properties.get("TimeToLiveSpecification") or {}
    return TableSpec(
        logical_id=logical_id,
        key_schema=list(properties["KeySchema"]),
        attribute_definitions=list(properties["AttributeDefinitions"]),
        stream_view_type=stream.get("StreamViewType"),
        ttl_attribute=ttl.get("AttributeName") if ttl.get("Enabled") else None,
    )


def _queue(logical_id: str, resource: Mapping[str, Any]) -> QueueSpec:
    properties = resource.get("Properties", {})
    redrive = properties.get("RedrivePolicy")
    dead_letter = _reference(redrive["deadLetterTargetArn"], f"{logical_id} RedrivePolicy") if redrive else None
    return QueueSpec(
        logical_id=logical_id,
        fifo=bool(properties.get("FifoQueue", False)),
        content_based_deduplication=bool(properties.get("ContentBasedDeduplication", False)),
        visibility_timeout=int(properties.get("VisibilityTimeout", 30)),
        retention_seconds=int(properties.get("MessageRetentionPeriod", 345600)),
        dead_letter_queue=dead_letter.logical_id if dead_letter else None,
        max_receive_count=int(redrive["maxReceiveCount"]) if redrive else None,
        maximum_message_size=int(properties.get("MaximumMessageSize", 262_144)),
    )


def _pipe(logical_id: str, resource: Mapping[str, Any]) -> PipeSpec:
    properties = resource["Properties"]
    source = _reference(properties["Source"], f"{logical_id} Source")
    if source.attribute != "StreamArn":
        raise TemplateError(f"{logical_id}: only DynamoDB stream sources are emulated, got {source}")
    parameters = properties.get("SourceParameters", {})
    stream = parameters.get("DynamoDBStreamParameters", {})
    target_parameters = properties.get("TargetParameters", {})
    sqs_parameters = target_parameters.get("SqsQueueParameters", {})
    dead_letter = stream.get("DeadLetterConfig", {}).get("Arn")
    return PipeSpec(
        logical_id=logical_id,
        source_table=source.logical_id,
        target_queue=_reference(properties["Target"], f"{logical_id} Target").logical_id,
        filter_patterns=[f["Pattern"] for f in parameters.get("FilterCriteria", {}).get("Filters", [])],
        input_template=target_parameters.get("InputTemplate"),
        message_group_id=sqs_parameters.get("MessageGroupId"),
        message_deduplication_id=sqs_parameters.get("MessageDeduplicationId"),
        batch_size=int(stream.get("BatchSize", 100)),
        maximum_retry_attempts=int(stream.get("MaximumRetryAttempts", -1)),
        maximum_record_age_seconds=int(stream.get("MaximumRecordAgeInSeconds", -1)),
        starting_position=str(stream.get("StartingPosition", "LATEST")),
        dead_letter_queue=_reference(dead_letter, f"{logical_id} DeadLetterConfig").logical_id if dead_letter else None,
        log_level=str(properties.get("LogConfiguration", {}).get("Level", "OFF")),
        automatic_bisect=stream.get("OnPartialBatchItemFailure") == "AUTOMATIC_BISECT",
    )


def _runs_python(resource: Mapping[str, Any]) -> bool:
    """A function of the application's, or CDK's own in another language: a custom resource's (AwsCustomResource
    runs on Node.js, and sets each lane DLQ's redrive allow policy in AWS), which is not read, as no custom resource
    is run here. Without a Runtime (an image), read: it fails where it is built, not skipped in silence."""
    runtime = resource.get("Properties", {}).get("Runtime")
    return runtime is None or str(runtime).startswith("python")


def _function(logical_id: str, resource: Mapping[str, Any]) -> FunctionSpec:
    properties = resource["Properties"]
    return FunctionSpec(
        logical_id=logical_id,
        handler=str(properties["Handler"]),
        timeout_seconds=int(properties.get("Timeout", 3)),
        memory_mb=int(properties.get("MemorySize", 128)),
        environment=dict(properties.get("Environment", {}).get("Variables", {})),
        asset_path=resource.get("Metadata", {}).get("aws:asset:path") or _staged_asset(properties.get("Code", {})),
    )


def _staged_asset(code: Mapping[str, Any]) -> str | None:
    """Without asset metadata, a directory asset is staged as ``asset.<hash>`` next to the template."""
    key = code.get("S3Key")
    return f"asset.{key.removesuffix('.zip')}" if isinstance(key, str) and key.endswith(".zip") else None


def _event_source_mapping(logical_id: str, resource: Mapping[str, Any]) -> EventSourceMappingSpec:
    properties = resource["Properties"]
    return EventSourceMappingSpec(
        logical_id=logical_id,
        function=_reference(properties["FunctionName"], f"{logical_id} FunctionName").logical_id,
        queue=_reference(properties["EventSourceArn"], f"{logical_id} EventSourceArn").logical_id,
        batch_size=int(properties.get("BatchSize", 10)),
        report_batch_item_failures="ReportBatchItemFailures" in properties.get("FunctionResponseTypes", []),
        maximum_concurrency=properties.get("ScalingConfig", {}).get("MaximumConcurrency"),
        batching_window_seconds=int(properties.get("MaximumBatchingWindowInSeconds", 0)),
    )
