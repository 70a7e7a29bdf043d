"""The inbox: one lease-claim row per (event, subscription), and the dead-letter and poison-pill rows.

States of a claim row::

    absent ──claim──► PENDING(owner, lease) ──mark_completed──► COMPLETED (expires after retention)
                        │   ▲        │
                release │   │ claim  └──mark_dead──► DEAD ──replay──► REPLAYING ──claim──► PENDING
                        ▼   │ (lease expired: take-over)     (final for the consumer; only an operator's
                      PENDING(lease expired)                     replay reruns it)

    ordered subscriptions only:  PENDING ──defer──► DEFERRED ──claim──► PENDING   (its predecessor is not applied)
                                 DEAD, DEFERRED or absent ──outbox skip──► SKIPPED (final, like COMPLETED)

Every write after the claim is conditioned on the ``owner`` token (fencing), so a worker whose lease
was taken over can neither complete, release nor kill the new owner's claim. The same token recognises
a worker's own write whose answer was lost (an HTTP 500 after the write applied, retried by the SDK).

The inbox forgets a COMPLETED row ``retention`` after the completion. So the absence of a row proves that
an (event, subscription) never completed only for a message issued less than ``retention`` ago (see
``claim``'s ``may_create``); past that, the consumer records the pair as UNVERIFIABLE dead work instead of
guessing. A COMPLETED row that has expired but not yet been swept still counts as completed.
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

from botocore.exceptions import ClientError

from outbox import clock as engine_clock
from outbox import keys
from outbox.canonical import canonical_json
from outbox.envelope import Envelope, format_timestamp
from outbox.exceptions import CompletionTooLargeError, LeaseLostError, WatermarkMovedError
from outbox.query import read_partition
from outbox.transaction import MAX_TRANSACT_ITEMS

logger = logging.getLogger(__name__)

PENDING, COMPLETED, DEAD = "PENDING", "COMPLETED", "DEAD"
# Set by an operator's replay in place of DEAD: claimable like an absent row (the row itself proves the
# pair has not completed since), and it names the dead letter that the completion resolves.
REPLAYING = "REPLAYING"
# An ordered subscription's pair whose predecessor is not applied yet (outbox.ordering): claimable like
# REPLAYING, at any age, by the wake-up message its predecessor's completion sends; the attempt it was
# deferred on is given back. SKIPPED: an operator skipped it (``outbox skip``); final, like COMPLETED.
DEFERRED, SKIPPED = "DEFERRED", "SKIPPED"
POISON_BODY_LIMIT = 64 * 1024  # enough to diagnose; far below the 400 KB item limit
# Clock skew between whoever issued a message and the consumer judging its age against the retention.
VOUCH_MARGIN = timedelta(hours=1)


class ClaimOutcome(StrEnum):
    CLAIMED = "claimed"
    ALREADY_COMPLETED = "already_completed"
    IN_PROGRESS = "in_progress"  # another worker holds a live lease
    DEAD = "dead"  # dead work: only an operator's replay reruns it
    CONFLICT = "conflict"  # same event id, different content
    UNVERIFIABLE = "unverifiable"  # no row, but the message is older than the inbox's memory


class DeadReason(StrEnum):
    TERMINAL = "terminal"  # a terminal error, invalid input, or a handler that broke its contract
    EXHAUSTED = "exhausted"  # every attempt failed (or crashed): the claim's attempts, not receives, decide
    CONFLICT = "conflict"  # other content under a claimed event id, or an event the events table does not hold
    UNVERIFIABLE = "unverifiable"  # older than the inbox's retention: it may have completed and been forgotten


@dataclass(frozen=True)
class Claim:
    """A claim this worker holds: the fencing token and what it needs to finish the claim."""

    event_id: str
    subscription: str
    tenant: str
    owner: str
    attempts: int
    digest: str
    lease_expires_at: datetime
    # The dead letter a replay left open on the row: completing the claim resolves it in the same write.
    open_dead_letter: str | None = None
    # The seq of the event an ordered subscription deferred this pair behind (None: never deferred).
    waits_for: int | None = None

    @property
    def idempotency_key(self) -> str:
        """Stable across retries and take-overs: pass it to any external API the handler calls."""
        return keys.idempotency_key(self.event_id, self.subscription)


@dataclass(frozen=True)
class ClaimRecord:
    """A claim row as read back (what the operator tools and tests look at); ``Claim`` is a worker's hold."""

    event_id: str
    subscription: str
    tenant: str
    status: str
    attempts: int
    digest: str
    owner: str | None  # None on a row no worker has claimed yet, and after a replay
    lease_expires_at: datetime | None  # while PENDING (the epoch once released)
    event_type: str | None
    event_seq: int | None
    created_at: str | None
    updated_at: str | None
    last_error: str | None = None
    dead_reason: str | None = None  # a DeadReason, while DEAD (kept by a replay)
    dead_at: str | None = None
    replayed_at: str | None = None
    open_dead_letter: str | None = None  # the dead letter a replay left open (its sort key)
    completed_at: str | None = None
    expires_at: datetime | None = None  # when a COMPLETED row is forgotten (TTL)
    waits_for: int | None = None  # while DEFERRED: the seq of the predecessor it waits for
    skipped: str | None = None  # once SKIPPED: by whom, when and why

    @classmethod
    def from_item(cls, item: Mapping[str, Any]) -> ClaimRecord:
        return cls(
            # A claim's own writes leave out what its key says (CLAIM#<event id>, subscription): every byte of
            # the hot path's requests costs client CPU. Rows other writers made carry both.
            event_id=_string(item, "event_id") or item["pk"]["S"].removeprefix(keys.claim_partition("")),
            subscription=_string(item, "subscription") or item["sk"]["S"],
            tenant=item["tenant"]["S"],
            status=item["status"]["S"],
            attempts=int(item["attempts"]["N"]),
            digest=item["digest"]["S"],
            owner=_string(item, "owner"),
            lease_expires_at=_moment(item, "lease_expires_at", per_second=1000),
            event_type=_string(item, "event_type"),
            event_seq=_number(item, "event_seq"),
            created_at=_string(item, "created_at"),
            updated_at=_string(item, "updated_at"),
            last_error=_string(item, "last_error"),
            dead_reason=_string(item, "dead_reason"),
            dead_at=_string(item, "dead_at"),
            replayed_at=_string(item, "replayed_at"),
            open_dead_letter=_string(item, "open_dead_letter"),
            completed_at=_string(item, "completed_at"),
            expires_at=_moment(item, "expires_at", per_second=1),
            waits_for=_number(item, "waits_for"),
            skipped=_string(item, "skipped"),
        )


