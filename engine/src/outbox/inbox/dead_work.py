"""Dead work: dead letters (a pair that will not run again by itself), refusals and conflicts (content that is
never run), and poison pills (a message that is not an event). Each is recorded before its message is
acknowledged, so an operator sees everything the consumer gave up on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from botocore.exceptions import ClientError

from outbox import keys
from outbox.exceptions import LeaseLostError, WatermarkMovedError
from outbox.inbox.rows import (
    DEAD,
    PENDING,
    POISON_BODY_LIMIT,
    Claim,
    DeadReason,
    _epoch_ms,
    _string,
    envelope_digest,
    storable_text,
    unclaimed_row,
)
from outbox.inbox.table import InboxTable, _cancelled_by_condition, _refusing_row, refused_at
from outbox.log.envelope import Envelope, format_timestamp


class DeadWork(InboxTable):
    """The writes that record what the consumer gave up on."""

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
                    "dead_at = :now_iso, updated_at = :now_iso REMOVE lease_expires_at, started_with_ms"
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

    def mark_left_out(
        self,
        envelope: Envelope,
        subscription: str,
        why: str,
        statuses: tuple[str, ...],
        receive_count: int,
        order: Sequence[Mapping[str, Any]] = (),
    ) -> bool:
        """A repair's message for a pair the deployed catalog no longer runs (``outbox.pairs``: its rule for
        ``statuses`` is to mark it dead): DEAD again, with an open dead letter that says why, and ``order``
        (``OrderBook.release_items``: its deferred row, if it waited in an order, out of it, the watermark's count
        one less), in one transaction. Nothing runs it, and nothing says it is on its way: the operator deploys the
        subscription again and replays it, or acknowledges it (``outbox skip``). False when the claim is in none
        of ``statuses`` (a row nobody is waiting on: nothing to do); ``LeaseLostError`` when it is PENDING under a
        live lease (a run of the code before the deploy: ask again once it ended or lapsed);
        ``WatermarkMovedError`` when the order changed since ``order`` was read (read it again)."""
        error = f"{envelope.id}:{subscription} was not run: {why}. Deploy it again and replay it, or skip it"
        now = self._clock()
        now_iso = format_timestamp(now)
        names = {f":s{index}": {"S": status} for index, status in enumerate(statuses) if status != PENDING}
        conditions = [f"#status IN ({', '.join(names)})"] if names else []
        if PENDING in statuses:
            # A claim under a live lease is someone's run (the code before the deploy): it ends it, never this.
            names[":pending"] = {"S": PENDING}
            names[":now"] = {"N": _epoch_ms(now)}
            conditions.append("(#status = :pending AND lease_expires_at < :now)")
        if not conditions:
            raise ValueError("mark_left_out needs the statuses a left-out pair is made dead from")
        condition = " OR ".join(conditions)
        claim = {
            "TableName": self.table_name,
            "Key": keys.claim_key(envelope.id, subscription),
            "UpdateExpression": (
                "SET #status = :dead, last_error = :error, dead_reason = :reason, dead_at = :now_iso, "
                "updated_at = :now_iso REMOVE lease_expires_at, started_with_ms, open_dead_letter, waits_for, "
                "deferred_at"
            ),
            "ConditionExpression": condition,
            "ExpressionAttributeNames": {"#status": "status"},
            "ExpressionAttributeValues": {
                ":dead": {"S": DEAD},
                ":error": {"S": error[:2000]},
                ":reason": {"S": DeadReason.LEFT_OUT.value},
                ":now_iso": {"S": now_iso},
                **names,
            },
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }
        letter = self.dead_letter_item(
            envelope, subscription, error, "LeftOutByDeploy", DeadReason.LEFT_OUT, receive_count
        )
        items = [{"Update": claim}, {"Put": {"TableName": self.table_name, "Item": letter}}, *map(dict, order)]
        try:
            self.client.transact_write_items(TransactItems=items)
        except ClientError as exc:
            if any(refused_at(exc, index) for index in range(2, len(items))):
                raise WatermarkMovedError(f"the order of {subscription} for {envelope.tenant} moved") from exc
            if PENDING in statuses and _string(_refusing_row(exc) or {}, "status") == PENDING:
                raise LeaseLostError(envelope.id, subscription, "mark it left out") from exc
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
