"""The Lambda SQS event source mapping, as AWS runs it, over moto's SQS and the virtual clock.

What it reproduces: batches of at most ``batch_size`` (FIFO: group order kept by SQS, an in-flight
message blocks its group), Lambda SQS events with the real record attributes, ``batchItemFailures``
(an unknown identifier, a raised exception or a crash fails the whole batch), deletion of what
succeeded, the function's timeout (``outbox.local.deadline``: the invocation is stopped there, nothing it
does afterwards takes effect, and the whole batch failed), and the visibility timeout: what failed comes
back when the virtual clock passes it, with its ``ApproximateReceiveCount`` raised, until the queue's
redrive policy moves it to the DLQ.
"""

from __future__ import annotations

import base64
import hashlib
import logging
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from botocore.exceptions import ClientError

from outbox.local import deadline
from outbox.local.clock import VirtualClock
from outbox.local.lambda_context import LocalLambdaContext
from outbox.local.watching import registered

logger = logging.getLogger(__name__)

LambdaHandler = Callable[[dict[str, Any], Any], Any]
# What SQS answers when a receipt handle no longer names a message in flight (it was deleted meanwhile).
_NOT_IN_FLIGHT = frozenset(
    {"ReceiptHandleIsInvalid", "AWS.SimpleQueueService.MessageNotInflight", "MessageNotInflight"}
)


def change_visibility_if_in_flight(sqs: Any, queue_url: str, receipt_handle: str, timeout: int = 0) -> bool:
    """Change a received message's visibility; False when it is gone (another worker, after its own receive
    of the same message, or an operator, deleted it meanwhile): there is nothing left to release."""
    try:
        sqs.change_message_visibility(QueueUrl=queue_url, ReceiptHandle=receipt_handle, VisibilityTimeout=timeout)
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") not in _NOT_IN_FLIGHT:
            raise
        return False
    return True


def lambda_message_attribute(attribute: Mapping[str, Any]) -> dict[str, Any]:
    """An SQS message attribute as Lambda puts it in an SQS event record: lower-case keys, a binary value in
    base64, and the (always empty) list values."""
    shaped: dict[str, Any] = {"stringListValues": [], "binaryListValues": [], "dataType": attribute["DataType"]}
    if "StringValue" in attribute:
        shaped["stringValue"] = attribute["StringValue"]
    if "BinaryValue" in attribute:
        shaped["binaryValue"] = base64.b64encode(attribute["BinaryValue"]).decode("ascii")
    return shaped


@dataclass
class InFlight:
    receipt_handle: str
    message_id: str
    visible_at: datetime


@dataclass
class BatchResult:
    """What one invocation did: the message ids it received, those it failed, and whether it crashed."""

    received: list[str]
    failed: list[str]
    crashed: BaseException | None = None

    @property
    def succeeded(self) -> list[str]:
        return [message_id for message_id in self.received if message_id not in self.failed]


@dataclass(frozen=True)
class PollWatcher:
    """What a watcher of a mapping is told, in the poller's thread (each hook optional, told in the order the
    watchers were added):

    - ``invoking(event, context)``: a batch is about to go to the function (a raise there fails the invocation as
      the function's own raise would);
    - ``invoked(event, context)``: that invocation ended, however it ended (told even when it raised);
    - ``polled(result)``: a poll that received a batch is done: what succeeded deleted, the rest in flight.
    """

    invoking: Callable[[dict[str, Any], LocalLambdaContext], None] | None = None
    invoked: Callable[[dict[str, Any], LocalLambdaContext], None] | None = None
    polled: Callable[[BatchResult], None] | None = None


