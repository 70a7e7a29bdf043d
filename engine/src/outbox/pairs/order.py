"""Ordered subscriptions: a tenant's events applied strictly in seq order, each exactly once.

A subscription declared ``ordered=True`` keeps, per tenant, a **watermark** in the inbox table: the seq of
the last of its events it applied (or an operator skipped). The consumer reads it before it claims a pair
(once per batch for all of the batch's pairs, then carried: ``outbox.delivery.ordered``):

- at or below the watermark: already applied, or skipped. Nothing runs, at any age (the watermark, unlike a
  COMPLETED claim row, is never forgotten);
- the **predecessor** (the nearest earlier event of the tenant that the subscription runs, found by a query of
  the log between the watermark and the event) is above the watermark: the pair is **deferred**. Its claim
  row becomes DEFERRED (the attempt is given back), a deferred row joins the subscription's order partition,
  and the message is acknowledged: waiting spends no attempt and earns no dead letter;
- otherwise it runs, and its completion advances the watermark in the same transaction. Every write to the
  watermark is conditioned on its ``version``, so a deferral and a completion that race cannot both think
  the other has not happened: one of them looks again.

After a completion (and whenever a duplicate finds its pair done), the consumer looks at the lowest deferred
event: once the watermark has reached the event it waits for, a **wake-up** message (a repair message for
that one subscription, as a replay sends) puts it back on the durable queue, behind the tenant's other
messages. Only the lowest deferred event can be ready (every other one waits for an event at or above it; a
row a deploy took out of the order is passed, sent to run the unordered way, and the next one looked at),
and a wake-up is sent before the message that triggered it is acknowledged, so a crash in between sends it
again.

A predecessor that is DEAD blocks its subscription for its tenant (and nothing else) until an operator
replays it or skips it (``outbox skip``, recorded with who and why). ``ordered_since`` says where the order
starts: events that occurred before it are not part of it (a subscription made ordered after it has run);
without it the order starts at the tenant's seq 1, and events emitted before the subscription existed are
sent to it by a reconcile (``outbox reconcile --subscription ...``), which the deferred events then wait for.

Key layout (``outbox.keys``): ``TENANT#<tenant>#ORDER#<subscription>`` holds ``WATERMARK``,
``DEFERRED#<seq>`` and ``SKIPPED#<seq>``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from outbox import clock as engine_clock
from outbox import keys
from outbox.exceptions import WatermarkMovedError
from outbox.log.envelope import Envelope, format_timestamp
from outbox.observing import AROUND, observed
from outbox.pairs.wake_ups import WakeUps  # the messages that put a deferred event back on the queue
from outbox.subscriptions import Subscription

__all__ = ["Deferred", "OrderBook", "Skip", "WakeUps", "Watermark", "WatermarkMovedError"]


@dataclass(frozen=True)
class Watermark:
    """Where an ordered subscription stands for one tenant. ``version`` 0: no row yet (nothing applied)."""

    tenant: str
    subscription: str
    applied_seq: int = 0
    version: int = 0
    deferred: int = 0  # how many of its events wait in DEFERRED rows
    applied_event_id: str | None = None
    updated_at: str | None = None

    @classmethod
    def from_item(cls, tenant: str, subscription: str, item: Mapping[str, Any] | None) -> Watermark:
        if not item:
            return cls(tenant, subscription)
        return cls(
            tenant,
            subscription,
            applied_seq=int(item["applied_seq"]["N"]),
            version=int(item["version"]["N"]),
            deferred=int(item.get("deferred_count", {}).get("N", "0")),
            applied_event_id=item.get("applied_event_id", {}).get("S"),
            updated_at=item.get("updated_at", {}).get("S"),
        )


@dataclass(frozen=True)
class Deferred:
    """An event waiting for its predecessor."""

    tenant: str
    subscription: str
    seq: int
    event_id: str
    event_type: str
    waits_for: int
    deferred_at: str

    @classmethod
    def from_item(cls, tenant: str, subscription: str, item: Mapping[str, Any]) -> Deferred:
        return cls(
            tenant,
            subscription,
            seq=int(item["seq"]["N"]),
            event_id=item["event_id"]["S"],
            event_type=item["event_type"]["S"],
            waits_for=int(item["waits_for"]["N"]),
            deferred_at=item["deferred_at"]["S"],
        )


@dataclass(frozen=True)
class Skip:
    """An operator's decision that an ordered subscription goes on without one event."""

    tenant: str
    subscription: str
    seq: int
    event_id: str
    by: str
    reason: str
    skipped_at: str

    @classmethod
    def from_item(cls, tenant: str, subscription: str, item: Mapping[str, Any]) -> Skip:
        return cls(
            tenant,
            subscription,
            seq=int(item["seq"]["N"]),
            event_id=item["event_id"]["S"],
            by=item["by"]["S"],
            reason=item["reason"]["S"],
            skipped_at=item["skipped_at"]["S"],
        )


