"""The outbox engine: emit() into per-tenant hash chains on DynamoDB, verify them, and deliver each
(event, subscription) effect once through the lease-claim inbox.

The durable consumer lives in ``outbox.consumer`` (it imports Powertools' batch utility, which code that
only emits does not need to pay for at cold start).
"""

from outbox import writes
from outbox.canonical import GENESIS_HASH, canonical_json, chain_hash
from outbox.chain import ChainBreak, ChainHead, ChainReport, verify_chain
from outbox.envelope import Envelope
from outbox.exceptions import (
    CallerWriteConditionFailedError,
    ChainHeadContentionError,
    ChainIntegrityError,
    CompletionTooLargeError,
    EmitOutcomeUnknownError,
    EnvelopeParseError,
    EventStoreUnavailableError,
    InvalidEventError,
    InvalidWriteError,
    LeaseLostError,
    OutboxError,
    OutboxValidationError,
    TerminalError,
)
from outbox.inbox import Claim, ClaimOutcome, DeadReason, Inbox
from outbox.store import EventStore, NewEvent
from outbox.subscriptions import Delivery, Effects, FollowUp, HandlerResult, Lane, Subscription, SubscriptionRegistry

__all__ = [
    "GENESIS_HASH",
    "CallerWriteConditionFailedError",
    "ChainBreak",
    "ChainHead",
    "ChainHeadContentionError",
    "ChainIntegrityError",
    "ChainReport",
    "Claim",
    "ClaimOutcome",
    "CompletionTooLargeError",
    "DeadReason",
    "Delivery",
    "Effects",
    "EmitOutcomeUnknownError",
    "Envelope",
    "EnvelopeParseError",
    "EventStore",
    "EventStoreUnavailableError",
    "FollowUp",
    "HandlerResult",
    "Inbox",
    "InvalidEventError",
    "InvalidWriteError",
    "Lane",
    "LeaseLostError",
    "NewEvent",
    "OutboxError",
    "OutboxValidationError",
    "Subscription",
    "SubscriptionRegistry",
    "TerminalError",
    "canonical_json",
    "chain_hash",
    "verify_chain",
    "writes",
]
