"""What every run of one consumer shares (each pair's ``outbox.delivery.run.Run`` is given it).

The inbox, the store, the lease policy, the invocation's time (``RunTimes``), how a failure is described (the error
detail) and who is told of each outcome (``outbox.delivery.observers``: the metrics, the log, the caller's own):
one ``Runs`` per consumer.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any

from outbox.delivery.observers import LogLines, MetricCounts, RunObserver, Telling, Told
from outbox.delivery.path import RemainingMs
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
        observers: Sequence[RunObserver] = (),
    ) -> None:
        self.inbox = inbox
        self.store = store
        self.lease_policy = lease_policy
        self.error_detail = error_detail
        self.times = times
        self._metric_counts = MetricCounts(metrics)
        self.observers: tuple[RunObserver, ...] = (LogLines(), self._metric_counts, *observers)

    @property
    def metrics(self) -> Any | None:
        """The Powertools ``Metrics`` the outcomes are counted on (a test may swap it between invocations)."""
        return self._metric_counts.metrics

    @metrics.setter
    def metrics(self, metrics: Any | None) -> None:
        self._metric_counts.metrics = metrics

    def tell(self, told: Told, log: Mapping[str, Any] | None = None, **facts: Any) -> None:
        """Tell every observer of an outcome (``outbox.delivery.observers``), once it is recorded. An observer that
        raises is logged and passed over: watching never changes a delivery (one raising after a claim would leave
        the claim held and, receive after receive, spend the pair's attempts)."""
        telling = Telling(told, facts, log or {})
        for observer in self.observers:
            try:
                observer(telling)
            except Exception:  # an observer's bug is its own
                logger.exception("an observer of %s failed; the delivery goes on", told.value)

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
        self.tell(Told.NO_TIME_LEFT, log, subscription=subscription.name, remaining_ms=remaining_ms())
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
