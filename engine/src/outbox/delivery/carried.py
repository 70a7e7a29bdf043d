"""The watermarks one batch carries through the ordered gate.

Within one batch (``outbox.delivery.batch``) each (tenant, subscription)'s watermark is read once, all of them
before the first record, in the BatchGetItem that checks the batch's events against the log, and then carried from
write to write: a batch of FIFO messages holds several consecutive events of a tenant, and nobody else delivers
them while it is in flight. A copy that went stale anyway (an operator's skip, say) fails safe, since every write
to the watermark is conditioned on its version: the write fails, and the gate reads it again. What did not end in
a write the gate knows the outcome of (a failed run or completion) is forgotten and read again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from outbox import keys
from outbox.pairs.order import OrderBook, Watermark


class CarriedWatermarks:
    """(tenant, subscription) -> its watermark as one batch last read or wrote it; with nothing to carry
    (``carried`` None: a pair delivered outside any batch), every watermark is read when it is needed."""

    def __init__(self, order: OrderBook, carried: dict[tuple[str, str], Watermark] | None = None) -> None:
        self.order = order
        self.carried = carried

    @classmethod
    def read_ahead(
        cls,
        order: OrderBook,
        inbox_table: str,
        places: Iterable[tuple[str, str]],
        read: Mapping[tuple[str, str, str], dict[str, Any] | None],
    ) -> CarriedWatermarks:
        """What a batch carries from its start: the watermarks of ``places`` (its ordered (tenant, subscription)
        pairs) that its first read holds (``read``: rows by (table, pk, sk), None for no row); one it does not hold
        (that read failed, or left it unprocessed) is read when it is needed."""
        carried: dict[tuple[str, str], Watermark] = {}
        for tenant, subscription in places:
            key = keys.watermark_key(tenant, subscription)
            place = (inbox_table, key["pk"]["S"], key["sk"]["S"])
            if place in read:
                carried[(tenant, subscription)] = Watermark.from_item(tenant, subscription, read[place])
        return cls(order, carried)

    def watermark(self, tenant: str, subscription: str) -> Watermark:
        """The watermark as this batch knows it, else read (and carried from here)."""
        if self.carried is not None and (known := self.carried.get((tenant, subscription))) is not None:
            return known
        return self.read(tenant, subscription)

    def read(self, tenant: str, subscription: str) -> Watermark:
        """The watermark read again, past what the batch carries (a conditioned write found it moved)."""
        fresh = self.order.watermark(tenant, subscription)
        self.carry(fresh)
        return fresh

    def carry(self, watermark: Watermark) -> None:
        if self.carried is not None:
            self.carried[(watermark.tenant, watermark.subscription)] = watermark

    def forget(self, tenant: str, subscription: str) -> None:
        if self.carried is not None:
            self.carried.pop((tenant, subscription), None)
