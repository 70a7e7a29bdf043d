"""verify_chain(): a tenant's log recomputed from genesis or from an anchor, and what it reports.

Apart from ``outbox.log.chain`` (the head and reading the log), which every emit needs: the auditor, status and
the operator tools verify, and a function that only emits or consumes does not build these classes at its
cold start (make bench, section 3).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from outbox.exceptions import EnvelopeParseError
from outbox.log import chain
from outbox.log.canonical import GENESIS_HASH
from outbox.log.chain import ChainHead, read_event_row, read_event_rows
from outbox.log.envelope import Envelope
from outbox.observing import Moment, point


@dataclass(frozen=True)
class Anchor:
    """A (seq, hash) of a tenant's log that was verified from genesis or from an earlier anchor, kept where
    no producer's or consumer's role can write (the audit table: the anchoring function and the operator role
    may). A log whose row at ``seq`` no longer has ``hash`` was rewritten, however carefully its hashes were
    recomputed."""

    tenant: str
    seq: int
    hash: str
    anchored_at: str = ""


class ChainBreak(StrEnum):
    GAP = "gap"  # a sequence number is missing
    ALTERED = "altered"  # a row's content no longer matches its own hash
    REORDERED = "reordered"  # a row sits at another position than its sequence number
    BROKEN_LINK = "broken_link"  # a row's prev_hash is not the hash of the row before it
    HEAD_MISMATCH = "head_mismatch"  # the chain head disagrees with the end of the log
    ANCHOR_MISMATCH = "anchor_mismatch"  # the anchored row is gone or no longer has the anchored hash


@dataclass(frozen=True)
class ChainReport:
    tenant: str
    intact: bool
    events_checked: int
    head_seq: int
    first_broken_seq: int | None = None
    reason: ChainBreak | None = None
    detail: str = ""
    # The first seq read: 1 for a full verification, the anchor's seq + 1 for an incremental one.
    verified_from_seq: int = 1
    # The anchor the log was checked against, if the tenant had one: its seq, and when it was set.
    anchor_seq: int | None = None
    # The hash at head_seq (the last hash verified), for advancing the anchor; "" when broken.
    head_hash: str = ""
    anchored_at: str | None = None


def verify_chain(
    client: Any, table_name: str, tenant: str, *, anchor: Anchor | None = None, full: bool = True
) -> ChainReport:
    """Recompute the tenant's chain; report intact, or the first broken seq and why.

    ``full`` (the default) recomputes from genesis and, given an ``anchor``, checks that the row at its seq
    still has its hash. ``full=False`` with an anchor verifies only what was appended since: it reads the
    anchored row (it must still have the anchored hash) and the rows after it, so its cost follows the new
    events, not the log's length; a rewrite below the anchor that leaves the anchored row alone is found by
    a full verification (and, when it happens, by the stream's tamper findings), not by this one.

    Streams the log (constant memory), then reads the head. An emit that commits between the two reads
    leaves the head ahead of the rows read; since a head and its event row commit in one transaction, the
    rows read after the head hold the head's row, so the walk reads on from where it stopped and checks
    the head against the row at its seq (``_ChainWalk.finish``). Only a head that the log does not hold
    after that second read is a mismatch: a concurrent writer never makes an intact log look broken.
    """
    walk = _ChainWalk(tenant, anchor)
    from_seq = 1
    if anchor is not None and not full and anchor.seq > 0:
        broken = walk.start_at_anchor(read_event_row(client, table_name, tenant, anchor.seq))
        if broken is not None:
            return broken
        from_seq = anchor.seq + 1
    broken = walk.over(read_event_rows(client, table_name, tenant, from_seq))
    if broken is not None:
        return broken
    point(Moment.CHECK_READS_HEAD, None, tenant=tenant)  # where an emit may commit between the two reads
    head = chain.read_head(client, table_name, tenant)
    if head.last_seq > walk.prev_seq:
        walk.watch(head.last_seq)
        broken = walk.over(read_event_rows(client, table_name, tenant, walk.prev_seq + 1))
        if broken is not None:
            return broken
    return walk.finish(head)


class _ChainWalk:
    """The state of one verification: the last good (seq, hash), and the checks each row must pass."""

    def __init__(self, tenant: str, anchor: Anchor | None) -> None:
        self.tenant, self.anchor = tenant, anchor
        self.prev_seq, self.prev_hash, self.checked, self.from_seq = 0, GENESIS_HASH, 0, 1
        # A head read before the rows after it (an emit landed between the log and the head): its seq, and the
        # hash the walk found there.
        self.watched_seq: int | None = None
        self.watched_hash: str | None = None

    def over(self, rows: Iterator[dict[str, Any]]) -> ChainReport | None:
        """Step over ``rows`` in order; the first break, or None."""
        for item in rows:
            broken = self.step(item)
            if broken is not None:
                return broken
        return None

    def watch(self, seq: int) -> None:
        """Remember the hash at ``seq`` when the walk gets there: the head read before those rows names it."""
        self.watched_seq = seq

    def report(self, seq: int, reason: ChainBreak, detail: str, head_seq: int | None = None) -> ChainReport:
        return ChainReport(
            self.tenant,
            False,
            self.checked,
            self.prev_seq if head_seq is None else head_seq,
            seq,
            reason,
            detail,
            verified_from_seq=self.from_seq,
            anchor_seq=self.anchor.seq if self.anchor else None,
            anchored_at=(self.anchor.anchored_at or None) if self.anchor else None,
        )

    def start_at_anchor(self, item: dict[str, Any] | None) -> ChainReport | None:
        """Take the anchored row as the verified start, if it still is what was anchored."""
        assert self.anchor is not None
        seq = self.anchor.seq
        self.from_seq = seq + 1
        if item is None:
            return self.report(seq, ChainBreak.ANCHOR_MISMATCH, f"the anchored event row seq {seq} is gone")
        envelope = self._envelope(item, seq)
        if isinstance(envelope, ChainReport):
            return envelope
        if envelope.hash != self.anchor.hash or envelope.computed_hash() != envelope.hash:
            return self._anchor_mismatch(seq)
        self.prev_seq, self.prev_hash = seq, envelope.hash
        return None

    def step(self, item: dict[str, Any]) -> ChainReport | None:
        expected = self.prev_seq + 1
        row_seq = int(item["sk"]["S"])
        if row_seq != expected:
            return self.report(expected, ChainBreak.GAP, f"seq {expected} is missing; the next row is seq {row_seq}")
        envelope = self._envelope(item, row_seq)
        if isinstance(envelope, ChainReport):
            return envelope
        if envelope.computed_hash() != envelope.hash:
            return self.report(row_seq, ChainBreak.ALTERED, f"seq {row_seq} ({envelope.id}) does not match its hash")
        if envelope.prev_hash != self.prev_hash:
            return self.report(
                row_seq,
                ChainBreak.BROKEN_LINK,
                f"seq {row_seq} does not link to seq {self.prev_seq}: an event before it was replaced or moved",
            )
        if self.anchor is not None and row_seq == self.anchor.seq and envelope.hash != self.anchor.hash:
            return self._anchor_mismatch(row_seq)
        self.prev_seq, self.prev_hash, self.checked = row_seq, envelope.hash, self.checked + 1
        if row_seq == self.watched_seq:
            self.watched_hash = envelope.hash
        return None

    def finish(self, head: ChainHead) -> ChainReport:
        if self.anchor is not None and self.prev_seq < self.anchor.seq:
            return self.report(
                self.prev_seq + 1,
                ChainBreak.ANCHOR_MISMATCH,
                f"the log ends at seq {self.prev_seq} but seq {self.anchor.seq} was anchored: events were removed",
                head_seq=head.last_seq,
            )
        if self.watched_seq == head.last_seq and self.watched_hash is not None:
            # The head was read before the rows from the walk's first stop on: the log must hold it (its row has
            # its hash); what follows it was appended since, and is checked link by link like the rest.
            reached, hash_there = True, self.watched_hash
        else:
            reached, hash_there = head.last_seq == self.prev_seq, self.prev_hash
        if not reached or hash_there != head.last_hash:
            return self.report(
                min(head.last_seq, self.prev_seq) + 1,
                ChainBreak.HEAD_MISMATCH,
                f"the head's hash at seq {head.last_seq} is not the hash of the event there"
                if reached
                else f"the head says seq {head.last_seq}, the log ends at seq {self.prev_seq}",
                head_seq=head.last_seq,
            )
        return ChainReport(
            self.tenant,
            True,
            self.checked,
            head.last_seq,
            verified_from_seq=self.from_seq,
            anchor_seq=self.anchor.seq if self.anchor else None,
            head_hash=head.last_hash,
            anchored_at=(self.anchor.anchored_at or None) if self.anchor else None,
        )

    def _envelope(self, item: dict[str, Any], row_seq: int) -> Envelope | ChainReport:
        try:
            envelope = Envelope.from_item(item)
        except EnvelopeParseError as exc:
            return self.report(row_seq, ChainBreak.ALTERED, f"seq {row_seq} is not a valid event row: {exc}")
        if envelope.seq != row_seq or envelope.tenant != self.tenant:
            return self.report(
                row_seq,
                ChainBreak.REORDERED,
                f"the row at seq {row_seq} holds event {envelope.id} of tenant {envelope.tenant!r} seq {envelope.seq}",
            )
        return envelope

    def _anchor_mismatch(self, seq: int) -> ChainReport:
        return self.report(
            seq,
            ChainBreak.ANCHOR_MISMATCH,
            f"seq {seq} no longer has the hash anchored at {self.anchor.anchored_at if self.anchor else '?'}: "
            "the log was rewritten at or before it (its hashes recomputed)",
        )
