"""What the simulator observes while the pipeline runs, recorded through the engine's seams.

The engine's moments come through its published seam (``outbox.observing``): the recorder is an observer,
registered before any fault, so it is the innermost one and a fault raised around a call still finds what the call
committed recorded as committed.

- Claims and fenced writes: ``CLAIMED`` (who holds each key now), ``COMPLETED`` (the completion committed:
  ``Inbox.mark_completed``, or ``emit()`` carrying ``Inbox.completion_write``) and ``DEAD``. Each committed
  fenced write notes whether its owner token was the current one. A call that raised may have committed (its
  answer lost): ``CLAIM_RAISED`` and the like note that it may count.
- Direct completions of DynamoDB-only subscriptions: ``DIRECT_COMMIT_DONE`` (the marker and the writes committed
  with no claim; the marker counts the one attempt it ran, under no owner), and ``DIRECT_FAILED``.
- Deliveries: every record the durable event source mapping hands to the consumer, with its receive count
  (the local runtime's mapping, wrapped: not the engine), and each pair's delivery (``BEFORE_DELIVERY`` to
  ``DELIVERED``), judged for the deadline.
- Sends: every message the relay pipe sends (recorded by the pipe hooks in ``simulation.driver``), and the
  pipes' own attempts and dead letters (the local runtime's pipe emulator, wrapped).
- Ordered subscriptions: ``DEFERRED`` (a pair put aside behind its predecessor, its attempt given back),
  ``BEFORE_WAKE_UP`` (a deferred pair sent back to the queue, by the consumer or an operator's skip) and the
  ordered gate's in-place runs (``BEFORE_WOKEN_RUN`` to ``WOKEN``).
- Runs: ``BEFORE_RUN`` to ``RAN``, each run of a handler judged as it starts (the deadline, invariant 15).

What is recorded is ``simulation.observations``.

One file: every seam the simulator records through, in one class, so that what each moment records (and what a
call's start leaves for its end) is in one place.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from datetime import datetime, timedelta
from typing import Any

from outbox.delivery.consumer import DurableConsumer
from outbox.delivery.path import DeliveryOutcome
from outbox.exceptions import LeaseLostError, WatermarkMovedError
from outbox.inbox import Claim, ClaimOutcome, ClaimResult
from outbox.local import deadline
from outbox.local.deadline import InvocationTimedOut
from outbox.local.esm import BatchResult, PollWatcher, SqsEventSourceMapping
from outbox.local.pipe import PipeEmulator, PipeHappening, PipeWatcher
from outbox.log.envelope import Envelope
from outbox.messages import TARGETS_ATTRIBUTE
from outbox.observing import Happening, Moment, observing
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
    """Observes the engine's seams and wraps the local runtime's durable event source mapping and pipes; writes to
    ``Observations``."""

    def __init__(
        self,
        world: World,
        observations: Observations,
        durable: SqsEventSourceMapping,
        pipes: Iterable[PipeEmulator] = (),
    ) -> None:
        self.trace = world.trace
        self.world = world
        self.observations = observations
        self.durable = durable
        self.pipes = list(pipes)
        self._consumer: DurableConsumer | None = None  # the one delivering, once it has delivered
        # Per key, for each of its deliveries under way (a second worker's nests in the first's run), why its last
        # run should not have started, if it should not (``BEFORE_RUN``).
        self._started_late: dict[str, list[str | None]] = {}
        # The invocation the last poll ran, with its messages' groups (message id -> tenant).
        self._last_invocation: tuple[Invocation, dict[str, str], dict[str, int]] | None = None
        self._failed_receives: dict[tuple[str, int], bool] = {}  # (message id, receive count) -> failed by it
        # What each call under way noted as it started, for its end: innermost last (calls nest, a second worker's
        # invocation inside the first's handler, and each ends before the one around it).
        self._under_way: list[Any] = []
        self._moments: dict[Moment, Callable[[Happening], None]] = {
            Moment.CLAIMED: self._claimed,
            Moment.CLAIM_RAISED: self._claim_raised,
            Moment.COMPLETED: self._completed,
            Moment.COMPLETION_RAISED: self._completion_raised,
            Moment.DIRECT_COMMIT_DONE: self._committed_directly,
            Moment.DIRECT_COMMIT_RAISED: self._direct_commit_raised,
            Moment.BEFORE_DIRECT_FAILURE: self._before_direct_failure,
            Moment.DIRECT_FAILED: self._failed_directly,
            Moment.DIRECT_FAILURE_RAISED: self._direct_failure_raised,
            Moment.DEFERRED: self._deferred,
            Moment.DEFERRAL_RAISED: self._deferral_raised,
            Moment.BEFORE_WAKE_UP: self._before_wake_up,
            Moment.BEFORE_DEATH: self._before_death,
            Moment.DEAD: self._dead,
            Moment.FORGIVEN: self._forgiven,
            Moment.BEFORE_RELEASE: self._before_release,
            Moment.RELEASED: self._released,
            Moment.RELEASE_RAISED: self._release_raised,
            Moment.BEFORE_DELIVERY: self._before_delivery,
            Moment.DELIVERED: self._delivery_ended,
            Moment.DELIVERY_RAISED: self._delivery_ended,
            Moment.BEFORE_RUN: self._before_run,
            Moment.RAN: self._run_ended,
            Moment.RUN_RAISED: self._run_ended,
            Moment.BEFORE_WOKEN_RUN: self._before_woken_run,
            Moment.WOKEN: self._woken_run_ended,
            Moment.WOKEN_RUN_RAISED: self._woken_run_ended,
            Moment.BEFORE_RECORD: self._before_record,
            Moment.RECORD_DONE: self._record_ended,
            Moment.RECORD_RAISED: self._record_ended,
        }

    def observe(self, happening: Happening) -> None:
        """The recorder as an observer of the engine (``outbox.observing``)."""
        record = self._moments.get(happening.moment)
        if record is not None:
            record(happening)

    @contextmanager
    def watching(self) -> Iterator[None]:
        with ExitStack() as stack:
            stack.enter_context(observing(self.observe))
            stack.enter_context(self.durable.watched(PollWatcher(self._invoking, self._invoked, self._polled)))
            for pipe in self.pipes:
                stack.enter_context(pipe.watched(PipeWatcher(self._pipe_attempt, self._pipe_dead_letter)))
            yield

    # -- the pipes (invariant 11) -------------------------------------------------------------------

    def _pipe_attempt(self, happening: PipeHappening) -> None:
        created = tuple(record.created for record in happening.records)
        self.observations.pipe_sends.append(
            PipeSend(happening.pipe, happening.at, happening.maximum_record_age_seconds, created)
        )

    def _pipe_dead_letter(self, happening: PipeHappening) -> None:
        self.observations.pipe_dead_letters.append(
            PipeDeadLetter(
                happening.pipe,
                happening.at,
                happening.maximum_record_age_seconds,
                happening.condition,
                happening.reason,
                tuple(record.created for record in happening.records),
            )
        )

    # -- the inbox ----------------------------------------------------------------------------------

    # -- the inbox ----------------------------------------------------------------------------------

    def _claim_raised(self, happening: Happening) -> None:
        # The claim's answer may have been lost after it committed: it may count as an attempt.
        self.observations.uncertain_claims[happening.key] += 1

    def _claimed(self, happening: Happening) -> None:
        result: ClaimResult = happening.detail.result
        key = self.trace.key(happening.key)
        if result.claim is None:
            self.trace.add("claim", f"{key} refused: {result.outcome.value}")
            if result.outcome is ClaimOutcome.IN_PROGRESS and self.observations.invocations:
                self.observations.invocations[-1].refused_running.add(happening.event_id)
            if result.outcome in _ENDED:
                # The row says the last lease ended: its holder's write committed, although its answer may have
                # been lost (a dead mark whose caller saw a 500), and no later claim takes over that holder.
                self.observations.live_leases.pop(happening.key, None)
            return
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

    def _completion_raised(self, happening: Happening) -> None:
        claim: Claim = happening.detail.arguments["claim"]
        if isinstance(happening.detail.error, LeaseLostError) and self.observations.invocations:
            self.observations.invocations[-1].lost_leases.add(happening.event_id)
        # A completion whose answer was lost may have committed: its owner may be the completer.
        self.observations.uncertain_completers.setdefault(claim.idempotency_key, set()).add(claim.owner)

    def _completed(self, happening: Happening) -> None:
        arguments = happening.detail.arguments
        claim: Claim = arguments["claim"]
        self.observations.completions.append(self._fenced(claim))
        self._applied(claim.idempotency_key, happening.detail.by.envelope)  # the run's
        self._finished(claim)
        follow_up = " with its follow-up event" if getattr(arguments["result"], "follow_up", None) else ""
        self.trace.add(
            "complete", f"{self.trace.key(claim.idempotency_key)} by {self.trace.owner(claim.owner)}{follow_up}"
        )

    def _direct_commit_raised(self, happening: Happening) -> None:
        key = happening.key
        if isinstance(happening.detail.error, WatermarkMovedError):
            # Refused before anything was written (the watermark is not as the run read it): the run spent no
            # attempt, and the ordered gate looks again under a lease.
            self._fruitless(key)
            self.trace.add("complete", f"{self.trace.key(key)} not committed directly: the watermark moved")
            return
        # Its answer may have been lost after it committed: the marker (one attempt, no owner) may be there.
        self.observations.uncertain_claims[key] += 1
        self.observations.uncertain_completers.setdefault(key, set()).add(DIRECT)

    def _committed_directly(self, happening: Happening) -> None:
        """The marker and the writes (``order``: an ordered subscription's watermark items) committed together, or
        the row that stopped them."""
        key = happening.key
        if happening.detail.result is not None:
            # The run committed nothing (a late duplicate of a pair with history): it spent no attempt.
            self._fruitless(key)
            self.trace.add("complete", f"{self.trace.key(key)} not committed directly: the pair has a row")
            return
        self.observations.claims[key] += 1  # the marker counts the attempt that ran
        self.observations.completions.append(FencedWrite(key, DIRECT, True, self.durable.clock()))
        self._applied(key, happening.detail.by.envelope)  # the run's
        follow_up = (
            " with its follow-up event" if getattr(happening.detail.arguments["result"], "follow_up", None) else ""
        )
        self.trace.add("complete", f"{self.trace.key(key)} directly (no lease){follow_up}")

    def _applied(self, key: str, envelope: Envelope) -> None:
        if key.endswith(f":{LEDGER}") and self.observations.invocations and self.world.in_order(envelope):
            self.observations.invocations[-1].applied.append((envelope.tenant, envelope.seq))

    def _fruitless(self, key: str) -> None:
        """The pair's latest handler run committed nothing and spent no attempt."""
        runs = self.world.handler_runs
        self.world.fruitless_runs.add(max((i for i, (k, _) in enumerate(runs) if k == key), default=-1))

    def _before_direct_failure(self, happening: Happening) -> None:
        key = happening.key
        self._under_way.append((self.observations.claims[key], len(self.observations.dead_calls)))

    def _direct_failure_raised(self, happening: Happening) -> None:
        # The claim (or the mark) after the failure raised: the message comes back, and whoever claims decides.
        self._under_way.pop()
        self.observations.unclaimed_direct_failures.add(happening.key)

    def _failed_directly(self, happening: Happening) -> None:
        key = happening.key
        claims, marks = self._under_way.pop()
        # A mark for the direct run's failure judges attempt 1 (the run), whatever attempt its late claim counted.
        calls, counts = self.observations.dead_calls, self.observations.dead_call_counts
        added = [index for index in range(marks, len(calls)) if calls[index][0] == key]
        calls.extend((key, 1, calls[index][2]) for index in added)
        counts.extend(counts[index] for index in added)  # in step with the calls
        if self.observations.claims[key] == claims:
            self.observations.unclaimed_direct_failures.add(key)
            self.trace.add("direct", f"{self.trace.key(key)} failed unclaimed, left to the claim's holder")

    def _deferral_raised(self, happening: Happening) -> None:
        claim: Claim = happening.detail.arguments["claim"]
        self.observations.uncertain_deferrals[claim.idempotency_key] += 1
        if _lost_answer(happening.detail.error):
            self._finished(claim)  # applied, its answer lost: the lease is gone

    def _deferred(self, happening: Happening) -> None:
        claim: Claim = happening.detail.arguments["claim"]
        key, waits_for = claim.idempotency_key, happening.detail.arguments["waits_for"]
        self.observations.deferrals[key] += 1
        self._finished(claim)
        self.trace.add("defer", f"{self.trace.key(key)} by {self.trace.owner(claim.owner)}: waits for seq {waits_for}")

    def _before_wake_up(self, happening: Happening) -> None:
        """Recorded before it is sent: a send whose answer was lost may still have put the message in the queue."""
        deferred, applied_seq = happening.detail.arguments["deferred"], happening.detail.arguments["applied_seq"]
        key = happening.key
        self.world.wake_ups.append(key)
        self.trace.add("wake", f"{self.trace.key(key)}: seq {deferred.seq} (the watermark is at {applied_seq})")

    def _before_death(self, happening: Happening) -> None:
        claim: Claim = happening.detail.arguments["claim"]
        reason = happening.detail.arguments["reason"]
        self.observations.dead_calls.append((claim.idempotency_key, claim.attempts, reason.value))
        self.observations.dead_call_counts.append(self.observations.attempt_counts(claim.idempotency_key))

    def _dead(self, happening: Happening) -> None:
        arguments = happening.detail.arguments
        claim: Claim = arguments["claim"]
        reason, receive_count = arguments["reason"], arguments["receive_count"]
        self.observations.dead_marks.append(self._fenced(claim))
        self.observations.dead_positions.append(
            (claim.idempotency_key, len(self.world.handler_runs), self.world.claims_recorded)
        )
        if reason.value == "exhausted":
            self.observations.exhausted_marks.append((claim.idempotency_key, self.world.claims_recorded))
        self._finished(claim)
        what = f"({reason.value}, receive {receive_count}): {brief(arguments['error'])}"
        self.trace.add("dead", f"{self.trace.key(claim.idempotency_key)} {what}")

    def _forgiven(self, happening: Happening) -> None:
        """An attempt cut off for other work's time, no longer counted: given back, and not the pair's own."""
        claim: Claim = happening.detail.arguments["claim"]
        forgiven: Claim = happening.detail.result
        self.observations.given_back[claim.idempotency_key] += claim.attempts - forgiven.attempts
        self.observations.forgiven[claim.idempotency_key] += claim.attempts - forgiven.attempts
        self.trace.add("forgive", f"{self.trace.key(claim.idempotency_key)}: its unfinished attempt is not counted")

    def _before_release(self, happening: Happening) -> None:
        claim: Claim = happening.detail.arguments["claim"]
        give_back: int = happening.detail.arguments["give_back"]
        if give_back:  # a claim given back with its attempt ran nothing: no attempt of it was released
            self.observations.given_back[claim.idempotency_key] += give_back
        else:
            self.observations.release_calls.add((claim.idempotency_key, claim.attempts))

    def _release_raised(self, happening: Happening) -> None:
        if _lost_answer(happening.detail.error):
            self._finished(happening.detail.arguments["claim"])  # applied, its answer lost: the lease is gone

    def _released(self, happening: Happening) -> None:
        claim: Claim = happening.detail.arguments["claim"]
        self.observations.releases.append(self._fenced(claim))
        self._finished(claim)
        error = brief(happening.detail.arguments["error"])
        self.trace.add(
            "release", f"{self.trace.key(claim.idempotency_key)} by {self.trace.owner(claim.owner)}: {error}"
        )

    # -- deliveries and runs ------------------------------------------------------------------------

    def _before_delivery(self, happening: Happening) -> None:
        self._consumer = happening.detail.by
        envelope: Envelope = happening.detail.arguments["envelope"]
        key, subscription = happening.key, happening.subscription
        reading = self.observations.reading
        if reading and reading[-1] is not None and subscription not in reading[-1]:
            self.observations.unnamed_deliveries.append(key)
        deadlines = self.observations.deadlines
        run = Run(key, deadlines[-1] if deadlines else self.durable.clock())
        self.observations.running.append(run)
        # Judged as the delivery starts, and again as each run of its handler starts (``BEFORE_RUN``).
        cut_off = self._cut_off_noted(key, envelope.tenant, self._started_with_time(key, subscription))
        cut_off.__enter__()
        self._under_way.append((run, cut_off))

    def _delivery_ended(self, happening: Happening) -> None:
        run, cut_off = self._under_way.pop()
        try:
            _ended(cut_off, happening.detail.error)
        finally:
            running = self.observations.running
            del running[next(i for i, r in enumerate(running) if r is run)]
        if happening.detail.error is None:
            self.trace.add("outcome", f"{self.trace.key(happening.key)} {happening.detail.result.value}")
        if happening.detail.error is None and happening.detail.result is DeliveryOutcome.HANDED:
            # The hand-off's write gives the pair to its durable execution: the worker's lease ends with it, and a
            # later claim (a replay after the execution failed) takes over no one.
            self.observations.live_leases.pop(happening.key, None)

    def _before_run(self, happening: Happening) -> None:
        """Each run of a handler, judged as it starts (a delivery may run its handler twice: a direct run whose
        commit found a row, then its lease): if the deadline stops the delivery (in the run, or in a write after
        it), its last run should not have started when too little was left for it (invariant 15)."""
        key, subscription = happening.key, happening.subscription
        judged = self._started_late.get(key)
        if judged:  # inside a delivery (or a woken run) of the pair: the one under way is the last
            judged[-1] = self._started_with_time(key, subscription)
        deadlines = self.observations.deadlines
        self._under_way.append((self.durable.clock(), deadlines[-1] if deadlines else None))

    def _run_ended(self, happening: Happening) -> None:
        # What the consumer learns of the run, as it measures it (outbox.delivery.timing.RunTimes): the time from
        # its start to its end, whatever happened meanwhile (a second worker's invocation nested in it), if it
        # ended before the deadline.
        started, until = self._under_way.pop()
        ended, subscription = self.durable.clock(), happening.subscription
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

    def _before_woken_run(self, happening: Happening) -> None:
        key, ready = happening.key, happening.detail.arguments["ready"]
        if self.observations.invocations:
            invocation = self.observations.invocations[-1]
            invocation.woken.add(ready.tenant)
            invocation.woken_runs[key] = runs = invocation.woken_runs.get(key, 0) + 1
            if runs > WOKEN_RUNS_IN_A_LOOP:
                self._stopped_in_a_loop(key)
        cut_off = self._cut_off_noted(key, ready.tenant)
        cut_off.__enter__()
        self._under_way.append(cut_off)

    def _woken_run_ended(self, happening: Happening) -> None:
        _ended(self._under_way.pop(), happening.detail.error)

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

    def _before_record(self, happening: Happening) -> None:
        record = happening.detail.arguments["record"]
        tenant = str((record.raw_event.get("attributes") or {}).get("MessageGroupId", ""))
        if self.observations.invocations and self.observations.invocations[-1].woken:
            self.observations.records_after_in_place.append(
                f"a record of {tenant} after in-place work of {sorted(self.observations.invocations[-1].woken)}"
            )
        self.observations.reading.append(_targets(record.raw_event))

    def _record_ended(self, _happening: Happening) -> None:
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

    def _invoking(self, event: dict[str, Any], context: Any) -> None:
        """A batch goes to the durable consumer: its receipts, and the invocation's deadline and budget."""
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

    def _invoked(self, event: dict[str, Any], context: Any) -> None:
        """The invocation ended (however): kept for its poll's judgement (``_polled``)."""
        self.observations.deadlines.pop()
        invocation = self.observations.invocations.pop()
        groups = {record["messageId"]: _group(record) for record in event["Records"]}
        now = self.durable.clock()
        counts = {record["messageId"]: _receipt(record, now).receive_count for record in event["Records"]}
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
        """The messages this invocation rightly acknowledged (no pair of theirs found running elsewhere, or lost to
        another worker's take-over) after a
        second worker received them again and failed them: the delete with the older receipt handle, which SQS
        may honour, is then what loses what the second worker left under way."""
        for message_id in result.received:
            self._failed_receives[(message_id, counts.get(message_id, 0))] = message_id in result.failed
        for message_id in set(result.received) - set(result.failed):
            latest = max(r.receive_count for r in self.observations.receipts if r.message_id == message_id)
            event_id = next(r for r in reversed(self.observations.receipts) if r.message_id == message_id).event_id
            again = latest > counts.get(message_id, latest) and self._failed_receives.get((message_id, latest), False)
            if again and event_id is not None and event_id not in invocation.refused_running | invocation.lost_leases:
                self.world.stale_deletes.append(event_id)

    def _polled(self, result: BatchResult) -> None:
        """A poll that received a batch is done: its invocation judged (a second worker's poll, run inside the
        first worker's handler, is judged as it ends, before the first's)."""
        last, self._last_invocation = self._last_invocation, None
        if result.crashed is None and last is not None:
            self._judge_wakes(result, *last[:2])
        if last is not None:
            self._note_stale_deletes(result, last[0], last[2])
        if isinstance(result.crashed, InvocationTimedOut):
            self.world.slowest_runs.clear()  # Lambda resets the container after a timeout: nothing seen survives
        if result.crashed is not None:
            failure = type(result.crashed).__name__
            self.trace.add("batch", f"the invocation failed as a whole ({failure}): every message comes back")
        elif result.failed:
            self.trace.add("batch", f"failed, to come back: {', '.join(map(self.trace.message, result.failed))}")


# A claim refused with one of these saw the pair's row past its lease: dead, done, or handed to a workflow.
_ENDED = frozenset({ClaimOutcome.DEAD, ClaimOutcome.ALREADY_COMPLETED, ClaimOutcome.HANDED})

# How often one invocation may run the same deferred pair in place before the simulator calls it a loop.
WOKEN_RUNS_IN_A_LOOP = 25


def _group(record: dict[str, Any]) -> str:
    return str((record.get("attributes") or {}).get("MessageGroupId", ""))


@contextmanager
def recording(
    world: World, observations: Observations, durable: SqsEventSourceMapping, pipes: Iterable[PipeEmulator]
) -> Iterator[None]:
    with Recorder(world, observations, durable, pipes).watching():
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


def _ended(noted: AbstractContextManager[None], error: BaseException | None) -> None:
    """End what a call's start entered as the call ended: with what it raised, if it raised."""
    if error is None:
        noted.__exit__(None, None, None)
    else:
        noted.__exit__(type(error), error, error.__traceback__)


def _lost_answer(exc: BaseException | None) -> bool:
    """A write whose answer was lost after it applied (the lost_answer fault's HTTP 500)."""
    response = getattr(exc, "response", None) or {}
    return bool(response.get("Error", {}).get("Code") == "InternalServerError")
