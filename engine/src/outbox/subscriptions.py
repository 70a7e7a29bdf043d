"""Subscriptions: a name (it keys the inbox), an fnmatch glob over event types, a lane and a handler."""

from __future__ import annotations

import fnmatch
import inspect
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from outbox.exceptions import ContractViolationError, OutboxValidationError
from outbox.log.envelope import Envelope, format_timestamp
from outbox.tracing import TraceContext, outgoing_headers

# Names are stored in inbox keys and dead-letter rows: keep them stable, short and key-safe.
SUBSCRIPTION_NAME_PATTERN = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)*$")
SUBSCRIPTION_NAME_MAX_LENGTH = 100


class Lane(StrEnum):
    """Where a subscription runs. Each lane has exactly one dispatcher (docs/concepts.md, Lanes)."""

    INLINE = "INLINE"  # in emit()'s caller, awaited, fail-closed
    LOCAL = "LOCAL"  # same process after commit, best effort
    DURABLE = "DURABLE"  # the durable consumer, via SQS FIFO and the inbox
    BEST_EFFORT = "BEST_EFFORT"  # the record-change consumer, row changes only
    WORKFLOW = "WORKFLOW"  # a Lambda durable execution, started once per pair by the durable consumer


class Effects(StrEnum):
    """What a DURABLE subscription's handler does besides computing its result.

    ``EXTERNAL`` (the default): it may call other systems, so it runs under a lease, keyed by
    ``Delivery.idempotency_key``, and its completion is a second write. ``DYNAMODB``: its only effects are
    the writes (and follow-up) it returns, so it needs no lease: the consumer runs it, then commits the writes
    with a completion marker conditioned on absence in one transaction, one request per (event,
    subscription). Running such a handler twice is harmless; a handler that calls anything else must not
    say ``DYNAMODB``, or a duplicate delivery calls it twice.
    """

    EXTERNAL = "external"
    DYNAMODB = "dynamodb"


@dataclass(frozen=True)
class FollowUp:
    """An event a handler emits as part of its completion (same transaction as the COMPLETED mark)."""

    event_type: str
    payload: Mapping[str, Any]


@dataclass(frozen=True)
class HandlerResult:
    """What a durable handler returns: DynamoDB writes and an optional follow-up event, committed atomically
    with the completion. External effects are not here: they happen in the handler, keyed by
    ``Delivery.idempotency_key``."""

    writes: Sequence[Mapping[str, Any]] = ()
    follow_up: FollowUp | None = None


@dataclass(frozen=True)
class Delivery:
    """What a handler receives."""

    envelope: Envelope
    subscription: str
    idempotency_key: str  # "<event_id>:<subscription>", stable across retries and take-overs
    attempt: int
    remaining_time_ms: Callable[[], int]

    @property
    def trace_context(self) -> TraceContext | None:
        """The trace context the event was emitted in (None for events stored before it was recorded)."""
        return self.envelope.trace_context

    def trace_headers(self) -> dict[str, str]:
        """HTTP headers (``traceparent``, ``tracestate``) that carry this delivery's trace on to a call the handler
        makes: the attempt's own span with OpenTelemetry, else the event's context, else none."""
        return outgoing_headers(self.envelope.trace_context)


# DURABLE, INLINE and LOCAL handlers take a Delivery and may return a HandlerResult; BEST_EFFORT handlers
# take an outbox.best_effort.changes.RecordChange. One type for both keeps one registry and one catalog.
Handler = Callable[[Any], "HandlerResult | None"]


