"""Every fault kind of the simulator earns its place: for each, a mutant of the catalogue (a realistic bug
of the guarantee code that the kind exists to expose) is caught on the seeds recorded for it.

Each mutant runs in a process of its own (the import hook of ``simulation.mutation`` serves the mutated
module), two at a time, against its recorded seeds, stopping at the first that reports a violation. A
schedule change may renumber the seeds: ``make mutants`` prints the new ones for ``Mutant.seeds``.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from simulation.mutants import MUTANTS, Mutant
from simulation.mutation import MutantResult, run_mutant
from simulation.schedule import Fault
from tests.conftest import Synthesized

# Each fault kind (and each action of the schedule that injects trouble), and the mutant it must catch.
FAULT_CLASSES: dict[str, str] = {
    Fault.CRASH_BEFORE_CLAIM: "claim-no-takeover",
    Fault.CRASH_AFTER_CLAIM: "claim-no-takeover",
    Fault.CRASH_AFTER_EFFECT: "crash-check-off-by-one",
    Fault.CRASH_BEFORE_COMPLETION: "crash-check-off-by-one",
    Fault.CRASH_AFTER_COMPLETION: "in-progress-acknowledged",
    Fault.RETRYABLE_ERROR: "every-error-terminal",
    Fault.TERMINAL_ERROR: "terminal-error-retried",
    Fault.DEPENDENCY_DOWN: "attempts-check-one-late",
    Fault.THROTTLE: "completion-writes-separate",
    Fault.RIVAL_EMIT: "head-race-retries-stale-head",
    Fault.VISIBILITY_TIMEOUT: "lease-shorter-than-invocation",
    Fault.LOCAL_HANDLER_ERROR: "local-error-escapes",
    Fault.LOST_ANSWER: "own-claim-not-recognised",
    Fault.CONTRACT_BREACH: "contract-violation-retryable",
    Fault.MESSAGE_LOST: "reconcile-stale-pending-handled",
    Fault.OPERATOR_INTERRUPTED: "redrive-deletes-before-send",
    Fault.EARLY_REDELIVERY: "in-progress-acknowledged",
    Fault.BROKEN_DEPLOY: "redrive-deletes-before-send",
    Fault.CONFLICTING_COPY: "log-refusal-unrecorded",
    Fault.WATERMARK_RACE: "watermark-unversioned",
    Fault.SLOW_HANDLER: "started-without-time",
    Fault.EMIT_DURING_CHECK: "verify-never-reads-on",
    Fault.UNPROCESSED_KEYS: "unprocessed-key-is-no-row",
    Fault.SEND_REFUSED: "wake-up-refusal-swallowed",
    Fault.WAKING_ANSWER_LOST: "ordered-direct-lost-answer-claimed",
    Fault.RECONCILE_DURING_RUN: "direct-second-run-without-time",
    Fault.NEWER_EMITTER: "newer-fields-refused",
    Fault.WORKFLOW_START_THROTTLED: "workflow-start-failure-acknowledged",
    Fault.WORKFLOW_START_LOST: "workflow-start-lookup-dropped",
    Fault.WORKFLOW_START_CRASH: "workflow-start-named-per-receive",
    Fault.WORKFLOW_FAILED: "workflow-failed-end-completes",
    Fault.WORKFLOW_TIMED_OUT: "workflow-timed-out-still-running",
    Fault.WORKFLOW_STOPPED: "workflow-stopped-still-running",
    Fault.WORKFLOW_NOTICE_LOST: "settle-pass-reads-one-shard",
    "a slow ordered ledger (every wake-up a message of its own)": "wake-up-refusal-swallowed",
    "crowded batches (one tenant's slow ordered backlog ahead of another's charge)": "unfinished-attempt-forgotten",
    "malformed bodies": "altered-envelope-accepted",
    "backlogs behind a failing head": "dead-by-receive-count",
    "redeliveries after the deduplication window": "claim-ignores-may-create",
    "time jumps past the retention": "replay-unverifiable-without-force",
    "repairs that name their pairs": "repair-targets-ignored",
    "a failure group's dry run replayed at the operator's next turn": "group-repair-ignores-approval",
    "a chain head set back": "event-put-unconditional",
    "a log rewritten at the end": "verify-ignores-links",
    "a log's tail rewritten with every hash recomputed, after an anchoring pass": "anchor-hash-unchecked",
    "every rewritten event row's finding (the stream's MODIFY)": "finding-old-hash-from-new-image",
    "INLINE handlers under head races": "inline-writes-not-resealed",
    "events near and past the relay's bound": "relay-bound-unchecked",
    "events the log never held (at the end)": "log-check-skipped",
    "an emitter running last year's code (schema version 1)": "upcast-skipped",
    "an ordered subscription's dead predecessor, replayed or skipped": "wake-up-skipped",
    "an ordered backlog woken beside other records of its batch": "wake-runs-before-the-batch",
    "a rewritten log repaired and re-anchored (at the end)": "reset-deals-with-nothing",
    "a forced replay of what the ordered ledger applied (at the end)": "forced-replay-of-applied-order",
    "a deploy with work in flight (the ledger made ordered at the switch)": "ordered-since-skips-the-switch",
    "a follow-up noted before a deploy, read after it on the DynamoDB-only path": "direct-path-skips-upcast",
    "imports: several items in one emit_many": "emit-many-links-to-the-head",
    "payload floats (the canonical JSON's fast path)": "floats-take-the-plain-path",
    "a replay of a pair dead as exhausted, failing again": "replay-keeps-attempts",
    "the liveness check (the drain's end, before the operator settles anything)": "retry-acknowledged",
    "the pair's state machine, read back from a stream on the inbox table": "claim-takes-dead-rows",
}
# Kinds that stress the pipeline without a bug class of the engine of their own, and why.
EXERCISED_ONLY: dict[str, str] = {
    Fault.PIPE_SEND_FAILURE: "the relay pipe retries the batch: a delay for the engine; the retry rules are the "
    "local runtime's, pinned in tests/outbox.local/test_pipe.py",
    Fault.PIPE_DUPLICATE_BATCH: "SQS deduplicates it within five minutes; invariant 6 (FIFO order) sees a runtime "
    "that does not, as the reversed-receive mutant of test_mutations.py shows",
    Fault.STREAM_REORDER: "stream order is per item only; invariant 6 checks the queue's order against the pipe's "
    "(the reversed-receive mutant of test_mutations.py)",
    Fault.LEASE_EXPIRY: "a lease that runs out with nobody to take it over must not stop its owner from finishing; "
    "with a taker, it is visibility_timeout's case",
    Fault.WORKFLOW_NOTICE_DUPLICATED: "a notice settles the pair's current hand-off, read at the notice, with a write "
    "conditioned on that very execution, and only while the claim is HANDED: no single mutant of those checks lets a "
    "second notice change anything; exercised so invariant 21 sees a second settle change nothing",
}
BY_ID = {mutant.id: mutant for mutant in MUTANTS}


def test_every_fault_kind_has_a_mutant_it_catches() -> None:
    missing = set(Fault) - set(FAULT_CLASSES) - set(EXERCISED_ONLY)
    assert not missing, f"no mutant for {sorted(missing)}: add one to simulation/mutants.py, or say why not"
    for mutant_id in FAULT_CLASSES.values():
        mutant = BY_ID[mutant_id]
        assert mutant.seeds, f"{mutant_id} has no recorded seeds (make mutants prints them)"
        assert not mutant.equivalent


@pytest.fixture(scope="module")
def results(synthesized: Synthesized) -> Iterator[dict[str, MutantResult]]:
    wanted = sorted(set(FAULT_CLASSES.values()))

    def run(mutant: Mutant) -> MutantResult:
        return run_mutant(mutant, mutant.seeds, synthesized.outdir, enough=1)

    with ThreadPoolExecutor(max_workers=2) as pool:
        yield dict(zip(wanted, pool.map(run, [BY_ID[name] for name in wanted]), strict=True))


@pytest.mark.slow
@pytest.mark.parametrize(("fault", "mutant_id"), sorted(FAULT_CLASSES.items()))
def test_the_simulator_catches_the_mutant_of_each_fault_kind(
    fault: str, mutant_id: str, results: dict[str, MutantResult]
) -> None:
    result = results[mutant_id]

    assert result.status == "caught", (
        f"{fault}: the mutant {mutant_id} was {result.status} on seeds {BY_ID[mutant_id].seeds} "
        f"({result.error or result.first_crash or 'no violation'}); find the seeds that catch it now with "
        f"make mutants ARGS='--only {mutant_id}'"
    )