@dataclass(frozen=True)
class DeadLetter:
    tenant: str
    event_id: str
    event_seq: int
    event_type: str
    subscription: str
    reason: str
    error: str
    error_type: str
    attempts: int | None
    dead_at: str
    resolved: str | None  # "replayed at ..." once an operator acted on it

    @classmethod
    def from_item(cls, item: Mapping[str, Any]) -> DeadLetter:
        return cls(
            tenant=item["tenant"]["S"],
            event_id=item["event_id"]["S"],
            event_seq=int(item["event_seq"]["N"]),
            event_type=item["event_type"]["S"],
            subscription=item["subscription"]["S"],
            reason=item["reason"]["S"],
            error=item["error"]["S"],
            error_type=item["error_type"]["S"],
            attempts=_number(item, "attempts"),
            dead_at=item["dead_at"]["S"],
            resolved=_string(item, "resolved"),
        )


@dataclass(frozen=True)
class PoisonPill:
    """A message that was not an event, as the consumer recorded it (``Inbox.record_poison``)."""

    message_id: str
    recorded_at: str
    error: str
    body: str
    body_truncated: bool
    attributes: dict[str, str]  # MessageGroupId, MessageDeduplicationId, ApproximateReceiveCount

    @classmethod
    def from_item(cls, item: Mapping[str, Any]) -> PoisonPill:
        attributes = item.get("attributes", {}).get("M", {})
        return cls(
            message_id=item["message_id"]["S"],
            recorded_at=item["recorded_at"]["S"],
            error=item["error"]["S"],
            body=item["body"]["S"],
            body_truncated=bool(item.get("body_truncated", {}).get("BOOL", False)),
            attributes={name: value.get("S", "") for name, value in attributes.items()},
        )


@dataclass(frozen=True)
class ClaimResult:
    outcome: ClaimOutcome
    claim: Claim | None = None
    existing: Mapping[str, Any] | None = None


def envelope_digest(envelope: Envelope) -> str:
    """sha256 over every field of the envelope: equal digests mean the same content."""
    return hashlib.sha256(canonical_json(envelope.model_dump(mode="json"))).hexdigest()


def unclaimed_row(
    envelope: Envelope, subscription: str, status: str, now: datetime, digest: str | None = None, **extra: Any
) -> dict[str, Any]:
    """A claim row that no worker holds (no owner, no lease), in ``status``, for a pair that had none."""
    now_iso = format_timestamp(now)
    return {
        **keys.claim_key(envelope.id, subscription),
        "status": {"S": status},
        "attempts": {"N": "0"},
        "digest": {"S": digest or envelope_digest(envelope)},
        "event_id": {"S": envelope.id},
        "subscription": {"S": subscription},
        "tenant": {"S": envelope.tenant},
        "event_type": {"S": envelope.type},
        "event_seq": {"N": str(envelope.seq)},
        "created_at": {"S": now_iso},
        "updated_at": {"S": now_iso},
        **{name: {"S": value} for name, value in extra.items()},
    }


