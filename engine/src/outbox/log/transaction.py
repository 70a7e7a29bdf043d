"""The one TransactWriteItems of an emit: its actions in order, and what DynamoDB's answer to it means.

``EventStore._commit`` decides what to do next (commit, re-seal on a newer head, re-send the same token, give
up); this module only builds the request and reads the answer, so each rule has one place:

- the actions: the chain head (index 0), the event rows in seq order, the caller's writes, the INLINE
  handlers' writes, and on a tenant's first emit its index row, last;
- the answer: ``None`` (committed), ``("head", current)`` (lost the race for the head), ``("transient",
  None)`` (refused without effect), ``("unknown", None)`` (may have committed: re-send the same token), or an
  ``OutboxError`` that names the write whose condition failed.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError

from outbox import keys
from outbox.exceptions import (
    CallerWriteConditionFailedError,
    ChainIntegrityError,
    EmitOutcomeUnknownError,
    EventStoreUnavailableError,
    InlineWriteConditionFailedError,
    InvalidWriteError,
)
from outbox.log.chain import ChainHead
from outbox.log.envelope import Envelope, format_timestamp

logger = logging.getLogger(__name__)

# A transaction's actions: the head, the event rows, then the caller's and the INLINE writes.
HEAD_INDEX, FIRST_EVENT_INDEX = 0, 1
TRANSIENT_REASONS = frozenset({"TransactionConflict", "ThrottlingError", "ProvisionedThroughputExceeded"})
THROTTLING_ERRORS = frozenset({"ThrottlingException", "ProvisionedThroughputExceededException", "RequestLimitExceeded"})
# Answers that do not say whether a transaction applied (as do any 5xx and botocore's own errors, such as a
# timeout): AWS's advice is to re-send it with the same ClientRequestToken until the answer is definite.
UNKNOWN_OUTCOME_ERRORS = frozenset({"InternalServerError", "TransactionInProgressException"})
TRANSIENT_ERRORS = THROTTLING_ERRORS | UNKNOWN_OUTCOME_ERRORS  # for reads, which are safe to repeat

Outcome = tuple[str, ChainHead | None] | None


@dataclass
class SealWrites:
    """The writes of one seal after the head and the event rows: the caller's first, then the INLINE ones."""

    items: list[Mapping[str, Any]]
    caller_count: int
    inline_owners: list[str] = field(default_factory=list)

    def append_inline(self, writes: list[tuple[str, Mapping[str, Any]]]) -> None:
        for owner, write in writes:
            self.inline_owners.append(owner)
            self.items.append(write)

    def owner(self, index: int) -> str | None:
        """The INLINE subscription that returned write ``index``, or None for one of the caller's."""
        return None if index < self.caller_count else self.inline_owners[index - self.caller_count]


def transaction_items(
    table_name: str, envelopes: Sequence[Envelope], head: ChainHead, writes: SealWrites
) -> list[Mapping[str, Any]]:
    """The actions, in the order the cancellation reasons are read by: the head moves to the last event."""
    items = [
        head_write(table_name, envelopes[-1], head),
        *(event_write(table_name, envelope) for envelope in envelopes),
        *writes.items,
    ]
    if head.last_seq == 0:
        items.append(tenant_index_write(table_name, envelopes[0]))
    return items


def refusal(
    exc: ClientError,
    envelopes: Sequence[Envelope],
    writes: SealWrites,
    table_keys: Mapping[str, Sequence[str]],
    token: str,
) -> Outcome:
    """What an error answer to the transaction means (see the module's docstring)."""
    envelope = envelopes[-1]
    code = exc.response.get("Error", {}).get("Code", "")
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
    if code == "TransactionCanceledException":
        return _cancelled(exc, envelopes, writes, table_keys)
    if code in UNKNOWN_OUTCOME_ERRORS or status >= 500:
        return unknown_outcome(envelope, exc)
    if code in THROTTLING_ERRORS:
        return "transient", None
    if code == "ValidationException":
        raise InvalidWriteError(f"DynamoDB rejected the transaction: {exc}") from exc
    if code == "IdempotentParameterMismatchException":
        raise EmitOutcomeUnknownError(
            envelope.id,
            envelope.tenant,
            f"DynamoDB says token {token} was used with other parameters; that is a bug in emit(), "
            "which must re-send a token's request unchanged",
        ) from exc
    raise EventStoreUnavailableError(f"emit failed: {exc}", committed=False) from exc