@dataclass(frozen=True)
class Subscription:
    name: str
    pattern: str
    lane: Lane
    handler: Handler
    terminal_on_validation_error: bool = True
    description: str = ""
    effects: Effects = Effects.EXTERNAL
    # Apply each tenant's events in seq order, each once (outbox.pairs.order); DURABLE only, always under a lease.
    ordered: bool = False
    # Where the order starts: events that occurred before this moment are not part of it (and not run). None:
    # at each tenant's first event; events emitted before the subscription existed come by a reconcile.
    ordered_since: datetime | None = None

    def __post_init__(self) -> None:
        # effects="dynamodb" reads well in a catalog; stored as the enum, so a typo fails here, at import.
        try:
            object.__setattr__(self, "effects", Effects(self.effects))
        except ValueError:
            choices = ", ".join(repr(e.value) for e in Effects)
            raise OutboxValidationError(
                f"subscription {self.name!r}: effects={self.effects!r} is not one of {choices}"
            ) from None
        self._check_order()
        # Asked once here, not at each call: the catalog's contract lists it, and ``run`` refuses the call.
        object.__setattr__(self, "_unbindable", _unbindable(self))

    @property
    def cannot_bind(self) -> str | None:
        """Why the handler cannot be called as its lane calls it (with one argument), or None."""
        found: str | None = getattr(self, "_unbindable", None)
        return found

    def run(self, argument: Any) -> Any:
        """The handler on ``argument`` (a ``Delivery``; a ``RecordChange`` on BEST_EFFORT). A handler whose
        signature cannot take it is a ``ContractViolationError`` naming the handler: terminal on DURABLE (no
        retry binds it), never a ``TypeError`` raised in the engine's frame."""
        if self.cannot_bind is not None:
            raise ContractViolationError(self.cannot_bind)
        return self.handler(argument)

    def _check_order(self) -> None:
        if self.ordered and self.lane is not Lane.DURABLE:
            raise OutboxValidationError(
                f"subscription {self.name!r}: ordered=True needs the DURABLE lane (it is {self.lane.value}); the "
                "other lanes run in the emitter's process and are in order already, or are best effort"
            )
        if self.ordered_since is not None:
            if not self.ordered:
                raise OutboxValidationError(f"subscription {self.name!r}: ordered_since is given, but not ordered=True")
            if self.ordered_since.tzinfo is None:
                raise OutboxValidationError(
                    f"subscription {self.name!r}: ordered_since must be timezone-aware, "
                    "for example datetime(2026, 12, 1, tzinfo=UTC)"
                )
            # Compared as text with the events' occurred_at, which has this format.
            object.__setattr__(self, "_since_text", format_timestamp(self.ordered_since))

    def matches(self, event_type: str) -> bool:
        return fnmatch.fnmatchcase(event_type, self.pattern)

    def orders(self, occurred_at: datetime) -> bool:
        """Whether this subscription delivers an event that occurred at ``occurred_at`` in its order: it is
        ordered, and the event is not from before ``ordered_since`` (no text to format without one)."""
        if not self.ordered:
            return False
        return getattr(self, "_since_text", None) is None or self.in_order(format_timestamp(occurred_at))

    def in_order(self, occurred_at: str) -> bool:
        """Whether an event that occurred at ``occurred_at`` (the log's text form) is part of this ordered
        subscription's order: always, unless it occurred before ``ordered_since``."""
        since: str | None = getattr(self, "_since_text", None)
        return since is None or occurred_at >= since


def handler_place(handler: Callable[..., Any]) -> str:
    """Where a handler is defined (``shop/catalog.py:19``), if Python can tell; else ''."""
    try:
        unwrapped = inspect.unwrap(handler)
        path, line = inspect.getsourcefile(unwrapped), inspect.getsourcelines(unwrapped)[1]
    except (OSError, TypeError):
        return ""
    return f"{path}:{line}" if path else ""


def _unbindable(subscription: Subscription) -> str | None:
    """Why ``subscription``'s handler cannot be called with the one positional argument its lane passes (a
    ``Delivery``, or a ``RecordChange`` on BEST_EFFORT), or None: Lambda's ``def handler(event, context)``
    passes every other check and fails only when an event comes."""
    handler = subscription.handler
    try:
        signature = inspect.signature(handler)
    except (TypeError, ValueError):  # a builtin or a callable Python cannot describe: called as it is
        return None
    try:
        signature.bind(None)
    except TypeError:
        pass
    else:
        return None
    argument = "record_change: RecordChange" if subscription.lane is Lane.BEST_EFFORT else "delivery: Delivery"
    name = getattr(handler, "__name__", type(handler).__name__)
    module = getattr(handler, "__module__", None)
    qualified = f"{module}:{getattr(handler, '__qualname__', name)}" if module else name
    place = handler_place(handler)
    bare = signature.replace(
        parameters=[p.replace(annotation=inspect.Parameter.empty) for p in signature.parameters.values()],
        return_annotation=inspect.Signature.empty,
    )
    return (
        f"subscription {subscription.name!r}: its handler {qualified}{bare}"
        f"{f' at {place}' if place else ''} cannot be called with the one argument the {subscription.lane.value} "
        f"lane passes: define it as def {name}({argument}) (not Lambda's (event, context))"
    )


