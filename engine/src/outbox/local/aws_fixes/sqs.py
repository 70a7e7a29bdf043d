"""SQS as AWS runs it, where moto 5.2.5 does not (rules 6 to 10, 12 and ReceiveRequestAttemptId).

Rule 6, the FIFO deduplication window (M14; R5.1). moto only compares a new message with those still in
the queue, so a resend after the original was deleted is delivered again. Here each FIFO queue
remembers every deduplication id (explicit or content-based) it accepted for five minutes of virtual
time, whatever happened to the message since; within that interval a duplicate is accepted by
SendMessage / SendMessageBatch and not enqueued. DeduplicationScope=messageGroup scopes it per group.
(moto's own Lambda event source mapping hook in ``Queue.add_message``, which needs moto's Docker
Lambda, is not called: the runtime runs its own event source mapping.)

Rule 7, the move to a dead-letter queue (M17; R5.4). When the redrive policy moves a message, a FIFO
DLQ's copy takes the message id as its deduplication id, keeps its MessageGroupId, gets a fresh enqueue
time (retention restarts), and carries ``DeadLetterQueueSourceArn``. The move bypasses the DLQ's
deduplication: moto compared the original deduplication id with the DLQ's messages, so a second
message with the same deduplication id (which moto's M14 let through) vanished on its way to the DLQ.
That was the "flaky vanish" of M17. Every SQS backend call also holds one process-wide lock, so a
thread deleting a message cannot drop one another thread is adding (moto rebuilds the list unlocked).

Rule 8, time (M19). moto's SQS models read the wall clock; here they read the virtual clock (sent
timestamps, visibility, delays, retention), and a message becomes visible again once the virtual
clock reaches its deadline. Group blocking (M15) and ApproximateReceiveCount are kept. A long poll
(WaitTimeSeconds) returns at once: on virtual time nothing arrives while a caller waits.

Rule 9, StartMessageMoveTask (M18; R5.6): ``outbox.local.aws_fixes.sqs_move_tasks``.

Rule 10, visibility changes (M20; R5.5). A message's visibility can be extended up to 12 hours from the
receive that put it in flight, and setting it to 0 (visible now) is always allowed; moto counted the 12
hours from when the message was sent.

Rule 12, message size (M21): ``outbox.local.aws_fixes.sqs_messages``.

ReceiveRequestAttemptId (M16; R5.3). On a FIFO queue, a retry with the same id within five minutes
returns the same messages and receipt handles and restarts their visibility timeout, unless one of
them was deleted or had its visibility changed since; then it is a new receive.
"""

from __future__ import annotations

import copy
from collections import OrderedDict
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from types import ModuleType
from typing import Any, cast
from weakref import WeakKeyDictionary

from moto.core.responses import ActionResult
from moto.sqs import models as sqs_models
from moto.sqs.exceptions import InvalidParameterValue, ReceiptHandleIsInvalid
from moto.sqs.models import Message, Queue, SQSBackend, _filter_message_attributes
from moto.sqs.responses import SQSResponse

from outbox.local.aws_fixes._patching import Clock, Patch
from outbox.local.aws_fixes.sqs_messages import (
    ENQUEUED_AT,
    RECEIVED_AT,
    SOURCE_ARN,
    SQS_LOCK,
    append,
    check_size,
    enqueued_at,
    source_arn,
)
from outbox.local.aws_fixes.sqs_move_tasks import MoveTasks

DEDUPLICATION_INTERVAL = timedelta(minutes=5)  # R5.1
RECEIVE_ATTEMPT_LIFETIME = timedelta(minutes=5)  # R5.3
DEAD_LETTER_SOURCE_ATTRIBUTE = "DeadLetterQueueSourceArn"

MAX_VISIBILITY_MS = 12 * 60 * 60 * 1000

_RECEIVE_ATTEMPT: ContextVar[str | None] = ContextVar("receive_request_attempt_id", default=None)

# Backend calls that read or change queues: each runs under SQS_LOCK. receive_message has its own.
# Also locked: send_message and send_message_batch, which rule 12 replaces (the lock wraps the replacement).
_LOCKED_BACKEND_CALLS = (
    "create_queue",
    "delete_queue",
    "get_queue_attributes",
    "set_queue_attributes",
    "delete_message",
    "delete_message_batch",
    "change_message_visibility_batch",
    "purge_queue",
    "list_dead_letter_source_queues",
)

_DedupKey = tuple[str | None, str]


