"""What the simulator observes while the pipeline runs, recorded through the engine's seams.

- Claims and fenced writes: ``Inbox.claim`` (who holds each key now), ``LeasePath.complete`` (the
  completion committed: ``Inbox.mark_completed``, or ``emit()`` carrying ``Inbox.completion_write``) and
  ``Inbox.mark_dead``. Each committed fenced write notes whether its owner token was the current one.
- Direct completions of DynamoDB-only subscriptions: ``DirectPath.commit`` (the marker and the
  writes committed with no claim; the marker counts the one attempt it ran, under no owner).
- Deliveries: every record the durable event source mapping hands to the consumer, with its receive count.
- Sends: every message the relay pipe sends (recorded by the pipe hooks in ``simulation.driver``).
- Ordered subscriptions: ``Inbox.defer`` (a pair put aside behind its predecessor, its attempt given back) and
  ``WakeUps.send`` (a deferred pair sent back to the queue, by the consumer or an operator's skip).
- Runs: ``Attempts.run_handler``, each run of a handler judged as it starts (the deadline, invariant 15).

The patches wrap the engine's methods innermost, so a crash injected around them still sees a claim that
committed as committed. What is recorded is ``simulation.observations``.

One file: every seam the simulator records through, in one class, so that the order in which the patches
wrap the engine's methods (and each other) is in one place.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from datetime import datetime, timedelta
from typing import Any
from unittest import mock

from outbox.consumer import DeliveryOutcome, DurableConsumer
from outbox.delivery.attempts import Attempts
from outbox.delivery.direct import DirectPath
from outbox.delivery.lease import LeasePath
from outbox.delivery.ordered import OrderedGate
from outbox.delivery.path import Pair
from outbox.envelope import Envelope
from outbox.exceptions import WatermarkMovedError
from outbox.inbox import Claim, ClaimOutcome, ClaimResult, Inbox
from outbox.local import deadline
from outbox.local.deadline import InvocationTimedOut
from outbox.local.esm import BatchResult, SqsEventSourceMapping
from outbox.local.pipe import PipeEmulator
from outbox.messages import TARGETS_ATTRIBUTE
from outbox.ordering import Deferred, WakeUps
from outbox.subscriptions import Subscription
from simulation.catalog import LEDGER
from simulation.observations import (
    DIRECT,
    CutOff,
    FencedWrite,
    Invocation,
    Observations,
    PipeDeadLetter,
    PipeSend,
    Receipt,
    Run,
)
from simulation.world import World


class Recorder:
    """Wraps the engine's seams and the durable event source mapping; writes to ``Observations``."""

    def __init__(self, world: World, observations: Observations, durable: SqsEventSourceMapping) -> None:
        self.trace = world.trace
        self.world = world
        self.observations = observations
        self.durable = durable
        # The originals, captured when recording starts (a mutation test may have replaced one).
        self._claim, self._complete, self._mark_dead = Inbox.claim, LeasePath.complete, Inbox.mark_dead
        self._release, self._deliver, self._forgive = Inbox.release, DurableConsumer.deliver, Inbox.forgive
        self._commit_directly, self._failed_directly = DirectPath.commit, DirectPath.failed
        self._process_record = DurableConsumer.process_record
        self._defer, self._wake_up = Inbox.defer, WakeUps.send
        self._run_woken, self._run_handler = OrderedGate.run_woken, Attempts.run_handler
        self._handler, self._poll = durable.handler, durable.poll
        self._consumer: DurableConsumer | None = None  # the one delivering, once it has delivered
        # Per key, for each of its deliveries under way (a second worker's nests in the first's run), why its last
        # run should not have started, if it should not (``run_handler``).
        self._started_late: dict[str, list[str | None]] = {}
        # The invocation the last poll ran, with its messages' groups (message id -> tenant).
        self._last_invocation: tuple[Invocation, dict[str, str], dict[str, int]] | None = None
        self._failed_receives: dict[tuple[str, int], bool] = {}  # (message id, receive count) -> failed by it

    @contextmanager
    def patched(self) -> Iterator[None]:
        recorder = self

        def claim(
            inbox: Inbox, envelope: Envelope, name: str, lease: timedelta, *args: Any, **kwargs: Any
        ) -> ClaimResult:
            return recorder.claim(inbox, envelope, name, lease, *args, **kwargs)

        def complete(
            path: LeasePath, claim_: Claim, envelope: Envelope, sub: Subscription, result: Any, *order: Any
        ) -> None:
            recorder.complete(path, claim_, envelope, sub, result, *order)

        def mark_dead(inbox: Inbox, claim_: Claim, envelope: Envelope, *details: Any) -> None:
            recorder.mark_dead(inbox, claim_, envelope, *details)

        def release(inbox: Inbox, claim_: Claim, error: str, give_back: int = 0, **kept: Any) -> None:
            recorder.release(inbox, claim_, error, give_back, **kept)

        def forgive(inbox: Inbox, claim_: Claim) -> Claim:
            return recorder.forgive(inbox, claim_)

        def deliver(
            consumer: DurableConsumer, envelope: Envelope, sub: Subscription, *args: Any, **kwargs: Any
        ) -> DeliveryOutcome:
            return recorder.deliver(consumer, envelope, sub, *args, **kwargs)

        def process_record(consumer: DurableConsumer, record: Any, *args: Any, **kwargs: Any) -> None:
            recorder.process_record(consumer, record, *args, **kwargs)

        def defer(inbox: Inbox, claim_: Claim, waits_for: int, order: Any) -> None:
            recorder.defer(inbox, claim_, waits_for, order)

        def wake_up(wake_ups: WakeUps, deferred: Deferred, applied_seq: int) -> None:
            recorder.wake_up(wake_ups, deferred, applied_seq)

        def run_woken(gate: OrderedGate, sub: Subscription, ready: Deferred, *args: Any) -> Any:
            return recorder.run_woken(gate, sub, ready, *args)

        def commit_directly(
            path: DirectPath, envelope: Envelope, sub: Subscription, result: Any, digest: str, *order: Any
        ) -> Any:
            return recorder.commit_directly(path, envelope, sub, result, digest, *order)

        def failed_directly(path: DirectPath, envelope: Envelope, sub: Subscription, *args: Any, **kwargs: Any) -> Any:
            return recorder.failed_directly(path, envelope, sub, *args, **kwargs)

        def run_handler(attempts: Attempts, pair: Pair, *args: Any) -> Any:
            return recorder.run_handler(attempts, pair, *args)

        with ExitStack() as stack:
            stack.enter_context(mock.patch.object(Inbox, "claim", claim))
            stack.enter_context(mock.patch.object(LeasePath, "complete", complete))
            stack.enter_context(mock.patch.object(Inbox, "mark_dead", mark_dead))
            stack.enter_context(mock.patch.object(Inbox, "release", release))
            stack.enter_context(mock.patch.object(Inbox, "forgive", forgive))
            stack.enter_context(mock.patch.object(DurableConsumer, "deliver", deliver))
            stack.enter_context(mock.patch.object(DurableConsumer, "process_record", process_record))
            stack.enter_context(mock.patch.object(DirectPath, "commit", commit_directly))
            stack.enter_context(mock.patch.object(DirectPath, "failed", failed_directly))
            stack.enter_context(mock.patch.object(Attempts, "run_handler", run_handler))
            stack.enter_context(mock.patch.object(Inbox, "defer", defer))
            stack.enter_context(mock.patch.object(WakeUps, "send", wake_up))
            stack.enter_context(mock.patch.object(OrderedGate, "run_woken", run_woken))
            stack.enter_context(mock.patch.object(self.durable, "handler", self.batch))
            stack.enter_context(mock.patch.object(self.durable, "poll", self.poll))
            stack.enter_context(mock.patch.object(PipeEmulator, "_attempt", self._pipe_attempt()))
            stack.enter_context(mock.patch.object(PipeEmulator, "_dead_letter", self._pipe_dead_letter()))
            yield

    # -- the pipes (invariant 11) -------------------------------------------------------------------

    def _pipe_attempt(self) -> Any:
        original, observations = PipeEmulator._attempt, self.observations

        def attempt(pipe: PipeEmulator, shard: Any, batch: Any, expired: Any) -> Any:
            created = tuple(record.created for record in batch.records)
            observations.pipe_sends.append(
                PipeSend(pipe.config.name, pipe._clock(), pipe.config.maximum_record_age_seconds, created)
            )
            return original(pipe, shard, batch, expired)

        return attempt

    def _pipe_dead_letter(self) -> Any:
        original, observations = PipeEmulator._dead_letter, self.observations

        def dead_letter(
            pipe: PipeEmulator, shard: Any, records: Any, condition: str, reason: str, attempts: int
        ) -> None:
            observations.pipe_dead_letters.append(
                PipeDeadLetter(
                    pipe.config.name,
                    pipe._clock(),
                    pipe.config.maximum_record_age_seconds,
                    condition,
                    reason,
                    tuple(record.created for record in records),
                )
            )
            original(pipe, shard, records, condition, reason, attempts)

        return dead_letter

    # -- the inbox ----------------------------------------------------------------------------------

    def claim(
        self, inbox: Inbox, envelope: Envelope, name: str, lease: timedelta, *args: Any, **kwargs: Any
    ) -> ClaimResult:
        try:
            result = self._claim(inbox, envelope, name, lease, *args, **kwargs)
        except BaseException:
            # The claim's answer may have been lost after it committed: it may count as an attempt.
            self.observations.uncertain_claims[f"{envelope.id}:{name}"] += 1
            raise
        key = self.trace.key(f"{envelope.id}:{name}")
        if result.claim is None:
            self.trace.add("claim", f"{key} refused: {result.outcome.value}")
            if result.outcome is ClaimOutcome.IN_PROGRESS and self.observations.invocations:
                self.observations.invocations[-1].refused_running.add(envelope.id)
            return result
        claim, now = result.claim, self.durable.clock()
        previous = self.observations.live_leases.get(claim.idempotency_key)
        if previous is not None and previous[0] != claim.owner and previous[1] >= now:
            self.observations.live_lease_takeovers.append(
                f"{key} taken over by {self.trace.owner(claim.owner)} while {self.trace.owner(previous[0])}'s lease "
                f"ran {(previous[1] - now).total_seconds():.0f} s more"
            )
        for run in self.observations.running:
            if run.key == claim.idempotency_key and run.owner not in (None, claim.owner) and run.deadline > now:
                self.observations.live_lease_takeovers.append(
                    f"{key} taken over by {self.trace.owner(claim.owner)} while {self.trace.owner(run.owner)}'s "
                    f"invocation had {(run.deadline - now).total_seconds():.0f} s to run"
                )
        for run in reversed(self.observations.running):
            if run.key == claim.idempotency_key and run.owner is None:
                run.owner = claim.owner
                break
        self.observations.live_leases[claim.idempotency_key] = (claim.owner, claim.lease_expires_at)
        self.observations.current_owner[claim.idempotency_key] = claim.owner
        self.observations.claims[claim.idempotency_key] += 1
        position = len(self.world.handler_runs)
        self.world.claim_positions.setdefault((claim.idempotency_key, claim.attempts), []).append(
            (position, self.world.claims_recorded)
        )
        self.world.claims_recorded += 1
        self.trace.add("claim", f"{key} by {self.trace.owner(result.claim.owner)} (attempt {result.claim.attempts})")
        return result

    def complete(
        self, path: LeasePath, claim: Claim, envelope: Envelope, sub: Subscription, result: Any, *order: Any
    ) -> None:
        try:
            self._complete(path, claim, envelope, sub, result, *order)
        except BaseException:
            # A completion whose answer was lost may have committed: its owner may be the completer.
            self.observations.uncertain_completers.setdefault(claim.idempotency_key, set()).add(claim.owner)
            raise
        self.observations.completions.append(self._fenced(claim))
        self._applied(claim.idempotency_key, envelope)
        self._finished(claim)
        follow_up = " with its follow-up event" if getattr(result, "follow_up", None) else ""
        self.trace.add(
            "complete", f"{self.trace.key(claim.idempotency_key)} by {self.trace.owner(claim.owner)}{follow_up}"
        )

    def commit_directly(
        self, path: DirectPath, envelope: Envelope, sub: Subscription, result: Any, digest: str, *order: Any
    ) -> Any:
        """``order``: an ordered subscription's watermark items, committed with the marker."""
        key = f"{envelope.id}:{sub.name}"
        try:
            existing = self._commit_directly(path, envelope, sub, result, digest, *order)
        except WatermarkMovedError:
            # Refused before anything was written (the watermark is not as the run read it): the run spent no
            # attempt, and the ordered gate looks again under a lease.
            self._fruitless(key)
            self.trace.add("complete", f"{self.trace.key(key)} not committed directly: the watermark moved")
            raise
        except BaseException:
            # Its answer may have been lost after it committed: the marker (one attempt, no owner) may be there.
            self.observations.uncertain_claims[key] += 1
            self.observations.uncertain_completers.setdefault(key, set()).add(DIRECT)
            raise
        if existing is not None:
            # The run committed nothing (a late duplicate of a pair with history): it spent no attempt.
            self._fruitless(key)
            self.trace.add("complete", f"{self.trace.key(key)} not committed directly: the pair has a row")
            return existing
        self.observations.claims[key] += 1  # the marker counts the attempt that ran
        self.observations.completions.append(FencedWrite(key, DIRECT, True, self.durable.clock()))
        self._applied(key, envelope)
        follow_up = " with its follow-up event" if getattr(result, "follow_up", None) else ""
        self.trace.add("complete", f"{self.trace.key(key)} directly (no lease){follow_up}")
        return existing

    def _applied(self, key: str, envelope: Envelope) -> None:
        if key.endswith(f":{LEDGER}") and self.observations.invocations and self.world.in_order(envelope):
            self.observations.invocations[-1].applied.append((envelope.tenant, envelope.seq))

    def _fruitless(self, key: str) -> None:
        """The pair's latest handler run committed nothing and spent no attempt."""
        runs = self.world.handler_runs
        self.world.fruitless_runs.add(max((i for i, (k, _) in enumerate(runs) if k == key), default=-1))

    def failed_directly(
        self, path: DirectPath, envelope: Envelope, sub: Subscription, *args: Any, **kwargs: Any
    ) -> Any:
        key = f"{envelope.id}:{sub.name}"
        claims, marks = self.observations.claims[key], len(self.observations.dead_calls)
        try:
            outcome = self._failed_directly(path, envelope, sub, *args, **kwargs)
        except BaseException:
            # The claim (or the mark) after the failure raised: the message comes back, and whoever claims decides.
            self.observations.unclaimed_direct_failures.add(key)
            raise
        # A mark for the direct run's failure judges attempt 1 (the run), whatever attempt its late claim counted.
        calls, counts = self.observations.dead_calls, self.observations.dead_call_counts
        added = [index for index in range(marks, len(calls)) if calls[index][0] == key]
        calls.extend((key, 1, calls[index][2]) for index in added)
        counts.extend(counts[index] for index in added)  # in step with the calls
        if self.observations.claims[key] == claims:
            self.observations.unclaimed_direct_failures.add(key)
            self.trace.add("direct", f"{self.trace.key(key)} failed unclaimed, left to the claim's holder")
        return outcome

    def defer(self, inbox: Inbox, claim: Claim, waits_for: int, order: Any) -> None:
        key = claim.idempotency_key
        try:
            self._defer(inbox, claim, waits_for, order)
        except BaseException as exc:
            self.observations.uncertain_deferrals[key] += 1
            if _lost_answer(exc):
                self._finished(claim)  # applied, its answer lost: the lease is gone
            raise
        self.observations.deferrals[key] += 1
        self._finished(claim)
        self.trace.add("defer", f"{self.trace.key(key)} by {self.trace.owner(claim.owner)}: waits for seq {waits_for}")

    def wake_up(self, wake_ups: WakeUps, deferred: Deferred, applied_seq: int) -> None:
        """Recorded before it is sent: a send whose answer was lost may still have put the message in the queue."""
        key = f"{deferred.event_id}:{deferred.subscription}"
        self.world.wake_ups.append(key)
        self.trace.add("wake", f"{self.trace.key(key)}: seq {deferred.seq} (the watermark is at {applied_seq})")
        self._wake_up(wake_ups, deferred, applied_seq)

    def mark_dead(self, inbox: Inbox, claim: Claim, envelope: Envelope, *details: Any) -> None:
        error, _error_type, reason, receive_count = details
        self.observations.dead_calls.append((claim.idempotency_key, claim.attempts, reason.value))
        self.observations.dead_call_counts.append(self.observations.attempt_counts(claim.idempotency_key))
        self._mark_dead(inbox, claim, envelope, *details)
        self.observations.dead_marks.append(self._fenced(claim))
        self.observations.dead_positions.append(
            (claim.idempotency_key, len(self.world.handler_runs), self.world.claims_recorded)
        )
        if reason.value == "exhausted":
            self.observations.exhausted_marks.append((claim.idempotency_key, self.world.claims_recorded))
        self._finished(claim)
        what = f"({reason.value}, receive {receive_count}): {brief(error)}"
        self.trace.add("dead", f"{self.trace.key(claim.idempotency_key)} {what}")

    def forgive(self, inbox: Inbox, claim: Claim) -> Claim:
        """An attempt cut off for other work's time, no longer counted: given back, and not the pair's own."""
        forgiven = self._forgive(inbox, claim)
        self.observations.given_back[claim.idempotency_key] += claim.attempts - forgiven.attempts
        self.observations.forgiven[claim.idempotency_key] += claim.attempts - forgiven.attempts
        self.trace.add("forgive", f"{self.trace.key(claim.idempotency_key)}: its unfinished attempt is not counted")
        return forgiven

    def release(self, inbox: Inbox, claim: Claim, error: str, give_back: int = 0, **kept: Any) -> None:
        if give_back:  # a claim given back with its attempt ran nothing: no attempt of it was released
            self.observations.given_back[claim.idempotency_key] += give_back
        else:
            self.observations.release_calls.add((claim.idempotency_key, claim.attempts))
        try:
            self._release(inbox, claim, error, give_back, **kept)
        except BaseException as exc:
            if _lost_answer(exc):
                self._finished(claim)  # applied, its answer lost: the lease is gone
            raise
        self.observations.releases.append(self._fenced(claim))
        self._finished(claim)
        self.trace.add(
            "release", f"{self.trace.key(claim.idempotency_key)} by {self.trace.owner(claim.owner)}: {brief(error)}"
        )

    def deliver(
        self, consumer: DurableConsumer, envelope: Envelope, sub: Subscription, *args: Any, **kwargs: Any
    ) -> DeliveryOutcome:
        self._consumer = consumer
        key = f"{envelope.id}:{sub.name}"
        reading = self.observations.reading
        if reading and reading[-1] is not None and sub.name not in reading[-1]:
            self.observations.unnamed_deliveries.append(key)
        deadlines = self.observations.deadlines
        run = Run(key, deadlines[-1] if deadlines else self.durable.clock())
        self.observations.running.append(run)
        try:
            # Judged as the delivery starts, and again as each run of its handler starts (``run_handler``).
            with self._cut_off_noted(key, envelope.tenant, self._started_with_time(key, sub.name)):
                outcome = self._deliver(consumer, envelope, sub, *args, **kwargs)
        finally:
            running = self.observations.running
            del running[next(i for i, r in enumerate(running) if r is run)]
        self.trace.add("outcome", f"{self.trace.key(key)} {outcome.value}")
        return outcome

    def run_handler(self, attempts: Attempts, pair: Pair, *args: Any) -> Any:
        """Each run of a handler, judged as it starts (a delivery may run its handler twice: a direct run whose
        commit found a row, then its lease): if the deadline stops the delivery (in the run, or in a write after
        it), its last run should not have started when too little was left for it (invariant 15)."""
        subscription = pair.subscription.name
        judged = self._started_late.get(pair.key)
        if judged:  # inside a delivery (or a woken run) of the pair: the one under way is the last
            judged[-1] = self._started_with_time(pair.key, subscription)
        deadlines = self.observations.deadlines
        started, until = self.durable.clock(), deadlines[-1] if deadlines else None
        try:
            return self._run_handler(attempts, pair, *args)
        finally:
            # What the consumer learns of the run, as it measures it (outbox.delivery.timing.RunTimes): the time
            # from its start to its end, whatever happened meanwhile (a second worker's invocation nested in it),
            # if it ended before the deadline.
            ended = self.durable.clock()
            if until is None or ended < until:
                known = self.world.slowest_runs.get(subscription, timedelta(0))
                self.world.slowest_runs[subscription] = max(known, ended - started)

    def _started_with_time(self, key: str, subscription: str) -> str | None:
        """Why this pair should not have started now, if it should not: less of the invocation is left than its
        subscription's slowest run this container has seen (and a second), which a whole invocation holds."""
        known = self.world.slowest_runs.get(subscription)
        deadlines = self.observations.deadlines
        if known is None or not deadlines:
            return None
        left, needed = deadlines[-1] - self.durable.clock(), known + timedelta(seconds=1)
        if deadline.remaining() != left:
            return None  # a fault moved the invocation's deadline (it stands for skew): its clock says nothing here
        if left >= needed or needed > self.world.function_timeout:
            return None
        return f"{key} started with {left.total_seconds():.1f} s left; {subscription} had run for {known}"

    @contextmanager
    def _cut_off_noted(self, key: str, tenant: str, too_late: str | None = None) -> Iterator[None]:
        """Note the time this pair's run takes, and its run if the deadline stops it: whether it would have fit
        without the time the invocation spent on other tenants' work before it, and why it should not have started
        (``too_late`` as it starts, then as its last run of the handler started), if it should not."""
        judged = self._started_late.setdefault(key, [])
        judged.append(too_late)
        invocation = self.observations.invocations[-1] if self.observations.invocations else Invocation()
        started, others_spent = self.durable.clock(), invocation.others_spent(tenant)
        own_spent = invocation.spent.get(tenant, 0.0)
        invocation.nested.append(0.0)
        try:
            yield
        except InvocationTimedOut:
            run = self.world.durations.get(key, timedelta(0)).total_seconds()
            budget = invocation.budget.total_seconds() if invocation.budget is not None else 0.0
            fits = others_spent > 0 and own_spent + run <= budget
            self.observations.cut_offs.append(CutOff(key, tenant, fits))
            if judged[-1] is not None:
                self.observations.started_too_late.append(judged[-1])
            self.trace.add("deadline", f"{self.trace.key(key)} stopped by Lambda at the deadline")
            raise
        finally:
            judged.pop()
            if not judged:
                del self._started_late[key]
            took = (self.durable.clock() - started).total_seconds()
            invocation.spent[tenant] = invocation.spent.get(tenant, 0.0) + took - invocation.nested.pop()
            if invocation.nested:
                invocation.nested[-1] += took

    def run_woken(self, gate: OrderedGate, subscription: Subscription, ready: Deferred, *args: Any) -> Any:
        key = f"{ready.event_id}:{subscription.name}"
        if self.observations.invocations:
            invocation = self.observations.invocations[-1]
            invocation.woken.add(ready.tenant)
            invocation.woken_runs[key] = runs = invocation.woken_runs.get(key, 0) + 1
            if runs > WOKEN_RUNS_IN_A_LOOP:
                self._stopped_in_a_loop(key)
        with self._cut_off_noted(key, ready.tenant):
            return self._run_woken(gate, subscription, ready, *args)

    def _stopped_in_a_loop(self, key: str) -> None:
        """The consumer runs the same deferred pair in place again and again in one invocation: a loop that no
        virtual time passes in, so only Lambda's timeout would end it. Recorded (invariant 14), and the invocation
        is given its deadline, as Lambda would stop it there."""
        what = (
            f"{self.trace.key(key)} was run in place after its predecessor {WOKEN_RUNS_IN_A_LOOP} times in one "
            "invocation and stayed deferred: a loop only Lambda's timeout stops"
        )
        if what not in self.world.wake_loops:
            self.world.wake_loops.append(what)
        self.trace.add("loop", what)
        if self.observations.deadlines:
            clock = self.durable.clock
            clock.advance(max(timedelta(0), self.observations.deadlines[-1] - clock()) + timedelta(seconds=1))
        raise InvocationTimedOut()

    def process_record(self, consumer: DurableConsumer, record: Any, *args: Any, **kwargs: Any) -> None:
        tenant = str((record.raw_event.get("attributes") or {}).get("MessageGroupId", ""))
        if self.observations.invocations and self.observations.invocations[-1].woken:
            self.observations.records_after_in_place.append(
                f"a record of {tenant} after in-place work of {sorted(self.observations.invocations[-1].woken)}"
            )
        self.observations.reading.append(_targets(record.raw_event))
        try:
            self._process_record(consumer, record, *args, **kwargs)
        finally:
            self.observations.reading.pop()

    def _finished(self, claim: Claim) -> None:
        """The owner's lease ends with its fenced write (a release sets it to zero)."""
        if self.observations.live_leases.get(claim.idempotency_key, ("",))[0] == claim.owner:
            del self.observations.live_leases[claim.idempotency_key]

    def _fenced(self, claim: Claim) -> FencedWrite:
        key = claim.idempotency_key
        current = self.observations.current_owner.get(key) == claim.owner
        return FencedWrite(key, claim.owner, current, self.durable.clock())

    # -- the event source mapping -------------------------------------------------------------------

    def batch(self, event: dict[str, Any], context: Any) -> Any:
        for record in event["Records"]:
            receipt = _receipt(record, self.durable.clock())
            self.observations.receipts.append(receipt)
            name = self.trace.event(receipt.event_id) if receipt.event_id else "?"
            message = self.trace.message(receipt.message_id)
            self.trace.add("receive", f"{message} = {name} of {receipt.tenant} (receive {receipt.receive_count})")
        deadline = self.durable.clock() + timedelta(milliseconds=context.get_remaining_time_in_millis())
        self.observations.deadlines.append(deadline)
        invocation = Invocation(budget=deadline - self.durable.clock(), wake_ups_before=len(self.world.wake_ups))
        self.observations.invocations.append(invocation)
        try:
            return self._handler(event, context)
        finally:
            self.observations.deadlines.pop()
            self.observations.invocations.pop()
            groups = {record["messageId"]: _group(record) for record in event["Records"]}
            counts = {
                record["messageId"]: _receipt(record, self.durable.clock()).receive_count for record in event["Records"]
            }
            self._last_invocation = (invocation, groups, counts)

    def _judge_wakes(self, result: BatchResult, invocation: Invocation, groups: dict[str, str]) -> None:
        """A wake-up is sent (or the event run in place) before the message that owes it is acknowledged: once an
        invocation acknowledged every message of a tenant, an event deferred behind a ledger event it applied is
        no longer DEFERRED, or its wake-up was sent in it. (A failed message of the tenant comes back, and wakes
        it then.)"""
        failed = {groups.get(message_id) for message_id in result.failed}
        applied = [(tenant, seq) for tenant, seq in invocation.applied if tenant not in failed]
        if not applied or self._consumer is None:
            return
        book = self._consumer.order
        with self.world.chaos.paused():
            for tenant, seq in applied:
                lowest = book.deferred(tenant, LEDGER, limit=1)
                if not lowest or lowest[0].waits_for != seq:
                    continue
                waiting = lowest[0]
                key = f"{waiting.event_id}:{LEDGER}"
                claim = self._consumer.inbox.read_claim(waiting.event_id, LEDGER)
                sent = key in self.world.wake_ups[invocation.wake_ups_before :]
                if claim is not None and claim.status == "DEFERRED" and not sent:
                    self.observations.unwoken_at_ack.append(
                        f"tenant {tenant}: every message acknowledged after seq {seq} was applied, and seq "
                        f"{waiting.seq}, deferred behind it, was neither run nor sent back to the queue"
                    )

    def _note_stale_deletes(self, result: BatchResult, invocation: Invocation, counts: dict[str, int]) -> None:
        """The messages this invocation rightly acknowledged (no pair of theirs found running elsewhere) after a
        second worker received them again and failed them: the delete with the older receipt handle, which SQS
        may honour, is then what loses what the second worker left under way."""
        for message_id in result.received:
            self._failed_receives[(message_id, counts.get(message_id, 0))] = message_id in result.failed
        for message_id in set(result.received) - set(result.failed):
            latest = max(r.receive_count for r in self.observations.receipts if r.message_id == message_id)
            event_id = next(r for r in reversed(self.observations.receipts) if r.message_id == message_id).event_id
            again = latest > counts.get(message_id, latest) and self._failed_receives.get((message_id, latest), False)
            if again and event_id is not None and event_id not in invocation.refused_running:
                self.world.stale_deletes.append(event_id)

    def poll(self) -> BatchResult | None:
        self._last_invocation = None
        result = self._poll()
        if result is not None and result.crashed is None and self._last_invocation is not None:
            self._judge_wakes(result, *self._last_invocation[:2])
        if result is not None and self._last_invocation is not None:
            self._note_stale_deletes(result, self._last_invocation[0], self._last_invocation[2])
        if result is not None and isinstance(result.crashed, InvocationTimedOut):
            self.world.slowest_runs.clear()  # Lambda resets the container after a timeout: nothing seen survives
        if result is not None and result.crashed is not None:
            failure = type(result.crashed).__name__
            self.trace.add("batch", f"the invocation failed as a whole ({failure}): every message comes back")
        elif result is not None and result.failed:
            self.trace.add("batch", f"failed, to come back: {', '.join(map(self.trace.message, result.failed))}")
        return result


