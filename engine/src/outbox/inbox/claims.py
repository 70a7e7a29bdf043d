"""Claims and their state machine: claim, complete, defer, release; and the DynamoDB-only path's marker.

A claim is one conditional write: the row is taken if absent (while the inbox can vouch that absence means
"never completed"), if its lease expired (a take-over), or if an operator's replay or an ordered predecessor
left it claimable (REPLAYING, DEFERRED). What finishes a claim is fenced on its owner (``InboxTable``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from botocore.exceptions import ClientError

from outbox import keys
from outbox.exceptions import CompletionTooLargeError, WatermarkMovedError
from outbox.inbox.rows import (
    COMPLETED,
    DEAD,
    DEFERRED,
    HANDED,
    PENDING,
    REPLAYING,
    SKIPPED,
    VOUCH_MARGIN,
    Claim,
    ClaimOutcome,
    ClaimResult,
    _epoch_ms,
    _from_epoch,
    _number,
    _string,
    envelope_digest,
    envelope_digests,
    unclaimed_row,
)
from outbox.inbox.table import InboxTable, _is_own_claim, _refusing_row, refused_at
from outbox.log.envelope import Envelope, format_timestamp
from outbox.log.limits import MAX_TRANSACT_ITEMS


def resolved_letter_item(table_name: str, tenant: str, letter: str, how: str) -> dict[str, Any]:
    """The transaction item that resolves the tenant's dead letter ``letter`` (its sort key) with ``how``."""
    return {
        "Update": {
            "TableName": table_name,
            "Key": {"pk": {"S": keys.dead_letter_partition(tenant)}, "sk": {"S": letter}},
            "UpdateExpression": "SET resolved = :how",
            "ConditionExpression": "attribute_exists(pk)",
            "ExpressionAttributeValues": {":how": {"S": how}},
        }
    }


def _workflow_attempt(row: Mapping[str, Any]) -> dict[str, Any]:
    """A WORKFLOW pair's next attempt: one more than the execution its row last recorded (a replay's), else 1."""
    previous = _string(row, "execution_arn")
    if previous is None:
        return {}
    return {"workflow_attempt": (_number(row, "workflow_attempt") or 1) + 1, "previous_execution": previous}


def _any_of_digests(accepted: Sequence[str]) -> tuple[str, dict[str, Any]]:
    """A condition that the row's digest is one of ``accepted``, and its values: the first is ``:digest``, which
    the claim also writes (a row it takes over gets the current digest)."""
    values = {(f":digest_{index}" if index else ":digest"): {"S": value} for index, value in enumerate(accepted)}
    return f"digest IN ({', '.join(values)})", values