@dataclass
class _DedupWindow:
    """The deduplication ids a FIFO queue accepted, oldest first, with when (ms) it accepted them."""

    accepted: OrderedDict[_DedupKey, float] = field(default_factory=OrderedDict)

    def admits(self, key: _DedupKey, now_ms: float) -> bool:
        cutoff = now_ms - DEDUPLICATION_INTERVAL.total_seconds() * 1000
        while self.accepted and next(iter(self.accepted.values())) <= cutoff:
            self.accepted.popitem(last=False)
        if key in self.accepted:
            return False
        self.accepted[key] = now_ms
        return True


@dataclass
class _Delivery:
    message: Message
    receipt_handle: str | None
    visible_at: float


@dataclass
class _Attempt:
    """What one ReceiveMessage with a ReceiveRequestAttemptId returned, for its retries."""

    expires_at_ms: float
    deliveries: list[_Delivery]


class SqsFixes:
    """Rules 6 to 10, 12 and ReceiveRequestAttemptId. The originals are captured when this is built."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._windows: WeakKeyDictionary[Queue, _DedupWindow] = WeakKeyDictionary()
        self._attempts: WeakKeyDictionary[Queue, dict[str, _Attempt]] = WeakKeyDictionary()
        self._move_tasks = MoveTasks(clock)
        self._add_message = Queue.add_message

    def kept(self) -> dict[str, Any]:
        """What these fixes keep beside moto's queues (dedup windows, receive attempts, move tasks), keyed by
        moto's own objects: pickled with them, it is restored with ``restore``."""
        with SQS_LOCK:
            return {
                "windows": dict(self._windows),
                "attempts": dict(self._attempts),
                "move_tasks": self._move_tasks.kept(),
            }

    def restore(self, kept: dict[str, Any]) -> None:
        with SQS_LOCK:
            self._windows = WeakKeyDictionary(kept["windows"])
            self._attempts = WeakKeyDictionary(kept["attempts"])
            self._move_tasks.restore(kept["move_tasks"])

    def patches(self) -> list[Patch]:
        fixes = self

        def locked(original: Callable[..., Any]) -> Callable[..., Any]:
            def call(self: Any, *args: Any, **kwargs: Any) -> Any:
                with SQS_LOCK:
                    return original(self, *args, **kwargs)

            call.__name__ = original.__name__
            call.__doc__ = original.__doc__
            return call

        def unix_time(dt: datetime | None = None) -> float:
            return (dt or fixes._clock.now()).timestamp()

        def unix_time_millis(dt: datetime | None = None) -> float:
            return unix_time(dt) * 1000

        def visible(self: Message) -> bool:
            # moto says "now > visible_at": on a clock that stands still, visibility 0 would never end.
            return fixes._clock.now_ms() >= self.visible_at

        def add_message(self: Queue, message: Message) -> None:
            fixes._enqueue(self, message)

        def receive_message(
            self: SQSBackend,
            queue_name: str,
            count: int,
            wait_seconds_timeout: int,
            visibility_timeout: int,
            message_attribute_names: list[str] | None = None,
        ) -> list[Message]:
            return fixes._receive(self, queue_name, count, visibility_timeout, message_attribute_names or [])

        def receive_message_request(self: SQSResponse) -> ActionResult:
            return fixes._receive_request(self, original_receive_request)

        def start_message_move_task(self: SQSResponse) -> ActionResult:
            task = fixes._move_tasks.start(
                self.sqs_backend,
                self._get_param("SourceArn"),
                self._get_param("DestinationArn"),
                self._get_param("MaxNumberOfMessagesPerSecond"),
            )
            return ActionResult({"TaskHandle": task.handle})

        def list_message_move_tasks(self: SQSResponse) -> ActionResult:
            tasks = fixes._move_tasks.list(
                self.sqs_backend, self._get_param("SourceArn"), self._get_param("MaxResults")
            )
            return ActionResult({"Results": [task.describe() for task in tasks]})

        def cancel_message_move_task(self: SQSResponse) -> ActionResult:
            fixes._move_tasks.cancel(self.sqs_backend, self._get_param("TaskHandle"))

        def send_message(self: SQSBackend, queue_name: str, message_body: str, *args: Any, **kwargs: Any) -> Message:
            attributes = kwargs.get("message_attributes", args[0] if args else None)
            check_size(self.get_queue(queue_name), message_body, attributes or {})
            return original_send_message(self, queue_name, message_body, *args, **kwargs)

        def send_message_batch(self: SQSBackend, queue_name: str, entries: dict[str, dict[str, Any]]) -> Any:
            # Every entry is measured before any is sent, as moto validates the rest: no half-sent batch.
            queue = self.get_queue(queue_name)
            for entry in entries.values():
                check_size(queue, entry["MessageBody"], entry.get("MessageAttributes") or {})
            return original_send_message_batch(self, queue_name, entries)

        def change_message_visibility(
            self: SQSBackend, queue_name: str, receipt_handle: str, visibility_timeout: int
        ) -> None:
            fixes._change_visibility(self, queue_name, receipt_handle, int(visibility_timeout))

        original_receive_request = SQSResponse.receive_message
        original_send_message = SQSBackend.send_message
        original_send_message_batch = SQSBackend.send_message_batch
        module: ModuleType = sqs_models
        return [
            Patch(module, "unix_time", unix_time, "M19: SQS on the virtual clock"),
            Patch(module, "unix_time_millis", unix_time_millis, "M19: SQS on the virtual clock"),
            Patch(Message, "visible", property(visible), "M19: visible again at the deadline"),
            Patch(Queue, "add_message", add_message, "M14: five-minute deduplication window"),
            Patch(SQSBackend, "receive_message", receive_message, "M15, M16, M17, M19"),
            Patch(SQSResponse, "receive_message", receive_message_request, "M16, M17: attempt id, DLQ source"),
            Patch(SQSResponse, "start_message_move_task", start_message_move_task, "M18"),
            Patch(SQSResponse, "list_message_move_tasks", list_message_move_tasks, "M18"),
            Patch(SQSResponse, "cancel_message_move_task", cancel_message_move_task, "M18"),
            Patch(SQSBackend, "change_message_visibility", change_message_visibility, "M20: 12 h from the receive"),
            Patch(SQSBackend, "send_message", locked(send_message), "M21: size in bytes, attributes included; M17"),
            Patch(SQSBackend, "send_message_batch", locked(send_message_batch), "M21: size in bytes, attributes; M17"),
            *(
                Patch(SQSBackend, name, locked(getattr(SQSBackend, name)), "M17: one lock for all SQS calls")
                for name in _LOCKED_BACKEND_CALLS
            ),
        ]

    # Rule 6: the deduplication window.

    def _enqueue(self, queue: Queue, message: Message) -> None:
        with SQS_LOCK:
            if queue.fifo_queue and message.deduplication_id is not None:
                by_group = getattr(queue, "deduplication_scope", "queue") == "messageGroup"
                key = (message.group_id if by_group else None, message.deduplication_id)
                window = self._windows.setdefault(queue, _DedupWindow())
                if not window.admits(key, self._clock.now_ms()):
                    return  # R5.1: accepted, not delivered
            append(queue, message)

    # Rules 7 and 8: receive on the virtual clock, with redrive, and ReceiveRequestAttemptId.

    def _receive(
        self, backend: SQSBackend, queue_name: str, count: int, visibility_timeout: int, attribute_names: list[str]
    ) -> list[Message]:
        with SQS_LOCK:
            queue = backend.get_queue(queue_name)
            now = self._clock.now_ms()
            attempt_id = _RECEIVE_ATTEMPT.get() if queue.fifo_queue else None
            messages = None
            if attempt_id:
                messages = self._replay(queue, attempt_id, visibility_timeout, now)
            if messages is None:
                messages = self._receive_visible(queue, count, visibility_timeout, now)
                if attempt_id and messages:
                    self._attempts.setdefault(queue, {})[attempt_id] = _Attempt(
                        now + RECEIVE_ATTEMPT_LIFETIME.total_seconds() * 1000,
                        [_Delivery(m, m.receipt_handle, m.visible_at) for m in messages],
                    )
            copies = []
            for message in messages:
                # A copy, as moto does: filtering the attributes must not change the stored message.
                received = copy.deepcopy(message)
                _filter_message_attributes(received, attribute_names)
                copies.append(received)
            return copies

    def _receive_visible(self, queue: Queue, count: int, visibility_timeout: int, now: float) -> list[Message]:
        for message in list(queue.pending_messages):
            if message.visible:
                queue.pending_messages.discard(message)
        # M15: a group with a message in flight is blocked; so is a group whose head is not visible.
        blocked: set[str | None] = {m.group_id for m in queue.pending_messages} if queue.fifo_queue else set()
        retention_ms = int(getattr(queue, "message_retention_period", 345600)) * 1000
        redrive = queue.redrive_policy if queue.dead_letter_queue is not None else None
        received: list[Message] = []
        for message in list(queue._messages):
            if len(received) >= count:
                break
            group = message.group_id if queue.fifo_queue else None
            if group is not None and group in blocked:
                continue
            if not message.visible or message.delayed:
                blocked.add(group)
                continue
            if enqueued_at(message) + retention_ms <= now:
                queue._messages.remove(message)  # past the retention period: SQS deletes it
                continue
            if redrive and message.approximate_receive_count >= int(redrive["maxReceiveCount"]):
                self._dead_letter(queue, message, now)
                continue
            queue.pending_messages.add(message)
            message.mark_received(visibility_timeout=visibility_timeout)
            setattr(message, RECEIVED_AT, now)
            received.append(message)
        return received

    def _replay(self, queue: Queue, attempt_id: str, visibility_timeout: int, now: float) -> list[Message] | None:
        attempts = self._attempts.setdefault(queue, {})
        for expired in [key for key, attempt in attempts.items() if attempt.expires_at_ms <= now]:
            del attempts[expired]
        attempt = attempts.get(attempt_id)
        if attempt is None:
            return None
        stored = {id(message) for message in queue._messages}
        if any(
            id(d.message) not in stored
            or d.message.receipt_handle != d.receipt_handle
            or d.message.visible_at != d.visible_at
            for d in attempt.deliveries
        ):
            del attempts[attempt_id]  # R5.3: a message was deleted or its visibility changed
            return None
        for delivery in attempt.deliveries:
            delivery.message.change_visibility(visibility_timeout)
            queue.pending_messages.add(delivery.message)
            delivery.visible_at = delivery.message.visible_at
        return [delivery.message for delivery in attempt.deliveries]

    def _change_visibility(self, backend: SQSBackend, queue_name: str, receipt_handle: str, timeout: int) -> None:
        """Rule 10 (M20; R5.5): a message's visibility may be extended up to 12 hours from the receive that
        put it in flight; making it visible now (0) is never an extension. moto counted the 12 hours from
        when the message was sent, so a message that waited long in its queue could not be released."""
        with SQS_LOCK:
            queue = backend.get_queue(queue_name)
            message = next((m for m in queue._messages if m.had_receipt_handle(receipt_handle)), None)
            if message is None:
                raise ReceiptHandleIsInvalid()
            received_at = getattr(message, RECEIVED_AT, None) or enqueued_at(message)
            if timeout > 0 and self._clock.now_ms() + timeout * 1000 - received_at > MAX_VISIBILITY_MS:
                raise InvalidParameterValue(
                    f"Value {timeout} for parameter VisibilityTimeout is invalid. Reason: Total VisibilityTimeout "
                    "for the message is beyond the limit [43200 seconds]"
                )
            message.change_visibility(timeout)
            if message.visible and message in queue.pending_messages:
                queue.pending_messages.remove(message)

    def _dead_letter(self, source: Queue, message: Message, now: float) -> None:
        dead_letter_queue = cast(Queue, source.dead_letter_queue)
        source._messages.remove(message)
        source.pending_messages.discard(message)
        if dead_letter_queue.fifo_queue:
            message.deduplication_id = message.id  # R5.4: the dedup id becomes the message id
            setattr(message, ENQUEUED_AT, now)  # R5.4: a FIFO DLQ restarts the retention period
        setattr(message, SOURCE_ARN, source.queue_arn)
        append(dead_letter_queue, message)

    def _receive_request(self, handler: SQSResponse, original: Callable[[SQSResponse], ActionResult]) -> ActionResult:
        token = _RECEIVE_ATTEMPT.set(handler._get_param("ReceiveRequestAttemptId"))
        try:
            result = original(handler)
        finally:
            _RECEIVE_ATTEMPT.reset(token)
        requested = set(
            handler._get_param("AttributeNames", []) + handler._get_param("MessageSystemAttributeNames", [])
        )
        response = result.result
        if not ({"All", DEAD_LETTER_SOURCE_ATTRIBUTE} & requested) or not isinstance(response, dict):
            return result
        with SQS_LOCK:
            queue = handler.sqs_backend.get_queue(handler._get_queue_name())
            sources = {m.id: arn for m in queue._messages if (arn := source_arn(m))}
        for message in response.get("Messages", []):
            arn = sources.get(message["MessageId"])
            if arn:
                message.setdefault("Attributes", {})[DEAD_LETTER_SOURCE_ATTRIBUTE] = arn
        return result
