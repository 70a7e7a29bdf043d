"""The direct path of a DynamoDB-only subscription: run with no claim, commit the writes with a marker.

Taken only where no history can exist yet (a first receive, not a repair, young enough that a missing row
proves the pair never completed): the handler runs with no claim, then its writes commit with a completion
marker that requires the pair to have no row, one request on the happy path. A crash before the commit leaves
nothing (the handler's only effects are the writes it returned), so the redelivery runs it again, under a
lease. Any history it meets (a failed attempt, a replay, a lease) hands the pair to the lease path.

The ordered gate (``outbox.delivery.ordered``) commits an ordered subscription's next event the same way, with
the watermark's move in the same transaction (``commit``'s ``order``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from outbox.delivery.attempts import Attempts
from outbox.delivery.lease import LeasePath
from outbox.delivery.path import DeliveryOutcome, Metric, Pair, RemainingMs, is_terminal_completion
from outbox.envelope import Envelope
from outbox.exceptions import CallerWriteConditionFailedError, WatermarkMovedError
from outbox.inbox import COMPLETED, DEAD, Claim
from outbox.inbox.rows import same_content
from outbox.observing import AROUND, observed
from outbox.subscriptions import Effects, HandlerResult, Subscription

logger = logging.getLogger(__name__)


class DirectPath:
    """One request per effect on the happy path; the lease path for everything else."""

    def __init__(self, attempts: Attempts, lease: LeasePath) -> None:
        self.attempts = attempts
        self.inbox = attempts.inbox
        self.lease = lease

    @staticmethod
    def takes(pair: Pair) -> bool:
        """Directly only where no history can exist yet: a first receive, not a repair (which left a row), and
        young enough that a missing row proves the pair never completed."""
        return (
            pair.subscription.effects is Effects.DYNAMODB
            and pair.receive_count == 1
            and pair.may_create
            and not pair.repair
        )

    def deliver(self, pair: Pair, remaining_ms: RemainingMs) -> DeliveryOutcome:
        if self.takes(pair):
            outcome = self._run_unclaimed(pair, remaining_ms)
            if outcome is not None:
                return outcome
            if self.attempts.lacks_time(pair.subscription, remaining_ms, pair.log):
                return DeliveryOutcome.RETRY  # the run took the time a second one needs: not started
        return self.lease.deliver(pair, remaining_ms)

    @observed(AROUND["run_directly"])
    def _run_unclaimed(self, pair: Pair, remaining_ms: RemainingMs) -> DeliveryOutcome | None:
        """Run and commit; None when the pair has history (the lease path decides). A failure is claimed after
        the fact, so attempts are counted and dead letters earned as on the lease path."""
        envelope, subscription, digest = pair.envelope, pair.subscription, pair.digest
        try:
            handler_result = self.attempts.run_handler(pair, pair.key, 1, remaining_ms)
        except Exception as exc:  # a handler may raise anything: classify it, never lose it
            return self.failed(envelope, subscription, exc, remaining_ms, digest, terminal=None)
        try:
            existing = self.commit(envelope, subscription, handler_result, digest)
        except Exception as exc:  # every completion failure is classified, as on the lease path
            terminal = is_terminal_completion(exc)
            return self.failed(envelope, subscription, exc, remaining_ms, digest, terminal=terminal)
        if existing is None:
            self.attempts.count(Metric.COMPLETIONS)
            return DeliveryOutcome.COMPLETED
        if not same_content(existing, envelope, digest):  # an older engine's row holds an older digest
            return self.attempts.conflict(envelope, subscription, existing, 1)
        if existing.get("status", {}).get("S") in (COMPLETED, DEAD):
            logger.info("skipped %s: a duplicate delivery", subscription.name, extra={"event_id": envelope.id})
            self.attempts.count(Metric.SKIPS)
            return DeliveryOutcome.SKIPPED
        return None

    @observed(AROUND["commit_directly"])
    def commit(
        self,
        envelope: Envelope,
        subscription: Subscription,
        result: HandlerResult,
        digest: str,
        order: Sequence[Mapping[str, Any]] = (),
    ) -> dict[str, Any] | None:
        """The marker, ``order`` (an ordered subscription's watermark moved to this event) and the writes (and
        the follow-up, through emit) in one transaction; None once committed, else the row that stopped the
        marker. ``WatermarkMovedError`` when the watermark is not as read."""
        marker = self.inbox.completion_marker(envelope, subscription.name, digest)
        if result.follow_up is None:
            return self.inbox.complete_directly(marker, result.writes, order)
        try:
            self.attempts.emit_follow_up(envelope, subscription, result, [marker, *order, *result.writes])
        except CallerWriteConditionFailedError as exc:
            if exc.index == 0:  # the marker: the pair has a row; the lease path reads and decides
                return {}
            if 0 < exc.index <= len(order):
                raise WatermarkMovedError(f"the watermark of {subscription.name} moved") from exc
            raise
        return None

    @observed(AROUND["fail_directly"])
    def failed(
        self,
        envelope: Envelope,
        subscription: Subscription,
        exc: BaseException,
        remaining_ms: RemainingMs,
        digest: str,
        terminal: bool | None,
    ) -> DeliveryOutcome:
        """A direct run failed: claim the pair now (counting the attempt), then release it or mark it dead,
        exactly as a failure under a lease. The one write of the failure path."""
        pair = Pair(envelope, subscription, 1, digest)
        claimed = self.attempts.claim(pair, remaining_ms, may_create=True)
        if not isinstance(claimed, Claim):
            return claimed  # another worker completed it, holds it, or it conflicts: as the claim says
        return self.attempts.failed(claimed, envelope, subscription, exc, 1, terminal=terminal)