def reconcile_row(envelope: Envelope, subscription: str, now: datetime) -> dict[str, Any]:
    """The claim row a reconcile writes, only where there is none, before it re-sends ``envelope`` for
    ``subscription``: REPLAYING, so the re-sent message is claimable at any age (the row itself proves the
    pair has not completed since), with the event's digest, so other content under its id is a conflict."""
    return unclaimed_row(envelope, subscription, REPLAYING, now, replayed_at=format_timestamp(now))


def _epoch_ms(moment: datetime) -> str:
    return str(int(moment.timestamp() * 1000))


class InboxReader:
    """The inbox table's rows, read back typed: claims, dead letters, poison pills. Reads only, all
    consistent; ``Inbox`` adds the writes."""

    def __init__(self, table_name: str, *, client: Any) -> None:
        self.table_name = table_name
        self.client = client

    def read_claim(self, event_id: str, subscription: str) -> ClaimRecord | None:
        item = self._get(keys.claim_key(event_id, subscription))
        return None if item is None else ClaimRecord.from_item(item)

    def claims_of(self, event_id: str) -> dict[str, ClaimRecord]:
        """Every claim of one event, by subscription name."""
        items = read_partition(self.client, self.table_name, keys.claim_partition(event_id))
        return {record.subscription: record for record in map(ClaimRecord.from_item, items)}

    def dead_letter(self, tenant: str, event_id: str, subscription: str) -> DeadLetter | None:
        """The pair's dead letter (resolved or not), or None."""
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
        items = read_partition(self.client, self.table_name, keys.poison_partition(day))
        return [PoisonPill.from_item(item) for item in items]

    def _get(self, key: dict[str, Any]) -> dict[str, Any] | None:
        item: dict[str, Any] | None = self.client.get_item(TableName=self.table_name, Key=key, ConsistentRead=True).get(
            "Item"
        )
        return item


