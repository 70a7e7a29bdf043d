"""The record-change consumer: the one dispatcher of the BEST_EFFORT lane.

No order, no inbox, no dead-letter rows: a failing handler fails its message, which SQS retries and
finally moves to the (alarmed) dead-letter queue. Handlers must therefore tolerate running again.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from outbox.record_changes import parse_record_change
from outbox.subscriptions import Lane, SubscriptionRegistry

logger = logging.getLogger(__name__)


class RecordChangeConsumer:
    def __init__(self, registry: SubscriptionRegistry, metrics: Any | None = None) -> None:
        self.registry = registry
        self.metrics = metrics

    def handle(self, event: Mapping[str, Any], context: Any) -> dict[str, Any]:
        processor = BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)
        response = process_partial_response(
            event=dict(event), record_handler=self.process_record, processor=processor, context=context
        )
        return dict(response)

    def process_record(self, record: SQSRecord) -> None:
        change = parse_record_change(record.body)
        subscriptions = self.registry.matching(change.type, Lane.BEST_EFFORT)
        if not subscriptions:
            logger.debug("row change %s matched no subscription", change.type)
            return
        for subscription in subscriptions:
            subscription.handler(change)
        if self.metrics is not None:
            self.metrics.add_metric(name="RowChangesHandled", unit="Count", value=1)
