"""An event before it commits: its draft, checked against every bound before any AWS call, and its seal
after a chain head (the next seq, linked to the head's hash and hashed).

A draft is checked once per emit, sealed at the widest seq the hash can carry: an upper bound for whatever
seq the event finally gets, so no seal after a lost head race can exceed a bound the first one met.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from outbox import keys
from outbox.exceptions import InvalidEventError
from outbox.log.canonical import GENESIS_HASH, MAX_SAFE_INTEGER, canonical_json, chain_hash, json_problem
from outbox.log.chain import ChainHead
from outbox.log.envelope import ULID_PATTERN, Envelope
from outbox.log.limits import WriteTarget, item_size
from outbox.messages import MAX_RELAY_BODY_BYTES, relay_body_size
from outbox.tracing import TraceContext

# The largest sequence number the hash can carry (an I-JSON integer).
_WIDEST_SEQ = MAX_SAFE_INTEGER
_MAX_ITEM_BYTES = 400 * 1024


def given_event_id(event_id: str) -> str:
    """A caller's own event id (``NewEvent.event_id``), refused unless it is a ULID's text."""
    if not isinstance(event_id, str) or not re.fullmatch(ULID_PATTERN, event_id):
        raise InvalidEventError(f"event_id {event_id!r} is not a ULID's text (26 characters of Crockford's base 32)")
    return event_id


def validated_draft(
    event_id: str,
    event_type: str,
    payload: Mapping[str, Any],
    tenant: str,
    actor: str,
    correlation_id: str,
    causation_id: str | None,
    schema_version: int,
    occurred_at: datetime,
    trace_context: TraceContext | None = None,
) -> dict[str, Any]:
    """The event's fields but its seq and hashes, every one of them validated: bad input never reaches AWS."""
    if not isinstance(payload, Mapping):
        raise InvalidEventError(f"payload must be a JSON object (a mapping), not {type(payload).__name__}")
    payload = copy.deepcopy(dict(payload))  # the event's own: the caller may change its dict afterwards
    problem = json_problem(payload)
    if problem is None:
        try:
            canonical_json(payload)
        except ValueError as exc:
            problem = f"payload is not canonical JSON: {exc}"
    if problem:
        raise InvalidEventError(problem)
    draft: dict[str, Any] = {
        "id": event_id,
        "type": event_type,
        "tenant": tenant,
        "correlation_id": correlation_id,
        "causation_id": causation_id,
        "actor": actor,
        "occurred_at": occurred_at,
        "schema_version": schema_version,
        "payload": payload,
    }
    if trace_context is not None:
        draft["trace_context"] = trace_context
    seal(draft, _widest_head(tenant), validate=True)
    return draft


def checked_events(drafts: Sequence[dict[str, Any]], table_name: str) -> list[WriteTarget]:
    """The head and event-row actions of the transaction, after checking each event against the item
    limit and the relay's; measured once per emit, at the widest seq (an upper bound for any seal)."""
    if len({draft["id"] for draft in drafts}) < len(drafts):
        raise InvalidEventError("two events of one emit have the same event_id")
    rows: list[WriteTarget] = []
    for draft in drafts:
        event_item = seal(draft, _widest_head(draft["tenant"])).to_item()
        size = item_size(event_item)
        if size > _MAX_ITEM_BYTES:
            raise InvalidEventError(f"the event row would be {size} bytes; DynamoDB items are at most 409600")
        body = relay_body_size(event_item)
        if body > MAX_RELAY_BODY_BYTES:
            raise InvalidEventError(
                f"the relay would carry this event as a {body}-byte message (its row in DynamoDB JSON, with a "
                f"type tag on every value), and the durable queue takes at most {MAX_RELAY_BODY_BYTES} "
                "(MaximumMessageSize, less what a repair's attributes need): such an event could never reach "
                "a DURABLE subscriber. Keep large content elsewhere (S3, the data table) and put its key in "
                "the payload"
            )
        # Each event of a batch gets its own seq, so its key is its own too: draft order stands in for it.
        key = {"pk": event_item["pk"], "sk": {"S": f"{event_item['sk']['S']}#{len(rows)}"}}
        rows.append(WriteTarget(f"event row {len(rows) + 1}", "Put", table_name, key, size))
    head_key = keys.head_key(drafts[0]["tenant"])
    return [WriteTarget("the chain head", "Update", table_name, head_key, 300), *rows]


def seal_all(
    drafts: Sequence[dict[str, Any]],
    head: ChainHead,
    seal_one: Callable[[dict[str, Any], ChainHead], Envelope] | None = None,
) -> list[Envelope]:
    """The drafts sealed in order after ``head``: consecutive seqs, each linked to the one before (each sealed by
    ``seal_one``, ``seal`` unless another engine version's sealing is given)."""
    envelopes = []
    for draft in drafts:
        envelope = (seal_one or seal)(draft, head)
        envelopes.append(envelope)
        head = ChainHead(head.tenant, envelope.seq, envelope.hash, envelope.id)
    return envelopes


def seal(draft: dict[str, Any], head: ChainHead, validate: bool = False) -> Envelope:
    """The envelope that would follow ``head``: next seq, linked and hashed."""
    fields = {**draft, "seq": head.last_seq + 1, "prev_hash": head.last_hash, "hash": GENESIS_HASH}
    try:
        unsealed = Envelope.model_validate(fields, extra="forbid")  # only a stored event carries unknown fields
    except ValueError as exc:
        if validate:
            raise InvalidEventError(f"invalid event: {exc}") from exc
        raise
    return unsealed.model_copy(update={"hash": chain_hash(head.last_hash, unsealed.hashed_body())})


def _widest_head(tenant: str) -> ChainHead:
    return ChainHead(tenant=tenant, last_seq=_WIDEST_SEQ - 1)
