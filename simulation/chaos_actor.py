"""The faults of a run, armed at their seams in the engine, the local runtime and the pipe; each fires when
the schedule's ``Chaos`` says so, and some act in the world when they do (a rival emit, a conflicting copy,
an operator's skip in a race)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager
from datetime import timedelta
from typing import Any

from outbox import keys
from outbox.delivery.path import Pair, RemainingMs
from outbox.inbox import ClaimRecord
from outbox.local import deadline, faults
from outbox.local.esm import BatchResult, PollWatcher
from outbox.local.faults import FaultCount, SecondWorker
from outbox.local.pipe import PipeFaults, PipeRecord, TargetInvocationError
from outbox.observing import Happening, Moment, observing
from outbox.subscriptions import Lane
from simulation.driver_state import CRASHED_LEASES_RUN_OUT, reseal
from simulation.ordered_faults import OrderedFaultSeams
from simulation.schedule import Emit, Fault


class FaultSeams(OrderedFaultSeams):
    @contextmanager
    def faults(self) -> Iterator[None]:
        """Every fault of the schedule, armed; each fires when ``Chaos`` says so."""
        armed = self.world.schedule.faults
        chaos, clock = self.chaos, self.runtime.clock
        seams: dict[Fault, Callable[[], AbstractContextManager[FaultCount]]] = {
            Fault.CRASH_BEFORE_CLAIM: lambda: faults.crash_before_claim(count=chaos.count(Fault.CRASH_BEFORE_CLAIM)),
            Fault.CRASH_AFTER_CLAIM: lambda: faults.crash_after_claim(count=chaos.count(Fault.CRASH_AFTER_CLAIM)),
            Fault.CRASH_AFTER_EFFECT: lambda: faults.crash_after_external_effect(
                self.world.service, count=chaos.count(Fault.CRASH_AFTER_EFFECT)
            ),
            Fault.CRASH_BEFORE_COMPLETION: lambda: faults.crash_before_completion(
                count=chaos.count(Fault.CRASH_BEFORE_COMPLETION)
            ),
            Fault.CRASH_AFTER_COMPLETION: lambda: faults.crash_after_completion(
                count=chaos.count(Fault.CRASH_AFTER_COMPLETION)
            ),
            Fault.THROTTLE: lambda: faults.throttle_dynamodb_calls(chaos.count(Fault.THROTTLE)),
            Fault.RIVAL_EMIT: lambda: faults.rival_emit_before_commit(
                self.rival_emit, count=chaos.count(Fault.RIVAL_EMIT)
            ),
            Fault.LEASE_EXPIRY: lambda: faults.expire_lease_while_running(
                clock, None, count=chaos.count(Fault.LEASE_EXPIRY)
            ),
            Fault.VISIBILITY_TIMEOUT: lambda: faults.visibility_timeout_during_handler(
                self.durable, count=chaos.count(Fault.VISIBILITY_TIMEOUT), second_worker=self._second_worker
            ),
            Fault.LOST_ANSWER: lambda: faults.lose_answers_after_commit(
                chaos.count(Fault.LOST_ANSWER), after=self._after_lost_answer, resent=self._sdk_resends
            ),
            Fault.MESSAGE_LOST: self._losing_messages,
            Fault.EARLY_REDELIVERY: self._redelivering_early,
            Fault.BROKEN_DEPLOY: self._broken_deploy,
            Fault.CONFLICTING_COPY: self._conflicting_copies,
            Fault.WATERMARK_RACE: self._racing_skips,
            Fault.EMIT_DURING_CHECK: self._emits_during_checks,
            Fault.UNPROCESSED_KEYS: lambda: faults.leave_keys_unprocessed(chaos.count(Fault.UNPROCESSED_KEYS)),
            Fault.SEND_REFUSED: self._refusing_wake_ups,
            Fault.WAKING_ANSWER_LOST: self._losing_waking_answers,
            Fault.RECONCILE_DURING_RUN: self._reconciling_during_direct_runs,
            Fault.NEWER_EMITTER: self.newer.newer_emitters,
            Fault.WORKFLOW_START_LOST: self.lost_start_answers,
            Fault.WORKFLOW_START_CRASH: self.crashes_after_start,
            Fault.WORKFLOW_START_THROTTLED: self.throttled_starts,
        }
        self.relay.faults = PipeFaults(
            before_send=self._before_send, duplicate_delivery=self._duplicate_delivery, reorder=self._reorder
        )
        with ExitStack() as stack:
            for kind, seam in seams.items():
                if kind in armed:
                    stack.enter_context(seam())
            yield

    @contextmanager
    def _emits_during_checks(self) -> Iterator[FaultCount]:
        """While a read-only pass reads a tenant's log (``_checking``), another writer of the tenant commits an
        event between the pass's read of the rows and its read of the chain head (``emit_during_check``)."""

        def reading(happening: Happening) -> None:
            if happening.moment is not Moment.CHECK_READS_HEAD:
                return
            tenant = happening.detail.arguments["tenant"]
            racing = self._checking and not self._rivalling and tenant in self.rivals
            if racing and self.chaos.fires(Fault.EMIT_DURING_CHECK, tenant, while_paused=True):
                self._rivalling = True
                try:
                    self.rival_emit(tenant)
                finally:
                    self._rivalling = False

        with observing(reading):
            yield self.chaos.count(Fault.EMIT_DURING_CHECK)

    @contextmanager
    def _reconciling_during_direct_runs(self) -> Iterator[FaultCount]:
        """A DynamoDB-only pair runs with no claim (the direct path, or the ordered gate's next event) and takes its
        time (a slow remote read): the
        operator's reconcile, run meanwhile over the run's events, finds the pair without a claim, writes its
        REPLAYING row and sends it again (``reconcile_during_run``). The run's commit must apply nothing, and the
        pair run again under a lease only while the invocation has the time for the run."""
        reconciled: set[str] = set()  # the pairs whose runs the reconcile lands in, until their commit
        direct_runs = (Moment.BEFORE_DIRECT_RUN, Moment.BEFORE_DIRECT_APPLY)

        def reconciled_in(pair: Pair, remaining_ms: RemainingMs) -> None:
            if not self._reconciling and self.chaos.fires(Fault.RECONCILE_DURING_RUN, pair.key):
                self.world.durations.setdefault(pair.key, self._reconcile_window(remaining_ms()))
                reconciled.add(pair.key)

        def reconciled_first(happening: Happening) -> None:
            """As a direct run starts, whether a reconcile lands in it; a fault point before its commit: the
            reconcile lands before the run commits."""
            if happening.moment in direct_runs:
                run = happening.detail.arguments["run"]
                reconciled_in(run.pair, run.remaining_ms)
            elif happening.moment is Moment.BEFORE_DIRECT_COMMIT and happening.key in reconciled:
                reconciled.discard(happening.key)
                self._reconciling = True
                try:
                    self.reconcile(self._start)
                finally:
                    self._reconciling = False

        with observing(reconciled_first):
            yield self.chaos.count(Fault.RECONCILE_DURING_RUN)

    def _reconcile_window(self, left_ms: int) -> timedelta:
        """How long the run a reconcile lands in takes: a while, or nearly all that is left of the invocation."""
        draw = self.chaos.draw(Fault.RECONCILE_DURING_RUN)
        left = timedelta(milliseconds=left_ms)
        if draw.random() < 0.5:
            return max(left - timedelta(seconds=draw.uniform(0.5, 3)), timedelta(seconds=1))
        return timedelta(seconds=draw.uniform(5, 35))

    def _after_lost_answer(self, subject: str, _request: dict[str, Any]) -> None:
        """Between a lost answer and the caller's retry, another writer of the tenant commits first."""
        _, _, partition = subject.partition(" ")
        tenant = partition.removeprefix("TENANT#").removesuffix("#HEAD")
        if partition.endswith("#HEAD") and tenant in self.interlopers and not self._rivalling:
            self._rivalling = True
            try:
                self._rival_serial += 1
                serial = self._rival_serial
                action = Emit(f"rival{serial}", tenant, -1, f"rival-item{serial}", serial, False)
                self._emit(self.interlopers[tenant], action, "rival")
            finally:
                self._rivalling = False

    @contextmanager
    def _losing_messages(self) -> Iterator[FaultCount]:
        """After an invocation failed as a whole, one of its messages may be gone for good (the
        ``message_lost`` fault): what its claim left, or nothing, is all that remains."""

        def lossy(result: BatchResult) -> None:
            if result.crashed is None or not self.durable.in_flight:
                return
            entry = self.durable.in_flight[0]
            if not self._recoverable(entry.message_id):
                return  # only a message reconcile can send again (an event as logged) may be lost for good
            if self.chaos.fires(Fault.MESSAGE_LOST, self.trace.message(entry.message_id)):
                self.world.lost_messages.append(self._event_of(entry.message_id))
                self.durable.in_flight.pop(0)
                # SQS loses it, not the function: a second worker's poll returns inside the first worker's
                # invocation, whose deadline would stop this delete (the message then came back, untracked).
                with deadline.outside():
                    self.sqs.delete_message(QueueUrl=self.durable_queue_url, ReceiptHandle=entry.receipt_handle)

        with self.durable.watched(PollWatcher(polled=lossy)):
            yield self.chaos.count(Fault.MESSAGE_LOST)

    def _event_of(self, message_id: str) -> str:
        receipt = next(r for r in self.observations.receipts if r.message_id == message_id)
        assert receipt.event_id is not None, "only a message of a logged event may be lost (_recoverable)"
        return receipt.event_id

    def _recoverable(self, message_id: str) -> bool:
        """Whether a message carries a logged event as the log holds it: not a malformed body, an event altered in
        transit, a copy with other content or a forged event (the queue held those alone: nothing sends them again)."""
        receipt = next((r for r in self.observations.receipts if r.message_id == message_id), None)
        if receipt is None or receipt.event_id is None:
            return False
        made_here = ("poison-", "copy-", "forged-")
        return not receipt.deduplication_id.startswith(made_here) and receipt.event_id not in self.world.forged

    @contextmanager
    def _conflicting_copies(self) -> Iterator[FaultCount]:
        """After an invocation failed as a whole, its crashed worker's claims wait for their leases to run out;
        then (``conflicting_copy``) a copy of one of its events arrives with other content under the same id
        and a hash that matches that content, in another message group, before the original comes back."""

        def copying(result: BatchResult) -> None:
            if result.crashed is None or not self.chaos.can_fire(Fault.CONFLICTING_COPY):
                return
            with self.chaos.paused():  # the simulator's own reads are not the pipeline's: no fault for them
                event_id = self._event_with_a_waiting_claim(result.received)
            if event_id is not None and self.chaos.fires(Fault.CONFLICTING_COPY, self.trace.event(event_id)):
                self.runtime.clock.advance(CRASHED_LEASES_RUN_OUT)
                with self.chaos.paused():
                    self._send_conflicting_copy(event_id)

        with self.durable.watched(PollWatcher(polled=copying)):
            yield self.chaos.count(Fault.CONFLICTING_COPY)

    def _event_with_a_waiting_claim(self, message_ids: Sequence[str]) -> str | None:
        """An event of these messages whose every durable pair has a claim row (so no pair of it can go to the copy
        first: the first content to claim a pair wins it), one of them PENDING, or now and then all of them done
        or dead already."""
        by_message = {r.message_id: r for r in self.observations.receipts if r.event_id and r.event_type}
        # What each message's body says, not the log: this runs after every failed invocation, and a copy of
        # an event the log does not hold as sent is refused before any claim, whatever its claims say.
        pairs = [
            (str(r.event_id), [s.name for s in self.catalog.registry.matching(str(r.event_type), Lane.DURABLE)])
            for r in (by_message[m] for m in message_ids if m in by_message)
        ]
        found = self._claim_statuses([(event_id, name) for event_id, names in pairs for name in names])
        for event_id, names in pairs:
            statuses = [found[(event_id, name)] for name in names if (event_id, name) in found]
            # Mostly while a pair waits; now and then when its pairs are done or dead already.
            settled = self.chaos.draw(Fault.CONFLICTING_COPY).random() < 0.3
            if names and len(statuses) == len(names) and ("PENDING" in statuses or settled):
                return event_id
        return None

    def _claim_statuses(self, pairs: Sequence[tuple[str, str]]) -> dict[tuple[str, str], str]:
        """The status of each (event, subscription) pair's claim that exists, in as few requests as BatchGetItem
        allows (this runs after every failed invocation: one query per event made long seeds slow)."""
        table = self.operations.topology.inbox_table
        statuses: dict[tuple[str, str], str] = {}
        wanted = [keys.claim_key(event_id, name) for event_id, name in dict.fromkeys(pairs)]
        while wanted:
            request: dict[str, Any] = {table: {"Keys": wanted[:100], "ConsistentRead": True}}
            wanted = wanted[100:]
            while request:
                answer = self.operations.dynamodb.batch_get_item(RequestItems=request)
                for item in answer["Responses"].get(table, []):
                    claim = ClaimRecord.from_item(item)
                    statuses[(claim.event_id, claim.subscription)] = claim.status
                request = answer.get("UnprocessedKeys") or {}
        return statuses

    def _send_conflicting_copy(self, event_id: str) -> None:
        envelope = next((e for e in self._logs() if e.id == event_id), None)
        if envelope is None:  # a message of an event the log does not hold (a forged one): no copy of it
            return
        forged = reseal(envelope, {**envelope.payload, "amount": int(envelope.payload["amount"]) + 1000})
        self.world.conflicting_copies.append(event_id)
        self.sqs.send_message(
            QueueUrl=self.durable_queue_url,
            MessageBody=json.dumps(forged.to_item()),
            MessageGroupId=f"{envelope.tenant}-copy",
            MessageDeduplicationId=f"copy-{event_id}-{len(self.world.conflicting_copies)}",
        )
        self.trace.add("sqs", f"a copy of {self.trace.event(event_id)} with other content lands in another group")

    def _second_worker(self, key: str) -> SecondWorker:
        """How a handler outlives its message's visibility: after the queue's visibility timeout, a second
        worker runs the message to the end, or dies holding the claim while the first worker completes, fails
        retryably or fails terminally (all of which its lost claim must fence out); or, with a visibility
        timeout shorter than the handler, a second worker arrives while the first one's lease is live (and
        must leave the claim alone)."""
        draw = self.chaos.draw(Fault.VISIBILITY_TIMEOUT)
        endings = ("second completes", "completes", "retryable", "terminal", "shorter visibility")
        ending = draw.choices(endings, weights=(1, 2, 1, 2, 2))[0]
        name = self.trace.key(key)
        if ending == "second completes":
            return SecondWorker()
        if ending == "shorter visibility":
            after = timedelta(seconds=draw.randint(15, 45))
            self.trace.add("FAULT", f"{name}: its message is visible again after {after.seconds} s, while it runs")
            return SecondWorker(after=after)
        if ending != "completes":
            self.world.stale_owner_failure[key] = ending
        self.trace.add("FAULT", f"the second worker of {name} dies holding it; the first {ending}")
        return SecondWorker(dies=True)

    def _sdk_resends(self, subject: str) -> bool:
        """Some lost answers are retried by the caller's SDK at once (botocore re-sends a 500): the
        caller sees the answer to the second send, and must recognise its own write in it."""
        resent = self.chaos.draw(Fault.LOST_ANSWER).random() < 0.4
        if resent:
            self.trace.add("FAULT", f"the SDK re-sends {subject}")
        return resent

    @contextmanager
    def _broken_deploy(self) -> Iterator[FaultCount]:
        """A deploy that cannot start (``broken_deploy``): for as many invocations as the queue's backstop,
        every batch fails before any claim, so its messages reach the DLQ; then the fix is deployed."""
        failing = {"left": 0}
        backstop = self.runtime.stack.queues[self.runtime.stack.output_reference("DurableQueueUrl").logical_id]
        window = (backstop.max_receive_count or 0) + 1

        def deploy(happening: Happening) -> None:
            """A fault point as the batch starts."""
            if happening.moment is not Moment.BEFORE_BATCH:
                return
            if failing["left"] == 0 and self.chaos.fires(Fault.BROKEN_DEPLOY, "the durable consumer"):
                failing["left"] = window
                self._dlq_alarm = True  # once its messages reach the DLQ, the operator redrives them
            if failing["left"] > 0:
                failing["left"] -= 1
                raise faults.WorkerCrash("the deployed consumer fails at start")

        with observing(deploy):
            yield self.chaos.count(Fault.BROKEN_DEPLOY)

    @contextmanager
    def _redelivering_early(self) -> Iterator[FaultCount]:
        """After an invocation failed as a whole, its messages are visible again at once (a visibility timeout
        shorter than the lease): a copy arrives while a crashed worker's lease is still live."""

        def early(result: BatchResult) -> None:
            crashed = result.crashed is not None and self.durable.in_flight
            if crashed and self.chaos.fires(Fault.EARLY_REDELIVERY, f"{len(self.durable.in_flight)} message(s)"):
                faults.redeliver(self.durable)

        with self.durable.watched(PollWatcher(polled=early)):
            yield self.chaos.count(Fault.EARLY_REDELIVERY)

    def _before_send(self, entries: Sequence[Mapping[str, Any]]) -> None:
        names = ", ".join(
            f"{self.trace.event(str(e['MessageDeduplicationId']))}({e['MessageGroupId']})" for e in entries
        )
        if self.chaos.fires(Fault.PIPE_SEND_FAILURE, names):
            raise TargetInvocationError("injected: SendMessageBatch failed")
        self._record_sends(entries, "pipe sends")
        self.observations.sent_batches.append([dict(entry) for entry in entries])

    def _duplicate_delivery(self, _records: Sequence[PipeRecord]) -> bool:
        if not self.chaos.fires(Fault.PIPE_DUPLICATE_BATCH):
            return False
        self._record_sends(self.observations.sent_batches[-1], "pipe sends again")
        return True

    def _reorder(self, records: list[PipeRecord]) -> list[PipeRecord]:
        """Any order of the batch's items; one item's records keep theirs (stream order is per item)."""
        if len(records) < 2 or not self.chaos.fires(Fault.STREAM_REORDER, f"a batch of {len(records)}"):
            return records
        by_item: dict[str, list[PipeRecord]] = {}
        for record in records:
            by_item.setdefault(record.item_key, []).append(record)
        items = list(by_item.values())
        self.chaos.draw(Fault.STREAM_REORDER).shuffle(items)
        return [record for item in items for record in item]

    def rival_emit(self, tenant: str) -> None:
        """Another writer of ``tenant`` commits an item first (the ``rival_emit`` fault)."""
        self._rival_serial += 1
        serial = self._rival_serial
        self._emit(
            self.rivals[tenant], Emit(f"rival{serial}", tenant, -1, f"rival-item{serial}", serial, False), "rival"
        )
