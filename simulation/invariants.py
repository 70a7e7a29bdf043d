"""The invariants a run must keep, checked against what the pipeline left behind and what was observed.

1. Every emitted event is in its tenant's log, gapless, and verify_chain is intact (and its entity row,
   its INLINE writes, computed for the seal that committed, and one LOCAL run came with it; no write a LOCAL
   handler returned); each tenant's INLINE counter equals its committed items; a log rewritten at the end
   (with recomputed hashes) is reported broken at the rewrite.
2. Every (event, durable subscription) has exactly one completed DynamoDB effect, or a dead-letter row
   with its error; never both, never neither. A dead letter must be earned: a terminal error the
   schedule injected, or every attempt the claim allows, each claimed.
3. External effects: at most one per idempotency key, and at least one call for every completed claim.
4. No claim is completed (or marked dead) by a worker that did not own it.
5. An event whose emit failed has no row, no entity change and no delivery; an event past the relay's
   bound never commits.
6. Per tenant, the durable consumer first receives the pipe's messages in the order SQS accepted them.
7. Every DLQ message and every open dead-letter row shows in ``Operations.status()``.
8. Every item row reaches its BEST_EFFORT subscriber at least once (the record-change lane).
9. Every malformed body is recorded as a poison pill, and none is left in a queue.
10. Dead work never runs again without an operator: after a pair is marked dead, its handler runs only
    after a replay (or a reconcile) named that pair.
11. The local runtime is as strict as AWS: a pipe sends only records younger than its maximum age (from
    their creation), discards for age only older ones, and never dead-letters a batch of several records
    that SQS refused for its content (AUTOMATIC_BISECT halves it first).
12. Tamper evidence: every event row rewritten in the log is a ``modified`` finding in the audit table (with
    the hash it had), and a tenant whose log nobody touched has no finding; a log rewritten with every hash
    recomputed after an anchoring pass shows broken in the status (invariant 7 checks that).
13. Schema versions: every durable handler gets its event type's current payload version, whatever version
    the event was stored with, and the log keeps each event as its emitter stored it (version 1 from an
    emitter running last year's code).
14. Ordered subscriptions (a schedule with the ordered ledger): per tenant, the seqs it applied are the first
    of the tenant's items in seq order, each once, in the order their completions committed, except those an
    operator skipped; the watermark is at the last of them and counts the deferred rows; every item after
    them waits behind the first, which is dead (or being replayed): that one has its dead letter, the others
    are DEFERRED, with no dead letter and no attempt spent for waiting; none is left deferred behind an
    applied event (a lost wake-up); and an ordered pair never completes on the direct path.
15. The deadline (Lambda stops an invocation at its timeout): work run in place (a deferred event after its
    predecessor) never comes before a record of its batch, so it never spends time another tenant's record
    needs; no pair starts with less of the invocation left than its subscription's slowest run in the container
    needs; and a pair whose handler fits the function's timeout is never dead as exhausted for runs the
    deadline cut off because of other tenants' work (runs that would have fit without the time it took): its own
    failures, and its own tenant's work, alone use up its attempts.
16. Read-only passes: the anchoring pass, status and verify-chain, run while other writers emit, never report a
    break of a log nobody altered (and invariant 12: the anchoring pass records no finding for it).

Invariant 4 also holds every release to the owner's token, and no claim may take over a lease still live.
Once the inbox's retention has passed (a time jump), a completed pair may be forgotten: an "unverifiable"
dead letter is then expected beside its one effect, and a swept claim beside it.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime, timedelta

from outbox import ChainHeadContentionError, Envelope, OutboxError
from outbox.audit import FindingKind
from outbox.chain import ChainReport
from outbox.messages import MAX_MESSAGE_BYTES
from outbox.ops import Topology
from simulation.catalog import (
    ANNOUNCE,
    ARCHIVE,
    CHARGE,
    ITEM_CREATED,
    ITEM_NOTED,
    LEDGER,
    applied_order_key,
    audit_key,
    counter_key,
    expected_pairs,
    item_key,
)
from simulation.recorder import DIRECT, Observations, Send
from simulation.state import State
from simulation.world import EmitRecord, World

NAMES = {
    1: "the log",
    2: "exactly once",
    3: "external effects",
    4: "fencing",
    5: "failed emits",
    6: "FIFO order",
    7: "status",
    8: "best-effort lane",
    9: "poison pills",
    10: "dead stays dead",
    11: "the local runtime as strict as AWS",
    12: "tamper evidence",
    13: "schema versions",
    14: "ordered subscriptions",
    15: "the deadline",
    16: "read-only passes",
}
DEDUPLICATION_SECONDS = 300
MAX_HEAD_RETRIES = 5  # EventStore's default, which the simulated emitters use


@dataclass(frozen=True)
class Violation:
    invariant: int
    message: str

    def __str__(self) -> str:
        return f"invariant {self.invariant} ({NAMES[self.invariant]}): {self.message}"


def check_all(world: World, observations: Observations, state: State, topology: Topology) -> list[Violation]:
    return [
        *check_log(world, state),
        *check_exactly_once(world, observations, state),
        *check_redrive_keeps_every_message(world, topology),
        *check_external_effects(world, state),
        *check_fencing(world, observations, state),
        *check_failed_emits(world, observations, state),
        *check_fifo_order(world, observations),
        *check_status(
            state,
            topology,
            set(world.tampered),
            set(world.rewritten) - world.repaired,
            {tenant for tenant, victim in world.tampered.items() if _too_large_for_a_finding(victim, state)},
        ),
        *check_repaired(world, state),
        *check_forced_replays_run(world),
        *check_best_effort_lane(world, state),
        *check_poison(world, state),
        *check_dead_stays_dead(world, observations),
        *check_runtime_as_strict_as_aws(observations),
        *check_tamper_evidence(world, state),
        *check_schema_versions(world, state),
        *check_ordered_subscriptions(world, observations, state),
        *check_deadline(world, observations, state),
        *(
            Violation(16, f"a read-only pass reported a log nobody altered broken: {what}")
            for what in world.false_breaks
        ),
    ]


def check_deadline(world: World, observations: Observations, state: State) -> list[Violation]:
    """Invariant 15: one tenant's work never costs another tenant its time or its attempts."""
    found = [
        Violation(15, f"in-place work came before the rest of its batch: {what}")
        for what in observations.records_after_in_place
    ]
    found += [
        Violation(15, f"a pair the deadline cut off should not have started: {what}")
        for what in observations.started_too_late
    ]
    cut_for_others = Counter(cut.key for cut in observations.cut_offs if cut.fits_without_others)
    for key, attempt, reason in observations.dead_calls:
        if reason != "exhausted" or key in world.too_slow or not cut_for_others[key]:
            continue
        claimed = observations.claims[key] + observations.uncertain_claims[key] - observations.given_back[key]
        # A cut-off the engine forgave is given back already (in ``claimed``): not to be taken off twice.
        own = claimed - max(cut_for_others[key] - observations.forgiven[key], 0)
        if own < state.max_attempts:
            found.append(
                Violation(
                    15,
                    f"{_name(world, key)}: dead as exhausted at attempt {attempt}, but {cut_for_others[key]} of its "
                    f"{claimed} attempt(s) were cut off by the deadline for other tenants' work (its handler fits "
                    "the function's timeout)",
                )
            )
    return found


