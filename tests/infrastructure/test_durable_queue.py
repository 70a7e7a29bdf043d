"""The durable FIFO queue and its dead-letter queue (and TLS on every queue), read from the synthesized template."""

from __future__ import annotations

from typing import Any

import pytest

from outbox_cdk import timing
from tests.infrastructure.conftest import resources_of_type
from tests.infrastructure.template_queries import only_resource

FOURTEEN_DAYS = 14 * 24 * 60 * 60


def _queue(stack_template: dict[str, Any], prefix: str) -> tuple[str, dict[str, Any]]:
    queue_id, queue = only_resource(stack_template, "AWS::SQS::Queue", prefix)
    return queue_id, queue["Properties"]


def test_durable_queue_is_fifo_deduplicated_by_event_id_not_content(stack_template: dict[str, Any]) -> None:
    _, queue = _queue(stack_template, "DurableQueue")
    assert queue["FifoQueue"] is True
    # The relay sets MessageDeduplicationId = event id; content-based dedup must stay off.
    assert queue["ContentBasedDeduplication"] is False
    assert queue["SqsManagedSseEnabled"] is True


def test_visibility_timeout_is_six_consumer_timeouts_plus_the_batching_window(
    stack_template: dict[str, Any],
) -> None:
    _, queue = _queue(stack_template, "DurableQueue")
    expected = 6 * timing.CONSUMER_TIMEOUT_SECONDS + timing.CONSUMER_BATCHING_WINDOW_SECONDS
    assert queue["VisibilityTimeout"] == expected == timing.QUEUE_VISIBILITY_TIMEOUT_SECONDS


def test_durable_queue_redrives_to_a_fifo_dlq_only_as_a_transport_backstop(stack_template: dict[str, Any]) -> None:
    _, queue = _queue(stack_template, "DurableQueue")
    dlq_id, dlq = _queue(stack_template, "DurableDeadLetters")
    assert queue["RedrivePolicy"] == {
        "deadLetterTargetArn": {"Fn::GetAtt": [dlq_id, "Arn"]},
        "maxReceiveCount": timing.DURABLE_MAX_RECEIVE_COUNT,
    }
    assert timing.DURABLE_MAX_RECEIVE_COUNT == 100
    assert dlq["FifoQueue"] is True, "a FIFO queue's DLQ must be FIFO"
    assert dlq["MessageRetentionPeriod"] == FOURTEEN_DAYS
    assert dlq["SqsManagedSseEnabled"] is True


def test_every_queue_denies_requests_without_tls(stack_template: dict[str, Any]) -> None:
    # Given every queue of the app: both lanes' queues, their DLQs and both pipe DLQs, the auditor's queue, its
    # DLQ, the tamper pipe's DLQ and the anchoring's DLQ, the WORKFLOW settle pass's DLQ, and the control-plane
    # watch's DLQ
    queue_ids = sorted(resources_of_type(stack_template, "AWS::SQS::Queue"))
    assert len(queue_ids) == 12, queue_ids
    for queue_id in queue_ids:
        # Then each has exactly one queue policy, and it denies any request without TLS
        policies = [
            policy["Properties"]
            for policy in resources_of_type(stack_template, "AWS::SQS::QueuePolicy").values()
            if {"Ref": queue_id} in policy["Properties"]["Queues"]
        ]
        assert len(policies) == 1, queue_id
        assert {
            "Action": "sqs:*",
            "Condition": {"Bool": {"aws:SecureTransport": "false"}},
            "Effect": "Deny",
            "Principal": {"AWS": "*"},
            "Resource": {"Fn::GetAtt": [queue_id, "Arn"]},
        } in policies[0]["PolicyDocument"]["Statement"]


def test_the_durable_queue_construct_exposes_its_parts() -> None:
    from aws_cdk import App, Stack
    from aws_cdk import aws_sns as sns

    from outbox_cdk.durable_queue import DurableQueue

    stack = Stack(App(), "Probe")
    durable = DurableQueue(stack, "Durable", alarm_topic=sns.Topic(stack, "Topic"))
    assert durable.max_receive_count == timing.DURABLE_MAX_RECEIVE_COUNT
    assert durable.queue.fifo
    assert durable.dead_letter_queue.fifo


@pytest.mark.parametrize(("function_timeout", "window", "expected"), [(60, 0, 360), (30, 0, 180), (30, 20, 200)])
def test_visibility_timeout_formula(function_timeout: int, window: int, expected: int) -> None:
    assert timing.visibility_timeout_seconds(function_timeout, window) == expected


@pytest.mark.parametrize(("function_timeout", "window"), [(0, 0), (60, -1), (7201, 0)])
def test_visibility_timeout_rejects_what_sqs_or_lambda_would(function_timeout: int, window: int) -> None:
    with pytest.raises(ValueError, match="timeout"):
        timing.visibility_timeout_seconds(function_timeout, window)


def test_every_queue_states_its_maximum_message_size_and_the_engine_s_relay_bound_fits_it(
    stack_template: dict[str, Any],
) -> None:
    from outbox.messages import MAX_MESSAGE_BYTES, MAX_RELAY_BODY_BYTES, REPAIR_ATTRIBUTES_RESERVE_BYTES
    from outbox_cdk.queue_defaults import MESSAGE_MAX_BYTES

    queues = resources_of_type(stack_template, "AWS::SQS::Queue")
    sizes = {queue_id: queue["Properties"].get("MaximumMessageSize") for queue_id, queue in queues.items()}
    assert set(sizes.values()) == {MESSAGE_MAX_BYTES}, f"a default is not a decision: {sizes}"
    assert MAX_MESSAGE_BYTES == MESSAGE_MAX_BYTES, "emit()'s bound must be the durable queue's"
    assert MAX_RELAY_BODY_BYTES + REPAIR_ATTRIBUTES_RESERVE_BYTES == MAX_MESSAGE_BYTES
    assert 10 * MESSAGE_MAX_BYTES < 6 * 1024 * 1024, "a batch of ten must fit one Lambda invocation's payload"
