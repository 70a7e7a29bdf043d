"""What every run of one consumer shares (each pair's ``outbox.delivery.run.Run`` is given it).

The inbox, the store, the lease policy, the invocation's time (``RunTimes``), how a failure is told (the error
detail) and counted (Powertools metrics): one ``Runs`` per consumer.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from functools import cached_property
from typing import TYPE_CHECKING, Any

from outbox.delivery.path import Metric, RemainingMs
from outbox.delivery.timing import LeasePolicy, RunTimes
from outbox.inbox import Inbox
from outbox.log.envelope import Envelope
from outbox.log.store import EventStore
from outbox.redaction import ErrorDetail
from outbox.subscriptions import Subscription

if TYPE_CHECKING:
    from outbox.pairs.order import OrderBook

logger = logging.getLogger(__name__)


class Runs:
    """What every run of one consumer shares."""

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

    @cached_property
    def order(self) -> OrderBook:
        """The ordered subscriptions' rows (``outbox.pairs.order``): imported only once a pair needs them, so that a
        consumer whose catalog orders nothing does not load them at its cold start."""
        from outbox.pairs.order import OrderBook

        return OrderBook(self.inbox.table_name, self.store.table_name, client=self.inbox.client, clock=self.inbox.clock)

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

    def count(self, metric: Metric) -> None:
        if self.metrics is not None:
            self.metrics.add_metric(name=metric.value, unit="Count", value=1)
