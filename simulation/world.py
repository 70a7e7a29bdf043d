"""The state of one simulated run that the simulator and the in-process handlers share.

The Lambda functions of the local runtime build their catalog from ``SUBSCRIPTIONS`` at cold start; the
simulation points that at ``simulation.catalog:build_catalog``, which finds this run's ``World`` in a
module-level registry by ``SIMULATION_RUN`` (one process runs one seed at a time, but the key keeps a
stale container from ever reaching another run's state).
"""

from __future__ import annotations

import functools
import random
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from ulid import ULID

from outbox import Envelope
from outbox.testing.services import FakeService
from simulation.chaos import Chaos
from simulation.schedule import Schedule, Upgrade
from simulation.trace import Trace

if TYPE_CHECKING:
    from outbox.catalog import Catalog


class DeterministicIds:
    """ULIDs from the virtual clock and a seeded stream: the same seed names its events the same."""

    def __init__(self, clock: Callable[[], datetime], seed: int) -> None:
        self._clock = clock
        self._random = random.Random(f"{seed}:ids")

    def ulid(self) -> ULID:
        milliseconds = int(self._clock().timestamp() * 1000)
        return ULID.from_bytes(milliseconds.to_bytes(6, "big") + self._random.randbytes(10))

    def __call__(self) -> str:
        return str(self.ulid())


@dataclass
class EmitRecord:
    """One emit the simulator made, and how it ended."""

    operation: str
    tenant: str
    item_id: str
    event_id: str
    origin: str  # "workload" or "rival"
    envelope: Envelope | None = None  # set when it committed
    error: BaseException | None = None  # set when it failed
    rivals: int = 0  # other writers of the tenant that committed while this emit ran
    size: str = "small"  # the schedule's Emit.size: "over_bound" must be refused
    version: int = 2  # the payload version the emitter's code stores (1: last year's code)

    @property
    def committed(self) -> bool:
        return self.envelope is not None


@dataclass
class Import:
    """An ``emit_many`` in progress: the INLINE audit writes the tenant's counter once per seal, with its last
    event (``SimulatedApp.audit``)."""

    actor: str
    size: int
    seen: int = 0  # the audit's runs so far, over every seal


@dataclass(frozen=True)
class InjectedError:
    kind: str  # "retryable" or "terminal"
    message: str
    attempt: int = 0  # the claim's attempt that the error struck