def rewritten_ids(world: World) -> set[str]:
    """The events whose rows were rewritten in the log at the end: their committed hash is gone from it."""
    return {victim.id for victim in world.tampered.values()} | {
        victim.id for victims in world.rewritten.values() for victim in victims
    }


# -- 1 ---------------------------------------------------------------------------------------------------


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
        row = state.data.get(_key(counter_key(tenant)))
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
    item = state.data.get(_key(item_key(record.tenant, record.item_id)))
    if item is None or item["operation"]["S"] != record.operation:
        found.append(Violation(1, f"{record.operation} committed without its item row"))
    audit = state.data.get(_key(audit_key(record.event_id)))
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


# -- 2 ---------------------------------------------------------------------------------------------------


def check_exactly_once(world: World, observations: Observations, state: State) -> list[Violation]:
    found: list[Violation] = []
    events = state.events
    ledger = state.ledger()
    letters = state.open_dead_letters()
    follow_ups = Counter(e.causation_id for e in events.values() if e.type == ITEM_NOTED)
    expected: set[str] = set()
    for envelope in events.values():
        required, optional = expected_pairs(world, envelope)
        for subscription in (*required, *optional):
            key = f"{envelope.id}:{subscription}"
            expected.add(key)
            letter = letters.get(key)
            reason = letter.reason if letter else None
            found.extend(_one_outcome(world, state, key, ledger.get(key, 0), reason, subscription in optional))
            if subscription == ANNOUNCE and follow_ups[envelope.id] != ledger.get(key, 0):
                found.append(
                    Violation(
                        2,
                        f"{_name(world, key)}: {follow_ups[envelope.id]} follow-up events for "
                        f"{ledger.get(key, 0)} completed effect(s)",
                    )
                )
    for key in sorted(set(ledger) - expected):
        found.append(Violation(2, f"{_name(world, key)}: an effect for no event of the log"))
    found.extend(_effects_match_the_log(world, state))
    found.extend(_conflicts_are_recorded(world, state))
    found.extend(_repairs_run_what_they_name(world, observations))
    for key, letter in sorted(letters.items()):
        found.extend(
            _earned(world, observations, state, key, letter.reason, letter.error, letter.attempts, ledger.get(key, 0))
        )
    found.extend(_terminal_errors_are_terminal(world, observations))
    found.extend(_exhaustion_is_earned(world, observations, state))
    found.extend(_attempts_are_bounded(world, observations, state))
    found.extend(_repairs_give_attempts_back(world, observations, state))
    found.extend(_attempts_were_claimed(world, observations, state))
    return found


def _attempts_were_claimed(world: World, observations: Observations, state: State) -> list[Violation]:
    """A claim row counts no attempt that no worker saw claimed (or saw fail in a way that may have claimed):
    attempts decide when a pair is dead, so one spent unseen (a worker's own claim, its answer lost and not
    recognised) kills a pair early. A replay resets the count, which only makes it smaller."""
    found: list[Violation] = []
    for key, claim in sorted(state.claims.items()):
        counted = int(claim.get("attempts", {}).get("N", "0"))
        seen = observations.claims[key] + observations.uncertain_claims[key]
        if counted > seen:
            found.append(
                Violation(
                    2,
                    f"{_name(world, key)}: its claim counts {counted} attempt(s), but {seen} claim(s) were seen: "
                    "an attempt was spent that no worker took",
                )
            )
    return found


