"""The outbox engine: emit() into per-tenant hash chains on DynamoDB, and verify them.

Public surface only; everything else is an implementation detail.
"""

from outbox import writes
from outbox.canonical import GENESIS_HASH, canonical_json, chain_hash
from outbox.chain import ChainBreak, ChainHead, ChainReport, verify_chain
from outbox.envelope import Envelope
from outbox.exceptions import (
    CallerWriteConditionFailedError,
    ChainHeadContentionError,
    ChainIntegrityError,
    EnvelopeParseError,
    EventStoreUnavailableError,
    InvalidEventError,
    InvalidWriteError,
    OutboxError,
    OutboxValidationError,
)
from outbox.store import EventStore

__all__ = [
    "GENESIS_HASH",
    "CallerWriteConditionFailedError",
    "ChainBreak",
    "ChainHead",
    "ChainHeadContentionError",
    "ChainIntegrityError",
    "ChainReport",
    "Envelope",
    "EnvelopeParseError",
    "EventStore",
    "EventStoreUnavailableError",
    "InvalidEventError",
    "InvalidWriteError",
    "OutboxError",
    "OutboxValidationError",
    "canonical_json",
    "chain_hash",
    "verify_chain",
    "writes",
]
