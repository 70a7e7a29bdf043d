"""The lease path: claim the pair, run its handler, complete it (or release it, or dead-letter it).

Every pair can take it: a first delivery, a redelivery after a crash (the expired lease is taken over), a
replay (the REPLAYING row is claimed), and the pairs the direct path and the ordered gate hand over. The
completion is fenced by the claim's owner: a worker whose lease was taken over completes nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any, TypeVar

from outbox.delivery.attempts import Attempts
from outbox.delivery.path import (
    DeliveryOutcome,
    Metric,
    Pair,
    RemainingMs,
    UnfinishedAttemptsError,
    is_terminal_completion,
)
from outbox.envelope import Envelope
from outbox.exceptions import CallerWriteConditionFailedError, LeaseLostError, WatermarkMovedError
from outbox.inbox import Claim
from outbox.observing import AROUND, observed
from outbox.subscriptions import HandlerResult, Subscription

if TYPE_CHECKING:
    from outbox.ordering import OrderBook

logger = logging.getLogger(__name__)

# How often a write conditioned on an order's watermark looks again when another writer moved it meanwhile.
ORDER_RACE_LOOKS = 3

T = TypeVar("T")


class LeasePath:
    """Claim, run, complete: the outcome of one (event, subscription)."""

    def __init__(self, attempts: Attempts) -> None:
        self.attempts = attempts
        self.inbox = attempts.inbox

    @cached_property
    def order(self) -> OrderBook:
        """The ordered subscriptions' rows (``outbox.ordering``): imported only once a pair needs them, so that a
        consumer whose catalog orders nothing does not load them at its cold start."""
        from outbox.ordering import OrderBook

        store = self.attempts.store
        return OrderBook(self.inbox.table_name, store.table_name, client=self.inbox.client, clock=self.inbox.clock)

    def deliver(self, pair: Pair, remaining_ms: RemainingMs) -> DeliveryOutcome:
        claim = self.claim_to_run(pair, remaining_ms)
        if isinstance(claim, DeliveryOutcome):
            return claim
        done = self.run_and_complete(
            claim, pair, remaining_ms, lambda result: self.complete(claim, pair.envelope, pair.subscription, result)
        )
        return DeliveryOutcome.COMPLETED if done is None else done

    def claim_to_run(self, pair: Pair, remaining_ms: RemainingMs) -> Claim | DeliveryOutcome:
        """The pair's claim, out of any order it was deferred in, ready to run (its handler, or its workflow's
        start); else the outcome that says why not (done already, held by a live lease, the order moved)."""
        claimed = self.attempts.claim(pair, remaining_ms)
        if not isinstance(claimed, Claim) or claimed.waits_for is None:
            return claimed
        return self.leave_order(claimed, pair)

    def unfinished(self, claim: Claim, pair: Pair) -> DeliveryOutcome | None:
        """Dead, unrun, when every allowed attempt started and none ended (a crash or a timeout each time)."""
        if claim.attempts > self.inbox.max_attempts:
            crashed = UnfinishedAttemptsError(f"{claim.attempts - 1} attempts ended without an answer (crash, timeout)")
            envelope, subscription = pair.envelope, pair.subscription
            return self.attempts.failed(claim, envelope, subscription, crashed, pair.receive_count, terminal=False)
        return None

    def leave_order(self, claim: Claim, pair: Pair) -> Claim | DeliveryOutcome:
        """A pair deferred in an order the deployed catalog no longer routes it through (``outbox.pairs``: DEFERRED,
        UNORDERED), claimed to run the unordered way: its deferred row leaves the order and the watermark's count
        goes down with it, before it runs (a crash after this leaves the message to come back and run it; a crash
        before, the row for the next claim to take out). RETRY when the order kept moving under it."""
        for _ in range(ORDER_RACE_LOOKS):
            items = self.order.release_items(claim.tenant, claim.subscription, pair.envelope.seq)
            try:
                return self.inbox.leave_order(claim, items)
            except WatermarkMovedError:
                continue
            except LeaseLostError:
                self.attempts.count(Metric.LEASES_LOST)
                return DeliveryOutcome.RETRY
        self.inbox.release(claim, "its order kept moving while it left it; it runs on the next receive", 1)
        return DeliveryOutcome.RETRY

    def run_and_complete(
        self, claim: Claim, pair: Pair, remaining_ms: RemainingMs, complete: Callable[[HandlerResult], T]
    ) -> T | DeliveryOutcome:
        """Run a claimed pair's handler, then ``complete`` it with the handler's result: what ``complete``
        returned, or the outcome of a failure (classified and recorded here)."""
        envelope, subscription, receive_count = pair.envelope, pair.subscription, pair.receive_count
        unfinished = self.unfinished(claim, pair)
        if unfinished is not None:
            return unfinished
        try:
            handler_result = self.attempts.run_handler(pair, claim.idempotency_key, claim.attempts, remaining_ms)
        except Exception as exc:  # a handler may raise anything: classify it, never lose it
            return self.attempts.failed(claim, envelope, subscription, exc, receive_count)
        try:
            done = complete(handler_result)
        except LeaseLostError:
            # The new owner may have died since: the message comes back, and the inbox decides then (done,
            # or a take-over). Acknowledging it here would rely on SQS keeping a message deleted with a
            # receipt handle from an older receive, which FIFO queues do not promise.
            logger.warning("lost the lease on %s before completing; the new owner finishes it", claim.idempotency_key)
            self.attempts.count(Metric.LEASES_LOST)
            return DeliveryOutcome.RETRY
        except Exception as exc:  # every completion failure is classified
            terminal = is_terminal_completion(exc)
            return self.attempts.failed(claim, envelope, subscription, exc, receive_count, terminal=terminal)
        self.attempts.count(Metric.COMPLETIONS)
        return done

    @observed(AROUND["commit"])
    def complete(
        self,
        claim: Claim,
        envelope: Envelope,
        subscription: Subscription,
        result: HandlerResult,
        order: Sequence[Mapping[str, Any]] = (),
    ) -> None:
        """The COMPLETED mark (fenced by the claim's owner), the handler's writes and follow-up, and ``order``
        (an ordered subscription's watermark) in one transaction."""
        if result.follow_up is None:
            self.inbox.mark_completed(claim, result.writes, order)
            return
        completion = [*self.inbox.completion_writes(claim), *map(dict, order)]
        try:
            self.attempts.emit_follow_up(envelope, subscription, result, [*completion, *result.writes])
        except CallerWriteConditionFailedError as exc:
            if exc.index == 0:  # the completion mark: our fencing token no longer holds
                raise LeaseLostError(claim.event_id, claim.subscription, "complete") from exc
            if order and exc.index == len(completion) - len(order):  # the watermark
                raise WatermarkMovedError(f"the watermark of {subscription.name} moved") from exc
            raise