def _effects_match_the_log(world: World, state: State) -> list[Violation]:
    """Every effect was computed from the event as the log holds it, never from other content under its id."""
    events, found = state.events, []
    rewritten = rewritten_ids(world)
    for key, amount in sorted(state.effect_amounts().items()):
        event = None if key.partition(":")[0] in rewritten else events.get(key.partition(":")[0])
        logged = None if event is None else event.payload.get("amount")
        if event is not None and amount != logged:
            found.append(Violation(2, f"{_name(world, key)}: its effect used amount {amount}, the log says {logged}"))
    return found


def _repairs_run_what_they_name(world: World, observations: Observations) -> list[Violation]:
    """A repair reruns the pairs the operator selected and nothing else: its message names only those, and
    the consumer runs only the pairs a message names (a completed sibling, perhaps forgotten, stays alone)."""
    found = [
        Violation(2, f"{_name(world, key)} was delivered for a repair message that did not name it")
        for key in sorted(set(observations.unnamed_deliveries))
    ]
    selected = {key for key, _ in world.replays} | set(world.wake_ups)  # a wake-up names its deferred pair
    for receipt in observations.receipts:
        if receipt.targets is None or receipt.event_id is None:
            continue
        named = {f"{receipt.event_id}:{subscription}" for subscription in receipt.targets}
        for key in sorted(named - selected):
            found.append(Violation(2, f"{_name(world, key)} was named by a repair message, but no repair selected it"))
    return sorted(set(found), key=str)


def _conflicts_are_recorded(world: World, state: State) -> list[Violation]:
    """A copy of an event with other content, or an event the log never held, is recorded as a conflict (and
    never run: an effect for no event of the log is a violation of its own)."""
    conflicts = {row.event_id for row in state.dead_letters if row.reason == "conflict"}
    found = [
        Violation(2, f"{world.trace.event(event_id)}: a copy with other content came, and no conflict was recorded")
        for event_id in sorted(set(world.conflicting_copies) - conflicts)
    ]
    found.extend(
        Violation(2, f"forged event {event_id}: the log never held it, and no conflict was recorded")
        for event_id in sorted(set(world.forged) - conflicts)
    )
    other_copies = {*world.conflicting_copies, *world.altered_in_transit}
    for event_id in sorted(rewritten_ids(world) & conflicts - other_copies):
        found.append(Violation(2, f"{world.trace.event(event_id)} was rewritten in the log and relayed again"))
    return found


def check_redrive_keeps_every_message(world: World, topology: Topology) -> list[Violation]:
    """A DLQ message an operator's tool deleted had been sent back to its queue first: however a redrive is cut
    short, it leaves a duplicate (which the inbox absorbs), never a gap. Checked on the calls themselves,
    because the effect of a lost message may still happen through another copy of its event."""
    handles: dict[str, str] = {}
    sent_back: set[str] = set()
    found: list[Violation] = []
    for name, request, answer in world.operator_calls:
        queue = request.get("QueueUrl")
        if name == "receive_message" and queue == topology.durable_dlq_url:
            handles.update({m["ReceiptHandle"]: m["MessageId"] for m in (answer or {}).get("Messages", [])})
        elif name == "send_message" and queue == topology.durable_queue_url:
            sent_back.add(str(request.get("MessageDeduplicationId", "")).removeprefix("redrive-"))
        elif name == "delete_message" and queue == topology.durable_dlq_url:
            message_id = handles.get(request["ReceiptHandle"], "?")
            if message_id not in sent_back:
                found.append(Violation(2, f"DLQ message {message_id} was deleted by a redrive before it was sent back"))
    return found


def _one_outcome(
    world: World, state: State, key: str, applied: int, dead_reason: str | None, optional: bool = False
) -> list[Violation]:
    """One effect or one dead letter, never both; ``optional`` (a subscription a deploy removed or narrowed
    away): neither is allowed too."""
    name, claim = _name(world, key), state.claims.get(key)
    status = claim["status"]["S"] if claim else "no claim"
    dead = dead_reason is not None
    if applied > 1:
        return [Violation(2, f"{name}: its DynamoDB effect was applied {applied} times")]
    if status in ("SKIPPED", "DEFERRED") and applied == 0 and not dead:
        return []  # an ordered pair an operator skipped, or one waiting for its predecessor: invariant 14's
    if world.retention_passed and applied == 1 and (dead_reason == "unverifiable" or claim is None):
        return []  # done once, then forgotten by the inbox: refused as unverifiable, or swept
    if applied == 1 and dead:
        return [Violation(2, f"{name}: completed and dead-lettered (claim {status})")]
    if applied == 0 and not dead:
        return [] if optional else [Violation(2, f"{name}: lost: no effect and no dead letter (claim {status})")]
    if applied == 1 and status != "COMPLETED":
        return [Violation(2, f"{name}: its effect committed but the claim is {status}")]
    if dead and status not in ("DEAD", "REPLAYING"):  # REPLAYING: a replay cut short, still open work
        return [Violation(2, f"{name}: an open dead letter but the claim is {status}")]
    return []