@dataclass
class World:
    seed: int
    schedule: Schedule
    trace: Trace
    chaos: Chaos
    ids: DeterministicIds
    data_table: str = ""
    service: FakeService = field(default_factory=lambda: FakeService("payments"))
    catalog: Catalog | None = None
    emits: list[EmitRecord] = field(default_factory=list)
    local_runs: Counter[str] = field(default_factory=Counter)  # event id -> LOCAL handler runs
    row_changes: Counter[str] = field(default_factory=Counter)  # item pk -> BEST_EFFORT deliveries
    injected: defaultdict[str, list[InjectedError]] = field(default_factory=lambda: defaultdict(list))
    down: set[str] = field(default_factory=set)  # keys whose dependency stays down until healed
    effects_created: Counter[str] = field(default_factory=Counter)  # idempotency key -> effects applied
    handler_runs: list[tuple[str, datetime]] = field(default_factory=list)  # (idempotency key, when)
    # Positions in handler_runs of direct runs whose commit found the pair's row: they committed nothing.
    fruitless_runs: set[int] = field(default_factory=set)
    run_attempts: set[tuple[str, int]] = field(default_factory=set)  # (idempotency key, attempt) that ran
    run_log: list[tuple[str, int]] = field(default_factory=list)  # per handler run: (key, attempt)
    # (key, attempt) -> the positions in handler_runs at which a claim with that attempt succeeded
    claim_positions: dict[tuple[str, int], list[tuple[int, int]]] = field(default_factory=dict)  # (runs before, serial)
    claims_recorded: int = 0  # the serial of the next claim: orders claims and dead marks between two runs
    # (key, the serial of the next claim) of each repair: what a replay gives back is counted from there.
    replay_serials: list[tuple[str, int]] = field(default_factory=list)
    # Keys whose owner lost its claim to a second worker that died holding it: how that owner's run ends.
    stale_owner_failure: dict[str, str] = field(default_factory=dict)
    replays: list[tuple[str, datetime]] = field(default_factory=list)  # pairs an operator replayed, and when
    # The same, as the number of handler runs before it: virtual time stands still, order does not.
    replay_positions: list[tuple[str, int]] = field(default_factory=list)
    poison_sent: int = 0  # malformed bodies the schedule put in the queue
    lost_messages: list[str] = field(default_factory=list)  # event ids whose message a fault lost for good
    # Event ids whose message an invocation rightly acknowledged with the receipt handle of an older receive,
    # after a second worker received it again and failed it: SQS may honour that delete, and what the second
    # worker left under way then has no message; the completeness pass names it, as it does a message lost.
    stale_deletes: list[str] = field(default_factory=list)
    conflicting_copies: list[str] = field(default_factory=list)  # event ids a copy with other content came for
    # (call, request, answer) of every call the operator's tools made while acting, in order.
    operator_calls: list[tuple[str, dict[str, Any], Any]] = field(default_factory=list)
    rolled_back: set[str] = field(default_factory=set)  # tenants whose chain head is set back right now
    tampered: dict[str, Envelope] = field(default_factory=dict)  # tenant -> the event rewritten in its log
    # tenant -> the events of its log rewritten with recomputed hashes (the head moved along), after an anchor
    rewritten: dict[str, list[Envelope]] = field(default_factory=dict)
    repaired: set[str] = field(default_factory=set)  # tenants whose rewritten rows were restored and re-anchored
    deployed_at: datetime | None = None  # when the schedule's deploy went out (None: not yet, or none)
    # Pairs an operator's forced replay was accepted for, and the handler runs before it: each must run again.
    forced: list[tuple[str, int]] = field(default_factory=list)
    retention_passed: bool = False  # a time jump went past the inbox's retention
    retention_passed_at: datetime | None = None  # when (virtual time) that jump landed
    altered_in_transit: set[str] = field(default_factory=set)  # event ids sent as altered poison bodies
    forged: list[str] = field(default_factory=list)  # ids of events the log never held, sent to the durable queue
    # The forged batch's events: id -> "held" (a copy at a place the log holds) or "unheld" (the tenant's next).
    forged_batch: dict[str, str] = field(default_factory=dict)
    upgraded: bool = False  # the rows written before the schedule's Upgrade are the previous release's
    # (idempotency key, stored version) of each durable run that got a payload of another version than today's
    stale_deliveries: list[tuple[str, int]] = field(default_factory=list)
    importing: Import | None = None  # the emit_many in progress, if one is
    # The ordered ledger: (tenant, seq) of each event an operator set out to skip (outbox skip), and the
    # idempotency key of each deferred pair a wake-up message was sent for (a repair no operator selected).
    skips: list[tuple[str, int]] = field(default_factory=list)
    wake_ups: list[str] = field(default_factory=list)
    # Commands outbox status (or a dead letter's rule) named that were refused (the operator follows the hints).
    hint_refusals: list[str] = field(default_factory=list)
    # Deferred pairs an invocation ran in place again and again without them leaving the order (recorder).
    wake_loops: list[str] = field(default_factory=list)
    # Skips that woke nothing though the lowest deferred event of their order waited for the skipped seq (or less).
    skips_that_woke_nothing: list[str] = field(default_factory=list)
    ledger_refused: set[str] = field(default_factory=set)  # keys the ordered ledger refused (Schedule.ledger_refuses)
    left_out_runs: list[str] = field(default_factory=list)  # keys run after the deploy left them out (2)
    # The slow_handler fault: idempotency key -> how long each run of its handler takes, and the keys whose
    # handler takes longer than the function's whole timeout (those die of their own deadline).
    durations: dict[str, timedelta] = field(default_factory=dict)
    too_slow: set[str] = field(default_factory=set)
    sleep: Callable[[timedelta], Any] | None = None  # advances the virtual clock (a handler taking time)
    function_timeout: timedelta = timedelta(seconds=60)  # the durable consumer's, from the template (the runner)
    # The longest run of each durable subscription's handler in the consumer's container (cleared when a timeout
    # resets it): what the consumer knows a run needs before it starts one (invariant 15).
    slowest_runs: dict[str, timedelta] = field(default_factory=dict)
    # What read-only passes during the run (anchoring, status, verify-chain) reported broken: nobody altered a
    # log then, so each is a false alarm (invariant 16).
    false_breaks: list[str] = field(default_factory=list)
    # Operator commands that raised what no runbook step answers (not a refusal, an AWS error or an interruption).
    operator_crashes: list[str] = field(default_factory=list)
    # The shipping workflow (simulation.shipping, in the SDK's threads): by execution ARN, how often its packing
    # step ran, and the carrier's callback it waits on; at the end, every execution (name, ARN, pair, attempt,
    # status) and how often each was started (the durable service's ``starts``).
    workflow_packed: Counter[str] = field(default_factory=Counter)
    workflow_waiting: dict[str, str] = field(default_factory=dict)
    workflow_executions: list[tuple[str, str, str, int, str]] = field(default_factory=list)
    workflow_starts: Counter[tuple[str, str]] = field(default_factory=Counter)
    clock: Callable[[], datetime] | None = None
    reader: Any = None  # a DynamoDB client for the INLINE handler's read (set by the driver)

    def deployed(self, kind: str) -> bool:
        """Whether the schedule's deploy is of ``kind`` and has gone out."""
        return self.schedule.deploy == kind and self.deployed_at is not None

    def in_order(self, envelope: Envelope) -> bool:
        """Whether an event is part of the ordered ledger's order as the deployed catalog has it: every item is,
        unless the ledger was made ordered by the schedule's deploy, whose order starts at the switch (what
        occurred before is delivered unordered), or a deploy of its route took items out of it (made unordered,
        ordered_since moved to the switch, narrowed to sim.item_noted, whose notes are in the order then)."""
        deploy, at = self.schedule.deploy, self.deployed_at
        if envelope.type != "sim.item_created":
            return deploy == "ledger_narrowed"
        if deploy == "ordered":
            return at is not None and envelope.occurred_at >= at
        if deploy == "ledger_since_moved":
            return at is None or envelope.occurred_at >= at
        if deploy in ("ledger_unordered", "ledger_narrowed"):
            return at is None
        return True

    def before_an_upgrade(self) -> bool:
        """Whether the schedule upgrades the engine and the upgrade is still to come (asked at every emit)."""
        return not self.upgraded and self._upgrades

    @functools.cached_property
    def _upgrades(self) -> bool:
        return any(isinstance(action, Upgrade) for action in self.schedule.actions)  # the schedule is frozen

    def emitted(self, tenant: str) -> bool:
        """Whether ``tenant`` has a committed event (a log to read)."""
        return any(record.tenant == tenant and record.committed for record in self.emits)

    def trace_clock(self) -> datetime:
        assert self.clock is not None, "the runner sets the world's clock"
        return self.clock()

    @property
    def run_id(self) -> str:
        return str(self.seed)


_WORLDS: dict[str, World] = {}


def register(world: World) -> None:
    _WORLDS[world.run_id] = world


def unregister(world: World) -> None:
    _WORLDS.pop(world.run_id, None)


def world_of(run_id: str) -> World:
    try:
        return _WORLDS[run_id]
    except KeyError:
        raise LookupError(f"no simulation run {run_id!r} is registered in this process") from None
