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

The package by concern: ``rows`` (statuses, a worker's claim, the rows written), ``records`` and ``reader``
(the operator's typed views), ``table`` (settings, clock and the fenced writes every concern shares),
``claims`` (a claim's writes, from the claim to its completion), ``markers`` (the DynamoDB-only path's
completion marker) and ``dead_work`` (dead letters, refusals, poison pills). ``Inbox`` is all of them on one
table. What a pair's states mean, and what each command may do with one, is ``outbox.pairs``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from outbox.inbox.claims import ClaimBook
from outbox.inbox.dead_work import DeadWork
from outbox.inbox.markers import CompletionMarkers
from outbox.inbox.reader import InboxReader
from outbox.inbox.rows import (
    COMPLETED,
    DEAD,
    DEFERRED,
    PENDING,
    POISON_BODY_LIMIT,
    REPLAYING,
    SKIPPED,
    VOUCH_MARGIN,
    Claim,
    ClaimOutcome,
    ClaimResult,
    DeadReason,
    envelope_digest,
    reconcile_row,
    storable_text,
    unclaimed_row,
)
from outbox.observing import AROUND, observed

if TYPE_CHECKING:
    from outbox.inbox.records import ClaimRecord, DeadLetter, PoisonPill

# The operator's typed records, loaded on first use (PEP 562): the durable consumer never reads one.
_RECORDS = frozenset({"ClaimRecord", "DeadLetter", "PoisonPill"})


def __getattr__(name: str) -> Any:
    if name not in _RECORDS:
        raise AttributeError(f"module 'outbox.inbox' has no attribute {name!r}")
    from outbox.inbox import records

    value = getattr(records, name)
    globals()[name] = value  # the next access is a plain attribute
    return value


__all__ = [
    "COMPLETED",
    "DEAD",
    "DEFERRED",
    "PENDING",
    "POISON_BODY_LIMIT",
    "REPLAYING",
    "SKIPPED",
    "VOUCH_MARGIN",
    "Claim",
    "ClaimOutcome",
    "ClaimRecord",
    "ClaimResult",
    "DeadLetter",
    "DeadReason",
    "Inbox",
    "InboxReader",
    "PoisonPill",
    "envelope_digest",
    "reconcile_row",
    "storable_text",
    "unclaimed_row",
]


class Inbox(ClaimBook, CompletionMarkers, DeadWork):
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

    # The writes of a pair's run, each told to its observers (``outbox.observing``).
    claim = observed(AROUND["claim"])(ClaimBook.claim)
    release = observed(AROUND["release"])(ClaimBook.release)
    defer = observed(AROUND["defer"])(ClaimBook.defer)
    forgive = observed(AROUND["forgive"])(ClaimBook.forgive)
    mark_dead = observed(AROUND["die"])(DeadWork.mark_dead)
