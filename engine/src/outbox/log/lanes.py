"""The in-process lanes emit() dispatches: INLINE handlers before the commit (their writes join its
transaction, and an error fails the emit), LOCAL handlers after it (best effort: an error is logged, redacted as
``outbox.redaction`` says, never raised, since the caller must learn that its event committed)."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from outbox import keys
from outbox.exceptions import ContractViolationError
from outbox.log.envelope import Envelope
from outbox.redaction import describe_failure
from outbox.subscriptions import Delivery, HandlerResult, Subscription

logger = logging.getLogger(__name__)


def run_inline(envelope: Envelope, subscriptions: Sequence[Subscription]) -> list[tuple[str, Mapping[str, object]]]:
    """The writes the INLINE handlers return for ``envelope`` as it would commit, each with its subscription's
    name. If one raises, the caller's request fails and nothing is committed (fail-closed, and atomic with the
    event)."""
    writes: list[tuple[str, Mapping[str, object]]] = []
    for subscription in subscriptions:
        result = subscription.run(_delivery(envelope, subscription))
        if result is None:
            continue
        if not isinstance(result, HandlerResult) or result.follow_up is not None:
            raise ContractViolationError(
                f"INLINE subscription {subscription.name!r} returned "
                f"{'a follow-up event' if isinstance(result, HandlerResult) else f'a {type(result).__name__}'}; "
                "an INLINE handler returns None or HandlerResult(writes=...). Only DURABLE handlers can "
                "emit follow-ups (they commit with the completion); nothing was committed"
            )
        writes.extend((subscription.name, write) for write in result.writes)
    return writes


def run_local(envelope: Envelope, subscriptions: Sequence[Subscription]) -> None:
    """LOCAL handlers run after the commit, in this process; an error is logged, never raised: the event
    is committed, and the caller must learn that, whatever a handler did."""
    for subscription in subscriptions:
        log = {"event_id": envelope.id, "subscription": subscription.name}
        try:
            result = subscription.run(_delivery(envelope, subscription))
        except (KeyboardInterrupt, SystemExit):
            raise  # the process is going away: the event committed, the rest of LOCAL is best effort
        except BaseException as exc:  # best effort by contract: the caller must learn that its event committed
            # Said as the durable lane says a handler's failure (its type and place, no traceback): a
            # traceback's text can repeat the payload the handler was working on.
            logger.error(
                "LOCAL subscription %s failed for event %s: %s",
                subscription.name,
                envelope.id,
                describe_failure(exc),
                extra=log,
            )
            continue
        if result is not None:
            logger.error(
                "LOCAL subscription %s returned a %s for event %s, which is dropped: LOCAL handlers return "
                "None (they run after the commit). Return writes from an INLINE handler to commit them with "
                "the event, or a follow-up from a DURABLE one",
                subscription.name,
                type(result).__name__,
                envelope.id,
                extra=log,
            )


def _delivery(envelope: Envelope, subscription: Subscription) -> Delivery:
    # In-process lanes have no invocation deadline of their own. Each handler gets a payload of its own.
    return Delivery(
        envelope.handler_copy(), subscription.name, keys.idempotency_key(envelope.id, subscription.name), 1, lambda: 0
    )