def unknown_outcome(envelope: Envelope, exc: Exception) -> tuple[str, None]:
    logger.warning("emit outcome unknown for event %s, re-sending with the same token: %s", envelope.id, exc)
    return "unknown", None


def _cancelled(
    exc: ClientError, envelopes: Sequence[Envelope], writes: SealWrites, table_keys: Mapping[str, Sequence[str]]
) -> tuple[str, ChainHead | None]:
    reasons = exc.response.get("CancellationReasons") or []
    codes = [reason.get("Code", "None") for reason in reasons]
    first_write = FIRST_EVENT_INDEX + len(envelopes)
    for index, code in enumerate(codes[first_write : first_write + len(writes.items)]):
        if code == "ConditionalCheckFailed":
            action, body = next(iter(writes.items[index].items()))
            key = body.get("Key") or {
                name: body["Item"][name]
                for name in table_keys.get(body["TableName"], ("pk", "sk"))
                if name in body["Item"]
            }
            owner = writes.owner(index)
            if owner is not None:
                raise InlineWriteConditionFailedError(owner, body["TableName"], key, f"{action} condition") from exc
            raise CallerWriteConditionFailedError(index, body["TableName"], key, f"{action} condition") from exc
    tenant = envelopes[0].tenant
    if codes and codes[HEAD_INDEX] == "ConditionalCheckFailed":
        current = reasons[HEAD_INDEX].get("Item")
        return "head", ChainHead.from_item(tenant, current) if current else None
    for envelope, code in zip(envelopes, codes[FIRST_EVENT_INDEX:first_write], strict=False):
        if code == "ConditionalCheckFailed":
            raise ChainIntegrityError(
                f"tenant {tenant!r}: the head is at seq {envelopes[0].seq - 1} but an event row already "
                f"exists at seq {envelope.seq}; run verify_chain"
            ) from exc
    if set(codes) - {"None"} <= TRANSIENT_REASONS:
        return "transient", None
    raise EventStoreUnavailableError(f"emit cancelled for reasons {codes}: {exc}", committed=False) from exc


def head_write(table_name: str, envelope: Envelope, head: ChainHead) -> dict[str, Any]:
    """The head moves from ``head`` to ``envelope`` only if nobody moved it since it was read: created on a
    tenant's first emit, else updated under a condition on both its seq and its hash."""
    values = {
        ":seq": {"N": str(envelope.seq)},
        ":hash": {"S": envelope.hash},
        ":id": {"S": envelope.id},
        ":now": {"S": format_timestamp(envelope.occurred_at)},
    }
    key = keys.head_key(envelope.tenant)
    if head.last_seq == 0:
        item = {
            **key,
            "kind": {"S": keys.KIND_HEAD},
            "tenant": {"S": envelope.tenant},
            "last_seq": values[":seq"],
            "last_hash": values[":hash"],
            "last_event_id": values[":id"],
            "updated_at": values[":now"],
        }
        return {
            "Put": {
                "TableName": table_name,
                "Item": item,
                "ConditionExpression": "attribute_not_exists(pk)",
                "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
            }
        }
    return {
        "Update": {
            "TableName": table_name,
            "Key": key,
            "UpdateExpression": ("SET last_seq = :seq, last_hash = :hash, last_event_id = :id, updated_at = :now"),
            "ConditionExpression": "last_seq = :prev AND last_hash = :prev_hash",
            "ExpressionAttributeValues": {
                **values,
                ":prev": {"N": str(head.last_seq)},
                ":prev_hash": {"S": head.last_hash},
            },
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }
    }


def tenant_index_write(table_name: str, envelope: Envelope) -> dict[str, Any]:
    """Lists the tenant for the operator tools; written with the tenant's first event (unconditionally:
    the head's condition already makes it once). Last in the transaction, so that cancellation
    reasons keep the caller's writes where the head and the event rows leave them."""
    return {
        "Put": {
            "TableName": table_name,
            "Item": {
                "pk": {"S": keys.tenant_index_partition(envelope.tenant)},
                "sk": {"S": envelope.tenant},
                "kind": {"S": keys.KIND_TENANT},
                "tenant": {"S": envelope.tenant},
                "first_event_at": {"S": format_timestamp(envelope.occurred_at)},
            },
        }
    }


def event_write(table_name: str, envelope: Envelope) -> dict[str, Any]:
    return {
        "Put": {
            "TableName": table_name,
            "Item": envelope.to_item(),
            "ConditionExpression": "attribute_not_exists(pk)",
        }
    }
