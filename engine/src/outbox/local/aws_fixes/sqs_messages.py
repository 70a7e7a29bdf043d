"""What the SQS fixes share about moto's queues and messages: the one lock every SQS backend call holds, the
facts moto's ``Message`` does not model (kept on the message itself, so that they follow every copy), and
rule 12, the size of a message (M21): SQS measures a message in bytes, its body (UTF-8) and its message
attributes (each name, data type and value) together, against the queue's MaximumMessageSize; moto counts
the body's characters alone, so a body of multi-byte text, or a repair message's attributes, would fit
locally and be refused by AWS."""

from __future__ import annotations

import threading
from typing import Any, cast

from moto.sqs.exceptions import InvalidParameterValue
from moto.sqs.models import Message, Queue

# One lock for every SQS backend call of the process: each call sees and leaves whole queues.
SQS_LOCK = threading.RLock()

# What moto's Message does not model.
SOURCE_ARN = "_aws_fixes_dead_letter_queue_source_arn"
ENQUEUED_AT = "_aws_fixes_enqueued_at_ms"
RECEIVED_AT = "_aws_fixes_received_at_ms"


def append(queue: Queue, message: Message) -> None:
    with queue._messages_lock:
        queue._messages.append(message)
        queue._messages_lock.notify_all()


def enqueued_at(message: Message) -> float:
    """When the message entered its queue (ms): a FIFO DLQ restarts it, where moto kept the sent time."""
    enqueued: float = getattr(message, ENQUEUED_AT, None) or cast(float, message.sent_timestamp)
    return enqueued


def source_arn(message: Message) -> str | None:
    """The queue a dead-lettered message came from (its DeadLetterQueueSourceArn)."""
    arn: str | None = getattr(message, SOURCE_ARN, None)
    return arn


def message_size(body: str, attributes: dict[str, Any]) -> int:
    """Bytes SQS counts for a message: the UTF-8 body plus each attribute's name, data type and value."""
    size = len(body.encode("utf-8"))
    for name, attribute in attributes.items():
        size += len(name.encode("utf-8"))
        for value in attribute.values():
            if isinstance(value, str):
                size += len(value.encode("utf-8"))
            elif isinstance(value, bytes):
                size += len(value)
    return size


def check_size(queue: Queue, body: str, attributes: dict[str, Any]) -> None:
    limit = int(queue.maximum_message_size)  # type: ignore[attr-defined]
    size = message_size(body, attributes)
    if size > limit:
        raise InvalidParameterValue(
            f"One or more parameters are invalid. Reason: Message must be shorter than {limit} bytes."
        )
