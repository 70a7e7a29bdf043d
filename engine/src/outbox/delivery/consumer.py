"""The durable consumer: Powertools SQS FIFO batch processing over the lease-claim inbox.

This is the batch loop: read the batch ahead, check each message against the log, parse it, find its
subscriptions, choose each pair's delivery path (``outbox.delivery``), record poison, and report the records to
retry. The paths decide what happens to a pair; the loop only maps their outcomes to what SQS hears.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.utilities.batch import SqsFifoPartialProcessor, process_partial_response
from aws_lambda_powertools.utilities.batch.exceptions import BatchProcessingError
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from outbox import keys
from outbox.delivery.batch import Batch
from outbox.delivery.direct import DirectPath
from outbox.delivery.lease import LeasePath
from outbox.delivery.left_out import LeftOut
from outbox.delivery.log_check import LogCheck, read_record
from outbox.delivery.observers import RunObserver, Told
from outbox.delivery.path import (
    DeliveryOutcome,
    Metric,
    Pair,
    RemainingMs,
    RetryableDeliveryError,
    UnfinishedAttemptsError,
)
from outbox.delivery.run import DeliveryPath, Run
from outbox.delivery.runs import Runs
from outbox.delivery.timing import LeasePolicy, RunTimes
from outbox.exceptions import (
    ContractViolationError,
    EnvelopeParseError,
    OutboxValidationError,
)
from outbox.inbox import Inbox, envelope_digest, storable_text
from outbox.log.envelope import Envelope
from outbox.log.store import EventStore
from outbox.messages import Message, parse_body
from outbox.observing import AROUND, observed
from outbox.pairs import DeployedCatalog, Route
from outbox.redaction import ErrorDetail
from outbox.subscriptions import Lane, Subscription, SubscriptionRegistry
from outbox.tracing import observed_pair

if TYPE_CHECKING:
    from outbox.delivery.ordered import OrderedGate
    from outbox.delivery.workflow import WorkflowPath
    from outbox.pairs.order import OrderBook, WakeUps
    from outbox.workflows.starter import WorkflowStarter


__all__ = [
    "ContractViolationError",
    "DeliveryOutcome",
    "DurableConsumer",
    "LeasePolicy",
    "Metric",
    "UnfinishedAttemptsError",
    "parse_body",
]


class DurableConsumer:
    """Runs every matching DURABLE subscription of each message exactly once per (event, subscription).

    Parameters
    ----------
    registry, inbox, store:
        The subscriptions, the claim table, and the event store used for handlers' follow-up events.
        ``inbox.max_attempts`` decides when a pair is dead: the claim counts its own attempts, so a message
        that waited behind a failing neighbour (and collected receives meanwhile) loses nothing.
    metrics:
        Optional Powertools ``Metrics``; the handler flushes it.
    error_detail:
        What a failure says in logs and dead letters (``outbox.redaction``): its type and place by default.
    wake_ups:
        How a deferred event goes back to the durable queue (``outbox.pairs.order.WakeUps``); required when a
        subscription is ordered.
    log:
        Optional Powertools ``Logger``: every line logged while a pair runs carries its tenant, event id,
        correlation id, subscription and receive count (and its attempt while the handler runs).
    observers:
        Told of each outcome of a pair's run (``outbox.delivery.observers``: claimed, completed, retrying, dead,
        deferred, ...) after the consumer's log and metrics are: to count per subscription, say, or to send dead
        letters to your own tools. One that raises is logged and passed over: the delivery goes on.
    """

    def __init__(
        self,
        registry: SubscriptionRegistry,
        inbox: Inbox,
        store: EventStore,
        *,
        lease_policy: LeasePolicy | None = None,
        metrics: Any | None = None,
        error_detail: ErrorDetail = ErrorDetail.REDACTED,
        wake_ups: WakeUps | None = None,
        log: Any | None = None,
        workflows: WorkflowStarter | None = None,
        workflow_functions: Mapping[str, Any] | None = None,
        observers: Sequence[RunObserver] = (),
    ) -> None:
        self.registry = registry
        self._deployed = DeployedCatalog(registry)
        self.log = log
        self.inbox = inbox
        self.store = store
        ordered = sorted(s.name for s in registry.subscriptions if s.ordered)
        if ordered and wake_ups is None:
            raise OutboxValidationError(
                f"ordered subscriptions ({', '.join(ordered)}) need wake_ups=outbox.pairs.order.WakeUps(...): a "
                "deferred event goes back to the durable queue when its predecessor is applied"
            )
        self.times = RunTimes()
        self.runs = Runs(
            inbox,
            store,
            lease_policy=lease_policy or LeasePolicy(),
            metrics=metrics,
            error_detail=error_detail,
            times=self.times,
            observers=observers,
        )
        self.log_check = LogCheck(store)
        self.lease = LeasePath()
        self.left_out = LeftOut(self.runs, lambda: self.ordered)
        self.direct = DirectPath()
        self._wake_ups = wake_ups
        if ordered:
            self.ordered  # noqa: B018 - built now, before any thread could race to build it twice
        self.workflow: WorkflowPath | None = None
        if any(s.lane is Lane.WORKFLOW for s in registry.subscriptions):  # its modules only where a catalog has one
            from outbox.delivery.workflow import workflow_path

            self.workflow = workflow_path(registry, self.runs, workflows, workflow_functions)

    @cached_property
    def ordered(self) -> OrderedGate:
        """The ordered gate: built with the consumer when its catalog orders a subscription, else never (unless a
        subscription registered later is ordered), so that a consumer whose catalog orders nothing does not import
        ordering's modules at its cold start (make bench, section 3)."""
        from outbox.delivery.ordered import OrderedGate

        return OrderedGate(self.runs, self._wake_ups)

    @property
    def deployed(self) -> DeployedCatalog:
        """What the deployed catalog does with each pair: the one answer every repair and status also ask (of the
        registry as it is now: a test may swap it between invocations)."""
        if self._deployed.registry is not self.registry:
            self._deployed = DeployedCatalog(self.registry)
        return self._deployed

    # What the runs share, as a caller configured it (a test may change it between invocations).
    @property
    def error_detail(self) -> ErrorDetail:
        return self.runs.error_detail

    @error_detail.setter
    def error_detail(self, detail: ErrorDetail) -> None:
        self.runs.error_detail = detail

    @property
    def metrics(self) -> Any | None:
        return self.runs.metrics

    @metrics.setter
    def metrics(self, metrics: Any | None) -> None:
        self.runs.metrics = metrics

    @property
    def lease_policy(self) -> LeasePolicy:
        return self.runs.lease_policy

    @property
    def wake_ups(self) -> WakeUps | None:
        return self._wake_ups

    @property
    def order(self) -> OrderBook:
        """The ordered subscriptions' watermarks and deferrals (``outbox.pairs.order.OrderBook``)."""
        return self.ordered.order

    # -- the Lambda entry -----------------------------------------------------------------------------

    @observed(AROUND["handle"])
    def handle(self, event: Mapping[str, Any], context: Any) -> dict[str, Any]:
        """Process one SQS FIFO batch; failures stop only their own message group."""
        processor = SqsFifoPartialProcessor(skip_group_on_error=True)
        remaining: RemainingMs = context.get_remaining_time_in_millis
        with self.times.invocation(remaining):
            return self._handle(event, context, processor, remaining)

    def _handle(
        self, event: Mapping[str, Any], context: Any, processor: SqsFifoPartialProcessor, remaining: RemainingMs
    ) -> dict[str, Any]:
        places: list[tuple[str, str]] = []  # the batch's ordered (tenant, subscription) places

        def watermark_keys(messages: Sequence[Message]) -> dict[str, list[dict[str, Any]]]:
            """The watermarks the batch's ordered deliveries need, read with its events in one request."""
            places.extend(dict.fromkeys(self._ordered_places(messages)))
            if not places:
                return {}
            return {self.inbox.table_name: [keys.watermark_key(tenant, name) for tenant, name in places]}

        ahead = self.log_check.read_ahead(
            event.get("Records") or [], lambda message: bool(self._subscriptions(message)), also=watermark_keys
        )
        # A batch without ordered deliveries carries no watermarks (a record the read ahead could not parse, read
        # again alone, still reaches the gate: it reads its watermark).
        batch = Batch(ahead, self.ordered.carrying(places, ahead.rows) if places else None)

        def record_handler(record: SQSRecord) -> None:
            self.process_record(record, remaining, batch)

        try:
            response = process_partial_response(
                event=dict(event), record_handler=record_handler, processor=processor, context=context
            )
            failures = [dict(failure) for failure in response.get("batchItemFailures", [])]
        except BatchProcessingError:
            # Powertools raises when every record failed or was skipped (no raise_on_entire_batch_failure
            # for FIFO yet). Reporting them all is the same for SQS without counting a function error.
            failures = [{"itemIdentifier": r["messageId"]} for r in event["Records"]]
        # Only now, with every record of the batch done: the time in-place work spends is time no other
        # record (another tenant's group, most likely) needs.
        reported = {failure["itemIdentifier"] for failure in failures}
        # Owed only by the gate's completions, whichever records they came from.
        unwoken = self.ordered.wake_owed(batch, remaining) if batch.owed else []
        failures += [{"itemIdentifier": i} for i in unwoken if i not in reported]
        return {"batchItemFailures": failures}

    def _ordered_places(self, messages: Iterable[Message]) -> list[tuple[str, str]]:
        """The (tenant, subscription) of every ordered delivery the batch's messages hold in their order."""
        return [
            (message.envelope.tenant, subscription.name)
            for message in messages
            for subscription in self._subscriptions(message)
            if self.deployed.route_of(subscription, message.envelope.type, message.envelope.occurred_at)
            is Route.IN_ORDER
        ]

    # -- one message ----------------------------------------------------------------------------------

    @observed(AROUND["read_record"])
    def process_record(self, record: SQSRecord, remaining_ms: RemainingMs, batch: Batch | None = None) -> None:
        """One record of a ``batch`` (what it read ahead and carries; its ordered completions owe it the wake-ups
        they leave), or alone, its wake-ups run at once."""
        ahead = batch.ahead if batch is not None else None
        if batch is not None:
            batch.begin_record(str(record.message_id))
        try:
            message = ahead.message(record) if ahead is not None else None
            if message is None:
                message = read_record(record.raw_event)
        except Exception as exc:  # whatever reading raised, the record is a poison pill
            self._poison(record, str(exc) if isinstance(exc, EnvelopeParseError) else f"{type(exc).__name__}")
            return
        envelope = message.envelope
        log = {"event_id": envelope.id, "correlation_id": envelope.correlation_id, "tenant": envelope.tenant}
        subscriptions = self._subscriptions(message)
        if message.targets is not None:
            self.left_out.record(self.deployed, envelope, message.targets, subscriptions, message.receive_count, batch)
        if not subscriptions:
            self.runs.tell(Told.UNMATCHED, log, event_id=envelope.id, type=envelope.type)
            return
        doubt = self.log_check.doubt(envelope, ahead)
        if doubt is not None:
            self._refuse(envelope, subscriptions, doubt, message.receive_count)
            return
        digest = envelope_digest(envelope)  # once per message, not per subscription
        # Absence of a claim row proves "never completed" only while the inbox still remembers completions
        # (a repair message is vouched for by the REPLAYING row its repair wrote, at any age).
        may_create = self.inbox.can_vouch_for(envelope.occurred_at)
        repair = message.targets is not None  # a replay or reconcile: its pairs have rows already
        retry = [
            s.name
            for s in subscriptions
            if self.deliver(
                envelope,
                s,
                message.receive_count,
                remaining_ms,
                digest,
                may_create=may_create,
                repair=repair,
                batch=batch,
            )
            is DeliveryOutcome.RETRY
        ]
        if batch is not None:
            batch.end_record()  # its ordered completions' wake-ups, run after the batch's records
        if retry:
            raise RetryableDeliveryError(f"event {envelope.id}: {', '.join(retry)} will run again")

    def _subscriptions(self, message: Message) -> tuple[Subscription, ...]:
        """The durable subscriptions a message runs: its type's, narrowed to those a repair message names."""
        subscriptions = self.deployed.running(message.envelope.type)
        if message.targets is not None:
            subscriptions = tuple(s for s in subscriptions if s.name in message.targets)
        return subscriptions

    @observed(AROUND["deliver"])
    def deliver(
        self,
        envelope: Envelope,
        subscription: Subscription,
        receive_count: int,
        remaining_ms: RemainingMs,
        digest: str | None = None,
        *,
        may_create: bool = True,
        repair: bool = False,
        batch: Batch | None = None,
    ) -> DeliveryOutcome:
        """Run one (event, subscription) to its outcome, on the path that fits it (``path_for``), once the
        invocation has time for it: a run the deadline would cut off comes back with its group instead."""
        log = {"event_id": envelope.id, "subscription": subscription.name, "tenant": envelope.tenant}
        if self.runs.lacks_time(subscription, remaining_ms, log):
            return DeliveryOutcome.RETRY
        pair = Pair(
            envelope, subscription, receive_count, digest or envelope_digest(envelope), may_create, repair, batch
        )
        with observed_pair(
            envelope, subscription.name, lane=Lane.DURABLE.value, receive_count=receive_count, log=self.log
        ) as observed:
            outcome = self.path_for(pair).deliver(Run(pair, remaining_ms, self.runs))
            observed.outcome(outcome.value)
        return outcome

    def path_for(self, pair: Pair) -> DeliveryPath:
        """The ordered gate for an ordered subscription's event in its order; the direct path for a
        DynamoDB-only subscription (which hands any pair with history to the lease path); else the lease path.

        An event that occurred before an ordered subscription's order starts (``ordered_since``: the
        subscription became ordered after it had run) is not part of the order: it is delivered as the
        subscription delivered it before the switch, so work in flight at the deploy (relayed, retried, dead
        and replayed) runs once, and nothing waits for it."""
        if pair.subscription.lane is Lane.WORKFLOW and self.workflow is not None:
            return self.workflow
        if self.deployed.route_of(pair.subscription, pair.envelope.type, pair.envelope.occurred_at) is Route.IN_ORDER:
            return self.ordered
        if pair.runs_directly:
            return self.direct
        return self.lease

    # -- what never reaches a path --------------------------------------------------------------------

    def _refuse(
        self, envelope: Envelope, subscriptions: tuple[Subscription, ...], doubt: tuple[str, str], receive_count: int
    ) -> None:
        """Never run an event the log does not hold: a conflict dead letter per subscription it would have run,
        and the message is acknowledged (a forger cannot block the tenant's group with it)."""
        why, logged = doubt
        error = f"event {envelope.id} was not run: {why}"
        self.runs.tell(
            Told.REFUSED, {"event_id": envelope.id, "tenant": envelope.tenant}, event_id=envelope.id, why=why
        )
        for subscription in subscriptions:
            with observed_pair(
                envelope, subscription.name, lane=Lane.DURABLE.value, receive_count=receive_count, log=self.log
            ) as observed:
                observed.outcome("conflict")
            self.inbox.record_refusal(
                envelope,
                subscription.name,
                error,
                "NotInEventLog",
                receive_count,
                received_hash=envelope.hash,
                logged_hash=logged,
            )
            log = {"event_id": envelope.id, "subscription": subscription.name, "tenant": envelope.tenant}
            self.runs.tell(Told.REFUSED_PAIR, log)

    def _poison(self, record: SQSRecord, error: str) -> None:
        attributes = record.raw_event.get("attributes") or {}
        kept = {
            name: str(attributes.get(name, ""))
            for name in ("MessageGroupId", "MessageDeduplicationId", "ApproximateReceiveCount")
        }
        # Escaped like the stored row: a lone surrogate from the body would make the log line itself fail
        # to encode (and be lost) on the way to stdout.
        body = record.raw_event.get("body")
        self.inbox.record_poison(str(record.message_id), body if isinstance(body, str) else repr(body), error, kept)
        self.runs.tell(Told.POISON_PILL, {}, message_id=record.message_id, error=storable_text(error))
