"""One invocation's batch: everything it carries, in the one object the consumer makes for it.

A batch of FIFO messages is read ahead in one request (its events checked against the log, with the watermarks of
its ordered places), its records are processed one after another, and only then are the wake-ups its ordered
completions owe run, with the time that is left. What one step leaves for the next lives here, for the
invocation and no longer: what was read ahead (``ahead``), the watermarks carried from write to write
(``watermarks``, ``outbox.delivery.carried``) and the wake-ups owed (``owed``). Nothing of it is kept on the
consumer or on a path: they serve every batch, and a handler called from several threads at once runs one batch
on each.

A record processed alone (a test's, or one delivered outside any invocation) has no batch: nothing read ahead,
nothing carried (each watermark is read when it is needed), and its wake-ups run at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from outbox.delivery.carried import CarriedWatermarks
    from outbox.delivery.log_check import ReadAhead
    from outbox.pairs.order import Watermark
    from outbox.subscriptions import Subscription


@dataclass(frozen=True)
class OwedWake:
    """An ordered completion of a batch's message whose deferred followers are woken after the batch's records."""

    message_id: str
    subscription: Subscription
    watermark: Watermark


class Batch:
    """One invocation's records: what was read ahead of them, the watermarks carried (None: the batch has no
    ordered place, nothing to carry), and the wake-ups their ordered completions owe."""

    def __init__(self, ahead: ReadAhead, watermarks: CarriedWatermarks | None) -> None:
        self.ahead = ahead
        self.watermarks = watermarks
        self.owed: list[OwedWake] = []
        self._record: tuple[str, list[tuple[Subscription, Watermark]]] | None = None

    def begin_record(self, message_id: str) -> None:
        """The record processed from here on: its ordered completions owe their wake-ups to the batch once it
        ends (``end_record``)."""
        self._record = (message_id, [])

    def owe(self, subscription: Subscription, watermark: Watermark) -> None:
        """An ordered completion of the current record's: the events deferred behind it are woken from
        ``watermark`` once the batch's records are done."""
        if self._record is None:
            raise RuntimeError("an ordered completion owes a wake-up outside any record of its batch")
        self._record[1].append((subscription, watermark))

    def end_record(self) -> None:
        """The current record's completions owe their wake-ups to the batch. Not called when its processing
        raised: the message comes back, finds its pairs applied, and owes them again."""
        if self._record is not None:
            message_id, completions = self._record
            self.owed += [OwedWake(message_id, subscription, mark) for subscription, mark in completions]
        self._record = None
