"""What the simulator observes while the pipeline runs (``Observations``), as ``simulation.recorder`` records
it through the engine's seams and the invariants read it."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

# The owner of a direct completion: it has no claim, and its marker row no owner attribute.
DIRECT = ""


@dataclass(frozen=True)
class FencedWrite:
    """A completion or a dead mark that committed, by the holder of ``owner``."""

    key: str
    owner: str
    owner_was_current: bool  # the token of the key's latest successful claim when it committed
    at: datetime


@dataclass(frozen=True)
class Receipt:
    """One record of one batch the durable consumer received."""

    tenant: str
    event_id: str | None
    message_id: str
    deduplication_id: str
    receive_count: int
    at: datetime
    targets: frozenset[str] | None = None  # a repair message's subscriptions; None: every one of its event
    event_type: str | None = None  # as its body says


@dataclass(frozen=True)
class Send:
    """One message the relay pipe sent (SQS accepts it; FIFO deduplication may drop it)."""

    tenant: str
    event_id: str
    at: datetime


@dataclass
class Invocation:
    """One invocation of the durable consumer in progress: the tenants whose deferred events it ran in place
    (after a predecessor, ``OrderedGate.run_woken``), the time its pairs of each tenant took, and how long
    Lambda gives it."""

    woken: set[str] = field(default_factory=set)
    # The ordered ledger's events whose completion committed in this invocation: (tenant, seq).
    applied: list[tuple[str, int]] = field(default_factory=list)
    spent: dict[str, float] = field(default_factory=dict)  # tenant -> seconds its pairs took
    budget: timedelta | None = None
    wake_ups_before: int = 0  # how many wake-ups the run had sent when the invocation started
    # The time nested pair runs took, one entry per pair run open (a fault may run one inside another): the outer
    # run's tenant is not charged for it twice.
    nested: list[float] = field(default_factory=list)
    # How often each deferred pair was run in place after its predecessor in this invocation (a loop shows here).
    woken_runs: dict[str, int] = field(default_factory=dict)
    # Events a pair of which it found claimed by a live lease elsewhere (it must not acknowledge their messages).
    refused_running: set[str] = field(default_factory=set)
    # Events a pair of which lost its lease to another worker in this invocation (its completion found the claim
    # taken over): the new owner holds it, so this invocation must not acknowledge their messages either.
    lost_leases: set[str] = field(default_factory=set)

    def others_spent(self, tenant: str) -> float:
        return sum(seconds for other, seconds in self.spent.items() if other != tenant)


@dataclass(frozen=True)
class CutOff:
    """A pair's run that Lambda stopped at the invocation's deadline."""

    key: str
    tenant: str
    # Whether the pair would have run to its end had the invocation not spent time on other tenants' work first:
    # its tenant's own work before it and its own run fit the invocation's time.
    fits_without_others: bool = False


@dataclass(frozen=True)
class AttemptCounts:
    """What a pair's attempts came to at one moment: its claims (and those that raised, maybe committed), the
    attempts given back or forgiven, and the runs the deadline cut off that would have fit without other
    tenants' work. A replay starts the count over; invariant 15 reads it between a replay and a dead mark."""

    claims: int = 0
    uncertain: int = 0
    given_back: int = 0
    forgiven: int = 0
    cut_for_others: int = 0

    def since(self, start: AttemptCounts) -> AttemptCounts:
        return AttemptCounts(
            self.claims - start.claims,
            self.uncertain - start.uncertain,
            self.given_back - start.given_back,
            self.forgiven - start.forgiven,
            self.cut_for_others - start.cut_for_others,
        )

    @property
    def claimed(self) -> int:
        return self.claims + self.uncertain - self.given_back


@dataclass
class Run:
    """A delivery of one (event, subscription) in progress, and the deadline of the invocation it runs in:
    until then, a take-over of its claim would run the pair twice at once."""

    key: str
    deadline: datetime
    owner: str | None = None  # set once its claim succeeded