class OrderBook:
    """The ordered subscriptions' rows in the inbox table, and the log queries that place an event.

    Parameters
    ----------
    inbox_table, events_table, client:
        Where the watermarks live, the log the predecessors are found in, and a boto3 DynamoDB client.
    clock: injected, like the inbox's.
    """

    def __init__(
        self,
        inbox_table: str,
        events_table: str,
        *,
        client: Any,
        clock: Callable[[], datetime] = engine_clock.now,
    ) -> None:
        self.inbox_table = inbox_table
        self.events_table = events_table
        self.client = client
        self._clock = clock

    # -- reads ----------------------------------------------------------------------------------------

    def watermark(self, tenant: str, subscription: str) -> Watermark:
        # A query of the one key rather than a GetItem: the same read unit, and every reader of the order
        # partition (the consumer, status, skip, reconcile) then needs dynamodb:Query alone on the inbox.
        key = keys.watermark_key(tenant, subscription)
        items = self.client.query(
            TableName=self.inbox_table,
            KeyConditionExpression="pk = :pk AND sk = :sk",
            ExpressionAttributeValues={":pk": key["pk"], ":sk": key["sk"]},
            ConsistentRead=True,
        )["Items"]
        return Watermark.from_item(tenant, subscription, items[0] if items else None)

    def predecessor(self, envelope: Envelope, subscription: Subscription, after_seq: int) -> int | None:
        """The seq of the nearest event before ``envelope`` in its tenant's log, above ``after_seq``, that
        ``subscription`` runs; None when there is none (the event is next in order). Reads the log backwards
        from the event, consistently (every earlier event committed before this one), stopping at the first."""
        if envelope.seq - 1 <= after_seq:
            return None
        for item in self._log_between(envelope.tenant, after_seq + 1, envelope.seq - 1):
            seq = int(item["sk"]["S"])
            if subscription.matches(item["type"]["S"]) and subscription.in_order(item["occurred_at"]["S"]):
                return seq
        return None

    def _log_between(self, tenant: str, low: int, high: int) -> Iterator[dict[str, Any]]:
        pages = self.client.get_paginator("query").paginate(
            TableName=self.events_table,
            KeyConditionExpression="pk = :pk AND sk BETWEEN :low AND :high",
            ExpressionAttributeValues={
                ":pk": {"S": keys.event_partition(tenant)},
                ":low": {"S": keys.seq_sort_key(low)},
                ":high": {"S": keys.seq_sort_key(high)},
            },
            ProjectionExpression="sk, #type, occurred_at",
            ExpressionAttributeNames={"#type": "type"},
            ScanIndexForward=False,
            ConsistentRead=True,
        )
        for page in pages:
            yield from page["Items"]

    def deferred(self, tenant: str, subscription: str, *, limit: int | None = None, above: int = 0) -> list[Deferred]:
        """The subscription's deferred events for ``tenant`` above seq ``above``, lowest first (``limit`` at most)."""
        items = self._partition_prefix(tenant, subscription, keys.DEFERRED_PREFIX, limit, above)
        return [Deferred.from_item(tenant, subscription, item) for item in items]

    def skips(self, tenant: str, subscription: str) -> list[Skip]:
        items = self._partition_prefix(tenant, subscription, keys.SKIPPED_PREFIX, None)
        return [Skip.from_item(tenant, subscription, item) for item in items]

    def _partition_prefix(
        self, tenant: str, subscription: str, prefix: str, limit: int | None, above: int = 0
    ) -> list[dict[str, Any]]:
        # Every sort key under a prefix is the prefix and a zero-padded seq, so "~" (above every digit) bounds them.
        request: dict[str, Any] = {
            "TableName": self.inbox_table,
            "KeyConditionExpression": "pk = :pk AND sk BETWEEN :low AND :high",
            "ExpressionAttributeValues": {
                ":pk": {"S": keys.order_partition(tenant, subscription)},
                ":low": {"S": prefix + (keys.seq_sort_key(above + 1) if above else "")},
                ":high": {"S": prefix + "~"},
            },
            "ConsistentRead": True,
        }
        found: list[dict[str, Any]] = []
        while True:
            if limit is not None:
                request["Limit"] = limit - len(found)
            page = self.client.query(**request)
            found.extend(page["Items"])
            if "LastEvaluatedKey" not in page or (limit is not None and len(found) >= limit):
                return found
            request["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def ready_deferred(
        self, watermark: Watermark, *, above: int = 0, whatever_it_waits_for: bool = False
    ) -> Deferred | None:
        """The deferred event that may run now: the lowest one (above seq ``above``), once the watermark has reached
        what it waits for (every other deferred event of the order waits for one at or above it).

        A row a deploy took out of the order (``ordered_since`` moved past it, or the subscription narrowed or
        unordered) breaks that rule: it waits for nothing any more, and the rows above it may wait for an event
        the order no longer holds. The gate passes such a row (``above``) and asks for the next one
        ``whatever_it_waits_for``: its run, in place or from its wake-up, places it again under the deployed
        catalog."""
        if watermark.deferred <= 0:
            return None
        lowest = self.deferred(watermark.tenant, watermark.subscription, limit=1, above=above)
        if lowest and (whatever_it_waits_for or lowest[0].waits_for <= watermark.applied_seq):
            return lowest[0]
        return None

    # -- transaction items -----------------------------------------------------------------------------

    @observed(AROUND["advance"])
    def advance_items(
        self, watermark: Watermark, envelope: Envelope, *, was_deferred: bool, skipped: bool = False
    ) -> list[dict[str, Any]]:
        """The watermark moved to ``envelope`` (applied, or skipped), conditioned on the version read, and the
        event's deferred row gone if it had one: items for the completion's (or the skip's) transaction."""
        after = self.advanced(watermark, envelope, was_deferred=was_deferred)
        values: dict[str, Any] = {
            ":seq": {"N": str(after.applied_seq)},
            ":event_id": {"S": envelope.id},
            ":next": {"N": str(after.version)},
            ":now_iso": {"S": format_timestamp(self._clock())},
        }
        sets = "SET applied_seq = :seq, applied_event_id = :event_id, version = :next, updated_at = :now_iso"
        # Set only what changes (every attribute costs the completion's request CPU): the row's kind and its
        # count of deferred events when it is created, the count again when this event was one of them.
        if watermark.version == 0 or after.deferred != watermark.deferred:
            values[":deferred"] = {"N": str(after.deferred)}
            sets += ", deferred_count = :deferred"
        if watermark.version == 0:
            values[":kind"] = {"S": "WATERMARK"}
            sets += ", kind = :kind"
        if skipped:
            sets += ", last_skipped_seq = :seq"
        update: dict[str, Any] = {
            "TableName": self.inbox_table,
            "Key": keys.watermark_key(envelope.tenant, watermark.subscription),
            "UpdateExpression": sets,
            **_versioned(watermark, values),
        }
        items: list[dict[str, Any]] = [{"Update": update}]
        if was_deferred:
            deferred_key = keys.deferred_key(envelope.tenant, watermark.subscription, envelope.seq)
            items.append({"Delete": {"TableName": self.inbox_table, "Key": deferred_key}})
        return items

    @staticmethod
    def advanced(watermark: Watermark, envelope: Envelope, *, was_deferred: bool) -> Watermark:
        """The watermark as ``advance_items`` leaves it once its transaction commits (the items are written
        from it, so what the gate carries and what the row holds cannot differ)."""
        return replace(
            watermark,
            applied_seq=envelope.seq,
            version=watermark.version + 1,
            deferred=max(watermark.deferred - (1 if was_deferred else 0), 0),
            applied_event_id=envelope.id,
        )

    @staticmethod
    def after_deferral(watermark: Watermark, *, was_deferred: bool) -> Watermark:
        """The watermark as ``defer_items`` leaves it once its transaction commits (the items are written from
        it)."""
        return replace(
            watermark, version=watermark.version + 1, deferred=watermark.deferred + (0 if was_deferred else 1)
        )

    def defer_items(
        self, watermark: Watermark, envelope: Envelope, waits_for: int, *, was_deferred: bool
    ) -> list[dict[str, Any]]:
        """The event's deferred row, and the watermark's count of them (once per event), conditioned on the
        version read: if the predecessor was applied meanwhile, the deferral fails and the event looks again."""
        after = self.after_deferral(watermark, was_deferred=was_deferred)
        now_iso = format_timestamp(self._clock())
        row = {
            **keys.deferred_key(envelope.tenant, watermark.subscription, envelope.seq),
            "kind": {"S": "DEFERRED"},
            "tenant": {"S": envelope.tenant},
            "subscription": {"S": watermark.subscription},
            "seq": {"N": str(envelope.seq)},
            "event_id": {"S": envelope.id},
            "event_type": {"S": envelope.type},
            "waits_for": {"N": str(waits_for)},
            "deferred_at": {"S": now_iso},
        }
        values: dict[str, Any] = {
            ":applied": {"N": str(watermark.applied_seq)},
            ":next": {"N": str(after.version)},
            ":deferred": {"N": str(after.deferred)},
            ":now_iso": {"S": now_iso},
            ":kind": {"S": "WATERMARK"},
        }
        update = {
            "TableName": self.inbox_table,
            "Key": keys.watermark_key(envelope.tenant, watermark.subscription),
            "UpdateExpression": (
                "SET applied_seq = :applied, version = :next, deferred_count = :deferred, "
                "updated_at = :now_iso, kind = :kind"
            ),
            **_versioned(watermark, values),
        }
        return [{"Put": {"TableName": self.inbox_table, "Item": row}}, {"Update": update}]

    def release_items(self, tenant: str, subscription: str, seq: int) -> list[dict[str, Any]]:
        """The items that take the deferred row at ``seq`` out of ``subscription``'s order for ``tenant`` (a deploy
        took its pair out of the order, or an operator skips it): the row deleted, and the watermark's count of
        deferred events one less, conditioned on both as read (a writer in between cancels the transaction: read
        again). Empty when there is no row. Every deferred row leaves through these items or ``advance_items``,
        so the watermark's count is always the number of rows that wait."""
        key = keys.deferred_key(tenant, subscription, seq)
        # A query of the one key, not a GetItem: the durable consumer's role may only query the order partitions.
        found = self.client.query(
            TableName=self.inbox_table,
            KeyConditionExpression="pk = :pk AND sk = :sk",
            ExpressionAttributeValues={":pk": key["pk"], ":sk": key["sk"]},
            ConsistentRead=True,
        )["Items"]
        if not found:
            return []
        items: list[dict[str, Any]] = [
            {"Delete": {"TableName": self.inbox_table, "Key": key, "ConditionExpression": "attribute_exists(pk)"}}
        ]
        watermark = self.watermark(tenant, subscription)
        if watermark.version:
            values = {
                ":count": {"N": str(max(watermark.deferred - 1, 0))},
                ":next": {"N": str(watermark.version + 1)},
            }
            update = {
                "TableName": self.inbox_table,
                "Key": keys.watermark_key(tenant, subscription),
                "UpdateExpression": "SET deferred_count = :count, version = :next",
                **_versioned(watermark, values),
            }
            items.append({"Update": update})
        return items

    def skip_record(self, envelope: Envelope, subscription: str, by: str, reason: str) -> dict[str, Any]:
        return {
            "Put": {
                "TableName": self.inbox_table,
                "Item": {
                    **keys.skipped_key(envelope.tenant, subscription, envelope.seq),
                    "kind": {"S": "SKIPPED"},
                    "seq": {"N": str(envelope.seq)},
                    "event_id": {"S": envelope.id},
                    "by": {"S": by},
                    "reason": {"S": reason[:2000]},
                    "skipped_at": {"S": format_timestamp(self._clock())},
                },
            }
        }


def _versioned(watermark: Watermark, values: dict[str, Any]) -> dict[str, Any]:
    """The condition that the watermark row is still the version read (absent when none was)."""
    if watermark.version == 0:
        return {"ConditionExpression": "attribute_not_exists(pk)", "ExpressionAttributeValues": values}
    return {
        "ConditionExpression": "version = :version",
        "ExpressionAttributeValues": {**values, ":version": {"N": str(watermark.version)}},
    }