def _terminal_errors_are_terminal(world: World, observations: Observations) -> list[Violation]:
    """Every injected terminal error (a TerminalError, a broken contract) is marked dead as terminal by the
    attempt it struck (the mark may lose to a new owner's fencing, but it must be tried). A direct run's first
    attempt holds no claim: when the pair cannot be claimed after its failure (held or done elsewhere), the
    holder decides."""
    tried = {(key, attempt) for key, attempt, reason in observations.dead_calls if reason == "terminal"}
    left = {(key, 1) for key in observations.unclaimed_direct_failures}
    return [
        Violation(2, f"{_name(world, key)}: attempt {error.attempt} hit a terminal error but was not marked dead")
        for key, errors in sorted(world.injected.items())
        for error in errors
        if error.kind == "terminal" and (key, error.attempt) not in tried | left
    ]


def _exhaustion_is_earned(world: World, observations: Observations, state: State) -> list[Violation]:
    """Dead as exhausted only by the last allowed attempt, which ran its handler and failed, or by the attempt
    after it, when the last allowed attempt never ended (it crashed: it was not released); never earlier,
    even if a replay later reran the pair."""
    found: list[Violation] = []
    last = state.max_attempts
    for key, attempt, reason in observations.dead_calls:
        if reason != "exhausted":
            continue
        if attempt < last:
            found.append(Violation(2, f"{_name(world, key)}: dead as exhausted by attempt {attempt} of {last}"))
        elif attempt <= last and (key, attempt) not in world.run_attempts:
            found.append(Violation(2, f"{_name(world, key)}: dead as exhausted by attempt {attempt}, which never ran"))
        elif attempt > last and (key, last) in observations.release_calls:
            found.append(
                Violation(2, f"{_name(world, key)}: attempt {last} failed and was released, then dead unrun as a crash")
            )
    return found


def _repairs_give_attempts_back(world: World, observations: Observations, state: State) -> list[Violation]:
    """A pair repaired (replayed, reconciled) and then dead as exhausted again used up every attempt since the
    repair: a replay gives an exhausted pair all its attempts back, never only what it had left."""
    found: list[Violation] = []
    serials: dict[str, list[int]] = defaultdict(list)
    for (key, _attempt), entries in world.claim_positions.items():
        serials[key].extend(serial for _position, serial in entries)
    for key, marked in observations.exhausted_marks:
        # Strictly before: a replay right after the mark, with no claim between them, has the mark's serial.
        repaired = [at for k, at in world.replay_serials if k == key and at < marked]
        if not repaired or observations.uncertain_claims[key]:
            continue
        since = sum(1 for serial in serials[key] if max(repaired) <= serial < marked)
        if since < state.max_attempts:
            found.append(
                Violation(
                    2,
                    f"{_name(world, key)}: dead as exhausted again after a repair, with {since} claim(s) since it "
                    f"of {state.max_attempts}: the repair did not give its attempts back",
                )
            )
    return found


def _attempts_are_bounded(world: World, observations: Observations, state: State) -> list[Violation]:
    """Between two operator repairs, a pair's handler runs at most ``max_attempts`` times; a DynamoDB-only
    subscription's once more: its first delivery runs with no claim, and a run stopped before its commit (a
    crash, the deadline) left nothing and counted no attempt. A direct run whose commit found the pair's row (a
    late duplicate of a pair with history) committed nothing and is not counted. A run the deadline cut off after
    other work's time is one the engine forgave (``Inbox.forgive``): it runs once more for each."""
    found: list[Violation] = []
    # The DynamoDB-only subscriptions: sim.archive, and sim.ledger until a deploy makes it ordered.
    direct = {ARCHIVE, LEDGER} if world.schedule.deploy == "ordered" else {ARCHIVE}
    runs: dict[str, list[int]] = defaultdict(list)
    for position, (key, _) in enumerate(world.handler_runs):
        if position not in world.fruitless_runs:  # a direct run that found the pair's row left nothing
            runs[key].append(position)
    for key, positions in sorted(runs.items()):
        resets = [at for k, at in world.replay_positions if k == key]
        segments: Counter[int] = Counter(sum(1 for reset in resets if reset <= run) for run in positions)
        most = max(segments.values())
        allowed = state.max_attempts + (1 if key.rpartition(":")[2] in direct else 0) + observations.forgiven[key]
        if most > allowed:
            found.append(Violation(2, f"{_name(world, key)}: its handler ran {most} times, more than {allowed}"))
    return found