@dataclass
class Observations:
    current_owner: dict[str, str] = field(default_factory=dict)
    claims: Counter[str] = field(default_factory=Counter)  # idempotency key -> successful claims
    uncertain_claims: Counter[str] = field(default_factory=Counter)  # claims that raised (maybe committed)
    uncertain_completers: dict[str, set[str]] = field(default_factory=dict)  # completions that raised
    dead_calls: list[tuple[str, int, str]] = field(default_factory=list)  # (key, attempt, reason), fenced or not
    # The pair's attempt counts at each dead call (in step with ``dead_calls``), and at each replay: (key, how
    # many dead calls came before it, counts).
    dead_call_counts: list[AttemptCounts] = field(default_factory=list)
    replay_counts: list[tuple[str, int, AttemptCounts]] = field(default_factory=list)
    # (key, handler runs before the mark, claims recorded before it)
    dead_positions: list[tuple[str, int, int]] = field(default_factory=list)
    # (key, claims recorded before the mark) of each committed dead mark as exhausted
    exhausted_marks: list[tuple[str, int]] = field(default_factory=list)
    release_calls: set[tuple[str, int]] = field(default_factory=set)  # (key, attempt), fenced or not
    # Keys whose direct run (no claim) failed while the pair could not be claimed (another worker held it, or
    # it was done): the failure was left to whoever held it, as it must be.
    unclaimed_direct_failures: set[str] = field(default_factory=set)
    completions: list[FencedWrite] = field(default_factory=list)
    dead_marks: list[FencedWrite] = field(default_factory=list)
    releases: list[FencedWrite] = field(default_factory=list)
    # idempotency key -> (owner, lease end) of the claim that holds it now; dropped when its owner finishes
    live_leases: dict[str, tuple[str, datetime]] = field(default_factory=dict)
    live_lease_takeovers: list[str] = field(default_factory=list)  # what a claim did to a lease still live
    running: list[Run] = field(default_factory=list)  # deliveries in progress, outermost first
    # The subscriptions the message being read names (None: every one of its event), innermost last.
    reading: list[frozenset[str] | None] = field(default_factory=list)
    unnamed_deliveries: list[str] = field(default_factory=list)  # pairs run for a message that did not name them
    deadlines: list[datetime] = field(default_factory=list)  # of the invocations in progress, outermost first
    receipts: list[Receipt] = field(default_factory=list)
    sends: list[Send] = field(default_factory=list)
    sent_batches: list[list[dict[str, Any]]] = field(default_factory=list)
    # What the local pipes did, for invariant 11 (the local runtime is as strict as AWS, no more, no less).
    pipe_sends: list[PipeSend] = field(default_factory=list)
    pipe_dead_letters: list[PipeDeadLetter] = field(default_factory=list)
    # Ordered subscriptions: idempotency key -> deferrals that committed (each gave its attempt back), and
    # deferrals that raised (maybe committed).
    deferrals: Counter[str] = field(default_factory=Counter)
    uncertain_deferrals: Counter[str] = field(default_factory=Counter)
    # The deadline (invariant 15): the durable invocations in progress, innermost last; every run Lambda stopped
    # at a deadline; claims given back unrun (an in-place claim handed to the message path); and each record a
    # batch processed after in-place work of another tenant in the same invocation.
    invocations: list[Invocation] = field(default_factory=list)
    cut_offs: list[CutOff] = field(default_factory=list)
    given_back: Counter[str] = field(default_factory=Counter)
    # Attempts the engine stopped counting because the deadline cut them off after other work's time.
    forgiven: Counter[str] = field(default_factory=Counter)
    records_after_in_place: list[str] = field(default_factory=list)
    # An invocation acknowledged every message of a tenant after it applied a ledger event that another waited
    # behind, and that one was neither run nor sent back to the queue (nothing left would wake it).
    unwoken_at_ack: list[str] = field(default_factory=list)
    # Pairs the deadline cut off that started with less time left than their subscription was known to need.
    started_too_late: list[str] = field(default_factory=list)

    def attempt_counts(self, key: str) -> AttemptCounts:
        """``key``'s attempt counts now."""
        cut = sum(1 for one in self.cut_offs if one.key == key and one.fits_without_others)
        return AttemptCounts(
            self.claims[key], self.uncertain_claims[key], self.given_back[key], self.forgiven[key], cut
        )


@dataclass(frozen=True)
class PipeSend:
    """A pipe sent these records (their creation times) at ``at``, with this maximum record age."""

    pipe: str
    at: datetime
    max_age_seconds: int
    created: tuple[datetime, ...]


@dataclass(frozen=True)
class PipeDeadLetter:
    pipe: str
    at: datetime
    max_age_seconds: int
    condition: str
    reason: str
    created: tuple[datetime, ...]
