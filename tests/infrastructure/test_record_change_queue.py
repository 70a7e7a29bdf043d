"""The record-change queue (standard) and its dead-letter queue, read from the synthesized template."""

from __future__ import annotations

from typing import Any

from outbox_cdk import timing
from tests.infrastructure.template_queries import only_resource

FOURTEEN_DAYS = 14 * 24 * 60 * 60


def test_the_record_change_queue_is_standard_and_encrypted(stack_template: dict[str, Any]) -> None:
    # Row changes have no order to keep: no FIFO, no message groups, no deduplication ids.
    _, queue = only_resource(stack_template, "AWS::SQS::Queue", "RecordChangesQueue")
    properties = queue["Properties"]
    assert "FifoQueue" not in properties
    assert "ContentBasedDeduplication" not in properties
    assert properties["SqsManagedSseEnabled"] is True
    assert properties["MessageRetentionPeriod"] == FOURTEEN_DAYS


def test_its_visibility_timeout_is_derived_from_the_record_change_consumers_timeout(
    stack_template: dict[str, Any],
) -> None:
    _, queue = only_resource(stack_template, "AWS::SQS::Queue", "RecordChangesQueue")
    expected = 6 * timing.RECORD_CHANGE_CONSUMER_TIMEOUT_SECONDS + timing.RECORD_CHANGE_BATCHING_WINDOW_SECONDS
    assert queue["Properties"]["VisibilityTimeout"] == expected == timing.RECORD_CHANGE_QUEUE_VISIBILITY_TIMEOUT_SECONDS


def test_it_redrives_to_a_standard_alarmed_dlq_after_the_timing_modules_receive_count(
    stack_template: dict[str, Any],
) -> None:
    _, queue = only_resource(stack_template, "AWS::SQS::Queue", "RecordChangesQueue")
    dlq_id, dlq = only_resource(stack_template, "AWS::SQS::Queue", "RecordChangesDeadLetters")
    assert queue["Properties"]["RedrivePolicy"] == {
        "deadLetterTargetArn": {"Fn::GetAtt": [dlq_id, "Arn"]},
        "maxReceiveCount": timing.RECORD_CHANGE_MAX_RECEIVE_COUNT,
    }
    assert "FifoQueue" not in dlq["Properties"], "a standard queue's DLQ must be standard"
    assert dlq["Properties"]["MessageRetentionPeriod"] == FOURTEEN_DAYS
    assert dlq["Properties"]["SqsManagedSseEnabled"] is True


def test_the_stack_outputs_the_record_change_queues(stack_template: dict[str, Any]) -> None:
    queue_id, _ = only_resource(stack_template, "AWS::SQS::Queue", "RecordChangesQueue")
    dlq_id, _ = only_resource(stack_template, "AWS::SQS::Queue", "RecordChangesDeadLetters")
    pipe_id, _ = only_resource(stack_template, "AWS::Pipes::Pipe", "RecordChangePipe")
    pipe_dlq_id, _ = only_resource(stack_template, "AWS::SQS::Queue", "RecordChangePipeDeadLetters")
    outputs = stack_template["Outputs"]
    assert outputs["RecordChangeQueueUrl"]["Value"] == {"Ref": queue_id}
    assert outputs["RecordChangeDeadLetterQueueUrl"]["Value"] == {"Ref": dlq_id}
    assert outputs["RecordChangePipeName"]["Value"] == {"Ref": pipe_id}
    assert outputs["RecordChangePipeDeadLetterQueueUrl"]["Value"] == {"Ref": pipe_dlq_id}
