"""The inbox table: the durable consumer's lease claims, dead-letter rows and poison pills."""

from __future__ import annotations

from typing import Final

from constructs import Construct

from stacks.constructs.table_defaults import protected_table

# Key layout shared with the engine (layers/engine/python/outbox/inbox.py).
CLAIM_PARTITION_PATTERN: Final = "CLAIM#<event_id>"  # sort key: the subscription name
DEAD_LETTER_PARTITION_PATTERN: Final = "TENANT#<tenant>#DEAD"
POISON_PARTITION_PATTERN: Final = "POISON#<yyyy-mm-dd>"

# Epoch seconds; the engine sets it on COMPLETED claims only (retention after completion). PENDING and
# DEAD claims, dead-letter rows and poison pills stay until an operator resolves them.
TTL_ATTRIBUTE: Final = "expires_at"

DEFAULT_RETENTION_DAYS: Final = 7
# The bounds the consumer accepts for INBOX_RETENTION_DAYS (outbox.settings.ConsumerSettings).
MIN_RETENTION_DAYS: Final = 1
MAX_RETENTION_DAYS: Final = 365


class InboxTable(Construct):
    """``self.table`` holds one claim per (event id, subscription); ``self.retention_days`` is how long
    a completed claim is kept, and so how long a redelivered event is still recognised as done.

    Keep it longer than anything can redeliver a completed event: a replaced relay pipe re-sends the
    stream's last 24 hours, and a reconciliation re-sends from the events table; a claim that has
    expired by then lets its subscription run a second time.
    """

    def __init__(self, scope: Construct, construct_id: str, *, retention_days: int = DEFAULT_RETENTION_DAYS) -> None:
        super().__init__(scope, construct_id)
        if isinstance(retention_days, bool) or not MIN_RETENTION_DAYS <= retention_days <= MAX_RETENTION_DAYS:
            raise ValueError(
                f"inbox retention must be {MIN_RETENTION_DAYS}..{MAX_RETENTION_DAYS} days, got {retention_days!r}"
            )
        self.retention_days = retention_days
        # Losing the claims would let every retained event run its subscriptions a second time: retained.
        self.table = protected_table(self, "Table", time_to_live_attribute=TTL_ATTRIBUTE)
