"""The invariants a run must keep, checked against what the pipeline left behind and what was observed.

1. Every emitted event is in its tenant's log, gapless, and verify_chain is intact (and its entity row,
   its INLINE writes, computed for the seal that committed, and one LOCAL run came with it; no write a LOCAL
   handler returned); each tenant's INLINE counter equals its committed items; a log rewritten at the end
   (with recomputed hashes) is reported broken at the rewrite.
2. Every (event, durable subscription) has exactly one completed DynamoDB effect, or a dead-letter row
   with its error; never both, never neither. A dead letter must be earned: a terminal error the
   schedule injected, or every attempt the claim allows, each claimed. A conflict is recorded only for other
   content (a copy, a forgery, a rewrite), never for the log's own, also after an upgrade's rows.
3. External effects: at most one per idempotency key, and at least one call for every completed claim.
4. No claim is completed (or marked dead) by a worker that did not own it.
5. An event whose emit failed has no row, no entity change and no delivery; an event past the relay's
   bound never commits.
6. Per tenant, the durable consumer first receives the pipe's messages in the order SQS accepted them.
7. Every DLQ message and every open dead-letter row shows in ``Operations.status()``; a row rewritten in the
   second of an anchor reset shows as its finding; one incident's conflict letters are one failure group.
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
    applied event (a lost wake-up), nor unwoken when an invocation acknowledged its tenant's messages; the
    ledger's direct completions (its next item, with no claim) are held to the same order.
15. The deadline (Lambda stops an invocation at its timeout): work run in place (a deferred event after its
    predecessor) never comes before a record of its batch, so it never spends time another tenant's record
    needs; no run of a pair's handler starts with less of the invocation left than its subscription's slowest
    run in the container needs; and a pair whose handler fits the function's timeout is never dead as exhausted
    for runs the deadline cut off because of other tenants' work (runs that would have fit without the time it
    took): its own failures, and its own tenant's work, alone use up its attempts (counted since the replay
    before the dead mark, if any: a replay starts the attempts over).
16. Read-only passes: the anchoring pass, status and verify-chain, run while other writers emit, never report a
    break of a log nobody altered (and invariant 12: the anchoring pass records no finding for it).
18. Completeness: the completeness pass reports exactly the pairs with no outcome past its bound
    (``simulation.invariants.completeness``).
19. Liveness: once the faults stop and the pipeline is idle, before the operator settles anything, no message
    sits in a lane queue and every pair has an outcome or the operator has been told (``.liveness``; checked by
    the runner when the drain ends, not here).
20. The pair's state machine: every change of a claim row is a transition of ``outbox.pairs.machine``
    (``simulation.reach``, from a stream on the inbox table; checked by the runner at the end).
21. The WORKFLOW lane (a schedule with the shipping workflow): at most one durable execution per (pair, attempt),
    none left running and none no claim names; every item's ``sim.ship`` pair COMPLETED by an execution that
    succeeded, or DEAD with its dead letter by one that failed, timed out or was stopped (``.workflows``); no
    attempt given back for a start that applied (from the inbox's stream, checked by the runner at the end).

Invariant 4 also holds every release to the owner's token, and no claim may take over a lease still live.
Once the inbox's retention has passed (a time jump), a completed pair may be forgotten: an "unverifiable"
dead letter is then expected beside its one effect, and a swept claim beside it.
"""

from __future__ import annotations

from outbox.ops import Topology
from simulation.invariants.base import NAMES, Violation
from simulation.invariants.completeness import check_completeness
from simulation.invariants.deadline import check_deadline, check_runtime_as_strict_as_aws
from simulation.invariants.delivery import (
    check_dead_stays_dead,
    check_exactly_once,
    check_external_effects,
    check_fencing,
    check_redrive_keeps_every_message,
)
from simulation.invariants.log import (
    check_failed_emits,
    check_log,
    check_schema_versions,
    check_tamper_evidence,
    too_large_for_a_finding,
)
from simulation.invariants.operations import (
    check_best_effort_lane,
    check_forced_replays_run,
    check_one_incident_one_group,
    check_poison,
    check_repaired,
    check_status,
)
from simulation.invariants.ordering import check_fifo_order, check_ordered_subscriptions
from simulation.invariants.workflows import check_workflows
from simulation.observations import Observations
from simulation.state import State
from simulation.world import World

__all__ = ["NAMES", "Violation", "check_all", "check_runtime_as_strict_as_aws", "check_status"]


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
            {tenant for tenant, victim in world.tampered.items() if too_large_for_a_finding(victim, state)},
        ),
        *check_repaired(world, state),
        *check_one_incident_one_group(world, state),
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
        *(Violation(17, f"an operator command crashed: {what}") for what in world.operator_crashes),
        *(Violation(17, f"a command outbox status named was refused: {what}") for what in world.hint_refusals),
        *check_completeness(world, state, topology),
        *check_workflows(world, state),
    ]
