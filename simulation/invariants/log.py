"""Invariants 1, 5, 12 and 13: the log. What emit committed is in its tenant's log with everything that came
with it; what it refused left nothing; what was changed behind its back shows; and each event keeps the schema
version its emitter stored."""

from __future__ import annotations

import json
from collections import Counter

from outbox import ChainHeadContentionError, Envelope, OutboxError
from outbox.audit.findings import FindingKind
from outbox.log.verification import ChainReport
from outbox.messages import MAX_MESSAGE_BYTES
from simulation.catalog import (
    ANNOUNCE,
    ITEM_CREATED,
    ITEM_NOTED,
    audit_key,
    counter_key,
    item_key,
)
from simulation.invariants.base import Violation, key_of, name_of
from simulation.observations import Observations
from simulation.state import State
from simulation.world import EmitRecord, World

MAX_HEAD_RETRIES = 5  # EventStore's default, which the simulated emitters use


def rewritten_ids(world: World) -> set[str]:
    """The events whose rows were rewritten in the log at the end: their committed hash is gone from it."""
    return {victim.id for victim in world.tampered.values()} | {
        victim.id for victims in world.rewritten.values() for victim in victims
    }


def check_log(world: World, state: State) -> list[Violation]:
    found: list[Violation] = []
    for tenant, report in state.chains.items():
        victim = world.tampered.get(tenant)
        if victim is not None:
            found.extend(_rewrite_detected(tenant, victim, report))
        elif not report.intact:
            found.append(
                Violation(1, f"tenant {tenant}: verify_chain broke at seq {report.first_broken_seq}: {report.detail}")
            )
    found.extend(Violation(1, f"an event row the engine cannot read: {row}") for row in state.unreadable_rows)
    events = state.events
    rewritten = rewritten_ids(world)
    for record in (r for r in world.emits if r.envelope is not None and r.envelope.id not in rewritten):
        envelope = record.envelope
        assert envelope is not None
        logged = events.get(envelope.id)
        if logged is None or logged.hash != envelope.hash or logged.seq != envelope.seq:
            found.append(
                Violation(1, f"{record.operation} committed as seq {envelope.seq} but the log does not hold it")
            )
            continue
        found.extend(_committed_with_its_writes(world, state, record))
    found.extend(_inline_counters_count_every_item(state))
    found.extend(
        Violation(1, f"a LOCAL handler's write was committed: {pk}")
        for pk, _ in state.data
        if pk.startswith("SIMLOCAL#")
    )
    emitted = {r.event_id for r in world.emits if r.committed}
    for envelope in events.values():
        if envelope.id not in emitted and not _is_follow_up(envelope, events):
            found.append(Violation(1, f"{envelope.tenant} seq {envelope.seq} ({envelope.type}) was emitted by nobody"))
    return found


def _inline_counters_count_every_item(state: State) -> list[Violation]:
    """The INLINE counter of each tenant reads and increments its row in every item's transaction: it equals
    the tenant's committed items only if every seal's INLINE writes were computed for that seal."""
    items = Counter(e.tenant for e in state.events.values() if e.type == ITEM_CREATED)
    found = []
    for tenant, committed in sorted(items.items()):
        row = state.data.get(key_of(counter_key(tenant)))
        counted = int(row["items"]["N"]) if row else 0
        if counted != committed:
            found.append(
                Violation(1, f"tenant {tenant}: {committed} items committed, the INLINE counter says {counted}")
            )
    return found


def _rewrite_detected(tenant: str, victim: Envelope, report: ChainReport) -> list[Violation]:
    """A row rewritten in the middle of the log, with a hash that matches its new content, breaks the link
    from the row after it: verify_chain must report the log broken there or before."""
    if report.intact:
        return [Violation(1, f"tenant {tenant}: seq {victim.seq} was rewritten, and verify_chain says intact")]
    if report.first_broken_seq is None or report.first_broken_seq > victim.seq + 1:
        return [
            Violation(
                1,
                f"tenant {tenant}: seq {victim.seq} was rewritten; verify_chain broke only at "
                f"{report.first_broken_seq}",
            )
        ]
    return []


def _committed_with_its_writes(world: World, state: State, record: EmitRecord) -> list[Violation]:
    found = []
    item = state.data.get(key_of(item_key(record.tenant, record.item_id)))
    if item is None or item["operation"]["S"] != record.operation:
        found.append(Violation(1, f"{record.operation} committed without its item row"))
    audit = state.data.get(key_of(audit_key(record.event_id)))
    envelope = record.envelope
    assert envelope is not None
    if audit is None:
        found.append(Violation(1, f"{record.operation} committed without the INLINE subscriber's audit row"))
    elif (audit["seq"]["N"], audit["hash"]["S"]) != (str(envelope.seq), envelope.hash):
        found.append(
            Violation(
                1,
                f"{record.operation} committed as seq {envelope.seq}, but its INLINE audit row names seq "
                f"{audit['seq']['N']} and hash {audit['hash']['S'][:12]}: written for a seal that never committed",
            )
        )
    runs = world.local_runs[record.event_id]
    if runs != 1:
        found.append(Violation(1, f"{record.operation}: the LOCAL subscriber ran {runs} times, not once"))
    return found


