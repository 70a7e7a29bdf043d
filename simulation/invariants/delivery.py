"""Invariants 2, 3, 4 and 10: delivery. Every durable pair has one effect or one dead letter, never both,
never neither, and a dead letter is earned; an external effect happens at most once per key; only the owner of a
claim ends it; and dead work runs again only when an operator names it."""

from __future__ import annotations

from collections import Counter, defaultdict
from datetime import datetime

from outbox.ops import Topology
from simulation.catalog import (
    ANNOUNCE,
    ARCHIVE,
    CHARGE,
    ITEM_NOTED,
    LEDGER,
    SHIP,
    expected_pairs,
)
from simulation.invariants.base import Violation, name_of
from simulation.invariants.conflicts import conflicts_are_recorded
from simulation.invariants.deploys import nothing_left_hanging
from simulation.invariants.log import rewritten_ids
from simulation.observations import DIRECT, Observations
from simulation.state import State
from simulation.world import World


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
                        f"{name_of(world, key)}: {follow_ups[envelope.id]} follow-up events for "
                        f"{ledger.get(key, 0)} completed effect(s)",
                    )
                )
    for key in sorted(set(ledger) - expected):
        found.append(Violation(2, f"{name_of(world, key)}: an effect for no event of the log"))
    found.extend(nothing_left_hanging(world, state, set(letters)))
    found.extend(_effects_match_the_log(world, state))
    found.extend(conflicts_are_recorded(world, state))
    found.extend(_repairs_run_what_they_name(world, observations))
    found.extend(
        Violation(2, f"{name_of(world, key)}: run after a deploy left it out of the deployed catalog")
        for key in sorted(set(world.left_out_runs))
    )
    for key, letter in sorted(letters.items()):
        if key.endswith(f":{SHIP}"):
            continue  # a workflow's dead letter is earned by its execution's end (invariant 21)
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
                    f"{name_of(world, key)}: its claim counts {counted} attempt(s), but {seen} claim(s) were seen: "
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
            found.append(Violation(2, f"{name_of(world, key)}: its effect used amount {amount}, the log says {logged}"))
    return found


def _repairs_run_what_they_name(world: World, observations: Observations) -> list[Violation]:
    """A repair reruns the pairs the operator selected and nothing else: its message names only those, and
    the consumer runs only the pairs a message names (a completed sibling, perhaps forgotten, stays alone)."""
    found = [
        Violation(2, f"{name_of(world, key)} was delivered for a repair message that did not name it")
        for key in sorted(set(observations.unnamed_deliveries))
    ]
    # A repair selects its pairs before it sends their message: a later selection cannot vouch for a message
    # received before it (a group's replay of pairs that died after the dry run the operator approved).
    selected_at: dict[str, datetime] = {}
    for key, at in world.replays:
        selected_at[key] = min(at, selected_at.get(key, at))
    woken = set(world.wake_ups)  # a wake-up names its deferred pair
    for receipt in observations.receipts:
        if receipt.targets is None or receipt.event_id is None:
            continue
        named = {f"{receipt.event_id}:{subscription}" for subscription in receipt.targets}
        for key in sorted(named - woken):
            if key not in selected_at:
                why = "no repair selected it"
            elif selected_at[key] > receipt.at:
                why = "no repair had selected it yet"
            else:
                continue
            found.append(Violation(2, f"{name_of(world, key)} was named by a repair message, but {why}"))
    return sorted(set(found), key=str)


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
    name, claim = name_of(world, key), state.claims.get(key)
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
        Violation(2, f"{name_of(world, key)}: attempt {error.attempt} hit a terminal error but was not marked dead")
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
            found.append(Violation(2, f"{name_of(world, key)}: dead as exhausted by attempt {attempt} of {last}"))
        elif attempt <= last and (key, attempt) not in world.run_attempts:
            found.append(
                Violation(2, f"{name_of(world, key)}: dead as exhausted by attempt {attempt}, which never ran")
            )
        elif attempt > last and (key, last) in observations.release_calls:
            found.append(
                Violation(
                    2, f"{name_of(world, key)}: attempt {last} failed and was released, then dead unrun as a crash"
                )
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
                    f"{name_of(world, key)}: dead as exhausted again after a repair, with {since} claim(s) since it "
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
    # The DynamoDB-only subscriptions: sim.archive, and sim.ledger, ordered or not (an ordered subscription's next
    # event takes the direct path on its first receive too).
    direct = {ARCHIVE, LEDGER}
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
            found.append(Violation(2, f"{name_of(world, key)}: its handler ran {most} times, more than {allowed}"))
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
    name = name_of(world, key)
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
    if reason == "left_out":
        return _left_out_is_earned(world, state, key, name, error)
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


def check_external_effects(world: World, state: State) -> list[Violation]:
    found: list[Violation] = []
    service, events = world.service, state.events
    for key, count in sorted(world.effects_created.items()):
        if count > 1:
            found.append(Violation(3, f"{name_of(world, key)}: {count} external effects for one idempotency key"))
    for key in sorted(service.effects):
        event_id, _, subscription = key.partition(":")
        if subscription != CHARGE or event_id not in events:
            found.append(Violation(3, f"an external effect under {key!r}, which names no charge of a logged event"))
    for key, claim in sorted(state.claims.items()):
        completed = key.endswith(f":{CHARGE}") and claim["status"]["S"] == "COMPLETED"
        if completed and (service.calls.get(key, 0) < 1 or key not in service.effects):
            found.append(Violation(3, f"{name_of(world, key)}: completed without calling the service"))
    return found


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
        if key.endswith(f":{SHIP}"):
            continue  # its execution's end completes it, conditioned on the execution, not an owner (invariant 21)
        if claim["status"]["S"] == "COMPLETED" and completer.get(key) != owner and owner not in maybe:
            found.append(Violation(4, f"{trace.key(key)} is COMPLETED under an owner whose completion was never seen"))
    return found


def _left_out_is_earned(world: World, state: State, key: str, name: str, error: str) -> list[Violation]:
    """A repair's message that reached a consumer whose deployed catalog no longer runs the pair makes it dead
    as ``left_out``: earned only after the schedule's deploy, for a pair that catalog does not require."""
    event_id, _, subscription = key.rpartition(":")
    envelope = state.events.get(event_id)
    if world.deployed_at is None or envelope is None or subscription in expected_pairs(world, envelope)[0]:
        return [Violation(2, f"{name}: dead as left_out, but the deployed catalog runs it ({error})")]
    return []


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
                found.append(Violation(10, f"{name_of(world, key)} ran again after it was dead, with no replay"))
                break
    return found
