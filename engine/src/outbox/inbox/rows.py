"""The inbox table's rows: a claim's statuses, a worker's claim, and the rows the engine writes (the typed
records an operator reads back are ``outbox.inbox.records``).

Attribute helpers (``_string``, ``_number``, ...) read DynamoDB's typed values; ``storable_text`` makes any text
storable (a poison pill's body may hold what UTF-8 cannot encode).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

from outbox import keys
from outbox.log.canonical import canonical_json
from outbox.log.envelope import Envelope, format_timestamp

PENDING, COMPLETED, DEAD = "PENDING", "COMPLETED", "DEAD"
# Set by an operator's replay in place of DEAD: claimable like an absent row (the row itself proves the
# pair has not completed since), and it names the dead letter that the completion resolves.
REPLAYING = "REPLAYING"
# An ordered subscription's pair whose predecessor is not applied yet (outbox.pairs.order): claimable like
# REPLAYING, at any age, by the wake-up message its predecessor's completion sends; the attempt it was
# deferred on is given back. SKIPPED: an operator skipped it (``outbox skip``); final, like COMPLETED.
DEFERRED, SKIPPED = "DEFERRED", "SKIPPED"
# A WORKFLOW pair whose durable execution started: its end settles it (outbox.workflows.handoffs).
HANDED = "HANDED"
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
    HANDED = "handed"  # handed to a workflow: its execution runs it, and its end settles it


class DeadReason(StrEnum):
    TERMINAL = "terminal"  # a terminal error, invalid input, or a handler that broke its contract
    EXHAUSTED = "exhausted"  # every attempt failed (or crashed): the claim's attempts, not receives, decide
    CONFLICT = "conflict"  # other content under a claimed event id, or an event the events table does not hold
    UNVERIFIABLE = "unverifiable"  # older than the inbox's retention: it may have completed and been forgotten
    # A repair's message (a replay, a reconcile, a wake-up) reached a consumer whose deployed catalog no longer runs
    # the pair (removed, renamed, narrowed, moved off DURABLE): dead again, with a letter that says why.
    LEFT_OUT = "left_out"


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
    # What was left of its invocation when the previous attempt started, if that attempt never ended (no
    # completion, release, dead mark or deferral: the deadline cut it off, or its worker died); None otherwise.
    unfinished_with_ms: int | None = None
    # The claimed event's seq (None where a caller built the claim without one).
    event_seq: int | None = None
    # A WORKFLOW pair's: the attempt whose execution this claim starts (one more than the last one handed, after a
    # replay), and the ARN of that last execution, kept in the row's history when the next is handed.
    workflow_attempt: int = 1
    previous_execution: str | None = None

    @property
    def idempotency_key(self) -> str:
        """Stable across retries and take-overs: pass it to any external API the handler calls."""
        return keys.idempotency_key(self.event_id, self.subscription)


@dataclass(frozen=True)
class ClaimResult:
    outcome: ClaimOutcome
    claim: Claim | None = None
    existing: Mapping[str, Any] | None = None


def envelope_digest(envelope: Envelope) -> str:
    """sha256 over every field of the envelope (``Envelope.digested_body``): equal digests mean the same content.
    The digest every claim row is written with; an event without a trace context has the one 0.5.0 wrote."""
    return _sha256(envelope.digested_body())


def envelope_digests(envelope: Envelope, digest: str | None = None) -> tuple[str, ...]:
    """Every digest a claim row of this content may hold, ``envelope_digest`` first (``digest``, when the caller
    has it). The engine from a54ead0 until 0.5.0's digest was restored digested an event without a trace context
    with ``"trace_context": null``: its rows are the same content's, claimable, done or dead as they say."""
    canonical = digest or envelope_digest(envelope)
    if envelope.trace_context is not None:
        return (canonical,)
    return canonical, _sha256({**envelope.digested_body(), "trace_context": None})


def same_content(row: Mapping[str, Any], envelope: Envelope, digest: str | None = None) -> bool:
    """Whether a claim row was written for this envelope's content: its digest is one of ``envelope_digests``
    (a row without one, as before, counts as the same). The older digest is computed only when the row's is not
    the current one: most rows hold it."""
    stored = _string(row, "digest")
    return stored is None or stored == digest or stored in envelope_digests(envelope, digest)


def _sha256(body: dict[str, Any]) -> str:
    return hashlib.sha256(canonical_json(body)).hexdigest()


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