def _earned(
    world: World,
    observations: Observations,
    state: State,
    key: str,
    reason: str,
    error: str,
    attempts: int,
    applied: int,
) -> list[Violation]:
    """A dead letter needs its cause: an injected terminal error, or every attempt the claim allows (each
    claimed, and failed or crashed); never the receive count, which skipped followers collect too."""
    name = _name(world, key)
    if not error:
        return [Violation(2, f"{name}: a dead letter without its error")]
    if reason == "terminal":
        injected = [e.message for e in world.injected.get(key, []) if e.kind == "terminal"]
        if not any(message in error for message in injected):
            return [Violation(2, f"{name}: dead as terminal, but no terminal error was injected ({error})")]
        return []
    if reason == "unverifiable":
        if not (world.retention_passed and applied == 1):
            return [Violation(2, f"{name}: dead as unverifiable although no message outlived the inbox's memory")]
        if not _arrived_late_for(world, observations, key):
            return [Violation(2, f"{name}: dead as unverifiable, but no message for it arrived after the retention")]
        return []  # completed, then forgotten: the inbox rightly refused to guess
    claimed = observations.claims[key] + observations.uncertain_claims[key]
    if attempts < state.max_attempts or claimed < state.max_attempts:
        return [
            Violation(
                2,
                f"{name}: dead as {reason} after attempt {attempts} (claims seen: {claimed}) of "
                f"{state.max_attempts}: a retryable error was not retried ({error})",
            )
        ]
    return []


def _arrived_late_for(world: World, observations: Observations, key: str) -> bool:
    """Whether a message for this pair (its event's, naming every subscription or this one) arrived after the
    inbox's retention had passed: only that can make the inbox refuse it as unverifiable."""
    event_id, _, subscription = key.partition(":")
    since = world.retention_passed_at
    return since is not None and any(
        r.event_id == event_id and r.at >= since and (r.targets is None or subscription in r.targets)
        for r in observations.receipts
    )


# -- 3 ---------------------------------------------------------------------------------------------------


def check_external_effects(world: World, state: State) -> list[Violation]:
    found: list[Violation] = []
    service, events = world.service, state.events
    for key, count in sorted(world.effects_created.items()):
        if count > 1:
            found.append(Violation(3, f"{_name(world, key)}: {count} external effects for one idempotency key"))
    for key in sorted(service.effects):
        event_id, _, subscription = key.partition(":")
        if subscription != CHARGE or event_id not in events:
            found.append(Violation(3, f"an external effect under {key!r}, which names no charge of a logged event"))
    for key, claim in sorted(state.claims.items()):
        completed = key.endswith(f":{CHARGE}") and claim["status"]["S"] == "COMPLETED"
        if completed and (service.calls.get(key, 0) < 1 or key not in service.effects):
            found.append(Violation(3, f"{_name(world, key)}: completed without calling the service"))
    return found


# -- 4 ---------------------------------------------------------------------------------------------------


def check_fencing(world: World, observations: Observations, state: State) -> list[Violation]:
    found: list[Violation] = []
    trace = world.trace
    found.extend(Violation(4, takeover) for takeover in observations.live_lease_takeovers)
    fenced = (
        ("completed", observations.completions),
        ("marked dead", observations.dead_marks),
        ("released", observations.releases),
    )
    for kind, writes in fenced:
        for write in writes:
            if not write.owner_was_current:
                found.append(
                    Violation(
                        4, f"{trace.key(write.key)} was {kind} by {trace.owner(write.owner)}, which no longer owned it"
                    )
                )
    completer = {write.key: write.owner for write in observations.completions}
    for key, claim in sorted(state.claims.items()):
        owner = claim["owner"]["S"] if "owner" in claim else DIRECT  # a direct completion's marker has none
        maybe = observations.uncertain_completers.get(key, set())
        if claim["status"]["S"] == "COMPLETED" and completer.get(key) != owner and owner not in maybe:
            found.append(Violation(4, f"{trace.key(key)} is COMPLETED under an owner whose completion was never seen"))
    return found


# -- 5 ---------------------------------------------------------------------------------------------------


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
            "an INLINE write": _key(audit_key(event_id)) in state.data,
            "a claim": any(key.startswith(f"{event_id}:") for key in state.claims),
            "a DynamoDB effect": any(pk == f"SIMEFFECT#{event_id}" for pk, _ in state.data),
            "a delivery": event_id in received,
            "a LOCAL run": world.local_runs[event_id] > 0,
            "an external call": any(key.startswith(f"{event_id}:") for key in world.service.calls),
        }
        found.extend(Violation(5, f"{what} left {thing}") for thing, present in traces.items() if present)
    return found


def _item_written_by(state: State, record: EmitRecord) -> bool:
    item = state.data.get(_key(item_key(record.tenant, record.item_id)))
    return item is not None and item["operation"]["S"] == record.operation


# -- 6 ---------------------------------------------------------------------------------------------------


def check_fifo_order(world: World, observations: Observations) -> list[Violation]:
    """Per tenant, the pipe's messages as SQS enqueued them (a resend within the deduplication window is
    dropped) must be what the consumer first received, in that order. Retries, redrives and replays
    deliver again, under another message or receive count: only first receipts of pipe messages count."""
    found: list[Violation] = []
    enqueued = _enqueued(observations.sends)
    first: dict[str, list[str]] = defaultdict(list)
    seen: set[str] = set()
    for receipt in observations.receipts:
        from_pipe = receipt.event_id is not None and receipt.deduplication_id == receipt.event_id
        if from_pipe and receipt.message_id not in seen:
            seen.add(receipt.message_id)
            first[receipt.tenant].append(receipt.deduplication_id)
    names = world.trace.event
    for tenant in sorted(set(enqueued) | set(first)):
        sent, received = enqueued.get(tenant, []), first.get(tenant, [])
        if sent != received:
            found.append(
                Violation(
                    6,
                    f"tenant {tenant}: the pipe's messages were enqueued as {' '.join(map(names, sent))} "
                    f"but first received as {' '.join(map(names, received))}",
                )
            )
    return found