@dataclass
class SubscriptionRegistry:
    """The subscriptions of an application. Built explicitly (no import-time global), so tests build their own."""

    subscriptions: list[Subscription] = field(default_factory=list)
    _matches: dict[tuple[str, Lane], tuple[Subscription, ...]] = field(default_factory=dict, repr=False)

    @classmethod
    def of(cls, subscriptions: Iterable[Subscription]) -> SubscriptionRegistry:
        registry = cls()
        for subscription in subscriptions:
            registry.register(subscription)
        return registry

    def register(self, subscription: Subscription) -> None:
        name = subscription.name
        if len(name) > SUBSCRIPTION_NAME_MAX_LENGTH or not SUBSCRIPTION_NAME_PATTERN.fullmatch(name):
            raise OutboxValidationError(
                f"subscription name {name!r} must match {SUBSCRIPTION_NAME_PATTERN.pattern} "
                f"(at most {SUBSCRIPTION_NAME_MAX_LENGTH} characters): it keys the inbox, so it must never change"
            )
        if any(existing.name == name for existing in self.subscriptions):
            raise OutboxValidationError(f"two subscriptions are named {name!r}; names key the inbox and must be unique")
        if not subscription.pattern:
            raise OutboxValidationError(f"subscription {name!r} has an empty event-type glob")
        if subscription.effects is Effects.DYNAMODB and subscription.lane is not Lane.DURABLE:
            raise OutboxValidationError(
                f"subscription {name!r} declares effects='dynamodb' on the {subscription.lane.value} lane: only "
                "DURABLE subscriptions have a completion to commit their writes with; put it on DURABLE, or drop "
                "effects (INLINE writes already commit with the emit)"
            )
        if subscription.lane is Lane.WORKFLOW or isinstance(subscription.handler, _workflow_handler_type()):
            _check_workflow(subscription, self.subscriptions)
        self.subscriptions.append(subscription)
        self._matches.clear()

    def matching(self, event_type: str, lane: Lane) -> tuple[Subscription, ...]:
        """Subscriptions of ``lane`` whose glob matches ``event_type``; memoised per type, so the hot path
        does not scan the catalog."""
        key = (event_type, lane)
        found = self._matches.get(key)
        if found is None:
            found = tuple(s for s in self.subscriptions if s.lane is lane and s.matches(event_type))
            self._matches[key] = found
        return found


def _workflow_handler_type() -> type:
    from outbox.workflows import WorkflowHandler

    return WorkflowHandler


def _check_workflow(subscription: Subscription, registered: Sequence[Subscription]) -> None:
    """A WORKFLOW subscription names its durable function with ``outbox.workflows.workflow(...)``, and such a handler
    is on the WORKFLOW lane only; no two share the digest their execution names may be made of."""
    from outbox.workflows import WorkflowHandler, subscription_digest

    name = subscription.name
    if subscription.lane is not Lane.WORKFLOW:
        raise OutboxValidationError(
            f"subscription {name!r} names a workflow handler on the {subscription.lane.value} lane: put it on "
            "Lane.WORKFLOW (its durable function is started by the durable consumer)"
        )
    if not isinstance(subscription.handler, WorkflowHandler):
        raise OutboxValidationError(
            f"subscription {name!r} is on the WORKFLOW lane: its handler is a durable function of its own, named "
            "with outbox.workflows.workflow('package.module:function'), not a callable of the consumer"
        )
    digest = subscription_digest(name)
    for other in registered:
        if other.lane is Lane.WORKFLOW and subscription_digest(other.name) == digest:
            raise OutboxValidationError(
                f"subscriptions {other.name!r} and {name!r} share the digest {digest} their execution names are "
                "made of: rename one"
            )