# How often one invocation may run the same deferred pair in place before the simulator calls it a loop.
WOKEN_RUNS_IN_A_LOOP = 25


def _group(record: dict[str, Any]) -> str:
    return str((record.get("attributes") or {}).get("MessageGroupId", ""))


@contextmanager
def recording(world: World, observations: Observations, durable: SqsEventSourceMapping) -> Iterator[None]:
    with Recorder(world, observations, durable).patched():
        yield


def brief(error: str, limit: int = 110) -> str:
    """An error message short enough for one trace line."""
    return error if len(error) <= limit else error[: limit - 3] + "..."


def _receipt(record: dict[str, Any], at: datetime) -> Receipt:
    attributes = record.get("attributes", {})
    try:
        body = json.loads(record["body"])
        event_id: str | None = body["event_id"]["S"]
        event_type: str | None = body["type"]["S"]
    except Exception:  # a malformed body (the simulator sends some on purpose): not an event
        event_id, event_type = None, None
    return Receipt(
        tenant=str(attributes.get("MessageGroupId", "")),
        event_id=event_id,
        message_id=str(record["messageId"]),
        deduplication_id=str(attributes.get("MessageDeduplicationId", "")),
        receive_count=int(attributes.get("ApproximateReceiveCount", 0)),
        at=at,
        targets=_targets(record),
        event_type=event_type,
    )


def _targets(record: dict[str, Any]) -> frozenset[str] | None:
    """The subscriptions a repair message names, read from the raw record (never through the engine)."""
    attribute = (record.get("messageAttributes") or {}).get(TARGETS_ATTRIBUTE) or {}
    text = attribute.get("stringValue") if isinstance(attribute, dict) else None
    return frozenset(text.split(",")) if isinstance(text, str) else None


def _lost_answer(exc: BaseException) -> bool:
    """A write whose answer was lost after it applied (the lost_answer fault's HTTP 500)."""
    response = getattr(exc, "response", None) or {}
    return bool(response.get("Error", {}).get("Code") == "InternalServerError")