def _enqueued(sends: list[Send]) -> dict[str, list[str]]:
    admitted: dict[str, datetime] = {}
    order: dict[str, list[str]] = defaultdict(list)
    for send in sends:
        last = admitted.get(send.event_id)
        if last is not None and (send.at - last).total_seconds() < DEDUPLICATION_SECONDS:
            continue
        admitted[send.event_id] = send.at
        order[send.tenant].append(send.event_id)
    return order


# -- 7 ---------------------------------------------------------------------------------------------------


def check_status(
    state: State,
    topology: Topology,
    tampered: Collection[str] = (),
    rewritten: Collection[str] = (),
    undeliverable: Collection[str] = (),
) -> list[Violation]:
    """What status shows: every queue's depth, every tenant's open dead letters, and its log altered exactly
    when it was: a row rewritten (``tampered``) shows as a broken chain, or (below the tenant's anchor, where
    status does not read) as a finding, or as the tamper pipe's dead letter when the row's two images were too
    large for a queue message (``undeliverable``: the documented gap, whose runbook is verify-chain --all); a
    tail rewritten with every hash recomputed after an anchoring pass (``rewritten``) as a chain broken at its
    anchor."""
    status = state.status
    if status is None:
        return [Violation(7, "Operations.status() failed")]
    found: list[Violation] = []
    for name, url in topology.queues().items():
        depth = status.queues.get(name)
        shown = depth.visible + depth.in_flight if depth else None
        if shown != state.queue_depths.get(url, 0):
            found.append(
                Violation(7, f"{name} holds {state.queue_depths.get(url, 0)} message(s); status shows {shown}")
            )
    listed = {tenant.tenant: tenant for tenant in status.tenants}
    letters = Counter(row.tenant for row in state.dead_letters if not row.resolved)
    for tenant in sorted(set(letters) | {t for t, log in state.logs.items() if log}):
        shown_tenant = listed.get(tenant)
        if shown_tenant is None:
            found.append(Violation(7, f"tenant {tenant} has events or dead letters but status does not list it"))
        elif shown_tenant.dead_letters != letters[tenant]:
            found.append(
                Violation(
                    7,
                    f"tenant {tenant} has {letters[tenant]} open dead letter(s); "
                    f"status shows {shown_tenant.dead_letters}",
                )
            )
        elif tenant not in tampered and tenant not in rewritten and not shown_tenant.chain_intact:
            found.append(Violation(7, f"status reports tenant {tenant}'s chain broken, and nobody altered it"))
        elif tenant in rewritten and shown_tenant.chain_intact:
            found.append(Violation(7, f"tenant {tenant}'s log was rewritten after its anchor; status shows it intact"))
        elif (
            tenant in tampered
            and tenant not in undeliverable
            and shown_tenant.chain_intact
            and not shown_tenant.tamper_findings
        ):
            # Status verifies from the anchor on: a rewrite below it shows as the stream's finding instead.
            found.append(Violation(7, f"tenant {tenant}'s log was rewritten; status shows it intact, with no finding"))
    return found


def check_forced_replays_run(world: World) -> list[Violation]:
    """A forced replay the tools accepted (and reported republished) runs its pair again: a replay never
    reports done what nothing will ever run."""
    found: list[Violation] = []
    for key, before in world.forced:
        if not any(run_key == key for run_key, _ in world.handler_runs[before:]):
            found.append(Violation(2, f"{_name(world, key)}: a forced replay reported it republished; it never ran"))
    return found


def check_repaired(world: World, state: State) -> list[Violation]:
    """A log repaired as the runbook says (the rows restored, the anchor reset) is healthy again in the status:
    intact, with no open finding, and not among its problems; its findings stay in the audit table."""
    status = state.status
    if status is None:
        return []
    found: list[Violation] = []
    listed = {tenant.tenant: tenant for tenant in status.tenants}
    for tenant in sorted(world.repaired):
        shown = listed.get(tenant)
        if shown is None or not shown.chain_intact or shown.tamper_findings:
            found.append(
                Violation(7, f"{tenant} was repaired and re-anchored, but status shows {shown or 'nothing'} for it")
            )
        if not state.findings.get(tenant):
            found.append(Violation(12, f"{tenant} was repaired and re-anchored, and its findings are gone"))
    return found


# -- 8 ---------------------------------------------------------------------------------------------------


def check_best_effort_lane(world: World, state: State) -> list[Violation]:
    found: list[Violation] = []
    for pk, _ in sorted(state.data):
        if pk.startswith("SIMITEM#") and world.row_changes[pk] < 1:
            found.append(Violation(8, f"the row {pk} never reached its BEST_EFFORT subscriber"))
    return found


# -- 9 ---------------------------------------------------------------------------------------------------


def check_poison(world: World, state: State) -> list[Violation]:
    recorded = state.poison_pills
    if recorded < world.poison_sent:
        return [Violation(9, f"{world.poison_sent} malformed bodies were sent but {recorded} recorded as poison pills")]
    return []


