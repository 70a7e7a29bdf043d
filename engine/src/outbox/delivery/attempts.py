"""What every delivery path does the same way: claim a pair, run its handler, record how an attempt ended.

The lease path claims before it runs, the direct path after a failure, the ordered gate before it places the
pair: all through ``Attempts.claim``, so a conflict, an event older than the inbox remembers and a live lease
elsewhere are answered alike. A failure is classified once (``Attempts.failed``): dead at once when no retry can
help, dead when the claim's attempts are used up, else released for the next receive.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from outbox.delivery.path import DeliveryOutcome, Metric, Pair, RemainingMs, checked_result
from outbox.delivery.timing import RUN_MARGIN_MS, LeasePolicy, RunTimes
from outbox.envelope import Envelope
from outbox.exceptions import ContractViolationError, LeaseLostError, TerminalError
from outbox.inbox import Claim, ClaimOutcome, DeadReason, Inbox
from outbox.observing import AROUND, Moment, observed, point
from outbox.redaction import ErrorDetail, describe_failure
from outbox.store import EventStore
from outbox.subscriptions import Delivery, HandlerResult, Subscription
from outbox.tracing import attempt_of_pair, current_pair

logger = logging.getLogger(__name__)


class Attempts:
    """The inbox, the store and the time of one consumer, as every path uses them."""

    def __init__(
        self,
        inbox: Inbox,
        store: EventStore,
        *,
        lease_policy: LeasePolicy,
        metrics: Any | None,
        error_detail: ErrorDetail,
        times: RunTimes,
    ) -> None:
        self.inbox = inbox
        self.store = store
        self.lease_policy = lease_policy
        self.metrics = metrics
        self.error_detail = error_detail
        self.times = times

    def lacks_time(self, subscription: Subscription, remaining_ms: RemainingMs, log: Mapping[str, Any]) -> bool:
        """Whether a run of ``subscription`` would not fit in what is left of the invocation (``RunTimes``):
        logged and counted, for the caller to answer RETRY (the message comes back with its group, no attempt
        spent). Asked before a pair's first run, and again before a second run in the same invocation (a
        direct run whose commit found history, or a watermark that moved)."""
        if self.times.has_time_for(subscription, remaining_ms):
            return False
        logger.info(
            "not starting %s with %d ms left: it comes back with the rest of its group",
            subscription.name,
            remaining_ms(),
            extra=dict(log),
        )
        self.count(Metric.NO_TIME_LEFT)
        return True

    @observed(AROUND["run"])
    def run_handler(self, pair: Pair, key: str, attempt: int, remaining_ms: RemainingMs) -> HandlerResult:
        """The subscription's handler on the delivered envelope; its run's time is remembered (``RunTimes``)."""
        subscription = pair.subscription
        started_ms = remaining_ms()
        try:
            delivery = Delivery(self.delivered(pair.envelope), subscription.name, key, attempt, remaining_ms)
            with attempt_of_pair(attempt):
                if subscription.cannot_bind is None:  # the handler's own code starts (a fault point's moment)
                    point(Moment.HANDLER_STARTS, self, pair=pair, delivery=delivery)
                return checked_result(subscription, subscription.run(delivery))
        finally:
            self.times.note_run(subscription, started_ms, remaining_ms())

    def delivered(self, envelope: Envelope) -> Envelope:
        """What a handler receives: a copy per handler (what one does to the payload, the next never sees),
        its payload brought to the type's current version by the catalog's upcasters. The envelope keeps the
        version it was stored as, and its hash covers the stored payload. Raised here, an upcaster's error
        (or a version newer than the catalog knows, ``SchemaVersionUnknownError``) is the handler's failure."""
        copy = envelope.handler_copy()
        catalog = self.store.catalog
        if catalog is None:
            return copy
        payload = catalog.delivered_payload(envelope.type, envelope.schema_version, copy.payload)
        return copy if payload is copy.payload else copy.model_copy(update={"payload": payload})

    def claim(
        self, pair: Pair, remaining_ms: RemainingMs, *, may_create: bool | None = None
    ) -> Claim | DeliveryOutcome:
        """The claim this worker now holds, or the outcome when it may not run the pair (recorded here)."""
        envelope, subscription = pair.envelope, pair.subscription
        lease = self.lease_policy.lease_for(remaining_ms())
        creates = pair.may_create if may_create is None else may_create
        result = self.inbox.claim(
            envelope, subscription.name, lease, pair.digest, may_create=creates, budget_ms=remaining_ms()
        )
        if result.outcome is ClaimOutcome.CONFLICT:
            return self.conflict(envelope, subscription, result.existing or {}, pair.receive_count)
        if result.outcome is ClaimOutcome.UNVERIFIABLE:
            return self._unverifiable(pair)
        if result.outcome is ClaimOutcome.IN_PROGRESS:
            # Another worker holds a live lease. The handler is skipped, but the message is NOT
            # acknowledged: if that worker has crashed, this message may be the only copy left, and
            # deleting it would lose the effect. It comes back after the visibility timeout, by when
            # the claim is completed (skip) or its lease has expired (take-over).
            logger.info("skipped %s for now: in progress elsewhere", subscription.name, extra=pair.log)
            self.count(Metric.SKIPS)
            return DeliveryOutcome.RETRY
        if result.claim is None:
            logger.info("skipped %s: %s", subscription.name, result.outcome.value, extra=pair.log)
            self.count(Metric.SKIPS)
            return DeliveryOutcome.SKIPPED
        self.count(Metric.CLAIMS)
        if result.claim.unfinished_with_ms is not None:
            return self._after_unfinished(result.claim, pair, remaining_ms)
        return result.claim

    def _after_unfinished(self, claim: Claim, pair: Pair, remaining_ms: RemainingMs) -> Claim | DeliveryOutcome:
        """The previous attempt started with ``claim.unfinished_with_ms`` of its invocation left and never ended:
        the deadline cut it off, or its worker died. A container that timed out is replaced, and what it learnt of
        the handler's time with it, so the claim row is where this is remembered.

        An attempt that started with less than a whole invocation left (other records of its batch, most likely
        other tenants', had taken the rest) is forgiven, once, by the claim that runs the pair again: one tenant's
        work never costs another its attempts. That claim needs more time than the unfinished attempt had; until
        one has it, each comes back with its group, its own attempt given back."""
        had = claim.unfinished_with_ms or 0
        whole = self.times.invocation_budget_ms()
        if whole is None or had + RUN_MARGIN_MS >= whole:
            return claim  # that attempt had a whole invocation: it counts, and no invocation has more time
        try:
            if remaining_ms() > had + RUN_MARGIN_MS:
                return self.inbox.forgive(claim)
            # Its own attempt given back, and the unfinished one kept for the claim that will run it.
            why = f"its last attempt did not end with {had} ms left; it runs with more"
            self.inbox.release(claim, why, 1, still_unfinished=had)
        except LeaseLostError:
            self.count(Metric.LEASES_LOST)
            return DeliveryOutcome.RETRY
        logger.info(
            "not running %s with %d ms left: its last attempt had %d ms and did not end",
            pair.subscription.name,
            remaining_ms(),
            had,
            extra=pair.log,
        )
        self.count(Metric.NO_TIME_LEFT)
        return DeliveryOutcome.RETRY

    def conflict(
        self, envelope: Envelope, subscription: Subscription, existing: Mapping[str, Any], receive_count: int
    ) -> DeliveryOutcome:
        log = {"event_id": envelope.id, "subscription": subscription.name, "tenant": envelope.tenant}
        logger.error("event %s conflicts with the content already claimed", envelope.id, extra=log)
        current_pair().outcome("conflict")
        self.inbox.record_conflict(envelope, subscription.name, existing, receive_count)
        self.count(Metric.CONFLICTS)
        return DeliveryOutcome.DEAD

    def _unverifiable(self, pair: Pair) -> DeliveryOutcome:
        if not self.inbox.mark_unverifiable(pair.envelope, pair.subscription.name, pair.digest, pair.receive_count):
            return DeliveryOutcome.RETRY  # a row appeared meanwhile: decide again on the next receive
        logger.error("not running %s: older than the inbox remembers", pair.subscription.name, extra=pair.log)
        self.count(Metric.DEAD_LETTERS)
        return DeliveryOutcome.DEAD

    def failed(
        self,
        claim: Claim,
        envelope: Envelope,
        subscription: Subscription,
        exc: BaseException,
        receive_count: int,
        terminal: bool | None = None,
    ) -> DeliveryOutcome:
        """Dead at once when no retry can help; dead when the claim's attempts are used up; else released
        for the next receive."""
        error = describe_failure(exc, self.error_detail)
        if terminal is None:
            terminal = isinstance(exc, TerminalError | ContractViolationError) or (
                subscription.terminal_on_validation_error and isinstance(exc, ValidationError)
            )
        exhausted = claim.attempts >= self.inbox.max_attempts
        log = {"event_id": envelope.id, "subscription": subscription.name, "attempt": claim.attempts}
        try:
            if terminal or exhausted:
                reason = DeadReason.TERMINAL if terminal else DeadReason.EXHAUSTED
                logger.error("dead-lettering %s (%s): %s", claim.idempotency_key, reason.value, error, extra=log)
                self.inbox.mark_dead(claim, envelope, error, type(exc).__name__, reason, receive_count)
                self.count(Metric.DEAD_LETTERS)
                # The dead letter is the record of it now: the message is acknowledged, and only a replay
                # (which targets this pair alone) runs it again.
                return DeliveryOutcome.DEAD
            logger.warning("retrying %s after: %s", claim.idempotency_key, error, extra=log)
            self.inbox.release(claim, error)
        except LeaseLostError:
            logger.warning("lost the lease on %s while recording a failure", claim.idempotency_key, extra=log)
            self.count(Metric.LEASES_LOST)
            return DeliveryOutcome.RETRY  # as above: the next receive sees what the new owner did
        self.count(Metric.RETRIES)
        return DeliveryOutcome.RETRY

    def emit_follow_up(
        self, envelope: Envelope, subscription: Subscription, result: HandlerResult, completion: list[Any]
    ) -> None:
        """The follow-up event, committed with ``completion`` (the completion first, then the handler's writes)."""
        assert result.follow_up is not None
        self.store.emit(
            result.follow_up.event_type,
            result.follow_up.payload,
            tenant=envelope.tenant,
            actor=f"subscription:{subscription.name}",
            correlation_id=envelope.correlation_id,
            causation_id=envelope.id,
            extra_writes=completion,
        )

    def count(self, metric: Metric) -> None:
        if self.metrics is not None:
            self.metrics.add_metric(name=metric.value, unit="Count", value=1)
