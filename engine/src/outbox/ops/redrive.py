"""Redrive: move a DLQ's messages back to their source queue, unchanged, and clear nothing. Each
subscription then runs, or is skipped as COMPLETED, or stays dead with its open dead letter (shown by
``status``, repaired by replay). Every message is put back before it is removed from the DLQ: an
interruption leaves a duplicate, which the inbox absorbs."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from botocore.exceptions import ClientError

from outbox.exceptions import OperationRefusedError
from outbox.ops.context import OperatorContext
from outbox.tracing import TraceContext, repair_span, trace_context_of_image

MOVE_TASK_UNSUPPORTED = {"UnsupportedOperation", "InvalidParameterValue", "AccessDenied", "NotImplementedError"}


@dataclass
class RedriveResult:
    moved: int = 0
    method: str = "receive-send-delete"  # "move-task, then receive-send-delete" when auto fell back
    status: str = "COMPLETED"  # the move task's status (RUNNING when it outlived the wait, FAILED)
    remaining: int = 0  # messages still in the DLQ afterwards (in flight ones included)
    failure: str | None = None  # why SQS's move task failed, in SQS's words (its FailureReason)
    max_messages: int | None = None  # what the operator asked for: all, or at most this many

    def shortfall(self, dlq: str) -> str | None:
        """Why the redrive did not do what was asked, and what to try next; None when it did. Moving
        ``max_messages`` is done, whatever is left; so is a DLQ that was empty (a rerun of a repair)."""
        if self.status == "FAILED":
            return (
                f"SQS's move task failed after moving {self.moved}: {self.failure or 'no reason given'}. "
                f"outbox redrive --dlq {dlq} --method receive-send-delete sends each message to the queue "
                "the DLQ belongs to, whatever its origin"
            )
        if self.status == "RUNNING":
            return (
                f"SQS's move task is still RUNNING after moving {self.moved}: it goes on without this command; "
                "outbox status shows the DLQ's depth as it drains"
            )
        if self.status != "COMPLETED":
            return f"SQS's move task ended {self.status} after moving {self.moved}: run this again"
        if self.remaining and (self.max_messages is None or self.moved < self.max_messages):
            return (
                f"{self.remaining} left in {dlq} that could not be received: in flight (another redrive, or "
                "messages that failed again and came back) or held behind an in-flight message of their group; "
                "they are visible again within the visibility timeout: run this again then"
            )
        return None


def redrive(
    context: OperatorContext,
    dlq: str = "durable-dlq",
    *,
    max_messages: int | None = None,
    method: str = "auto",
    on_message: Callable[[str], None] | None = None,
    wait: timedelta = timedelta(minutes=5),
) -> RedriveResult:
    """Move a DLQ's messages back to their source queue, unchanged; clear nothing.

    ``method``: "receive-send-delete" (works everywhere, resumable), "move-task" (SQS
    StartMessageMoveTask), or "auto" (the move task; where SQS refuses it, or the task fails, say on
    messages that were never dead-lettered by SQS and so have no source queue, the loop moves the rest).
    A move task is followed until it ends or ``wait`` passes; the result says how many messages moved.
    """
    url, target = redrive_route(context, dlq)
    result: RedriveResult | None = None
    if method in ("auto", "move-task") and max_messages is None:
        try:
            result = _redrive_with_move_task(context, url, wait)
        except ClientError as exc:
            if method == "move-task" or exc.response["Error"]["Code"] not in MOVE_TASK_UNSUPPORTED:
                raise
    if result is None:
        result = _redrive_loop(context, url, target, max_messages, on_message)
    elif method == "auto" and result.status == "FAILED":
        rest = _redrive_loop(context, url, target, None, on_message)
        result = RedriveResult(
            moved=result.moved + rest.moved,
            method="move-task, then receive-send-delete",
            failure=result.failure,
        )
    result.max_messages = max_messages
    result.remaining = sum(context.message_counts(url))
    return result


def redrive_route(context: OperatorContext, dlq: str) -> tuple[str, str]:
    """The DLQ named ``dlq`` and the queue its messages go back to."""
    topology = context.topology
    routes = {
        "durable-dlq": (topology.durable_dlq_url, topology.durable_queue_url),
        "record-change-dlq": (topology.record_change_dlq_url, topology.record_change_queue_url),
        # A finding the recorder could not write: recording it again is idempotent (one row per stream record).
        "tamper-dlq": (topology.tamper_dlq_url, topology.tamper_queue_url),
    }
    if dlq not in routes or not routes[dlq][0] or not routes[dlq][1]:
        raise OperationRefusedError(
            f"cannot redrive {dlq!r}: choose one of {sorted(routes)} (a pipe's DLQ holds batch metadata, "
            "not events: recover those with reconcile)"
        )
    url, target = routes[dlq]
    assert url is not None
    assert target is not None
    return url, target


def _redrive_loop(
    context: OperatorContext, url: str, target: str, max_messages: int | None, on_message: Callable[[str], None] | None
) -> RedriveResult:
    result = RedriveResult()
    while max_messages is None or result.moved < max_messages:
        batch = context.sqs.receive_message(
            QueueUrl=url,
            MaxNumberOfMessages=10,
            VisibilityTimeout=60,
            MessageSystemAttributeNames=["All"],
            MessageAttributeNames=["All"],
        ).get("Messages", [])
        if not batch:
            break
        for message in batch[: None if max_messages is None else max_messages - result.moved]:
            _move(context, message, url, target)
            result.moved += 1
            if on_message is not None:
                on_message(message["MessageId"])
    return result


def _move(context: OperatorContext, message: dict[str, Any], url: str, target: str) -> None:
    attributes = message.get("Attributes", {})
    send: dict[str, Any] = {"QueueUrl": target, "MessageBody": message["Body"]}
    if message.get("MessageAttributes"):
        send["MessageAttributes"] = message["MessageAttributes"]  # a repair's targets travel on
    if "MessageGroupId" in attributes:
        send["MessageGroupId"] = attributes["MessageGroupId"]
        # Stable per DLQ message: a redrive interrupted after this send and run again is deduplicated.
        send["MessageDeduplicationId"] = f"redrive-{message['MessageId']}"
    with repair_span("redrive", {"message.id": str(message["MessageId"])}, _recorded_context(message["Body"])):
        context.sqs.send_message(**send)  # put back first ...
    context.sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])  # ... then remove


def _recorded_context(body: str) -> TraceContext | None:
    """The trace context of the event a dead message carries (a relay body is its row's image), if any. A dead
    message may be anything anyone sent: a body nested deeper than the parser recurses is no event either, and
    must not stop the redrive of the rest."""
    try:
        image = json.loads(body)
    except (ValueError, RecursionError):
        return None
    return trace_context_of_image(image.get("dynamodb", {}).get("NewImage", image) if isinstance(image, dict) else None)


def _redrive_with_move_task(context: OperatorContext, url: str, wait: timedelta) -> RedriveResult:
    """Let SQS move every visible message back to its source queue, and follow the task to its end."""
    sqs = context.sqs
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    handle = sqs.start_message_move_task(SourceArn=arn)["TaskHandle"]
    deadline = context.now() + wait
    while True:
        # The newest task first; SQS names a task's handle only while it is RUNNING, and runs one task per
        # queue at a time, so the newest one is ours.
        tasks = sqs.list_message_move_tasks(SourceArn=arn, MaxResults=1).get("Results", [])
        task = tasks[0] if tasks and tasks[0].get("TaskHandle", handle) == handle else {}
        status = str(task.get("Status", "UNKNOWN"))
        if status != "RUNNING" or context.now() >= deadline:
            moved = int(task.get("ApproximateNumberOfMessagesMoved", 0))
            return RedriveResult(moved=moved, method="move-task", status=status, failure=task.get("FailureReason"))
        context.sleep(2)
