"""The one answer to "what does the deployed catalog do with this pair now".

The consumer, replay, skip, the failure groups' repairs, reconcile and status all ask ``DeployedCatalog``
for a pair's route, and ``outbox.pairs.machine.rule`` for what that route means in the pair's state: none of
them matches names, globs, lanes or ``ordered_since`` on its own, so none can disagree with another about a
pair a deploy changed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from outbox.log.envelope import format_timestamp
from outbox.pairs.machine import Route, Rule, State, rule, state_of
from outbox.subscriptions import Lane, Subscription

if TYPE_CHECKING:
    from outbox.subscriptions import SubscriptionRegistry


# The lanes the durable consumer runs: DURABLE handlers, and WORKFLOW pairs it hands to a durable execution.
CONSUMER_LANES = frozenset({Lane.DURABLE, Lane.WORKFLOW})


@dataclass(frozen=True)
class Placement:
    """A pair's route under the deployed catalog, the subscription that runs it (None when left out), and, when
    left out, why in words an operator recognises."""

    route: Route
    subscription: Subscription | None = None
    left_out_because: str = ""

    def rule(self, status: str | None) -> Rule:
        """What every command does with the pair whose claim row says ``status`` (None: no row)."""
        return rule(state_of(status), self.route)

    def why(self, status: str | None) -> str:
        return self.rule(status).why.format(why=self.left_out_because)


class DeployedCatalog:
    """The deployed catalog's durable subscriptions, read as routes for pairs."""

    def __init__(self, registry: SubscriptionRegistry) -> None:
        self.registry = registry  # read at each question: a registry may still grow after this is made

    def running(self, event_type: str) -> tuple[Subscription, ...]:
        """The subscriptions that run an event of ``event_type`` (the consumer's question; memoised per type)."""
        return self.registry.matching(event_type, Lane.DURABLE) + self.registry.matching(event_type, Lane.WORKFLOW)

    @staticmethod
    def route_of(subscription: Subscription, event_type: str, occurred_at: datetime) -> Route:
        """The route of the pair (an event of ``event_type`` that occurred at ``occurred_at``, ``subscription`` as
        deployed): a subscription that no longer matches the type, or left the DURABLE lane, leaves it out."""
        if subscription.lane is not Lane.DURABLE or not subscription.matches(event_type):
            return Route.LEFT_OUT
        return Route.IN_ORDER if subscription.orders(occurred_at) else Route.UNORDERED

    def place(self, subscription: str, event_type: str, occurred_at: datetime | str | Callable[[], str]) -> Placement:
        """The route of the pair (an event of ``event_type`` that occurred at ``occurred_at``, ``subscription``).
        ``occurred_at`` may be a function that reads it (the log's text form): it is called only for an ordered
        subscription with an ``ordered_since``, the one case where the time decides."""
        found = self.find(subscription)
        if found is None:
            return Placement(Route.LEFT_OUT, None, f"{subscription} is not in the deployed catalog")
        if found.lane not in CONSUMER_LANES:
            return Placement(Route.LEFT_OUT, None, f"{subscription} is on the {found.lane.value} lane now")
        if not found.matches(event_type):
            return Placement(
                Route.LEFT_OUT, None, f"{subscription} matches {found.pattern!r} now, which {event_type} is not"
            )
        if found.ordered and (found.ordered_since is None or found.in_order(_text(occurred_at))):
            return Placement(Route.IN_ORDER, found)
        return Placement(Route.UNORDERED, found)

    def find(self, subscription: str) -> Subscription | None:
        return next((s for s in self.registry.subscriptions if s.name == subscription), None)

    def durable(self) -> list[Subscription]:
        """The durable subscriptions, by name."""
        return sorted((s for s in self.registry.subscriptions if s.lane is Lane.DURABLE), key=lambda s: s.name)

    def consumed(self) -> list[Subscription]:
        """The subscriptions whose pairs the durable consumer runs (DURABLE, and WORKFLOW: handed to an
        execution), by name: every one of their pairs has an outcome to come."""
        return sorted((s for s in self.registry.subscriptions if s.lane in CONSUMER_LANES), key=lambda s: s.name)


def _text(occurred_at: datetime | str | Callable[[], str]) -> str:
    if isinstance(occurred_at, str):
        return occurred_at
    if isinstance(occurred_at, datetime):
        return format_timestamp(occurred_at)
    return occurred_at()


__all__ = ["DeployedCatalog", "Placement", "Route", "State"]
