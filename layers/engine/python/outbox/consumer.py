"""The durable consumer: Powertools SQS FIFO batch processing over the lease-claim inbox."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum
from typing import Any

from aws_lambda_powertools.utilities.batch import SqsFifoPartialProcessor, process_partial_response
from aws_lambda_powertools.utilities.batch.exceptions import BatchProcessingError
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from botocore.exceptions import ClientError
from pydantic import ValidationError

from outbox.envelope import Envelope
from outbox.exceptions import (
    CallerWriteConditionFailedError,
    EnvelopeParseError,
    LeaseLostError,
    OutboxError,
    TerminalError,
)
from outbox.inbox import Claim, ClaimOutcome, DeadReason, Inbox, envelope_digest
from outbox.store import EventStore
from outbox.subscriptions import Delivery, HandlerResult, Lane, Subscription, SubscriptionRegistry

logger = logging.getLogger(__name__)


class RetryableDeliveryError(OutboxError):
    """At least one subscription must run again: the message goes back to the queue (a batch item failure)."""


class DeliveryOutcome(StrEnum):
    COMPLETED = "completed"
    SKIPPED = "skipped"
    RETRY = "retry"
    DEAD = "dead"


class Metric(StrEnum):
    CLAIMS = "Claims"
    SKIPS = "ClaimSkips"
    COMPLETIONS = "Completions"
    RETRIES = "Retries"
    DEAD_LETTERS = "DeadLetters"
    CONFLICTS = "Conflicts"
    POISON_PILLS = "PoisonPills"
    UNMATCHED = "UnmatchedEvents"
    LEASES_LOST = "LeasesLost"


@dataclass(frozen=True)
class LeasePolicy:
    """A lease lasts as long as the invocation can (so a live handler is never taken over), plus a margin
    for clock skew; the floor covers a remaining time that reads 0 right at the deadline."""

    floor: timedelta = timedelta(seconds=5)
    margin: timedelta = timedelta(seconds=5)

    def lease_for(self, remaining_ms: int) -> timedelta:
        return max(timedelta(milliseconds=remaining_ms), self.floor) + self.margin


def parse_body(body: str) -> Envelope:
    """The pipe forwards the raw NewImage (typed DynamoDB JSON) as the body; also accept it wrapped in
    a stream record or in ``{"newImage": ...}``, so a changed input template degrades loudly, not silently."""
    try:
        document = json.loads(body)
    except (TypeError, ValueError) as exc:
        raise EnvelopeParseError(f"body is not JSON: {exc}") from exc
    if not isinstance(document, dict):
        raise EnvelopeParseError(f"body is JSON {type(document).__name__}, not a DynamoDB image")
    if isinstance(document.get("dynamodb"), dict):
        document = document["dynamodb"].get("NewImage") or {}
    elif isinstance(document.get("newImage") or document.get("NewImage"), dict):
        document = document.get("newImage") or document["NewImage"]
    envelope = Envelope.from_item(document)
    if envelope.computed_hash() != envelope.hash:
        raise EnvelopeParseError(f"event {envelope.id} does not match its own hash: altered after emit")
    return envelope


class DurableConsumer:
    """Runs every matching DURABLE subscription of each message exactly once per (event, subscription).

    Parameters
    ----------
    registry, inbox, store:
        The subscriptions, the claim table, and the event store used for handlers' follow-up events.
    max_receive_count:
        The queue's redrive ``maxReceiveCount`` (from the infrastructure): a retryable failure on that
        receive is the last chance, so it is dead-lettered there.
    metrics:
        Optional Powertools ``Metrics``; the handler flushes it.
    """

    def __init__(
        self,
        registry: SubscriptionRegistry,
        inbox: Inbox,
        store: EventStore,
        *,
        max_receive_count: int,
        lease_policy: LeasePolicy | None = None,
        metrics: Any | None = None,
    ) -> None:
        self.registry = registry
        self.inbox = inbox
        self.store = store
        self.max_receive_count = max_receive_count
        self.lease_policy = lease_policy or LeasePolicy()
        self.metrics = metrics

    # -- the Lambda entry -----------------------------------------------------------------------------

    def handle(self, event: Mapping[str, Any], context: Any) -> dict[str, Any]:
        """Process one SQS FIFO batch; failures stop only their own message group."""
        processor = SqsFifoPartialProcessor(skip_group_on_error=True)
        remaining: Callable[[], int] = context.get_remaining_time_in_millis

        def record_handler(record: SQSRecord) -> None:
            self.process_record(record, remaining)

        try:
            response = process_partial_response(
                event=dict(event), record_handler=record_handler, processor=processor, context=context
            )
            return dict(response)
        except BatchProcessingError:
            # Powertools raises when every record failed or was skipped (no raise_on_entire_batch_failure
            # for FIFO yet). Reporting them all is the same for SQS without counting a function error.
            return {"batchItemFailures": [{"itemIdentifier": r["messageId"]} for r in event["Records"]]}

    # -- one message ----------------------------------------------------------------------------------

    def process_record(self, record: SQSRecord, remaining_ms: Callable[[], int]) -> None:
        receive_count = int(record.attributes.approximate_receive_count)
        try:
            envelope = parse_body(record.body)
        except EnvelopeParseError as exc:
            self._poison(record, str(exc))
            return
        log = {"event_id": envelope.id, "correlation_id": envelope.correlation_id, "tenant": envelope.tenant}
        subscriptions = self.registry.matching(envelope.type, Lane.DURABLE)
        if not subscriptions:
            logger.warning("event %s of type %s matched no durable subscription", envelope.id, envelope.type, extra=log)
            self._count(Metric.UNMATCHED)
            return
        digest = envelope_digest(envelope)  # once per message, not per subscription
        retry = [
            s.name
            for s in subscriptions
            if self.deliver(envelope, s, receive_count, remaining_ms, digest) is DeliveryOutcome.RETRY
        ]
        if retry:
            raise RetryableDeliveryError(f"event {envelope.id}: {', '.join(retry)} will run again")

    def deliver(
        self,
        envelope: Envelope,
        subscription: Subscription,
        receive_count: int,
        remaining_ms: Callable[[], int],
        digest: str | None = None,
    ) -> DeliveryOutcome:
        """Claim, run, complete: the outcome of one (event, subscription)."""
        log = {"event_id": envelope.id, "subscription": subscription.name, "tenant": envelope.tenant}
        lease = self.lease_policy.lease_for(remaining_ms())
        result = self.inbox.claim(envelope, subscription.name, lease, digest)
        if result.outcome is ClaimOutcome.CONFLICT:
            logger.error("event %s conflicts with the content already claimed", envelope.id, extra=log)
            self.inbox.record_conflict(envelope, subscription.name, result.existing or {}, receive_count)
            self._count(Metric.CONFLICTS)
            return DeliveryOutcome.DEAD
        if result.outcome is ClaimOutcome.IN_PROGRESS:
            # Another worker holds a live lease. The handler is skipped, but the message is NOT
            # acknowledged: if that worker has crashed, this message may be the only copy left, and
            # deleting it would lose the effect. It comes back after the visibility timeout, by when
            # the claim is completed (skip) or its lease has expired (take-over).
            logger.info("skipped %s for now: in progress elsewhere", subscription.name, extra=log)
            self._count(Metric.SKIPS)
            return DeliveryOutcome.RETRY
        if result.claim is None:
            logger.info("skipped %s: %s", subscription.name, result.outcome.value, extra=log)
            self._count(Metric.SKIPS)
            return DeliveryOutcome.SKIPPED
        claim = result.claim
        self._count(Metric.CLAIMS)
        delivery = Delivery(envelope, subscription.name, claim.idempotency_key, claim.attempts, remaining_ms)
        try:
            handler_result = subscription.handler(delivery)
        except Exception as exc:  # a handler may raise anything: classify it, never lose it
            return self._failed(claim, envelope, subscription, exc, receive_count)
        try:
            self._complete(claim, envelope, subscription, handler_result or HandlerResult())
        except LeaseLostError:
            logger.warning("lost the lease on %s before completing; the new owner finishes it", claim.idempotency_key)
            self._count(Metric.LEASES_LOST)
            return DeliveryOutcome.SKIPPED
        except (ClientError, OutboxError) as exc:
            # The completion transaction was cancelled (a handler write's condition, throttling, ...):
            # nothing of it is visible, so the claim is retried like any retryable failure.
            return self._failed(claim, envelope, subscription, exc, receive_count)
        self._count(Metric.COMPLETIONS)
        return DeliveryOutcome.COMPLETED

    def _complete(self, claim: Claim, envelope: Envelope, subscription: Subscription, result: HandlerResult) -> None:
        if result.follow_up is None:
            self.inbox.mark_completed(claim, result.writes)
            return
        try:
            self.store.emit(
                result.follow_up.event_type,
                result.follow_up.payload,
                tenant=envelope.tenant,
                actor=f"subscription:{subscription.name}",
                correlation_id=envelope.correlation_id,
                causation_id=envelope.id,
                extra_writes=[*self.inbox.completion_writes(claim), *result.writes],
            )
        except CallerWriteConditionFailedError as exc:
            if exc.index == 0:  # the completion mark: our fencing token no longer holds
                raise LeaseLostError(claim.event_id, claim.subscription, "complete") from exc
            raise

    def _failed(
        self, claim: Claim, envelope: Envelope, subscription: Subscription, exc: BaseException, receive_count: int
    ) -> DeliveryOutcome:
        error = f"{type(exc).__name__}: {exc}"
        terminal = isinstance(exc, TerminalError) or (
            subscription.terminal_on_validation_error and isinstance(exc, ValidationError)
        )
        last_receive = receive_count >= self.max_receive_count
        log = {"event_id": envelope.id, "subscription": subscription.name, "attempt": claim.attempts}
        try:
            if terminal or last_receive:
                reason = DeadReason.TERMINAL if terminal else DeadReason.EXHAUSTED
                logger.error("dead-lettering %s (%s): %s", claim.idempotency_key, reason.value, error, extra=log)
                self.inbox.mark_dead(claim, envelope, error, type(exc).__name__, reason, receive_count)
                self._count(Metric.DEAD_LETTERS)
                # On the last receive the message still goes back, so SQS moves it to the DLQ: the
                # transport and the inbox then agree on what is dead.
                return DeliveryOutcome.DEAD if terminal else DeliveryOutcome.RETRY
            logger.warning("retrying %s after: %s", claim.idempotency_key, error, extra=log)
            self.inbox.release(claim, error)
        except LeaseLostError:
            logger.warning("lost the lease on %s while recording a failure", claim.idempotency_key, extra=log)
            self._count(Metric.LEASES_LOST)
            return DeliveryOutcome.SKIPPED
        self._count(Metric.RETRIES)
        return DeliveryOutcome.RETRY

    def _poison(self, record: SQSRecord, error: str) -> None:
        attributes = {
            "MessageGroupId": record.attributes.message_group_id or "",
            "MessageDeduplicationId": record.attributes.message_deduplication_id or "",
            "ApproximateReceiveCount": record.attributes.approximate_receive_count,
        }
        logger.error("poison pill %s: %s", record.message_id, error)
        self.inbox.record_poison(record.message_id, record.body or "", error, attributes)
        self._count(Metric.POISON_PILLS)

    def _count(self, metric: Metric) -> None:
        if self.metrics is not None:
            self.metrics.add_metric(name=metric.value, unit="Count", value=1)
