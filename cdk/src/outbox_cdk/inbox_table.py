"""The inbox table: the durable consumer's lease claims, dead-letter rows and poison pills."""

from __future__ import annotations

from typing import Final

from aws_cdk import aws_kms as kms
from constructs import Construct

from outbox_cdk.table_defaults import protected_table
from outbox_cdk.timing import minimum_inbox_retention_days

# Key layout shared with the engine (outbox.inbox).
CLAIM_PARTITION_PATTERN: Final = "CLAIM#<event_id>"  # sort key: the subscription name
DEAD_LETTER_PARTITION_PATTERN: Final = "TENANT#<tenant>#DEAD"
POISON_PARTITION_PATTERN: Final = "POISON#<yyyy-mm-dd>"

# Epoch seconds; the engine sets it on COMPLETED claims only (retention after completion). PENDING and
# DEAD claims, dead-letter rows and poison pills stay until an operator resolves them.
TTL_ATTRIBUTE: Final = "expires_at"

# Derived from how long the pipe, the queue and the DLQ may hold a message (timing).
MIN_RETENTION_DAYS: Final = minimum_inbox_retention_days()
DEFAULT_RETENTION_DAYS: Final = MIN_RETENTION_DAYS
# The upper bound the consumer accepts for INBOX_RETENTION_DAYS (outbox.settings.ConsumerSettings).
MAX_RETENTION_DAYS: Final = 365


class InboxTable(Construct):
    """``self.table`` holds one claim per (event id, subscription); ``self.retention_days`` is how long
    a completed claim is kept, and so how long a redelivered event is still recognised as done.

    At least ``MIN_RETENTION_DAYS``: the longest a pipe message can travel before a consumer sees it
    (stream record age, queue, DLQ; ``timing``). The consumer never runs a message older than the inbox's
    memory (it dead-letters it as unverifiable), so a shorter retention cannot double an effect, but it
    would turn redriven work into decisions for an operator: the synth refuses it.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        retention_days: int = DEFAULT_RETENTION_DAYS,
        encryption_key: kms.IKey | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        if isinstance(retention_days, bool) or not MIN_RETENTION_DAYS <= retention_days <= MAX_RETENTION_DAYS:
            raise ValueError(
                f"inbox retention must be {MIN_RETENTION_DAYS}..{MAX_RETENTION_DAYS} days, got {retention_days!r}: "
                f"a message may travel {MIN_RETENTION_DAYS} days (pipe record age, queue and DLQ retention) "
                "before the consumer sees it, and the inbox must still remember whether it completed"
            )
        self.retention_days = retention_days
        # Losing the claims would let every retained event run its subscriptions a second time: retained.
        self.table = protected_table(self, "Table", time_to_live_attribute=TTL_ATTRIBUTE, encryption_key=encryption_key)
