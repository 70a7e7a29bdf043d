"""Rule 9 of the SQS fixes, StartMessageMoveTask (M18; R5.6): StartMessageMoveTask, ListMessageMoveTasks and
CancelMessageMoveTask, which moto does not implement. A task moves every visible message synchronously
(oldest first, MessageGroupId kept, a new message id and a fresh deduplication id) and is COMPLETED when it
returns."""

from __future__ import annotations

import base64
import copy
import json
import string
from dataclasses import dataclass
from typing import Any, NoReturn
from weakref import WeakKeyDictionary

from moto.moto_api._internal import mock_random
from moto.sqs.exceptions import InvalidParameterValue, SQSException
from moto.sqs.models import Message, Queue, SQSBackend

from outbox.local.aws_fixes._patching import Clock
from outbox.local.aws_fixes.sqs_messages import SQS_LOCK, source_arn


@dataclass
class MoveTask:
    handle: str
    source_arn: str
    destination_arn: str | None
    max_per_second: int | None
    started_ms: int
    to_move: int
    moved: int = 0
    status: str = "COMPLETED"
    failure: str | None = None

    def describe(self) -> dict[str, Any]:
        described: dict[str, Any] = {
            "Status": self.status,
            "SourceArn": self.source_arn,
            "ApproximateNumberOfMessagesMoved": self.moved,
            "ApproximateNumberOfMessagesToMove": self.to_move,
            "StartedTimestamp": self.started_ms,
        }
        if self.destination_arn:
            described["DestinationArn"] = self.destination_arn
        if self.max_per_second is not None:
            described["MaxNumberOfMessagesPerSecond"] = self.max_per_second
        if self.failure:
            described["FailureReason"] = self.failure
        return described


class ResourceNotFound(SQSException):
    def __init__(self, message: str) -> None:
        super().__init__("ResourceNotFoundException", message)


class MoveTasks:
    """The message move tasks of each SQS backend."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._tasks: WeakKeyDictionary[SQSBackend, list[MoveTask]] = WeakKeyDictionary()

    def kept(self) -> dict[SQSBackend, list[MoveTask]]:
        return dict(self._tasks)

    def restore(self, kept: dict[SQSBackend, list[MoveTask]]) -> None:
        self._tasks = WeakKeyDictionary(kept)

    def start(
        self, backend: SQSBackend, source: str, destination_arn: str | None, max_per_second: int | None
    ) -> MoveTask:
        with SQS_LOCK:
            queue = _queue_by_arn(backend, source)
            if not any(other.dead_letter_queue is queue for other in backend.queues.values()):
                raise InvalidParameterValue("Source queue must be configured as a Dead Letter Queue.")
            destination = _queue_by_arn(backend, destination_arn) if destination_arn else None
            if destination is not None and destination.fifo_queue != queue.fifo_queue:
                raise InvalidParameterValue("The source queue and the destination queue must be of the same type.")
            candidates = [m for m in queue._messages if m.visible and not m.delayed]
            task = MoveTask(
                handle=_task_handle(source),
                source_arn=source,
                destination_arn=destination_arn,
                max_per_second=max_per_second,
                started_ms=int(self._clock.now_ms()),
                to_move=len(candidates),
            )
            for message in candidates:
                target = destination or _find_queue(backend, source_arn(message))
                if target is None:
                    task.status = "FAILED"
                    task.failure = (
                        f"Message {message.id} has no DeadLetterQueueSourceArn and no DestinationArn was given"
                    )
                    break
                queue._messages.remove(message)
                queue.pending_messages.discard(message)
                target.add_message(_redriven(message, target))
                task.moved += 1
            self._tasks.setdefault(backend, []).append(task)
            return task

    def list(self, backend: SQSBackend, source: str, max_results: int | None) -> list[MoveTask]:
        with SQS_LOCK:
            _queue_by_arn(backend, source)
            tasks = [task for task in self._tasks.get(backend, []) if task.source_arn == source]
            return list(reversed(tasks))[: max_results or 1]

    def cancel(self, backend: SQSBackend, handle: str) -> NoReturn:
        """Tasks run synchronously, so none is ever RUNNING, the only state that can be cancelled."""
        with SQS_LOCK:
            task = next((task for task in self._tasks.get(backend, []) if task.handle == handle), None)
        if task is None:
            raise ResourceNotFound("The task handle does not match any message movement task.")
        raise ResourceNotFound(f"Only a RUNNING message movement task can be cancelled; this one is {task.status}.")


def _find_queue(backend: SQSBackend, arn: str | None) -> Queue | None:
    return next((queue for queue in backend.queues.values() if queue.queue_arn == arn), None)


def _queue_by_arn(backend: SQSBackend, arn: str) -> Queue:
    queue = _find_queue(backend, arn)
    if queue is None:
        raise ResourceNotFound(f"The resource that you specified for the ARN {arn} does not exist.")
    return queue


def _task_handle(source: str) -> str:
    task = {"taskId": str(mock_random.uuid4()), "sourceArn": source}
    return base64.b64encode(json.dumps(task).encode()).decode()


def _redriven(message: Message, target: Queue) -> Message:
    """R5.6: a redriven message is a new message (new id, enqueue time); its group is kept."""
    moved = Message(str(mock_random.uuid4()), message.body, copy.deepcopy(message.system_attributes))
    moved.message_attributes = copy.deepcopy(message.message_attributes)
    if target.fifo_queue:
        moved.group_id = message.group_id
        moved.deduplication_id = moved.id  # fresh, so the five-minute window cannot swallow it
        moved.sequence_number = "".join(mock_random.choice(string.digits) for _ in range(20))
    moved.mark_sent()
    return moved
