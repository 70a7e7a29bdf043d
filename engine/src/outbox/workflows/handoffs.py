"""The inbox's rows of the WORKFLOW lane: a pair handed to its execution, and that execution's end.

A hand-off is one transaction: the claim (fenced on its owner, PENDING) becomes HANDED with the execution's ARN,
name and attempt, and a row is added to the running index, ``WORKFLOWS#RUNNING#<shard>`` / ``<handed at>#<event
id>#<subscription>``, which the settle pass and status read oldest first. The end is one transaction too,
conditioned on the claim being HANDED to that very execution: SUCCEEDED completes it (and resolves the dead
letter a replay left open), any other end makes it DEAD with a dead letter that names the execution and its
error; either way the running row goes. Settling an execution again, or a stale one, changes nothing.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

from botocore.exceptions import ClientError

from outbox import keys
from outbox.inbox import COMPLETED, DEAD, Claim, DeadReason
from outbox.inbox.claims import resolved_letter_item
from outbox.inbox.rows import HANDED, _number, _string
from outbox.inbox.table import InboxTable, _cancelled_by_condition
from outbox.log.envelope import format_timestamp
from outbox.query import read_partition

RUNNING_PARTITION_PREFIX: Final = "WORKFLOWS#RUNNING#"
RUNNING_SHARDS: Final = 8


def running_partition(shard: int) -> str:
    return f"{RUNNING_PARTITION_PREFIX}{shard}"


def running_key(event_id: str, subscription: str, handed_at: str) -> dict[str, Any]:
    """A handed pair's row in the running index: its shard by the event id, its sort key by when it was handed."""
    shard = int(hashlib.sha256(event_id.encode()).hexdigest()[:8], 16) % RUNNING_SHARDS
    return {"pk": {"S": running_partition(shard)}, "sk": {"S": f"{handed_at}#{event_id}#{subscription}"}}


@dataclass(frozen=True)
class Handoff:
    """A pair handed to a workflow, as its claim row says."""

    event_id: str
    subscription: str
    tenant: str
    event_type: str
    event_seq: int
    execution_arn: str
    execution_name: str
    attempt: int
    handed_at: str
    open_dead_letter: str | None = None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Handoff:
        """The claim row read as every claim row is (``ClaimRecord``), and what the hand-off added to it."""
        from outbox.inbox.records import ClaimRecord  # the settle pass's and status's, not the consumer's cold start

        claim = ClaimRecord.from_item(row)
        return cls(
            event_id=claim.event_id,
            subscription=claim.subscription,
            tenant=claim.tenant,
            event_type=claim.event_type or "",
            event_seq=claim.event_seq or 0,
            execution_arn=row["execution_arn"]["S"],
            execution_name=row["execution_name"]["S"],
            attempt=_number(row, "workflow_attempt") or 1,
            handed_at=row["handed_at"]["S"],
            open_dead_letter=claim.open_dead_letter,
        )


@dataclass(frozen=True)
class Running:
    """A row of the running index: a pair handed to a workflow and not settled yet."""

    event_id: str
    subscription: str
    tenant: str
    execution_arn: str
    handed_at: str
    ends_by: str | None = None  # its execution's timeout from its hand-off (None: not known)