@dataclass
class SqsEventSourceMapping:
    sqs: Any
    queue_url: str
    queue_arn: str
    handler: LambdaHandler
    function_name: str
    function_timeout: timedelta
    visibility_timeout: timedelta
    clock: VirtualClock
    batch_size: int = 10
    region: str = "us-east-1"
    in_flight: list[InFlight] = field(default_factory=list)
    invocations: int = 0
    # The messages of the invocation under way (empty between invocations): what a fault needs to make one
    # of them visible again while its handler still runs.
    receiving: list[dict[str, Any]] = field(default_factory=list)
    # What each invocation that failed as a whole raised, oldest first (a test's drain reports the first).
    crashes: list[BaseException] = field(default_factory=list)
    watchers: list[PollWatcher] = field(default_factory=list)

    def watched(self, watcher: PollWatcher) -> AbstractContextManager[PollWatcher]:
        """Tell ``watcher`` of this mapping's invocations and polls for the duration of the block."""
        return registered(self.watchers, watcher)

    def poll(self) -> BatchResult | None:
        """Receive one batch and invoke the function with it; None when nothing is visible."""
        self.release_expired()
        with deadline.outside():  # the poller's request, not the function's
            response = self.sqs.receive_message(
                QueueUrl=self.queue_url,
                MaxNumberOfMessages=self.batch_size,
                MessageSystemAttributeNames=["All"],
                MessageAttributeNames=["All"],
            )
        messages = response.get("Messages", [])
        if not messages:
            return None
        self.invocations += 1
        # Visibility runs from the receive, not from the handler's end: SQS started the clock when it
        # handed the messages over, whatever the function does with them.
        visible_again_at = self.clock() + self.visibility_timeout
        event = {"Records": [self._record(message) for message in messages]}
        context = LocalLambdaContext(self.function_name, self.function_timeout, self.clock)
        received = [message["MessageId"] for message in messages]
        crashed: BaseException | None = None
        outer, self.receiving = self.receiving, messages
        deadline.install()
        try:
            # Lambda stops the invocation at its timeout: no request of its code is sent after it (deadline).
            with deadline.invocation(context.deadline, self.clock, self.function_name):
                response = self._invoke(event, context)
                deadline.enforce()  # an answer given after the deadline is never seen either
            failed = self._failed_ids(response, received)
        except KeyboardInterrupt:
            raise  # the host stops the local process (Ctrl-C, a runner's time limit): no crash of the function's
        except BaseException as exc:  # a crash (even SystemExit) fails the whole batch, as in Lambda
            logger.warning("invocation of %s failed as a whole: %r", self.function_name, exc)
            failed, crashed = list(received), exc
            self.crashes.append(exc)
        finally:
            self.receiving = outer
        # Lambda's poller deletes what succeeded; a second worker's poll, run inside a first worker's handler,
        # is not stopped by the first one's deadline (its messages would stay in flight, untracked, for ever).
        with deadline.outside():
            for message in messages:
                if message["MessageId"] in failed:
                    self.in_flight.append(InFlight(message["ReceiptHandle"], message["MessageId"], visible_again_at))
                else:
                    self._delete(message)
        result = BatchResult(received, failed, crashed)
        for watcher in list(self.watchers):
            if watcher.polled is not None:
                watcher.polled(result)
        return result

    def _invoke(self, event: dict[str, Any], context: LocalLambdaContext) -> Any:
        watchers = list(self.watchers)
        for watcher in watchers:
            if watcher.invoking is not None:
                watcher.invoking(event, context)
        try:
            return self.handler(event, context)
        finally:
            for watcher in reversed(watchers):
                if watcher.invoked is not None:
                    watcher.invoked(event, context)

    def _delete(self, message: Mapping[str, Any]) -> None:
        """Delete a message the invocation processed. A receipt handle SQS no longer honours (the message came
        back and was received again meanwhile) is no failure of the invocation: Lambda logs it, and the
        message is processed again, which the consumer's inbox absorbs."""
        try:
            self.sqs.delete_message(QueueUrl=self.queue_url, ReceiptHandle=message["ReceiptHandle"])
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") not in _NOT_IN_FLIGHT:
                raise
            logger.warning("%s could not delete %s: %s", self.function_name, message["MessageId"], exc)

    def release_expired(self) -> None:
        """Forget the failed messages whose visibility timeout has passed: SQS makes them visible again by
        itself (on the virtual clock), as Lambda leaves them to it. Lambda never changes their visibility
        with the receipt handle of its receive: by then the message may have been received again, and a
        change with the old handle (which moto accepts) would make that newer receive visible early."""
        now = self.clock()
        self.in_flight = [entry for entry in self.in_flight if entry.visible_at > now]

    def drain(self, max_invocations: int = 1000) -> list[BatchResult]:
        """Poll until the queue is empty, letting virtual time pass whenever only in-flight messages remain."""
        results: list[BatchResult] = []
        while len(results) < max_invocations:
            result = self.poll()
            if result is not None:
                results.append(result)
                continue
            if not self.in_flight:
                return results
            self.clock.advance(min(entry.visible_at for entry in self.in_flight) - self.clock())
        raise RuntimeError(f"{self.function_name} did not drain its queue in {max_invocations} invocations")

    def _failed_ids(self, response: Any, received: list[str]) -> list[str]:
        if response is None:
            return []
        failures = response.get("batchItemFailures", []) if isinstance(response, Mapping) else None
        if failures is None:
            return []
        identifiers = [failure.get("itemIdentifier") for failure in failures]
        if any(identifier not in received for identifier in identifiers):
            # Lambda treats a response naming an unknown or empty id as a failure of the whole batch.
            logger.warning("%s reported unknown item identifiers %s", self.function_name, identifiers)
            return list(received)
        return [identifier for identifier in identifiers if identifier is not None]

    def _record(self, message: Mapping[str, Any]) -> dict[str, Any]:
        body = message["Body"]
        return {
            "messageId": message["MessageId"],
            "receiptHandle": message["ReceiptHandle"],
            "body": body,
            "attributes": dict(message.get("Attributes", {})),
            "messageAttributes": {
                name: lambda_message_attribute(value) for name, value in message.get("MessageAttributes", {}).items()
            },
            "md5OfBody": message.get("MD5OfBody") or hashlib.md5(body.encode()).hexdigest(),
            "eventSource": "aws:sqs",
            "eventSourceARN": self.queue_arn,
            "awsRegion": self.region,
        }
