"""A repair's message (a replay, a reconcile's re-send, a wake-up) that names pairs the deployed catalog no longer
runs: a deploy removed, renamed or narrowed their subscription, or moved it off DURABLE, since it was sent
(``outbox.pairs``: the MARK_DEAD rules). Each pair that waited for it is made dead again with a dead letter that
says why, leaves the order it waited in, and the order goes on without it."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from outbox import keys
from outbox.delivery.observers import Told
from outbox.delivery.path import RetryableDeliveryError
from outbox.delivery.run import ORDER_RACE_LOOKS
from outbox.delivery.runs import Runs
from outbox.exceptions import LeaseLostError, WatermarkMovedError
from outbox.log.envelope import Envelope
from outbox.pairs import Act, DeployedCatalog, State, rule
from outbox.subscriptions import Subscription

if TYPE_CHECKING:
    from outbox.delivery.batch import Batch
    from outbox.delivery.ordered import OrderedGate


class LeftOut:
    """Records the pairs a repair's message names that the deployed catalog no longer runs."""

    def __init__(self, runs: Runs, ordered: Callable[[], OrderedGate]) -> None:
        self.runs = runs
        self.inbox = runs.inbox
        self.ordered = ordered  # built only when a left-out pair's subscription is ordered

    def record(
        self,
        deployed: DeployedCatalog,
        envelope: Envelope,
        targets: Iterable[str],
        running: tuple[Subscription, ...],
        receive_count: int,
        batch: Batch | None = None,
    ) -> None:
        """A repair's message names pairs the deployed catalog no longer runs (a deploy removed, renamed or
        narrowed their subscription, or moved it off DURABLE since the repair was sent): each that waited for
        it (REPLAYING, DEFERRED, or PENDING with its lease lapsed) is made dead again with a dead letter that says
        why, so that no repair is reported under way while nothing will ever run it (``outbox.pairs.machine``: the
        MARK_DEAD rules). One under a live lease is a run of the code before the deploy: the message comes back.
        ``batch``: the message's (the watermarks it carries), if any."""
        names = {subscription.name for subscription in running}
        for name in sorted(set(targets) - names):
            placement = deployed.place(name, envelope.type, envelope.occurred_at)
            statuses = tuple(state.value for state in State if rule(state, placement.route).consumer is Act.MARK_DEAD)
            if not statuses:
                continue  # the deployed catalog runs it after all (another lane's dispatcher, say): not ours
            why = placement.left_out_because
            try:
                marked = self._mark(envelope, name, why, statuses, receive_count)
            except LeaseLostError as exc:  # a run under way (the code before the deploy) ends it, or lapses
                raise RetryableDeliveryError(f"{envelope.id}:{name} is running elsewhere: asked again later") from exc
            if marked:
                log = {"event_id": envelope.id, "subscription": name, "tenant": envelope.tenant}
                self.runs.tell(Told.LEFT_OUT, log, key=keys.idempotency_key(envelope.id, name), why=why)
            found = deployed.find(name)
            if found is not None and found.ordered:
                # It may have waited in the order, which goes on without it: the next deferred event is sent on
                # (again, on a redelivery of this message: the marking above may have landed before a crash).
                self.ordered().send_next(found, envelope.tenant, batch)

    def _mark(self, envelope: Envelope, name: str, why: str, statuses: tuple[str, ...], receive_count: int) -> bool:
        """Dead again with its left_out dead letter, and out of the order it waited in (if any), at once; looking
        again while that order moves (a crash on the way: the message comes back and does it again)."""
        for _ in range(ORDER_RACE_LOOKS):
            order = self.runs.order.release_items(envelope.tenant, name, envelope.seq)
            try:
                return self.inbox.mark_left_out(envelope, name, why, statuses, receive_count, order)
            except WatermarkMovedError:
                continue
        raise WatermarkMovedError(f"the order of {name} for {envelope.tenant} kept moving: the message comes back")
