"""What a delivery path is given and what it answers: one ``Pair`` in, one ``DeliveryOutcome`` out.

The batch loop (``outbox.delivery.consumer``) maps the outcome to what SQS hears: RETRY fails the record (it comes back
with its group), anything else acknowledges it. A path records what happened to the pair in the inbox before
it answers, so an answer lost with the invocation costs a redelivery, never an effect.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError, ParamValidationError

from outbox import keys
from outbox.exceptions import (
    CallerWriteConditionFailedError,
    ChainHeadContentionError,
    ContractViolationError,
    EventStoreUnavailableError,
    InlineWriteConditionFailedError,
    OutboxError,
    WatermarkMovedError,
)
from outbox.log.envelope import Envelope
from outbox.subscriptions import Effects, HandlerResult, Subscription

if TYPE_CHECKING:
    from outbox.delivery.batch import Batch

# What is left of the invocation, in milliseconds (the Lambda context's ``get_remaining_time_in_millis``).
RemainingMs = Callable[[], int]


class DeliveryOutcome(StrEnum):
    COMPLETED = "completed"
    SKIPPED = "skipped"
    RETRY = "retry"
    DEAD = "dead"
    DEFERRED = "deferred"  # an ordered subscription's event behind its predecessor: acknowledged, woken later
    HANDED = "handed"  # a WORKFLOW pair's execution started and recorded: acknowledged, its end settles it


class Metric(StrEnum):
    CLAIMS = "Claims"
    SKIPS = "ClaimSkips"
    COMPLETIONS = "Completions"
    RETRIES = "Retries"
    DEAD_LETTERS = "DeadLetters"
    CONFLICTS = "Conflicts"
    POISON_PILLS = "PoisonPills"
    UNMATCHED = "UnmatchedEvents"
    LEASES_LOST = "LeasesLost"
    DEFERRALS = "Deferrals"
    RUN_AFTER_PREDECESSOR = "RunAfterPredecessor"  # a deferred event applied right after the one it waited for
    WAKE_UPS = "WakeUps"  # a deferred event sent back to the queue instead
    NO_TIME_LEFT = "NoTimeLeft"  # a pair not started for lack of time: its message comes back, no attempt spent


@dataclass(frozen=True)
class Pair:
    """One (event, subscription) to deliver, with what its message told the batch loop.

    ``may_create``: the inbox still remembers completions from the event's time, so a missing claim row proves
    the pair never completed. ``repair``: a replay or reconcile sent it (its pair has a row already). ``batch``:
    the invocation's batch it is delivered in (what the batch carries; its ordered completion's wake-up is owed
    to it, run once the batch's records are done), or None outside any batch (nothing carried, woken at once)."""

    envelope: Envelope
    subscription: Subscription
    receive_count: int
    digest: str
    may_create: bool = True
    repair: bool = False
    batch: Batch | None = field(default=None, compare=False)

    @property
    def key(self) -> str:
        return keys.idempotency_key(self.envelope.id, self.subscription.name)

    @property
    def log(self) -> dict[str, Any]:
        return {"event_id": self.envelope.id, "subscription": self.subscription.name, "tenant": self.envelope.tenant}

    @property
    def runs_directly(self) -> bool:
        """Whether it may run with no claim (``outbox.delivery.direct``): a DynamoDB-only subscription's, where no
        history can exist yet (a first receive, not a repair, which left a row, and young enough that a missing
        row proves the pair never completed)."""
        return (
            self.subscription.effects is Effects.DYNAMODB
            and self.receive_count == 1
            and self.may_create
            and not self.repair
        )


class RetryableDeliveryError(OutboxError):
    """At least one subscription must run again: the message goes back to the queue (a batch item failure)."""


class UnfinishedAttemptsError(OutboxError):
    """Every attempt the claim allows started and none ended (a crash or a timeout each time)."""


def checked_result(subscription: Subscription, result: object) -> HandlerResult:
    """A durable handler's answer, or ``ContractViolationError`` (terminal: it answers the same every time)."""
    if result is None:
        return HandlerResult()
    if not isinstance(result, HandlerResult):
        raise ContractViolationError(
            f"{subscription.name} returned a {type(result).__name__}; a DURABLE handler returns a HandlerResult or None"
        )
    return result


# Completion failures that a later attempt can get past; anything else (invalid writes, a follow-up that
# fails validation, a completion too large, a number DynamoDB cannot store, ...) fails again every time.
_RETRYABLE_COMPLETION_ERRORS = (
    WatermarkMovedError,  # placed again on the next receive
    CallerWriteConditionFailedError,  # the handler's own condition may hold later
    InlineWriteConditionFailedError,  # so may an INLINE subscriber's of the follow-up
    ChainHeadContentionError,
    EventStoreUnavailableError,
    BotoCoreError,
)
_TERMINAL_CLIENT_ERRORS = frozenset({"ValidationException", "SerializationException"})


def is_terminal_completion(exc: BaseException) -> bool:
    """Whether a completion (or a direct commit) that raised ``exc`` would fail the same way every time."""
    if isinstance(exc, ParamValidationError):  # the SDK refused the request's shape: it always will
        return True
    if isinstance(exc, _RETRYABLE_COMPLETION_ERRORS):
        return False
    if isinstance(exc, ClientError):
        code = exc.response.get("Error", {}).get("Code", "")
        reasons = {reason.get("Code") for reason in exc.response.get("CancellationReasons") or []}
        return code in _TERMINAL_CLIENT_ERRORS or "ValidationError" in reasons
    return True