class Handoffs:
    """The WORKFLOW lane's writes and reads on an inbox (``Inbox``, or any ``InboxTable``)."""

    def __init__(self, inbox: InboxTable) -> None:
        self.inbox = inbox

    @property
    def table_name(self) -> str:
        return self.inbox.table_name

    def hand_off(
        self,
        claim: Claim,
        execution_arn: str,
        execution_name: str,
        attempt: int,
        *,
        execution_timeout: int | None = None,
    ) -> None:
        """The claim becomes HANDED to ``execution_arn``, and the running index lists it. ``LeaseLostError`` when the
        claim is no longer this worker's (the new owner's start, with the same name, finds the same execution)."""
        now = self.inbox.clock()
        handed_at = format_timestamp(now)
        values: dict[str, Any] = {
            ":handed": {"S": HANDED},
            ":arn": {"S": execution_arn},
            ":name": {"S": execution_name},
            ":attempt": {"N": str(attempt)},
        }
        history = ""
        if claim.previous_execution is not None and claim.previous_execution != execution_arn:
            # The execution before this one (a replay's predecessor) stays named in the row's history.
            history = ", execution_history = list_append(if_not_exists(execution_history, :none), :previous)"
            values |= {":none": {"L": []}, ":previous": {"L": [{"S": claim.previous_execution}]}}
        update = self.inbox._fenced_item(
            claim,
            {
                "UpdateExpression": (
                    "SET #status = :handed, execution_arn = :arn, execution_name = :name, workflow_attempt = :attempt, "
                    f"handed_at = :now_iso, updated_at = :now_iso{history} REMOVE lease_expires_at, started_with_ms"
                ),
                "ExpressionAttributeValues": values,
            },
        )
        running = {
            **running_key(claim.event_id, claim.subscription, handed_at),
            "kind": {"S": "WORKFLOW_RUNNING"},
            "event_id": {"S": claim.event_id},
            "subscription": {"S": claim.subscription},
            "tenant": {"S": claim.tenant},
            "execution_arn": {"S": execution_arn},
            "handed_at": {"S": handed_at},
        }
        if execution_timeout is not None:  # by when Lambda ends it, whatever it does: the pass must have seen it
            running["ends_by"] = {"S": format_timestamp(now + timedelta(seconds=execution_timeout))}
        self.inbox._fenced_transaction(
            claim,
            "hand off",
            [{"Update": update}, {"Put": {"TableName": self.table_name, "Item": running}}],
            landed=HANDED,
        )

    def handoff(self, event_id: str, subscription: str) -> Handoff | None:
        """The pair's hand-off, while its claim is HANDED (None otherwise)."""
        item = self.inbox.client.get_item(
            TableName=self.table_name, Key=keys.claim_key(event_id, subscription), ConsistentRead=True
        ).get("Item")
        if item is None or _string(item, "status") != HANDED:
            return None
        return Handoff.from_row(item)

    def running(self) -> Iterator[Running]:
        """Every pair handed to a workflow and not settled, oldest first within each shard."""
        return running_pairs(self.inbox.client, self.table_name)

    def settle_succeeded(self, handoff: Handoff) -> bool:
        """COMPLETED (its replay's dead letter resolved), the running row gone. False when the claim is no longer
        HANDED to that execution (settled already)."""
        now = self.inbox.clock()
        now_iso = format_timestamp(now)
        claim = self._settle_claim(
            handoff,
            "SET #status = :completed, completed_at = :now_iso, updated_at = :now_iso, expires_at = :expires "
            "REMOVE open_dead_letter",
            {
                ":completed": {"S": COMPLETED},
                ":expires": {"N": str(int((now + self.inbox.retention).timestamp()))},
            },
            now_iso,
        )
        items: list[dict[str, Any]] = [{"Update": claim}, self._unlist(handoff)]
        if handoff.open_dead_letter is not None:
            how = f"completed at {now_iso} by the workflow execution {handoff.execution_arn}"
            items.append(resolved_letter_item(self.table_name, handoff.tenant, handoff.open_dead_letter, how))
        return self._transact(items)

    def settle_failed(self, handoff: Handoff, status: str, error: str, error_type: str) -> bool:
        """DEAD, with a dead letter that names the execution (its ARN in ``execution_arn``, its name in the text)
        and its error; the running row gone. False when the claim is no longer HANDED to that execution."""
        now_iso = format_timestamp(self.inbox.clock())
        text = f"workflow execution {handoff.execution_name} ended {status}: {error}"[:2000]
        claim = self._settle_claim(
            handoff,
            "SET #status = :dead, last_error = :error, dead_reason = :reason, dead_at = :now_iso, "
            "updated_at = :now_iso REMOVE open_dead_letter",
            {":dead": {"S": DEAD}, ":error": {"S": text}, ":reason": {"S": DeadReason.TERMINAL.value}},
            now_iso,
        )
        letter = {
            **keys.dead_letter_key(handoff.tenant, handoff.event_id, handoff.subscription),
            "kind": {"S": "DEAD_LETTER"},
            "tenant": {"S": handoff.tenant},
            "event_id": {"S": handoff.event_id},
            "event_type": {"S": handoff.event_type},
            "event_seq": {"N": str(handoff.event_seq)},
            "subscription": {"S": handoff.subscription},
            "reason": {"S": DeadReason.TERMINAL.value},
            "error": {"S": text},
            "error_type": {"S": error_type},
            "receive_count": {"N": "0"},
            "attempts": {"N": str(handoff.attempt)},
            "dead_at": {"S": now_iso},
            "execution_arn": {"S": handoff.execution_arn},
            "execution_status": {"S": status},
        }
        return self._transact(
            [{"Update": claim}, {"Put": {"TableName": self.table_name, "Item": letter}}, self._unlist(handoff)]
        )

    def _settle_claim(
        self, handoff: Handoff, expression: str, values: Mapping[str, Any], now_iso: str
    ) -> dict[str, Any]:
        return {
            "TableName": self.table_name,
            "Key": keys.claim_key(handoff.event_id, handoff.subscription),
            "UpdateExpression": expression,
            "ConditionExpression": "#status = :handed AND execution_arn = :arn",
            "ExpressionAttributeNames": {"#status": "status"},
            "ExpressionAttributeValues": {
                **values,
                ":handed": {"S": HANDED},
                ":arn": {"S": handoff.execution_arn},
                ":now_iso": {"S": now_iso},
            },
        }

    def _unlist(self, handoff: Handoff) -> dict[str, Any]:
        return {
            "Delete": {
                "TableName": self.table_name,
                "Key": running_key(handoff.event_id, handoff.subscription, handoff.handed_at),
            }
        }

    def _transact(self, items: list[dict[str, Any]]) -> bool:
        try:
            self.inbox.client.transact_write_items(TransactItems=items)
        except ClientError as exc:
            if _cancelled_by_condition(exc):
                return False
            raise
        return True


def running_pairs(client: Any, table_name: str) -> Iterator[Running]:
    """The running index of the inbox ``table_name``: every pair handed to a workflow and not settled, oldest first
    within each shard (``sorted`` by ``handed_at`` for all of them)."""
    for shard in range(RUNNING_SHARDS):
        for row in read_partition(client, table_name, running_partition(shard)):
            yield Running(
                event_id=row["event_id"]["S"],
                subscription=row["subscription"]["S"],
                tenant=row["tenant"]["S"],
                execution_arn=row["execution_arn"]["S"],
                handed_at=row["handed_at"]["S"],
                ends_by=_string(row, "ends_by"),
            )


def handed_since(handoff: Running, now: datetime) -> float:
    """How long ago, in seconds, ``handoff`` was handed to its workflow."""
    return (now - datetime.fromisoformat(handoff.handed_at)).total_seconds()
