"""Fault injection for the local runtime: the failures the design must survive, on demand.

Each fault is a context manager that counts what it did (``FaultCount.fired``). Handlers stay
unmodified: faults patch the engine's seams (the consumer's claim and completion, a subscription's
handler) or moto's DynamoDB front door (throttling). Pipe faults (duplicate delivery, reordered
records) are ``PipeEmulator.faults``; redelivery is ``redeliver()``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any
from unittest import mock

from local_runtime.clock import VirtualClock
from local_runtime.esm import SqsEventSourceMapping
from outbox.consumer import DeliveryOutcome, DurableConsumer
from outbox.envelope import Envelope
from outbox.inbox import ClaimResult, Inbox
from outbox.subscriptions import Subscription


class WorkerCrash(BaseException):
    """The worker dies (out of memory, a deploy, SIGKILL): not an Exception, so no handler code catches
    it, and Lambda fails the whole invocation."""


@dataclass
class FaultCount:
    remaining: int
    fired: int = 0

    def take(self) -> bool:
        if self.remaining <= 0:
            return False
        self.remaining -= 1
        self.fired += 1
        return True


def _selected(subscription: Subscription, only: str | None) -> bool:
    return only is None or subscription.name == only


@contextmanager
def crash_after_claim(times: int = 1, subscription: str | None = None) -> Iterator[FaultCount]:
    """The worker dies right after its claim committed, before the handler ran."""
    count, original = FaultCount(times), Inbox.claim

    def claim(inbox: Inbox, envelope: Envelope, name: str, lease: timedelta) -> ClaimResult:
        result = original(inbox, envelope, name, lease)
        if result.claim is not None and (subscription in (None, name)) and count.take():
            raise WorkerCrash(f"crashed after claiming {result.claim.idempotency_key}")
        return result

    with mock.patch.object(Inbox, "claim", claim):
        yield count


@contextmanager
def crash_before_completion(times: int = 1, subscription: str | None = None) -> Iterator[FaultCount]:
    """The worker dies after the handler's effect and before the COMPLETED mark: the worst moment."""
    count, original = FaultCount(times), DurableConsumer._complete

    def complete(consumer: DurableConsumer, claim: Any, envelope: Envelope, sub: Subscription, result: Any) -> None:
        if _selected(sub, subscription) and count.take():
            raise WorkerCrash(f"crashed before completing {claim.idempotency_key}")
        original(consumer, claim, envelope, sub, result)

    with mock.patch.object(DurableConsumer, "_complete", complete):
        yield count


@contextmanager
def fail_handler(
    subscription: str, times: int, error: Callable[[], BaseException] = lambda: ConnectionError("injected")
) -> Iterator[FaultCount]:
    """The named subscription's handler raises ``error()`` on its next ``times`` runs."""
    count, original = FaultCount(times), DurableConsumer.deliver

    def deliver(consumer: DurableConsumer, envelope: Envelope, sub: Subscription, *args: Any) -> DeliveryOutcome:
        if sub.name == subscription:
            handler = sub.handler

            def failing(delivery: Any) -> Any:
                if count.take():
                    raise error()
                return handler(delivery)

            sub = replace(sub, handler=failing)
        return original(consumer, envelope, sub, *args)

    with mock.patch.object(DurableConsumer, "deliver", deliver):
        yield count


@contextmanager
def expire_lease_while_running(clock: VirtualClock, subscription: str, times: int = 1) -> Iterator[FaultCount]:
    """Virtual time jumps past the lease while the handler runs (a handler slower than its lease)."""
    count, original = FaultCount(times), DurableConsumer.deliver

    def deliver(consumer: DurableConsumer, envelope: Envelope, sub: Subscription, *args: Any) -> DeliveryOutcome:
        if sub.name == subscription:
            handler = sub.handler

            def slow(delivery: Any) -> Any:
                if count.take():
                    clock.advance(consumer.lease_policy.lease_for(delivery.remaining_time_ms()) + timedelta(seconds=1))
                return handler(delivery)

            sub = replace(sub, handler=slow)
        return original(consumer, envelope, sub, *args)

    with mock.patch.object(DurableConsumer, "deliver", deliver):
        yield count


@contextmanager
def throttle_dynamodb(operation: str, times: int) -> Iterator[FaultCount]:
    """moto answers the next ``times`` calls of ``operation`` (e.g. "TransactWriteItems") with
    ProvisionedThroughputExceededException, as DynamoDB does under a hot partition."""
    import re

    from moto.dynamodb.exceptions import ERROR_TYPE_PREFIX, DynamodbException
    from moto.dynamodb.responses import DynamoHandler

    method = re.sub(r"(?<!^)(?=[A-Z])", "_", operation).lower()
    count, original = FaultCount(times), getattr(DynamoHandler, method)

    def throttled(handler: Any, *args: Any, **kwargs: Any) -> Any:
        if count.take():
            raise DynamodbException(
                ERROR_TYPE_PREFIX + "ProvisionedThroughputExceededException", "injected: rate of requests exceeds"
            )
        return original(handler, *args, **kwargs)

    with mock.patch.object(DynamoHandler, method, throttled):
        yield count


def redeliver(mapping: SqsEventSourceMapping) -> int:
    """Every in-flight message becomes visible now, as if its visibility timeout had passed early (a
    visibility timeout shorter than the handler): SQS delivers it again while it may still be running."""
    entries, mapping.in_flight = mapping.in_flight, []
    for entry in entries:
        mapping.sqs.change_message_visibility(
            QueueUrl=mapping.queue_url, ReceiptHandle=entry.receipt_handle, VisibilityTimeout=0
        )
    return len(entries)