class Inbox(InboxReader):
    """Claims, completions and dead letters on the inbox table.

    Parameters
    ----------
    table_name, client:
        The inbox table and an injected boto3 DynamoDB client.
    max_attempts:
        A DEAD claim may be claimed again while its attempts are below this (a terminal error uses them
        all up at once); the operator tools reset claims they rerun.
    retention:
        How long COMPLETED rows are kept (TTL). An expired row counts as absent even before DynamoDB's
        TTL sweep deletes it, so behaviour never depends on how late the sweep runs.
    clock:
        Injected so that the local runtime's virtual clock drives leases and expiry.
    """

    def __init__(
        self,
        table_name: str,
        *,
        client: Any,
        max_attempts: int,
        retention: timedelta = timedelta(days=7),
        clock: Callable[[], datetime] = engine_clock.now,
        new_owner: Callable[[], str] = lambda: uuid.uuid4().hex,
    ) -> None:
        super().__init__(table_name, client=client)
        self.max_attempts = max_attempts
        self.retention = retention
        self._clock = clock
        self._new_owner = new_owner

    @property
    def clock(self) -> Callable[[], datetime]:
        """The clock the inbox judges leases and retention by (the ordered subscriptions' rows use it too)."""
        return self._clock

    # -- claim --------------------------------------------------------------------------------------

    def can_vouch_for(self, issued_at: datetime) -> bool:
        """Whether a missing row proves that no completion happened since ``issued_at``: any completion after
        it keeps its COMPLETED row for ``retention``."""
        return self._clock() < issued_at + self.retention - VOUCH_MARGIN

    def claim(
        self,
        envelope: Envelope,
        subscription: str,
        lease: timedelta,
        digest: str | None = None,
        *,
        may_create: bool = True,
    ) -> ClaimResult:
        """One conditional write: take the row if absent (and ``may_create``) or if its lease has expired.

        ``may_create`` is False for a message issued longer ago than the inbox remembers completions: its
        row may be missing because the pair completed and the row expired, so absence proves nothing and
        the outcome is UNVERIFIABLE. ``digest`` may be passed in when one message is claimed for several
        subscriptions."""
        now = self._clock()
        owner = self._new_owner()
        digest = digest or envelope_digest(envelope)
        lease_expires_at = now + lease
        if may_create:
            created = self._create(envelope, subscription, owner, digest, now, lease_expires_at)
            if created is not None:
                return created
        claimable = "(#status = :pending AND lease_expires_at < :now) OR #status IN (:replaying, :deferred)"
        if may_create:
            claimable = f"attribute_not_exists(pk) OR {claimable}"
        try:
            response = self.client.update_item(
                TableName=self.table_name,
                Key=keys.claim_key(envelope.id, subscription),
                UpdateExpression=(
                    "SET #status = :pending, #owner = :owner, lease_expires_at = :lease, "
                    "attempts = if_not_exists(attempts, :zero) + :one, digest = :digest, tenant = :tenant, "
                    "event_type = :event_type, event_seq = :event_seq, "
                    "created_at = if_not_exists(created_at, :now_iso), updated_at = :now_iso"
                ),
                ConditionExpression=f"(attribute_not_exists(pk) OR digest = :digest) AND ({claimable})",
                ExpressionAttributeNames={"#status": "status", "#owner": "owner"},
                ExpressionAttributeValues={
                    ":pending": {"S": PENDING},
                    ":replaying": {"S": REPLAYING},
                    ":deferred": {"S": DEFERRED},
                    ":owner": {"S": owner},
                    ":lease": {"N": _epoch_ms(lease_expires_at)},
                    ":now": {"N": _epoch_ms(now)},
                    ":now_iso": {"S": format_timestamp(now)},
                    ":zero": {"N": "0"},
                    ":one": {"N": "1"},
                    ":digest": {"S": digest},
                    ":tenant": {"S": envelope.tenant},
                    ":event_type": {"S": envelope.type},
                    ":event_seq": {"N": str(envelope.seq)},
                },
                ReturnValues="ALL_NEW",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except ClientError as exc:
            existing, own = self._refused(exc, envelope, subscription, owner)
            return own or ClaimResult(self._why_not_claimable(existing, digest), existing=existing)
        row = response["Attributes"]
        return ClaimResult(ClaimOutcome.CLAIMED, claim=self._claim_of(envelope, subscription, row))

    def _create(
        self,
        envelope: Envelope,
        subscription: str,
        owner: str,
        digest: str,
        now: datetime,
        lease_expires_at: datetime,
    ) -> ClaimResult | None:
        """The first claim of a pair that has no row: a PutItem conditioned on absence, lighter than the update
        (no expression, no row to send back: this worker wrote all of it). None when a row exists: the update
        decides then (a take-over, a replay, done, dead, a conflict)."""
        row = unclaimed_row(envelope, subscription, PENDING, now, digest)
        del row["event_id"], row["subscription"]  # the key says both (ClaimRecord.from_item reads them there)
        row["owner"] = {"S": owner}
        row["attempts"] = {"N": "1"}
        row["lease_expires_at"] = {"N": _epoch_ms(lease_expires_at)}
        try:
            self.client.put_item(
                TableName=self.table_name,
                Item=row,
                ConditionExpression="attribute_not_exists(pk)",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except ClientError as exc:
            return self._refused(exc, envelope, subscription, owner)[1]
        return ClaimResult(ClaimOutcome.CLAIMED, claim=self._claim_of(envelope, subscription, row))

    def _refused(
        self, exc: ClientError, envelope: Envelope, subscription: str, owner: str
    ) -> tuple[dict[str, Any], ClaimResult | None]:
        """The row that failed a claim's condition, and the claim if that row is this worker's own: an earlier
        send applied and its answer was lost (the SDK re-sent it). Any other error is raised."""
        existing = _refusing_row(exc)
        if existing is None:
            raise exc
        if _is_own_claim(existing, owner):
            return existing, ClaimResult(ClaimOutcome.CLAIMED, claim=self._claim_of(envelope, subscription, existing))
        return existing, None

    def _claim_of(self, envelope: Envelope, subscription: str, row: Mapping[str, Any]) -> Claim:
        return Claim(
            envelope.id,
            subscription,
            envelope.tenant,
            owner=row["owner"]["S"],
            attempts=int(row["attempts"]["N"]),
            digest=row["digest"]["S"],
            lease_expires_at=_from_epoch(row["lease_expires_at"]["N"], per_second=1000),
            open_dead_letter=_string(row, "open_dead_letter"),
            waits_for=_number(row, "waits_for"),
        )

    @staticmethod
    def _why_not_claimable(existing: Mapping[str, Any], digest: str) -> ClaimOutcome:
        if not existing:
            return ClaimOutcome.UNVERIFIABLE  # absent, and the claim was not allowed to create it
        if existing.get("digest", {}).get("S", digest) != digest:
            return ClaimOutcome.CONFLICT
        status = existing.get("status", {}).get("S")
        if status in (COMPLETED, SKIPPED):
            return ClaimOutcome.ALREADY_COMPLETED
        if status == DEAD:
            return ClaimOutcome.DEAD
        return ClaimOutcome.IN_PROGRESS

    # -- finishing a claim (all fenced on the owner token) ------------------------------------------

    def completion_write(self, claim: Claim) -> dict[str, Any]:
        """The COMPLETED mark as a transaction item, so handler writes can commit with it."""
        now = self._clock()
        return {
            "Update": {
                "TableName": self.table_name,
                "Key": keys.claim_key(claim.event_id, claim.subscription),
                "UpdateExpression": (
                    "SET #status = :completed, completed_at = :now_iso, updated_at = :now_iso, "
                    "expires_at = :expires REMOVE lease_expires_at, open_dead_letter"
                    + (", waits_for, deferred_at" if claim.waits_for is not None else "")
                ),
                "ConditionExpression": "#owner = :owner AND #status = :pending",
                "ExpressionAttributeNames": {"#status": "status", "#owner": "owner"},
                "ExpressionAttributeValues": {
                    ":completed": {"S": COMPLETED},
                    ":pending": {"S": PENDING},
                    ":owner": {"S": claim.owner},
                    ":now_iso": {"S": format_timestamp(now)},
                    ":expires": {"N": str(int((now + self.retention).timestamp()))},
                },
                "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
            }
        }

    def completion_writes(self, claim: Claim) -> list[dict[str, Any]]:
        """The COMPLETED mark first (fencing failures point at index 0), then, for a replayed pair, the
        resolution of its dead letter: done work is never left as open work."""
        writes = [self.completion_write(claim)]
        if claim.open_dead_letter is not None:
            writes.append(
                {
                    "Update": {
                        "TableName": self.table_name,
                        "Key": {
                            "pk": {"S": keys.dead_letter_partition(claim.tenant)},
                            "sk": {"S": claim.open_dead_letter},
                        },
                        "UpdateExpression": "SET resolved = :how",
                        "ConditionExpression": "attribute_exists(pk)",
                        "ExpressionAttributeValues": {
                            ":how": {"S": f"completed at {format_timestamp(self._clock())} after a replay"}
                        },
                    }
                }
            )
        return writes

    def mark_completed(
        self,
        claim: Claim,
        writes: Sequence[Mapping[str, Any]] = (),
        order: Sequence[Mapping[str, Any]] = (),
    ) -> None:
        """Commit the handler's DynamoDB writes and the COMPLETED mark together, or neither; for an ordered
        subscription, with ``order`` (``OrderBook.advance_items``): the watermark moves in the same
        transaction, or ``WatermarkMovedError`` says it changed since it was read."""
        completion = [*self.completion_writes(claim), *map(dict, order)]
        if len(writes) + len(completion) > MAX_TRANSACT_ITEMS:
            raise CompletionTooLargeError(
                f"{claim.subscription} returned {len(writes)} writes; at most "
                f"{MAX_TRANSACT_ITEMS - len(completion)} fit in one transaction with the completion"
            )
        if not writes and len(completion) == 1:
            self._fenced_update(claim, "complete", completion[0]["Update"], landed=COMPLETED)
            return
        watermark_at = len(completion) - len(order) if order else None
        self._fenced_transaction(
            claim, "complete", [*completion, *map(dict, writes)], landed=COMPLETED, watermark_at=watermark_at
        )

    def restore_applied(self, event_id: str, subscription: str) -> bool:
        """A REPLAYING claim of an ordered pair its watermark has passed (applied in order already: only a
        forced replay of a completed pair leaves one) back to COMPLETED, so nothing re-sends it for ever.
        False when the claim was not REPLAYING."""
        now = self._clock()
        try:
            self.client.update_item(
                TableName=self.table_name,
                Key=keys.claim_key(event_id, subscription),
                UpdateExpression=(
                    "SET #status = :completed, completed_at = :now_iso, updated_at = :now_iso, expires_at = :expires"
                ),
                # A row carrying an open dead letter stays as it is, for the operator to see: a completion
                # never leaves one open, and a skip (the other way past the watermark) resolves it.
                ConditionExpression="#status = :replaying AND attribute_not_exists(open_dead_letter)",
                ExpressionAttributeNames={"#status": "status"},
                ExpressionAttributeValues={
                    ":completed": {"S": COMPLETED},
                    ":replaying": {"S": REPLAYING},
                    ":now_iso": {"S": format_timestamp(now)},
                    ":expires": {"N": str(int((now + self.retention).timestamp()))},
                },
            )
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
                raise
            return False
        return True

    def defer(self, claim: Claim, waits_for: int, order: Sequence[Mapping[str, Any]]) -> None:
        """Put an ordered subscription's pair aside until ``waits_for`` is applied: DEFERRED (claimable at any
        age, by its wake-up), the attempt it was claimed with given back, and ``order``
        (``OrderBook.defer_items``) in the same transaction. Raises ``WatermarkMovedError`` when the
        watermark changed since it was read (the predecessor may have been applied: look again)."""
        update = self._fenced_item(
            claim,
            {
                "UpdateExpression": (
                    "SET #status = :deferred, waits_for = :waits_for, deferred_at = :now_iso, "
                    "attempts = attempts - :one, updated_at = :now_iso REMOVE lease_expires_at"
                ),
                "ExpressionAttributeValues": {
                    ":deferred": {"S": DEFERRED},
                    ":waits_for": {"N": str(waits_for)},
                    ":one": {"N": "1"},
                },
            },
        )
        self._fenced_transaction(
            claim, "defer", [{"Update": update}, *map(dict, order)], landed=DEFERRED, watermark_at=2
        )

    # -- DynamoDB-only subscriptions: no lease, one request ------------------------------------------

    def completion_marker(self, envelope: Envelope, subscription: str, digest: str) -> dict[str, Any]:
        """A COMPLETED row for a pair that has none, as a transaction item: it commits with the handler's
        writes, and only where no row exists. A duplicate delivery fails its condition (the row it finds says
        whether the content was the same), and a pair with any history (a failed attempt, a replay, a live
        lease) is left to the lease path."""
        now = self._clock()
        row = unclaimed_row(envelope, subscription, COMPLETED, now, digest, completed_at=format_timestamp(now))
        row["attempts"] = {"N": "1"}
        row["expires_at"] = {"N": str(int((now + self.retention).timestamp()))}
        return {
            "Put": {
                "TableName": self.table_name,
                "Item": row,
                "ConditionExpression": "attribute_not_exists(pk)",
                "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
            }
        }

    def complete_directly(
        self, marker: Mapping[str, Any], writes: Sequence[Mapping[str, Any]] = ()
    ) -> dict[str, Any] | None:
        """Commit ``marker`` (``completion_marker``) with the handler's ``writes``: one PutItem without writes,
        one TransactWriteItems with them. Returns None once committed, or the row that was there instead
        (the marker's condition failed, nothing was written). A failed condition of one of the writes
        raises the transaction's ClientError, as a completion on the lease path does."""
        if len(writes) + 1 > MAX_TRANSACT_ITEMS:
            raise CompletionTooLargeError(
                f"{marker['Put']['Item']['subscription']['S']} returned {len(writes)} writes; at most "
                f"{MAX_TRANSACT_ITEMS - 1} fit in one transaction with the completion"
            )
        put = marker["Put"]
        try:
            if not writes:
                self.client.put_item(**put)
            else:
                self.client.transact_write_items(TransactItems=[dict(marker), *map(dict, writes)])
        except ClientError as exc:
            existing = _refusing_row(exc)
            if existing is None:
                raise
            return existing
        return None

    def release(self, claim: Claim, error: str, give_back: int = 0) -> None:
        """Give the claim back after a retryable error: the lease ends now, the next receive retries.
        ``give_back`` attempts are not counted (a claim taken only to be handed to another path); the count is
        set, not decremented, so a resend of this write after a lost answer gives back nothing twice."""
        update = "SET lease_expires_at = :zero, last_error = :error, updated_at = :now_iso"
        values: dict[str, Any] = {":zero": {"N": "0"}, ":error": {"S": error[:2000]}}
        if give_back:
            update += ", attempts = :attempts"
            values[":attempts"] = {"N": str(max(claim.attempts - give_back, 0))}
        self._fenced_update(claim, "release", {"UpdateExpression": update, "ExpressionAttributeValues": values})

    def mark_dead(
        self,
        claim: Claim,
        envelope: Envelope,
        error: str,
        error_type: str,
        reason: DeadReason,
        receive_count: int,
    ) -> None:
        """DEAD plus a tenant-scoped dead-letter row, in one transaction. DEAD is final for the consumer:
        only an operator's replay (which clears the row) runs the pair again."""
        claim_update = self._fenced_item(
            claim,
            {
                "UpdateExpression": (
                    "SET #status = :dead, last_error = :error, dead_reason = :reason, "
                    "dead_at = :now_iso, updated_at = :now_iso REMOVE lease_expires_at"
                ),
                "ExpressionAttributeValues": {
                    ":dead": {"S": DEAD},
                    ":error": {"S": error[:2000]},
                    ":reason": {"S": reason.value},
                },
            },
        )
        dead_letter = self.dead_letter_item(envelope, claim.subscription, error, error_type, reason, receive_count)
        dead_letter["attempts"] = {"N": str(claim.attempts)}
        self._fenced_transaction(
            claim,
            "mark dead",
            [{"Update": claim_update}, {"Put": {"TableName": self.table_name, "Item": dead_letter}}],
            landed=DEAD,
        )

    def mark_unverifiable(self, envelope: Envelope, subscription: str, digest: str, receive_count: int) -> bool:
        """Record a pair the inbox cannot vouch for (no row, message older than the retention) as DEAD work
        with a dead letter that says so, instead of running it and perhaps doubling a forgotten effect.
        False when a row appeared meanwhile (the caller claims again)."""
        days = self.retention.days
        error = (
            f"the message for {envelope.id}:{subscription} was issued more than {days} days ago, longer than "
            "the inbox remembers completions, and the pair has no claim row: it may have completed and been "
            "forgotten. Nothing was run. If you know it did not run, replay it with --force."
        )
        now = self._clock()
        row = unclaimed_row(
            envelope,
            subscription,
            DEAD,
            now,
            dead_reason=DeadReason.UNVERIFIABLE.value,
            last_error=error,
            dead_at=format_timestamp(now),
        )
        row["digest"] = {"S": digest}
        letter = self.dead_letter_item(
            envelope, subscription, error, "Unverifiable", DeadReason.UNVERIFIABLE, receive_count
        )
        letter["attempts"] = {"N": "0"}
        only_if_absent = {"TableName": self.table_name, "Item": row, "ConditionExpression": "attribute_not_exists(pk)"}
        try:
            self.client.transact_write_items(
                TransactItems=[{"Put": only_if_absent}, {"Put": {"TableName": self.table_name, "Item": letter}}]
            )
        except ClientError as exc:
            if _cancelled_by_condition(exc):
                return False
            raise
        return True

    def record_conflict(
        self, envelope: Envelope, subscription: str, existing: Mapping[str, Any], receive_count: int
    ) -> None:
        """A delivery whose content differs from the claimed one: recorded with both digests, never run."""
        stored = existing.get("digest", {}).get("S", "")
        received = envelope_digest(envelope)
        self.record_refusal(
            envelope,
            subscription,
            f"event {envelope.id} arrived with digest {received}, but {subscription} claimed it with {stored}",
            "ConflictingPayload",
            receive_count,
            stored_digest=stored,
        )

    def record_refusal(
        self, envelope: Envelope, subscription: str, error: str, error_type: str, receive_count: int, **facts: str
    ) -> None:
        """A delivery of ``subscription`` that is never run: a ``conflict`` dead letter, one per content that
        arrived (so a repeat rewrites its own row, never another pair's dead letter), ``facts`` beside it. It
        touches no claim: what the log holds under that id still runs, or already ran, as it should."""
        received = envelope_digest(envelope)
        item = self.dead_letter_item(envelope, subscription, error, error_type, DeadReason.CONFLICT, receive_count)
        item["sk"] = {"S": keys.conflict_sort_key(envelope.id, subscription, received)}
        item["received_digest"] = {"S": received}
        item.update({name: {"S": value} for name, value in facts.items()})
        self.client.put_item(TableName=self.table_name, Item=item)

    def dead_letter_item(
        self,
        envelope: Envelope,
        subscription: str,
        error: str,
        error_type: str,
        reason: DeadReason,
        receive_count: int,
    ) -> dict[str, Any]:
        return {
            **keys.dead_letter_key(envelope.tenant, envelope.id, subscription),
            "kind": {"S": "DEAD_LETTER"},
            "tenant": {"S": envelope.tenant},
            "event_id": {"S": envelope.id},
            "event_type": {"S": envelope.type},
            "event_seq": {"N": str(envelope.seq)},
            "subscription": {"S": subscription},
            "reason": {"S": reason.value},
            "error": {"S": error[:4000]},
            "error_type": {"S": error_type},
            "receive_count": {"N": str(receive_count)},
            "dead_at": {"S": format_timestamp(self._clock())},
        }

    def record_poison(self, message_id: str, body: str, error: str, attributes: Mapping[str, str]) -> None:
        """A message that is not an envelope, kept under a global partition per day for diagnosis."""
        now = self._clock()
        item: dict[str, Any] = {
            "pk": {"S": keys.poison_partition(now)},
            "sk": {"S": keys.poison_sort_key(format_timestamp(now), storable_text(message_id))},
            "kind": {"S": "POISON"},
            "message_id": {"S": storable_text(message_id)},
            "body": {"S": storable_text(body[:POISON_BODY_LIMIT])},
            "body_truncated": {"BOOL": len(body) > POISON_BODY_LIMIT},
            "error": {"S": storable_text(error[:4000])},
            "recorded_at": {"S": format_timestamp(now)},
        }
        if attributes:
            item["attributes"] = {
                "M": {storable_text(name): {"S": storable_text(str(value))} for name, value in attributes.items()}
            }
        self.client.put_item(TableName=self.table_name, Item=item)

    # -- helpers ------------------------------------------------------------------------------------

    def _fenced_item(self, claim: Claim, update: Mapping[str, Any]) -> dict[str, Any]:
        now_iso = format_timestamp(self._clock())
        return {
            "TableName": self.table_name,
            "Key": keys.claim_key(claim.event_id, claim.subscription),
            "UpdateExpression": update["UpdateExpression"],
            "ConditionExpression": "#owner = :owner AND #status = :pending",
            "ExpressionAttributeNames": {"#status": "status", "#owner": "owner"},
            "ExpressionAttributeValues": {
                **update["ExpressionAttributeValues"],
                ":owner": {"S": claim.owner},
                ":pending": {"S": PENDING},
                ":now_iso": {"S": now_iso},
            },
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }

    def _fenced_update(self, claim: Claim, action: str, update: Mapping[str, Any], landed: str | None = None) -> None:
        """One fenced UpdateItem. ``landed`` is the status our own write leaves: finding it under our owner
        token after a failed condition means an earlier send of this write applied and its answer was lost."""
        request = update if "TableName" in update else self._fenced_item(claim, update)
        try:
            self.client.update_item(**request)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
                raise
            if not _is_own(exc.response.get("Item"), claim, landed):
                raise LeaseLostError(claim.event_id, claim.subscription, action) from exc

    def _fenced_transaction(
        self, claim: Claim, action: str, items: list[dict[str, Any]], landed: str, watermark_at: int | None = None
    ) -> None:
        """A transaction whose first item is the fenced claim update (see ``_fenced_update``); the item at
        ``watermark_at``, if any, is an ordered subscription's watermark, conditioned on the version read."""
        first = next(iter(items[0].values()))
        first.setdefault("ReturnValuesOnConditionCheckFailure", "ALL_OLD")
        try:
            self.client.transact_write_items(TransactItems=items)
        except ClientError as exc:
            reasons = exc.response.get("CancellationReasons") or []
            if not reasons:
                raise
            if reasons[0].get("Code") == "ConditionalCheckFailed":
                if not _is_own(reasons[0].get("Item"), claim, landed):
                    raise LeaseLostError(claim.event_id, claim.subscription, action) from exc
                return
            moved = watermark_at is not None and watermark_at < len(reasons)
            if moved and reasons[watermark_at].get("Code") == "ConditionalCheckFailed":  # type: ignore[index]
                raise WatermarkMovedError(
                    f"the watermark of {claim.subscription} for tenant {claim.tenant} moved while {action}"
                ) from exc
            raise


def storable_text(text: str) -> str:
    """``text`` as DynamoDB can store it: a lone surrogate (or anything UTF-8 cannot encode) escaped, so that
    recording a poison pill can never fail on the very content that made it one."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _string(item: Mapping[str, Any] | None, name: str) -> str | None:
    value = (item or {}).get(name)
    return None if value is None else value.get("S")


def _number(item: Mapping[str, Any], name: str) -> int | None:
    return int(item[name]["N"]) if name in item else None


def _moment(item: Mapping[str, Any], name: str, per_second: int) -> datetime | None:
    """An epoch number attribute (``per_second`` units a second) as a moment, or None."""
    return _from_epoch(item[name]["N"], per_second) if name in item else None


def _from_epoch(value: str, per_second: int) -> datetime:
    return datetime.fromtimestamp(int(value) / per_second, tz=UTC)


def _refusing_row(exc: ClientError) -> dict[str, Any] | None:
    """The row whose condition refused a write (a single write's, or a transaction's first item's), as the
    request asked DynamoDB to return it; None when the write failed for another reason."""
    if exc.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException":
        return dict(exc.response.get("Item") or {})
    reasons = exc.response.get("CancellationReasons") or []
    if reasons and reasons[0].get("Code") == "ConditionalCheckFailed":
        return dict(reasons[0].get("Item") or {})
    return None


def _is_own_claim(existing: Mapping[str, Any], owner: str) -> bool:
    # Our own claim, applied by an earlier send whose answer was lost (the SDK re-sent it).
    return _string(existing, "owner") == owner and _string(existing, "status") == PENDING


def _is_own(existing: Mapping[str, Any] | None, claim: Claim, landed: str | None) -> bool:
    return landed is not None and _string(existing, "owner") == claim.owner and _string(existing, "status") == landed


def _cancelled_by_condition(exc: ClientError) -> bool:
    if exc.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException":
        return True
    reasons = exc.response.get("CancellationReasons") or []
    return any(reason.get("Code") == "ConditionalCheckFailed" for reason in reasons)