def _is_follow_up(envelope: Envelope, events: dict[str, Envelope]) -> bool:
    return (
        envelope.type == ITEM_NOTED and envelope.causation_id in events and envelope.actor == f"subscription:{ANNOUNCE}"
    )


def check_failed_emits(world: World, observations: Observations, state: State) -> list[Violation]:
    found: list[Violation] = [
        Violation(5, f"{r.operation} committed an event larger than the durable queue takes: the relay cannot send it")
        for r in world.emits
        if r.committed and r.size == "over_bound"
    ]
    received = {receipt.event_id for receipt in observations.receipts}
    for record in (r for r in world.emits if r.error is not None):
        event_id, what = record.event_id, f"{record.operation} (failed: {type(record.error).__name__})"
        if isinstance(record.error, ChainHeadContentionError) and record.rivals <= MAX_HEAD_RETRIES:
            found.append(
                Violation(
                    5, f"{what}: gave up on the chain head after {record.rivals} rival commit(s), fewer than retries"
                )
            )
        if not isinstance(record.error, OutboxError):
            # Nothing committed, but the engine promises its callers OutboxError only (outbox.exceptions).
            found.append(Violation(5, f"{what}: emit let a {type(record.error).__name__} through: {record.error}"))
        traces = {
            "an event row": event_id in state.events,
            "an entity change": _item_written_by(state, record),
            "an INLINE write": key_of(audit_key(event_id)) in state.data,
            "a claim": any(key.startswith(f"{event_id}:") for key in state.claims),
            "a DynamoDB effect": any(pk == f"SIMEFFECT#{event_id}" for pk, _ in state.data),
            "a delivery": event_id in received,
            "a LOCAL run": world.local_runs[event_id] > 0,
            "an external call": any(key.startswith(f"{event_id}:") for key in world.service.calls),
        }
        found.extend(Violation(5, f"{what} left {thing}") for thing, present in traces.items() if present)
    return found


def _item_written_by(state: State, record: EmitRecord) -> bool:
    item = state.data.get(key_of(item_key(record.tenant, record.item_id)))
    return item is not None and item["operation"]["S"] == record.operation


def check_tamper_evidence(world: World, state: State) -> list[Violation]:
    """Every rewritten event row is a ``modified`` finding naming its seq and the hash it had; no finding for
    a log nobody touched (emit() only ever inserts event rows). Anchor resets are operators' records."""
    changed = {victim.tenant: [victim] for victim in world.tampered.values()}
    for tenant, victims in world.rewritten.items():
        changed.setdefault(tenant, []).extend(victims)
    found: list[Violation] = []
    for tenant, findings in sorted(state.findings.items()):
        modified = {(f.seq, f.old_hash) for f in findings if f.kind is FindingKind.MODIFIED}
        for victim in changed.get(tenant, []):
            if (victim.seq, victim.hash) in modified or too_large_for_a_finding(victim, state):
                continue
            found.append(Violation(12, f"{tenant} seq {victim.seq} was rewritten and no finding records it"))
        if tenant not in changed:
            found.extend(
                Violation(12, f"{tenant}: a {f.kind} finding at seq {f.seq}, but nobody changed its log ({f.detail})")
                for f in findings
                if f.kind is not FindingKind.ANCHOR_RESET
            )
    return found


def check_schema_versions(world: World, state: State) -> list[Violation]:
    found = [
        Violation(13, f"{name_of(world, key)}: its handler got the payload of version {version} as stored, not upcast")
        for key, version in world.stale_deliveries
    ]
    rewritten = rewritten_ids(world)
    for record in world.emits:
        if record.envelope is None or record.envelope.id in rewritten:
            continue
        event = state.events.get(record.envelope.id)
        stored = (event.schema_version, "flagged" in event.payload) if event is not None else None
        if stored is not None and stored != (record.version, record.version == 1):
            found.append(
                Violation(
                    13,
                    f"{world.trace.event(record.envelope.id)} was emitted as version {record.version}; the log holds "
                    f"version {stored[0]} with {'a' if stored[1] else 'no'} version-1 field",
                )
            )
    return found


def too_large_for_a_finding(victim: Envelope, state: State) -> bool:
    """A MODIFY record carries the old and the new image: for an event near the relay's bound the two pass
    what a queue message holds, so the tamper pipe dead-letters it (alarmed) instead of delivering it. That
    is the documented gap; the anchoring pass still sees the rewrite. It must be in that DLQ, though."""
    return len(json.dumps(victim.to_item())) > MAX_MESSAGE_BYTES // 2 and state.tamper_pipe_dead_letters > 0
