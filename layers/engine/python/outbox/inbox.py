"""The inbox: one lease-claim row per (event, subscription), and the dead-letter and poison-pill rows.

States of a claim row::

    absent ──claim──► PENDING(owner, lease) ──mark_completed──► COMPLETED (expires after retention)
                        │   ▲        │
                release │   │ claim  └──mark_dead──► DEAD ──claim while attempts < max──► PENDING
                        ▼   │ (lease expired: take-over)
                      PENDING(lease expired)

Every write after the claim is conditioned on the ``owner`` token (fencing), so a worker whose lease
was taken over can neither complete, release nor kill the new owner's claim.
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from botocore.exceptions import ClientError

from outbox import clock as engine_clock
from outbox.canonical import canonical_json
from outbox.envelope import Envelope, format_timestamp
from outbox.exceptions import CompletionTooLargeError, LeaseLostError
from outbox.transaction import MAX_TRANSACT_ITEMS

logger = logging.getLogger(__name__)

PENDING, COMPLETED, DEAD = "PENDING", "COMPLETED", "DEAD"
POISON_BODY_LIMIT = 64 * 1024  # enough to diagnose; far below the 400 KB item limit


class ClaimOutcome(StrEnum):
    CLAIMED = "claimed"
    ALREADY_COMPLETED = "already_completed"
    IN_PROGRESS = "in_progress"  # another worker holds a live lease
    DEAD_EXHAUSTED = "dead_exhausted"  # dead, and no attempts left: only an operator reset reruns it
    CONFLICT = "conflict"  # same event id, different content


class DeadReason(StrEnum):
    TERMINAL = "terminal"  # the handler raised a terminal error or its input failed validation
    EXHAUSTED = "exhausted"  # a retryable error on the queue's last receive
    CONFLICT = "conflict"  # the same event id arrived with a different digest


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
    # The dead letter this (event, subscription) left when it was last DEAD, still open: completing the
    # claim must resolve it too, whoever completes it.
    open_dead_letter: str | None = None

    @property
    def idempotency_key(self) -> str:
        """Stable across retries and take-overs: pass it to any external API the handler calls."""
        return f"{self.event_id}:{self.subscription}"


@dataclass(frozen=True)
class ClaimResult:
    outcome: ClaimOutcome
    claim: Claim | None = None
    existing: Mapping[str, Any] | None = None


def envelope_digest(envelope: Envelope) -> str:
    """sha256 over every field of the envelope: equal digests mean the same content."""
    return hashlib.sha256(canonical_json(envelope.model_dump(mode="json"))).hexdigest()


def claim_key(event_id: str, subscription: str) -> dict[str, Any]:
    return {"pk": {"S": f"CLAIM#{event_id}"}, "sk": {"S": subscription}}


def dead_letter_partition(tenant: str) -> str:
    return f"TENANT#{tenant}#DEAD"


def _epoch_ms(moment: datetime) -> str:
    return str(int(moment.timestamp() * 1000))


class Inbox:
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
        self.table_name = table_name
        self.client = client
        self.max_attempts = max_attempts
        self.retention = retention
        self._clock = clock
        self._new_owner = new_owner

    # -- claim --------------------------------------------------------------------------------------

    def claim(self, envelope: Envelope, subscription: str, lease: timedelta, digest: str | None = None) -> ClaimResult:
        """One conditional write: take the row if absent, stale, expired, or dead with attempts left.
        ``digest`` may be passed in when one message is claimed for several subscriptions."""
        now = self._clock()
        owner = self._new_owner()
        digest = digest or envelope_digest(envelope)
        lease_expires_at = now + lease
        try:
            response = self.client.update_item(
                TableName=self.table_name,
                Key=claim_key(envelope.id, subscription),
                UpdateExpression=(
                    "SET #status = :pending, #owner = :owner, lease_expires_at = :lease, "
                    "attempts = if_not_exists(attempts, :zero) + :one, digest = :digest, "
                    "event_id = :event_id, subscription = :subscription, tenant = :tenant, "
                    "event_type = :event_type, created_at = if_not_exists(created_at, :now_iso), "
                    "updated_at = :now_iso REMOVE expires_at"
                ),
                ConditionExpression=(
                    "(attribute_not_exists(pk) OR digest = :digest) AND ("
                    "attribute_not_exists(pk)"
                    " OR (#status = :pending AND lease_expires_at < :now)"
                    " OR (#status = :dead AND attempts < :max_attempts AND dead_reason <> :terminal)"
                    " OR (#status = :completed AND expires_at < :now_s))"
                ),
                ExpressionAttributeNames={"#status": "status", "#owner": "owner"},
                ExpressionAttributeValues={
                    ":pending": {"S": PENDING},
                    ":dead": {"S": DEAD},
                    ":completed": {"S": COMPLETED},
                    ":owner": {"S": owner},
                    ":lease": {"N": _epoch_ms(lease_expires_at)},
                    ":now": {"N": _epoch_ms(now)},
                    ":now_s": {"N": str(int(now.timestamp()))},
                    ":now_iso": {"S": format_timestamp(now)},
                    ":zero": {"N": "0"},
                    ":one": {"N": "1"},
                    ":max_attempts": {"N": str(self.max_attempts)},
                    ":terminal": {"S": DeadReason.TERMINAL.value},
                    ":digest": {"S": digest},
                    ":event_id": {"S": envelope.id},
                    ":subscription": {"S": subscription},
                    ":tenant": {"S": envelope.tenant},
                    ":event_type": {"S": envelope.type},
                },
                ReturnValues="ALL_OLD",  # the previous attempts, and whether it was dead
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
                raise
            existing = exc.response.get("Item") or {}
            return ClaimResult(self._why_not_claimable(existing, digest), existing=existing)
        previous = response.get("Attributes") or {}
        attempts = int(previous.get("attempts", {}).get("N", "0")) + 1
        claim = Claim(
            envelope.id,
            subscription,
            envelope.tenant,
            owner,
            attempts,
            digest,
            lease_expires_at,
            # Kept on the row (not in this worker's memory) from mark_dead until a completion resolves it, so
            # it survives releases and take-overs between the DEAD state and the eventual completion.
            open_dead_letter=previous.get("open_dead_letter", {}).get("S"),
        )
        return ClaimResult(ClaimOutcome.CLAIMED, claim=claim)

    def _why_not_claimable(self, existing: Mapping[str, Any], digest: str) -> ClaimOutcome:
        if existing.get("digest", {}).get("S", digest) != digest:
            return ClaimOutcome.CONFLICT
        status = existing.get("status", {}).get("S")
        if status == COMPLETED:
            return ClaimOutcome.ALREADY_COMPLETED
        if status == DEAD:
            return ClaimOutcome.DEAD_EXHAUSTED
        return ClaimOutcome.IN_PROGRESS

    # -- finishing a claim (all fenced on the owner token) ------------------------------------------

    def completion_write(self, claim: Claim) -> dict[str, Any]:
        """The COMPLETED mark as a transaction item, so handler writes can commit with it."""
        now = self._clock()
        return {
            "Update": {
                "TableName": self.table_name,
                "Key": claim_key(claim.event_id, claim.subscription),
                "UpdateExpression": (
                    "SET #status = :completed, completed_at = :now_iso, updated_at = :now_iso, "
                    "expires_at = :expires REMOVE lease_expires_at, open_dead_letter"
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
            }
        }

    def completion_writes(self, claim: Claim) -> list[dict[str, Any]]:
        """The COMPLETED mark first (its index 0 is what fencing failures point at), then, for a claim that
        took over a DEAD row, the resolution of that row's dead letter: done work is not open work."""
        writes = [self.completion_write(claim)]
        if claim.open_dead_letter is not None:
            writes.append(
                {
                    "Update": {
                        "TableName": self.table_name,
                        "Key": {"pk": {"S": dead_letter_partition(claim.tenant)}, "sk": {"S": claim.open_dead_letter}},
                        "UpdateExpression": "SET resolved = :how",
                        "ConditionExpression": "attribute_exists(pk)",
                        "ExpressionAttributeValues": {
                            ":how": {"S": f"completed at {format_timestamp(self._clock())} (attempt {claim.attempts})"}
                        },
                    }
                }
            )
        return writes

    def mark_completed(self, claim: Claim, writes: Sequence[Mapping[str, Any]] = ()) -> None:
        """Commit the handler's DynamoDB writes and the COMPLETED mark together, or neither."""
        completion = self.completion_writes(claim)
        if len(writes) + len(completion) > MAX_TRANSACT_ITEMS:
            raise CompletionTooLargeError(
                f"{claim.subscription} returned {len(writes)} writes; at most {MAX_TRANSACT_ITEMS - len(completion)} "
                "fit in one transaction with the completion"
            )
        if not writes and len(completion) == 1:
            self._fenced_update(claim, "complete", completion[0]["Update"])
            return
        try:
            self.client.transact_write_items(TransactItems=[*completion, *writes])
        except ClientError as exc:
            reasons = exc.response.get("CancellationReasons") or []
            if reasons and reasons[0].get("Code") == "ConditionalCheckFailed":
                raise LeaseLostError(claim.event_id, claim.subscription, "complete") from exc
            raise

    def release(self, claim: Claim, error: str) -> None:
        """Give the claim back after a retryable error: the lease ends now, the next receive retries."""
        self._fenced_update(
            claim,
            "release",
            {
                "UpdateExpression": "SET lease_expires_at = :zero, last_error = :error, updated_at = :now_iso",
                "ExpressionAttributeValues": {":zero": {"N": "0"}, ":error": {"S": error[:2000]}},
            },
        )

    def mark_dead(
        self,
        claim: Claim,
        envelope: Envelope,
        error: str,
        error_type: str,
        reason: DeadReason,
        receive_count: int,
    ) -> None:
        """DEAD plus a tenant-scoped dead-letter row, in one transaction. A terminal reason is never
        claimed again (only an operator reset reruns it); an exhausted one may be, while attempts last."""
        now_iso = format_timestamp(self._clock())
        claim_update = self._fenced_item(
            claim,
            {
                "UpdateExpression": (
                    "SET #status = :dead, last_error = :error, dead_reason = :reason, "
                    "open_dead_letter = :letter, dead_at = :now_iso, updated_at = :now_iso REMOVE lease_expires_at"
                ),
                "ExpressionAttributeValues": {
                    ":dead": {"S": DEAD},
                    ":error": {"S": error[:2000]},
                    ":reason": {"S": reason.value},
                    ":letter": {"S": f"{claim.event_id}#{claim.subscription}"},
                },
            },
        )
        dead_letter = self.dead_letter_item(envelope, claim.subscription, error, error_type, reason, receive_count)
        dead_letter["attempts"] = {"N": str(claim.attempts)}
        try:
            self.client.transact_write_items(
                TransactItems=[
                    {"Update": claim_update},
                    {"Put": {"TableName": self.table_name, "Item": dead_letter}},
                ]
            )
        except ClientError as exc:
            reasons = exc.response.get("CancellationReasons") or []
            if reasons and reasons[0].get("Code") == "ConditionalCheckFailed":
                raise LeaseLostError(claim.event_id, claim.subscription, "mark dead") from exc
            raise
        logger.debug("dead-lettered %s at %s", claim.idempotency_key, now_iso)

    def record_conflict(
        self, envelope: Envelope, subscription: str, existing: Mapping[str, Any], receive_count: int
    ) -> None:
        """A delivery whose content differs from the claimed one: recorded with both digests, never run."""
        stored = existing.get("digest", {}).get("S", "")
        received = envelope_digest(envelope)
        item = self.dead_letter_item(
            envelope,
            subscription,
            f"event {envelope.id} arrived with digest {received}, but {subscription} claimed it with {stored}",
            "ConflictingPayload",
            DeadReason.CONFLICT,
            receive_count,
        )
        item["sk"] = {"S": f"{envelope.id}#{subscription}#CONFLICT#{received}"}
        item["stored_digest"] = {"S": stored}
        item["received_digest"] = {"S": received}
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
            "pk": {"S": dead_letter_partition(envelope.tenant)},
            "sk": {"S": f"{envelope.id}#{subscription}"},
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
            "pk": {"S": f"POISON#{now.strftime('%Y-%m-%d')}"},
            "sk": {"S": f"{format_timestamp(now)}#{message_id}"},
            "kind": {"S": "POISON"},
            "message_id": {"S": message_id},
            "body": {"S": body[:POISON_BODY_LIMIT]},
            "body_truncated": {"BOOL": len(body) > POISON_BODY_LIMIT},
            "error": {"S": error[:4000]},
            "recorded_at": {"S": format_timestamp(now)},
        }
        if attributes:
            item["attributes"] = {"M": {name: {"S": str(value)} for name, value in attributes.items()}}
        self.client.put_item(TableName=self.table_name, Item=item)

    # -- reads --------------------------------------------------------------------------------------

    def get_claim(self, event_id: str, subscription: str) -> dict[str, Any] | None:
        response = self.client.get_item(
            TableName=self.table_name, Key=claim_key(event_id, subscription), ConsistentRead=True
        )
        item: dict[str, Any] | None = response.get("Item")
        return item

    # -- helpers ------------------------------------------------------------------------------------

    def _fenced_item(self, claim: Claim, update: Mapping[str, Any]) -> dict[str, Any]:
        now_iso = format_timestamp(self._clock())
        return {
            "TableName": self.table_name,
            "Key": claim_key(claim.event_id, claim.subscription),
            "UpdateExpression": update["UpdateExpression"],
            "ConditionExpression": "#owner = :owner AND #status = :pending",
            "ExpressionAttributeNames": {"#status": "status", "#owner": "owner"},
            "ExpressionAttributeValues": {
                **update["ExpressionAttributeValues"],
                ":owner": {"S": claim.owner},
                ":pending": {"S": PENDING},
                ":now_iso": {"S": now_iso},
            },
        }

    def _fenced_update(self, claim: Claim, action: str, update: Mapping[str, Any]) -> None:
        request = update if "TableName" in update else self._fenced_item(claim, update)
        try:
            self.client.update_item(**request)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException":
                raise LeaseLostError(claim.event_id, claim.subscription, action) from exc
            raise
