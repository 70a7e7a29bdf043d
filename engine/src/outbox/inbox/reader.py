"""Reading the inbox: the operator's views of claims, dead letters and poison pills, all consistent reads."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from outbox import keys
from outbox.log.envelope import format_timestamp
from outbox.query import read_partition

if TYPE_CHECKING:
    from outbox.inbox.records import ClaimRecord, DeadLetter, PoisonPill


class InboxReader:
    """The inbox table's rows, read back typed: claims, dead letters, poison pills. Reads only, all
    consistent; ``Inbox`` adds the writes. The typed records (``outbox.inbox.records``) are imported by the
    views that return them: the durable consumer, an ``Inbox`` too, never reads one."""

    def __init__(self, table_name: str, *, client: Any) -> None:
        self.table_name = table_name
        self.client = client

    def read_claim(self, event_id: str, subscription: str) -> ClaimRecord | None:
        from outbox.inbox.records import ClaimRecord

        item = self._get(keys.claim_key(event_id, subscription))
        return None if item is None else ClaimRecord.from_item(item)

    def claims_of(self, event_id: str) -> dict[str, ClaimRecord]:
        """Every claim of one event, by subscription name."""
        from outbox.inbox.records import ClaimRecord

        items = read_partition(self.client, self.table_name, keys.claim_partition(event_id))
        return {record.subscription: record for record in map(ClaimRecord.from_item, items)}

    def dead_letter(self, tenant: str, event_id: str, subscription: str) -> DeadLetter | None:
        """The pair's dead letter (resolved or not), or None."""
        from outbox.inbox.records import DeadLetter

        item = self._get(keys.dead_letter_key(tenant, event_id, subscription))
        return None if item is None else DeadLetter.from_item(item)

    def dead_letters(
        self,
        tenant: str,
        *,
        subscription: str | None = None,
        event_id: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        include_resolved: bool = False,
    ) -> list[DeadLetter]:
        """The tenant's dead letters (conflicts included), open ones only unless ``include_resolved``, of
        ``subscription`` and ``event_id`` where given, dead between ``since`` and ``until``."""
        from outbox.inbox.records import DeadLetter

        items = read_partition(self.client, self.table_name, keys.dead_letter_partition(tenant))
        return [
            row
            for row in map(DeadLetter.from_item, items)
            if (include_resolved or row.resolved is None)
            and (subscription is None or row.subscription == subscription)
            and (event_id is None or row.event_id == event_id)
            and (since is None or row.dead_at >= format_timestamp(since))
            and (until is None or row.dead_at <= format_timestamp(until))
        ]

    def poison_pills(self, day: datetime) -> list[PoisonPill]:
        """The poison pills recorded on ``day``'s date (whatever the message held, as recorded)."""
        from outbox.inbox.records import PoisonPill

        items = read_partition(self.client, self.table_name, keys.poison_partition(day))
        return [PoisonPill.from_item(item) for item in items]

    def _get(self, key: dict[str, Any]) -> dict[str, Any] | None:
        item: dict[str, Any] | None = self.client.get_item(TableName=self.table_name, Key=key, ConsistentRead=True).get(
            "Item"
        )
        return item