# -- 10 --------------------------------------------------------------------------------------------------


def check_dead_stays_dead(world: World, observations: Observations) -> list[Violation]:
    """A run after the mark counts only if its claim came after it too: a worker that claimed before the
    pair died (and lost the claim) may still be running its handler."""
    found: list[Violation] = []
    for dead_key, marked, claims_before_mark in observations.dead_positions:
        for position, (key, attempt) in enumerate(world.run_log):
            if key != dead_key or position < marked:
                continue
            serials = [serial for p, serial in world.claim_positions.get((key, attempt), []) if p <= position]
            if not serials or max(serials) < claims_before_mark:
                continue  # its claim came before the mark (or it had none: a direct run that commits nothing)
            if not any(k == key and marked <= at <= position for k, at in world.replay_positions):
                found.append(Violation(10, f"{_name(world, key)} ran again after it was dead, with no replay"))
                break
    return found


# -- helpers ---------------------------------------------------------------------------------------------


def _key(key: dict[str, str]) -> tuple[str, str]:
    return key["pk"], key["sk"]


def _name(world: World, key: str) -> str:
    return world.trace.key(key)


__all__ = ["NAMES", "Violation", "check_all"]


# -- 11 --------------------------------------------------------------------------------------------------

# What SQS says when it refuses a request for what it carries: AWS's AUTOMATIC_BISECT would halve the batch.
_CONTENT_REFUSALS = ("BatchRequestTooLong", "shorter than")


def check_runtime_as_strict_as_aws(observations: Observations) -> list[Violation]:
    """The local runtime delivers nothing AWS would drop and drops nothing AWS would deliver: a pipe sends
    only records younger than MaximumRecordAgeInSeconds (counted from their creation), discards for age only
    older ones, and never dead-letters a batch of several records that SQS refused for its content (AWS
    halves it first)."""
    found: list[Violation] = []
    for send in observations.pipe_sends:
        if send.max_age_seconds >= 0:
            cutoff = send.at - timedelta(seconds=send.max_age_seconds)
            stale = [created for created in send.created if created < cutoff]
            if stale:
                found.append(Violation(11, f"{send.pipe} sent {len(stale)} record(s) AWS would have discarded for age"))
    for letter in observations.pipe_dead_letters:
        if letter.condition == "RecordAgeExceeded":
            cutoff = letter.at - timedelta(seconds=letter.max_age_seconds)
            young = [created for created in letter.created if created >= cutoff]
            if young:
                found.append(
                    Violation(11, f"{letter.pipe} discarded {len(young)} record(s) younger than the maximum age")
                )
        elif len(letter.created) > 1 and any(sign in letter.reason for sign in _CONTENT_REFUSALS):
            found.append(
                Violation(
                    11,
                    f"{letter.pipe} dead-lettered a batch of {len(letter.created)} that SQS refused for its content: "
                    "AUTOMATIC_BISECT would have halved it",
                )
            )
    return found


# -- 12 --------------------------------------------------------------------------------------------------


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
            if (victim.seq, victim.hash) in modified or _too_large_for_a_finding(victim, state):
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
        Violation(13, f"{_name(world, key)}: its handler got the payload of version {version} as stored, not upcast")
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


def _too_large_for_a_finding(victim: Envelope, state: State) -> bool:
    """A MODIFY record carries the old and the new image: for an event near the relay's bound the two pass
    what a queue message holds, so the tamper pipe dead-letters it (alarmed) instead of delivering it. That
    is the documented gap; the anchoring pass still sees the rewrite. It must be in that DLQ, though."""
    return len(json.dumps(victim.to_item())) > MAX_MESSAGE_BYTES // 2 and state.tamper_pipe_dead_letters > 0


# -- 14 --------------------------------------------------------------------------------------------------


def check_ordered_subscriptions(world: World, observations: Observations, state: State) -> list[Violation]:
    """Per tenant, what the ordered ledger applied (its ledger row, appended in each completion's transaction)
    against the tenant's items in the log, the watermark, and what waits behind the first item not applied."""
    if not world.schedule.ordered:
        return []
    found: list[Violation] = []
    for tenant, log in sorted(state.logs.items()):
        found.extend(_applied_in_order(world, state, tenant, log))
    found.extend(_waiting_spends_nothing(world, observations, state))
    ordered_ids = {envelope.id for log in state.logs.values() for envelope in log if world.in_order(envelope)}
    found.extend(
        Violation(14, f"{_name(world, write.key)} completed on the direct path: an ordered pair takes the lease path")
        for write in observations.completions
        if write.owner == DIRECT and write.key.endswith(f":{LEDGER}") and write.key.partition(":")[0] in ordered_ids
    )
    return found


