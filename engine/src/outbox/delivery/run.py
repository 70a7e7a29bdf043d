"""One pair's run: the transitions a delivery takes, each recorded in the inbox and told to observers.

A path (``lease``, ``direct``, ``ordered``, ``workflow``) is a strategy over a ``Run``: it chooses which transitions
to take and in what order, and never calls another path. The run takes them the same way whoever asks, so a claim,
a failure, a conflict, a commit and a dead letter mean one thing on every path:

- ``claim`` (and ``claim_to_run``: out of an order the deployed catalog no longer routes the pair through): the
  lease-claim write, or the outcome that says why the pair may not run here (done, held, a conflict, too old);
- ``run_handler``: the subscription's handler on the delivered envelope, its time remembered;
- ``commit`` (under the claim's lease) or ``commit_directly`` (no claim: a completion marker that requires the pair
  to have no row), each with the handler's writes, its follow-up and an ordered subscription's watermark;
- ``fail`` (a claimed run) or ``fail_unclaimed`` (a direct run, claimed after the fact): dead at once when no retry
  can help, dead when the claim's attempts are used up, else released for the next receive;
- ``under_lease``: claim, run, commit, the sequence every pair can take.

``outbox.delivery.runs.Runs`` is what every run of one consumer shares (the inbox, the store, the lease policy, the
invocation's time).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from pydantic import ValidationError

from outbox.delivery.observers import Told
from outbox.delivery.path import (
    DeliveryOutcome,
    Pair,
    RemainingMs,
    UnfinishedAttemptsError,
    checked_result,
    is_terminal_completion,
)
from outbox.delivery.timing import RUN_MARGIN_MS, LeasePolicy
from outbox.exceptions import (
    CallerWriteConditionFailedError,
    ContractViolationError,
    LeaseLostError,
    TerminalError,
    WatermarkMovedError,
)
from outbox.inbox import Claim, ClaimOutcome, DeadReason
from outbox.log.envelope import Envelope
from outbox.observing import AROUND, Moment, observed, point
from outbox.redaction import describe_failure
from outbox.subscriptions import Delivery, HandlerResult, Subscription
from outbox.tracing import attempt_of_pair, current_pair

if TYPE_CHECKING:
    from outbox.delivery.runs import Runs

# How often a write conditioned on an order's watermark looks again when another writer moved it meanwhile.
ORDER_RACE_LOOKS = 3

T = TypeVar("T")


class DeliveryPath(Protocol):
    """A way to run a pair (the lease path, the direct path, the ordered gate, the workflow path): a strategy over
    its ``Run``, which takes the transitions it chooses."""

    def deliver(self, run: Run) -> DeliveryOutcome: ...


class Run:
    """One pair's run in one invocation (``remaining_ms``: what is left of it), with what every run of its
    consumer shares (``runs``)."""

    def __init__(self, pair: Pair, remaining_ms: RemainingMs, runs: Runs) -> None:
        self.pair = pair
        self.remaining_ms = remaining_ms
        self.runs = runs
        self.inbox = runs.inbox

    @property
    def envelope(self) -> Envelope:
        return self.pair.envelope

    @property
    def subscription(self) -> Subscription:
        return self.pair.subscription

    @property
    def lease_policy(self) -> LeasePolicy:
        return self.runs.lease_policy

    def tell(self, told: Told, **facts: Any) -> None:
        """Tell the consumer's observers of an outcome of this pair's run (``Runs.tell``), with the pair's log keys."""
        self.runs.tell(told, self.pair.log, **facts)

    def lacks_time(self) -> bool:
        """Whether a run would not fit in what is left of the invocation (``Runs.lacks_time``)."""
        return self.runs.lacks_time(self.subscription, self.remaining_ms, self.pair.log)

    # -- the claim ------------------------------------------------------------------------------------------

    def claim(self, *, may_create: bool | None = None) -> Claim | DeliveryOutcome:
        """The claim this worker now holds, or the outcome when it may not run the pair (recorded here)."""
        pair, subscription, remaining_ms = self.pair, self.subscription, self.remaining_ms
        lease = self.lease_policy.lease_for(remaining_ms())
        creates = pair.may_create if may_create is None else may_create
        result = self.inbox.claim(
            pair.envelope, subscription.name, lease, pair.digest, may_create=creates, budget_ms=remaining_ms()
        )
        if result.outcome is ClaimOutcome.CONFLICT:
            return self.conflict(result.existing or {}, pair.receive_count)
        if result.outcome is ClaimOutcome.UNVERIFIABLE:
            return self._unverifiable()
        if result.outcome is ClaimOutcome.IN_PROGRESS:
            # Another worker holds a live lease. The handler is skipped, but the message is NOT
            # acknowledged: if that worker has crashed, this message may be the only copy left, and
            # deleting it would lose the effect. It comes back after the visibility timeout, by when
            # the claim is completed (skip) or its lease has expired (take-over).
            self.runs.tell(Told.HELD_ELSEWHERE, pair.log, subscription=subscription.name)
            return DeliveryOutcome.RETRY
        if result.claim is None:
            self.runs.tell(Told.DONE_ALREADY, pair.log, subscription=subscription.name, outcome=result.outcome.value)
            return DeliveryOutcome.SKIPPED
        self.runs.tell(Told.CLAIMED, pair.log)
        if result.claim.unfinished_with_ms is not None:
            return self._after_unfinished(result.claim)
        return result.claim

    def _after_unfinished(self, claim: Claim) -> Claim | DeliveryOutcome:
        """The previous attempt started with ``claim.unfinished_with_ms`` of its invocation left and never ended:
        the deadline cut it off, or its worker died. A container that timed out is replaced, and what it learnt of
        the handler's time with it, so the claim row is where this is remembered.

        An attempt that started with less than a whole invocation left (other records of its batch, most likely
        other tenants', had taken the rest) is forgiven, once, by the claim that runs the pair again: one tenant's
        work never costs another its attempts. That claim needs more time than the unfinished attempt had; until
        one has it, each comes back with its group, its own attempt given back."""
        had = claim.unfinished_with_ms or 0
        whole = self.runs.times.invocation_budget_ms()
        if whole is None or had + RUN_MARGIN_MS >= whole:
            return claim  # that attempt had a whole invocation: it counts, and no invocation has more time
        try:
            if self.remaining_ms() > had + RUN_MARGIN_MS:
                return self.inbox.forgive(claim)
            # Its own attempt given back, and the unfinished one kept for the claim that will run it.
            why = f"its last attempt did not end with {had} ms left; it runs with more"
            self.inbox.release(claim, why, 1, still_unfinished=had)
        except LeaseLostError:
            self.runs.tell(Told.LEASE_LOST, self.pair.log)
            return DeliveryOutcome.RETRY
        left = self.remaining_ms()
        self.runs.tell(
            Told.UNFINISHED_WAITS, self.pair.log, subscription=self.subscription.name, remaining_ms=left, had=had
        )
        return DeliveryOutcome.RETRY

    def conflict(self, existing: Mapping[str, Any], receive_count: int) -> DeliveryOutcome:
        """The pair's row holds another content than this delivery's: a conflict dead letter, never a run."""
        envelope, subscription = self.envelope, self.subscription
        log = {"event_id": envelope.id, "subscription": subscription.name, "tenant": envelope.tenant}
        current_pair().outcome("conflict")
        self.inbox.record_conflict(envelope, subscription.name, existing, receive_count)
        self.runs.tell(Told.CONFLICT, log, event_id=envelope.id)
        return DeliveryOutcome.DEAD

    def _unverifiable(self) -> DeliveryOutcome:
        pair = self.pair
        if not self.inbox.mark_unverifiable(pair.envelope, pair.subscription.name, pair.digest, pair.receive_count):
            return DeliveryOutcome.RETRY  # a row appeared meanwhile: decide again on the next receive
        self.runs.tell(Told.UNVERIFIABLE, pair.log, subscription=pair.subscription.name)
        return DeliveryOutcome.DEAD

    def claim_to_run(self) -> Claim | DeliveryOutcome:
        """The pair's claim, out of any order it was deferred in, ready to run (its handler, or its workflow's
        start); else the outcome that says why not (done already, held by a live lease, the order moved)."""
        claimed = self.claim()
        if not isinstance(claimed, Claim) or claimed.waits_for is None:
            return claimed
        return self.leave_order(claimed)

    def leave_order(self, claim: Claim) -> Claim | DeliveryOutcome:
        """A pair deferred in an order the deployed catalog no longer routes it through (``outbox.pairs``: DEFERRED,
        UNORDERED), claimed to run the unordered way: its deferred row leaves the order and the watermark's count
        goes down with it, before it runs (a crash after this leaves the message to come back and run it; a crash
        before, the row for the next claim to take out). RETRY when the order kept moving under it."""
        for _ in range(ORDER_RACE_LOOKS):
            items = self.runs.order.release_items(claim.tenant, claim.subscription, self.envelope.seq)
            try:
                return self.inbox.leave_order(claim, items)
            except WatermarkMovedError:
                continue
            except LeaseLostError:
                self.runs.tell(Told.LEASE_LOST, self.pair.log)
                return DeliveryOutcome.RETRY
        self.inbox.release(claim, "its order kept moving while it left it; it runs on the next receive", 1)
        return DeliveryOutcome.RETRY

    def unfinished(self, claim: Claim) -> DeliveryOutcome | None:
        """Dead, unrun, when every allowed attempt started and none ended (a crash or a timeout each time)."""
        if claim.attempts > self.inbox.max_attempts:
            crashed = UnfinishedAttemptsError(f"{claim.attempts - 1} attempts ended without an answer (crash, timeout)")
            return self.fail(claim, crashed, terminal=False)
        return None

    # -- the handler ------------------------------------------------------------------------------------------

    @observed(AROUND["run"])
    def run_handler(self, key: str, attempt: int) -> HandlerResult:
        """The subscription's handler on the delivered envelope; its run's time is remembered (``RunTimes``)."""
        subscription, remaining_ms = self.subscription, self.remaining_ms
        started_ms = remaining_ms()
        try:
            delivery = Delivery(self.runs.delivered(self.envelope), subscription.name, key, attempt, remaining_ms)
            with attempt_of_pair(attempt):
                if subscription.cannot_bind is None:  # the handler's own code starts (a fault point's moment)
                    point(Moment.HANDLER_STARTS, self, pair=self.pair, delivery=delivery)
                return checked_result(subscription, subscription.run(delivery))
        finally:
            self.runs.times.note_run(subscription, started_ms, remaining_ms())

    def run_and_commit(self, claim: Claim, commit: Callable[[HandlerResult], T]) -> T | DeliveryOutcome:
        """Run a claimed pair's handler, then ``commit`` it with the handler's result: what ``commit`` returned,
        or the outcome of a failure (classified and recorded here)."""
        unfinished = self.unfinished(claim)
        if unfinished is not None:
            return unfinished
        try:
            handler_result = self.run_handler(claim.idempotency_key, claim.attempts)
        except Exception as exc:  # a handler may raise anything: classify it, never lose it
            return self.fail(claim, exc)
        try:
            done = commit(handler_result)
        except LeaseLostError:
            # The new owner may have died since: the message comes back, and the inbox decides then (done,
            # or a take-over). Acknowledging it here would rely on SQS keeping a message deleted with a
            # receipt handle from an older receive, which FIFO queues do not promise.
            self.runs.tell(Told.LEASE_LOST_BEFORE_COMPLETING, self.pair.log, key=claim.idempotency_key)
            return DeliveryOutcome.RETRY
        except Exception as exc:  # every completion failure is classified
            return self.fail(claim, exc, terminal=is_terminal_completion(exc))
        self.runs.tell(Told.COMPLETED, self.pair.log)
        return done

    def under_lease(self) -> DeliveryOutcome:
        """Claim, run, commit: the sequence every pair can take (a first delivery, a redelivery after a crash, a
        replay, and whatever another way of running hands back)."""
        claim = self.claim_to_run()
        if isinstance(claim, DeliveryOutcome):
            return claim
        done = self.run_and_commit(claim, lambda result: self.commit(claim, result))
        return DeliveryOutcome.COMPLETED if done is None else done

    # -- the commit ---------------------------------------------------------------------------------------

    @observed(AROUND["commit"])
    def commit(self, claim: Claim, result: HandlerResult, order: Sequence[Mapping[str, Any]] = ()) -> None:
        """The COMPLETED mark (fenced by the claim's owner), the handler's writes and follow-up, and ``order``
        (an ordered subscription's watermark) in one transaction."""
        if result.follow_up is None:
            self.inbox.mark_completed(claim, result.writes, order)
            return
        completion = [*self.inbox.completion_writes(claim), *map(dict, order)]
        try:
            self._emit_follow_up(result, [*completion, *result.writes])
        except CallerWriteConditionFailedError as exc:
            if exc.index == 0:  # the completion mark: our fencing token no longer holds
                raise LeaseLostError(claim.event_id, claim.subscription, "complete") from exc
            if order and exc.index == len(completion) - len(order):  # the watermark
                raise WatermarkMovedError(f"the watermark of {self.subscription.name} moved") from exc
            raise

    @observed(AROUND["commit_directly"])
    def commit_directly(self, result: HandlerResult, order: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any] | None:
        """With no claim: a completion marker that requires the pair to have no row, ``order`` (an ordered
        subscription's watermark moved to this event) and the writes (and the follow-up, through emit) in one
        transaction; None once committed, else the row that stopped the marker. ``WatermarkMovedError`` when the
        watermark is not as read."""
        marker = self.inbox.completion_marker(self.envelope, self.subscription.name, self.pair.digest)
        if result.follow_up is None:
            return self.inbox.complete_directly(marker, result.writes, order)
        try:
            self._emit_follow_up(result, [marker, *order, *result.writes])
        except CallerWriteConditionFailedError as exc:
            if exc.index == 0:  # the marker: the pair has a row; the lease path reads and decides
                return {}
            if 0 < exc.index <= len(order):
                raise WatermarkMovedError(f"the watermark of {self.subscription.name} moved") from exc
            raise
        return None

    def _emit_follow_up(self, result: HandlerResult, completion: list[Any]) -> None:
        """The follow-up event, committed with ``completion`` (the completion first, then the handler's writes)."""
        assert result.follow_up is not None
        envelope = self.envelope
        self.runs.store.emit(
            result.follow_up.event_type,
            result.follow_up.payload,
            tenant=envelope.tenant,
            actor=f"subscription:{self.subscription.name}",
            correlation_id=envelope.correlation_id,
            causation_id=envelope.id,
            extra_writes=completion,
        )

    # -- a failure ----------------------------------------------------------------------------------------

    def fail(self, claim: Claim, exc: BaseException, terminal: bool | None = None) -> DeliveryOutcome:
        """Dead at once when no retry can help; dead when the claim's attempts are used up; else released
        for the next receive."""
        subscription, receive_count = self.subscription, self.pair.receive_count
        error = describe_failure(exc, self.runs.error_detail)
        if terminal is None:
            terminal = isinstance(exc, TerminalError | ContractViolationError) or (
                subscription.terminal_on_validation_error and isinstance(exc, ValidationError)
            )
        exhausted = claim.attempts >= self.inbox.max_attempts
        log = {"event_id": self.envelope.id, "subscription": subscription.name, "attempt": claim.attempts}
        try:
            if terminal or exhausted:
                reason = DeadReason.TERMINAL if terminal else DeadReason.EXHAUSTED
                self.inbox.mark_dead(claim, self.envelope, error, type(exc).__name__, reason, receive_count)
                self.runs.tell(Told.DEAD, log, key=claim.idempotency_key, reason=reason.value, error=error)
                # The dead letter is the record of it now: the message is acknowledged, and only a replay
                # (which targets this pair alone) runs it again.
                return DeliveryOutcome.DEAD
            self.inbox.release(claim, error)
        except LeaseLostError:
            self.runs.tell(Told.LEASE_LOST_RECORDING_FAILURE, log, key=claim.idempotency_key)
            return DeliveryOutcome.RETRY  # as above: the next receive sees what the new owner did
        self.runs.tell(Told.RETRYING, log, key=claim.idempotency_key, error=error)
        return DeliveryOutcome.RETRY

    @observed(AROUND["fail_directly"])
    def fail_unclaimed(self, exc: BaseException, terminal: bool | None) -> DeliveryOutcome:
        """A run with no claim failed: claim the pair now (counting the attempt), then release it or mark it dead,
        exactly as a failure under a lease. The one write of the failure path."""
        claimed = self.claim(may_create=True)
        if not isinstance(claimed, Claim):
            return claimed  # another worker completed it, holds it, or it conflicts: as the claim says
        return self.fail(claimed, exc, terminal=terminal)