class ClaimBook(InboxTable):
    """The claim rows' writes, from the claim to the completion."""

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
        budget_ms: int = 0,
    ) -> ClaimResult:
        """One conditional write: take the row if absent (and ``may_create``) or if its lease has expired.

        ``budget_ms``: what is left of the invocation as this attempt starts. The row keeps it until the attempt
        ends (every write that ends one removes it), so the next claim learns whether the previous attempt ended
        and, if not, how much time it had (``Claim.unfinished_with_ms``).

        ``may_create`` is False for a message issued longer ago than the inbox remembers completions: its
        row may be missing because the pair completed and the row expired, so absence proves nothing and
        the outcome is UNVERIFIABLE. ``digest`` may be passed in when one message is claimed for several
        subscriptions."""
        now = self._clock()
        owner = self._new_owner()
        digest = digest or envelope_digest(envelope)
        lease_expires_at = now + lease
        if may_create:
            created = self._create(envelope, subscription, owner, digest, now, lease_expires_at, budget_ms)
            if created is not None:
                return created
        claimable = "(#status = :pending AND lease_expires_at < :now) OR #status IN (:replaying, :deferred)"
        if may_create:
            claimable = f"attribute_not_exists(pk) OR {claimable}"
        # A row an older engine wrote for this content holds the digest it computed (envelope_digests).
        accepted = envelope_digests(envelope, digest)
        same_content, digests = _any_of_digests(accepted)
        try:
            response = self.client.update_item(
                TableName=self.table_name,
                Key=keys.claim_key(envelope.id, subscription),
                UpdateExpression=(
                    "SET #status = :pending, #owner = :owner, lease_expires_at = :lease, "
                    "attempts = if_not_exists(attempts, :zero) + :one, digest = :digest, tenant = :tenant, "
                    "event_type = :event_type, event_seq = :event_seq, "
                    "created_at = if_not_exists(created_at, :now_iso), updated_at = :now_iso, "
                    # Read before this update sets it: the previous attempt's, if it never ended.
                    "unfinished_with_ms = if_not_exists(started_with_ms, :zero), started_with_ms = :budget"
                ),
                ConditionExpression=f"(attribute_not_exists(pk) OR {same_content}) AND ({claimable})",
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
                    **digests,
                    ":tenant": {"S": envelope.tenant},
                    ":event_type": {"S": envelope.type},
                    ":event_seq": {"N": str(envelope.seq)},
                    ":budget": {"N": str(budget_ms)},
                },
                ReturnValues="ALL_NEW",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except ClientError as exc:
            existing, own = self._refused(exc, envelope, subscription, owner)
            return own or ClaimResult(self._why_not_claimable(existing, digest, accepted), existing=existing)
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
        budget_ms: int = 0,
    ) -> ClaimResult | None:
        """The first claim of a pair that has no row: a PutItem conditioned on absence, lighter than the update
        (no expression, no row to send back: this worker wrote all of it). None when a row exists: the update
        decides then (a take-over, a replay, done, dead, a conflict)."""
        row = unclaimed_row(envelope, subscription, PENDING, now, digest)
        del row["event_id"], row["subscription"]  # the key says both (ClaimRecord.from_item reads them there)
        row["owner"] = {"S": owner}
        row["attempts"] = {"N": "1"}
        row["lease_expires_at"] = {"N": _epoch_ms(lease_expires_at)}
        row["started_with_ms"] = {"N": str(budget_ms)}
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
            unfinished_with_ms=_number(row, "unfinished_with_ms") or None,
            event_seq=envelope.seq,
            **_workflow_attempt(row),
        )

    @staticmethod
    def _why_not_claimable(existing: Mapping[str, Any], digest: str, accepted: Sequence[str] = ()) -> ClaimOutcome:
        """``accepted``: the other digests a row of the same content may hold (``envelope_digests``)."""
        if not existing:
            return ClaimOutcome.UNVERIFIABLE  # absent, and the claim was not allowed to create it
        stored = existing.get("digest", {}).get("S", digest)
        if stored != digest and stored not in accepted:
            return ClaimOutcome.CONFLICT
        status = existing.get("status", {}).get("S")
        if status in (COMPLETED, SKIPPED):
            return ClaimOutcome.ALREADY_COMPLETED
        if status == DEAD:
            return ClaimOutcome.DEAD
        if status == HANDED:
            return ClaimOutcome.HANDED
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
                    "expires_at = :expires REMOVE lease_expires_at, started_with_ms, open_dead_letter"
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
            how = f"completed at {format_timestamp(self._clock())} after a replay"
            writes.append(resolved_letter_item(self.table_name, claim.tenant, claim.open_dead_letter, how))
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
        """A REPLAYING claim of an ordered pair its watermark has passed and that completed before (applied in
        order already: only a forced replay of a completed pair leaves one) back to COMPLETED, so nothing re-sends
        it for ever. False when the claim was not REPLAYING, or never completed: a pair the watermark passed
        while the order did not hold it (a pattern widened since), which a repair must still run."""
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
                ConditionExpression=(
                    "#status = :replaying AND attribute_not_exists(open_dead_letter) AND attribute_exists(completed_at)"
                ),
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
                    "attempts = attempts - :one, updated_at = :now_iso REMOVE lease_expires_at, started_with_ms"
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

    def leave_order(self, claim: Claim, order: Sequence[Mapping[str, Any]]) -> Claim:
        """A claim that waited DEFERRED in an order the deployed catalog no longer routes it through (a deploy made
        its subscription unordered, or moved ``ordered_since`` past it), taken to run the unordered way: it forgets
        that it waited, with ``order`` (``OrderBook.release_items``: its deferred row out of the order and the
        watermark's count one less) in the same transaction, before it runs. The claim as it is then. Raises
        ``WatermarkMovedError`` when the order changed since ``order`` was read (read it again)."""
        update = self._fenced_item(
            claim,
            {
                "UpdateExpression": "SET updated_at = :now_iso REMOVE waits_for, deferred_at",
                "ExpressionAttributeValues": {},
            },
        )
        if not order:
            self._fenced_update(claim, "leave its order", update, landed=PENDING)
            return replace(claim, waits_for=None)
        try:
            self._fenced_transaction(
                claim, "leave its order", [{"Update": update}, *map(dict, order)], landed=PENDING, watermark_at=2
            )
        except ClientError as exc:
            if refused_at(exc, 1):  # the deferred row went meanwhile: the order moved
                raise WatermarkMovedError(f"the order of {claim.subscription} for {claim.tenant} moved") from exc
            raise
        return replace(claim, waits_for=None)

    def release(self, claim: Claim, error: str, give_back: int = 0, *, still_unfinished: int | None = None) -> None:
        """Give the claim back after a retryable error: the lease ends now, the next receive retries.
        ``give_back`` attempts are not counted (a claim taken only to be handed to another path); the count is
        set, not decremented, so a resend of this write after a lost answer gives back nothing twice.
        ``still_unfinished``: a claim given back unrun keeps the previous attempt's unfinished time for the next
        claim (``Claim.unfinished_with_ms``)."""
        update = "SET lease_expires_at = :zero, last_error = :error, updated_at = :now_iso"
        values: dict[str, Any] = {":zero": {"N": "0"}, ":error": {"S": error[:2000]}}
        if give_back:
            update += ", attempts = :attempts"
            values[":attempts"] = {"N": str(max(claim.attempts - give_back, 0))}
        if still_unfinished is None:
            update += " REMOVE started_with_ms"  # the attempt ended
        else:
            update += ", started_with_ms = :unfinished"
            values[":unfinished"] = {"N": str(still_unfinished)}
        self._fenced_update(claim, "release", {"UpdateExpression": update, "ExpressionAttributeValues": values})

    def forgive(self, claim: Claim) -> Claim:
        """Count the attempt before this claim's as never made (it was cut off for time other work took): the
        claim with one attempt less. The count is set, not decremented, so a resend after a lost answer
        forgives nothing twice."""
        attempts = max(claim.attempts - 1, 1)
        update = {
            "UpdateExpression": "SET attempts = :attempts, updated_at = :now_iso",
            "ExpressionAttributeValues": {":attempts": {"N": str(attempts)}},
        }
        self._fenced_update(claim, "forgive", update)
        return replace(claim, attempts=attempts)