def _applied_in_order(world: World, state: State, tenant: str, log: list[Envelope]) -> list[Violation]:
    """(Only the items of the order: a ledger made ordered by a deploy ran the earlier ones unordered, each once
    by invariant 2.)"""
    items = [envelope for envelope in log if envelope.type == ITEM_CREATED and world.in_order(envelope)]
    row = state.data.get(_key(applied_order_key(tenant)))
    in_order = {envelope.seq for envelope in items}
    applied = [int(value["N"]) for value in row["seqs"]["L"] if int(value["N"]) in in_order] if row else []
    skipped = state.skipped.get((tenant, LEDGER), {})
    decided = {seq for who, seq in world.skips if who == tenant}
    found = [
        Violation(14, f"tenant {tenant}: seq {seq} is skipped for {LEDGER}, and no operator skipped it")
        for seq in sorted(set(skipped) - decided)
    ]
    found.extend(
        Violation(14, f"tenant {tenant}: {LEDGER} applied seq {seq} {count} times")
        for seq, count in sorted(Counter(applied).items())
        if count > 1
    )
    if applied != sorted(applied):
        found.append(Violation(14, f"tenant {tenant}: {LEDGER} applied seqs {applied}, not in seq order"))
    found.extend(
        Violation(14, f"tenant {tenant}: seq {seq} was applied by {LEDGER} and skipped")
        for seq in sorted(set(applied) & set(skipped))
    )
    done = sorted(set(applied) | set(skipped))
    first = [envelope.seq for envelope in items[: len(done)]]
    if done != first:
        found.append(
            Violation(
                14,
                f"tenant {tenant}: {LEDGER} applied or skipped seqs {done}, but the tenant's first items are "
                f"{first}: a gap in the order",
            )
        )
        return found
    found.extend(_watermark_follows(world, state, tenant, done[-1] if done else 0))
    found.extend(_waiting_behind_the_first(world, state, tenant, items[len(done) :]))
    return found


def _watermark_follows(world: World, state: State, tenant: str, last: int) -> list[Violation]:
    row = state.watermarks.get((tenant, LEDGER))
    at = int(row["applied_seq"]["N"]) if row else 0
    counted = int(row.get("deferred_count", {}).get("N", "0")) if row else 0
    rows = len(state.deferred.get((tenant, LEDGER), {}))
    found = []
    what = f"tenant {tenant}: the watermark of {LEDGER}"
    if at != last:
        found.append(Violation(14, f"{what} is at seq {at}; the last applied or skipped is {last}"))
    if counted != rows:
        found.append(Violation(14, f"{what} counts {counted} deferred events; {rows} wait"))
    return found


def _waiting_behind_the_first(world: World, state: State, tenant: str, waiting: list[Envelope]) -> list[Violation]:
    """The first item not applied is dead (its dead letter open, or a replay of it on its way); every later one
    waits for the item before it, DEFERRED (claimable by its wake-up), with no dead letter."""
    letters = state.open_dead_letters()
    deferred = state.deferred.get((tenant, LEDGER), {})
    found: list[Violation] = []
    for index, envelope in enumerate(waiting):
        key = f"{envelope.id}:{LEDGER}"
        claim = state.claims.get(key)
        status = claim["status"]["S"] if claim else "no claim"
        if index == 0:
            if status not in ("DEAD", "REPLAYING") or key not in letters:
                stranded = status == "DEFERRED"
                left = " (left deferred: its predecessor is applied and no wake-up came)" if stranded else ""
                found.append(
                    Violation(14, f"{_name(world, key)}: seq {envelope.seq} is next for {LEDGER}, and {status}{left}")
                )
            continue
        row = deferred.get(envelope.seq)
        waits_for = int(row["waits_for"]["N"]) if row else None
        if status != "DEFERRED" or key in letters or waits_for != waiting[index - 1].seq:
            found.append(
                Violation(
                    14,
                    f"{_name(world, key)}: seq {envelope.seq} waits behind seq {waiting[0].seq}, which is not applied; "
                    f"it is {status}, {'with' if key in letters else 'without'} a dead letter, its deferred row "
                    f"waits for {waits_for} (expected DEFERRED behind seq {waiting[index - 1].seq})",
                )
            )
    waiting_seqs = {envelope.seq for envelope in waiting[1:]}
    first = state.claims.get(f"{waiting[0].id}:{LEDGER}") if waiting else None
    if first is not None and "waits_for" in first:
        waiting_seqs.add(waiting[0].seq)  # deferred, then woken and dead: its row stays until applied or skipped
    found.extend(
        Violation(14, f"tenant {tenant}: a deferred row of {LEDGER} at seq {seq}, which does not wait")
        for seq in sorted(set(deferred) - waiting_seqs)
    )
    return found


def _waiting_spends_nothing(world: World, observations: Observations, state: State) -> list[Violation]:
    """A deferral gives its claim's attempt back: an ordered pair's claim counts at most the claims seen less
    the deferrals that committed (a replay resets the count, which only makes it smaller)."""
    found: list[Violation] = []
    for key, claim in sorted(state.claims.items()):
        deferrals = observations.deferrals[key]
        if not key.endswith(f":{LEDGER}") or not deferrals:
            continue
        counted = int(claim.get("attempts", {}).get("N", "0"))
        seen = observations.claims[key] + observations.uncertain_claims[key]
        if counted > seen - deferrals:
            found.append(
                Violation(
                    14,
                    f"{_name(world, key)}: its claim counts {counted} attempt(s) after {seen} claim(s) and "
                    f"{deferrals} deferral(s): waiting spent an attempt",
                )
            )
    return found
