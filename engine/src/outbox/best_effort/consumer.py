"""The record-change consumer: the one dispatcher of the BEST_EFFORT lane.

No order, no inbox, no dead-letter rows: a failing handler fails its message, which SQS retries and
finally moves to the (alarmed) dead-letter queue. Handlers must therefore tolerate running again. Each
failed record is counted (``Metric.FAILURES``): SQS's age metric cannot see a message that keeps failing
(docs/aws-behaviour.md R9.1), the count can.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from contextlib import AbstractContextManager
from enum import StrEnum
from typing import Any

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from outbox.best_effort.changes import RecordChange, parse_record_change
from outbox.subscriptions import Lane, SubscriptionRegistry
from outbox.tracing import PairSpan, observed

logger = logging.getLogger(__name__)

__all__ = ["Metric", "RecordChangeConsumer"]


class Metric(StrEnum):
    """The Powertools counts the record-change consumer publishes, one per record."""

    HANDLED = "RowChangesHandled"
    UNMATCHED = "UnmatchedRowChanges"
    FAILURES = "RowChangeFailures"


class RecordChangeConsumer:
    def __init__(self, registry: SubscriptionRegistry, metrics: Any | None = None, log: Any | None = None) -> None:
        self.registry = registry
        self.metrics = metrics
        self.log = log  # a Powertools Logger: each change's lines carry its keys (outbox.tracing.observed)
        self._unmatched_seen: set[str] = set()

    def handle(self, event: Mapping[str, Any], context: Any) -> dict[str, Any]:
        processor = BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)
        response = process_partial_response(
            event=dict(event), record_handler=self.process_record, processor=processor, context=context
        )
        return dict(response)

    def process_record(self, record: SQSRecord) -> None:
        """One record; whatever it raises still fails it as a batch item failure, after it is counted."""
        try:
            self._process(record)
        except Exception:
            self._count(Metric.FAILURES)
            raise

    def _process(self, record: SQSRecord) -> None:
        change = parse_record_change(record.body)
        subscriptions = self.registry.matching(change.type, Lane.BEST_EFFORT)
        if not subscriptions:
            self._unmatched(change.type)
            return
        for subscription in subscriptions:
            with self._observed(change, subscription.name) as observed:
                try:
                    result = subscription.run(change)
                except Exception:
                    observed.outcome("retry")  # the record fails and comes back, every subscription of it with it
                    raise
                observed.outcome("completed")
            if result is not None:
                logger.error(
                    "BEST_EFFORT subscription %s returned a %s for %s, which is dropped: BEST_EFFORT handlers "
                    "return None and write what they must themselves (they may run twice)",
                    subscription.name,
                    type(result).__name__,
                    change.type,
                    extra={"subscription": subscription.name, "row_change_event_id": change.event_id},
                )
        self._count(Metric.HANDLED)

    def _observed(self, change: RecordChange, subscription: str) -> AbstractContextManager[PairSpan]:
        """A span per (row change, subscription): a row change carries no trace context, so it is only the
        invocation's child; a handler that raises ends it with the exception and fails the record."""
        attributes: dict[str, str | int] = {
            "row_change.event_id": change.event_id,
            "row_change.type": change.type,
            "row_change.table": change.table,
            "subscription": subscription,
            "lane": Lane.BEST_EFFORT.value,
        }
        keys = {"row_change_event_id": change.event_id, "row_change_type": change.type, "subscription": subscription}
        return observed(f"process {subscription}", attributes, None, keys=keys, log=self.log)

    def _unmatched(self, change_type: str) -> None:
        """A WARNING the first time this process sees a type nobody subscribes to (a mistyped entity prefix
        drops every change of it), then DEBUG; the metric counts every one."""
        level = logging.DEBUG if change_type in self._unmatched_seen else logging.WARNING
        self._unmatched_seen.add(change_type)
        logger.log(level, "row change %s matched no BEST_EFFORT subscription; it is dropped", change_type)
        self._count(Metric.UNMATCHED)

    def _count(self, metric: Metric) -> None:
        if self.metrics is not None:
            self.metrics.add_metric(name=metric.value, unit="Count", value=1)
