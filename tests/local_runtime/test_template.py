"""The runtime reads what it builds from the synthesized template: one source of truth."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from outbox.local.resources import LocalResources
from outbox.local.template import Reference, TemplateError, load_stack
from outbox_cdk import timing
from tests.conftest import Synthesized


def test_the_template_yields_every_resource_the_runtime_emulates(synthesized: Synthesized) -> None:
    stack = load_stack(synthesized.outdir, "OutboxEngine")

    relay = stack.pipes[stack.output_reference("RelayPipeName").logical_id]
    assert relay.input_template == "<$.dynamodb.NewImage>"
    assert (relay.message_group_id, relay.message_deduplication_id) == (
        "$.dynamodb.NewImage.tenant.S",
        "$.dynamodb.NewImage.event_id.S",
    )
    assert relay.automatic_bisect, "the emulator halves a batch SQS refuses whole, as the pipe is configured to"
    assert relay.maximum_record_age_seconds == timing.RELAY_MAXIMUM_RECORD_AGE_HOURS * 3600
    durable = stack.queues[stack.output_reference("DurableQueueUrl").logical_id]
    assert durable.fifo
    assert durable.maximum_message_size == 262_144
    assert durable.max_receive_count == timing.DURABLE_MAX_RECEIVE_COUNT
    assert durable.dead_letter_queue == stack.output_reference("DurableDeadLetterQueueUrl").logical_id
    consumer = stack.functions[stack.output_reference("DurableConsumerFunctionName").logical_id]
    assert consumer.handler == "outbox.handlers.durable_consumer.handler"
    assert consumer.asset_path is not None
    assert (synthesized.outdir / consumer.asset_path / "modules" / "__init__.py").exists()
    assert {m.function for m in stack.event_source_mappings.values()} == {
        consumer.logical_id,
        stack.output_reference("RecordChangeConsumerFunctionName").logical_id,
        stack.output_reference("TamperRecorderFunctionName").logical_id,
    }
    inbox = stack.tables[stack.output_reference("InboxTableName").logical_id]
    assert inbox.ttl_attribute == "expires_at"


def test_cdk_s_node_function_for_the_custom_resources_is_not_read(synthesized: Synthesized) -> None:
    """The function that sets each lane DLQ's redrive allow policy in AWS (AwsCustomResource, on Node.js) is not
    the application's: the runtime runs no custom resource, so it neither builds nor reloads that function."""
    template = synthesized.template("OutboxEngine")
    runtimes = {
        logical_id: resource["Properties"]["Runtime"]
        for logical_id, resource in template["Resources"].items()
        if resource["Type"] == "AWS::Lambda::Function"
    }
    node = {logical_id for logical_id, runtime in runtimes.items() if runtime.startswith("nodejs")}
    assert len(node) == 1, runtimes
    stack = load_stack(synthesized.outdir, "OutboxEngine")
    assert set(stack.functions) == set(runtimes) - node
    assert "index.handler" not in {spec.handler for spec in stack.functions.values()}


def test_a_missing_template_says_to_synthesize_first(tmp_path: Path) -> None:
    with pytest.raises(TemplateError, match="run the synth first"):
        load_stack(tmp_path, "OutboxEngine")


def test_a_reference_the_runtime_did_not_create_is_an_error_not_a_guess() -> None:
    with pytest.raises(TemplateError, match="cannot resolve"):
        LocalResources().resolve(Reference("SomeBucket", "Arn"))


def test_a_pipe_on_a_non_stream_source_is_refused(tmp_path: Path) -> None:
    template = {
        "Resources": {
            "Pipe": {
                "Type": "AWS::Pipes::Pipe",
                "Properties": {"Source": {"Fn::GetAtt": ["Queue", "Arn"]}, "Target": {"Ref": "Queue"}},
            }
        }
    }
    (tmp_path / "S.template.json").write_text(json.dumps(template))
    with pytest.raises(TemplateError, match="only DynamoDB stream sources"):
        load_stack(tmp_path, "S")
