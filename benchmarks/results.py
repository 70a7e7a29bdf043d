"""The figures the benchmarks wrote, as typed objects: what the report may use, and nothing it may assume.

Each step of ``python -m benchmarks`` writes one JSON file under ``.local/bench/full/`` (or ``quick/``), and
the runner writes ``run.json`` (the machine and the timings). ``load(directory)`` reads them into
``Results``. A file, or a figure the report needs, that is missing or malformed is a ``MissingFigureError``
naming the benchmark and the figure: never a default. Properties compute what follows from the figures
alone (ratios of medians, the worst case); nothing here formats or words anything.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator


class MissingFigureError(Exception):
    """A benchmark's figures lack one the report needs, or its file is missing or unreadable."""


class Figures(BaseModel):
    # A benchmark may write more than the report reads; what the report reads is declared here.
    model_config = ConfigDict(frozen=True, extra="ignore")


class Summary(Figures):
    """A figure over repetitions: the median, the smallest and the largest, and how many."""

    median: float
    low: float
    high: float
    n: int


def _require(found: Any, names: Any, where: str) -> None:
    missing = [name for name in names if name not in found]
    if missing:
        raise ValueError(f"{where} has no {', '.join(map(str, missing))}")


# -- consumer (benchmarks.consumer_overhead) -------------------------------------------------------------


class ConsumerRun(Figures):
    """One consumer over one scenario's batches."""

    cpu_ms_per_message: Summary
    replayed_cpu_ms_per_message: Summary
    dynamodb_requests_per_delivery: float
    write_units_per_delivery: float
    requests_by_operation_per_delivery: dict[str, float]

    @property
    def inbox_requests_per_delivery(self) -> float:
        """Claims and completions: every request but the read that checks each batch's events against the log
        (a BatchGetItem, or a GetItem per message when the batch's read left a key unprocessed)."""
        log_check = ("GetItem", "BatchGetItem")
        return sum(n for operation, n in self.requests_by_operation_per_delivery.items() if operation not in log_check)


class ConsumerScenario(Figures):
    label: str
    subscriptions: int
    effect_write: bool
    ours: ConsumerRun
    baseline: ConsumerRun
    direct: ConsumerRun  # the engine's subscriptions declared DynamoDB-only (no lease)
    ordered: ConsumerRun  # the engine's subscriptions declared ordered (lease path and watermark)
    cpu_ratio: Summary
    replayed_cpu_ratio: Summary
    direct_replayed_cpu_ratio: Summary
    ordered_replayed_cpu_ratio: Summary  # ordered against the same subscriptions unordered ("ours")
    ordered_direct: ConsumerRun  # ordered and DynamoDB-only: the next event in order commits with no claim
    ordered_direct_replayed_cpu_ratio: Summary  # against the same subscriptions DynamoDB-only, unordered

    @property
    def shape(self) -> str:
        """The handler shape's name in target paths: ``1-sub-no-writes``, ``4-subs-one-write``."""
        subscriptions = f"{self.subscriptions}-sub{'s' if self.subscriptions > 1 else ''}"
        return f"{subscriptions}-{'one-write' if self.effect_write else 'no-writes'}"


class CatalogScale(Figures):
    sizes: tuple[int, int]
    replayed_cpu_ms_per_message: dict[str, Summary]
    dynamodb_requests_per_message: dict[str, float]
    replayed_cpu_ratio: Summary

    @model_validator(mode="after")
    def _every_size_measured(self) -> Self:
        sizes = [str(size) for size in self.sizes]
        _require(self.replayed_cpu_ms_per_message, sizes, "replayed_cpu_ms_per_message")
        _require(self.dynamodb_requests_per_message, sizes, "dynamodb_requests_per_message")
        return self


class CpuBreakdown(Figures):
    """Client CPU in microseconds of each step, replayed, best of five."""

    ours_parse_body_us_per_message: float
    ours_of_which_hash_check_us: float
    baseline_parse_us_per_message: float
    ours_claim_us: float
    ours_of_which_envelope_digest_us: float
    ours_mark_completed_us: float
    baseline_save_inprogress_us: float
    baseline_save_success_us: float


class OutOfOrder(Figures):
    """An ordered subscription on events whose tenants' consecutive pairs arrive swapped (counted)."""

    events: int
    deliveries_per_event: float  # messages handled per event: 1 plus the wake-ups
    dynamodb_requests_per_event: float
    write_units_per_event: float
    read_units_per_event: float


class MotoOperation(Figures):
    requests: int
    cpu_ms_per_request: float


class TracingCost(Figures):
    """The consumer with OpenTelemetry absent, its API alone, and its SDK recording every span."""

    label: str
    modes: tuple[str, ...]
    replayed_cpu_ms_per_message: dict[str, Summary]
    api_ratio: Summary
    recording_ratio: Summary


class ConsumerFigures(Figures):
    repetitions: int
    batch_size: int
    batches: int
    messages: int
    scenarios: tuple[ConsumerScenario, ...] = Field(min_length=1)
    catalog_scale: CatalogScale
    cpu_breakdown_us: CpuBreakdown
    tracing: TracingCost
    ordered_out_of_order: OutOfOrder
    moto_cpu_ms_by_operation: dict[str, MotoOperation]

    @property
    def shapes(self) -> dict[str, ConsumerScenario]:
        return {scenario.shape: scenario for scenario in self.scenarios}

    @property
    def worst(self) -> ConsumerScenario:
        return max(self.scenarios, key=lambda s: s.replayed_cpu_ratio.median)

    @property
    def best(self) -> ConsumerScenario:
        return min(self.scenarios, key=lambda s: s.replayed_cpu_ratio.median)

    @property
    def max_inbox_requests_per_delivery(self) -> float:
        return max(s.ours.inbox_requests_per_delivery for s in self.scenarios)

    @property
    def worst_ordered_cpu_ratio(self) -> Summary:
        """Ordered against unordered client CPU in the shape where ordering costs most (by median)."""
        return max((s.ordered_replayed_cpu_ratio for s in self.scenarios), key=lambda ratio: ratio.median)

    @property
    def worst_ordered_direct_cpu_ratio(self) -> Summary:
        """Ordered DynamoDB-only against unordered DynamoDB-only client CPU, in the shape where ordering costs
        most (by median)."""
        return max((s.ordered_direct_replayed_cpu_ratio for s in self.scenarios), key=lambda ratio: ratio.median)

    @property
    def max_ordered_direct_requests_per_delivery(self) -> float:
        """An ordered DynamoDB-only subscription's DynamoDB requests per (event, subscription), log check
        included, in the shape that needs most."""
        return max(s.ordered_direct.dynamodb_requests_per_delivery for s in self.scenarios)

    @property
    def max_ordered_requests_per_delivery(self) -> float:
        """An ordered subscription's DynamoDB requests per (event, subscription), log check included, in the
        shape that needs most."""
        return max(s.ordered.dynamodb_requests_per_delivery for s in self.scenarios)


# -- cost (benchmarks.cost_per_event) -------------------------------------------------------------------


class PerEvent(Figures):
    """Billed units per event (or per (event, subscription)), empty polls apart."""

    dynamodb_requests: float
    write_units: float
    write_units_of_failed_calls: float
    read_units: float
    stream_read_units: float
    stream_read_units_incl_empty_polls: float
    pipe_requests: float
    sqs_requests_fifo: float
    sqs_requests_standard: float
    sqs_requests_incl_empty_receives: float
    lambda_invocations: float
    gb_seconds: float


class ActorUsage(Figures):
    requests: int
    errors: int
    message_chunks: int
    sqs_requests_fifo: int
    sqs_requests_standard: int
    empty: int
    by_operation: dict[str, int]


class FunctionUse(Figures):
    invocations: int
    memory_mb: int
    wall_ms_per_invocation: float
    moto_share_of_wall: float
    gb_seconds: float
    gb_seconds_without_moto: float


class RecordChangeLane(Figures):
    """The meter's actor names of the record-change lane's pipe, event source mapping and function."""

    pipe: str
    mapping: str
    function: str


class Actors(Figures):
    durable_consumer: str
    record_change_lane: RecordChangeLane


class EmptyPolls(Figures):
    """Calls that returned nothing, keyed by the API operation in the benchmark's figures."""

    get_records: int = Field(alias="GetRecords")
    receive_message: int = Field(alias="ReceiveMessage")


# The item classes the write-unit comparison cannot do without (a classifier that no longer recognises the
# tables would otherwise turn them into zeros).
REQUIRED_WRITE_CLASSES = (("app", "event row"), ("app", "chain head"), ("durable_consumer", "inbox claim row"))


class CostRun(Figures):
    cadence: str
    events: int
    pairs: int
    seconds: float
    per_event: PerEvent
    per_pair: PerEvent
    actors: Actors
    durable_consumer_dynamodb_requests_per_pair: float
    empty_polls: EmptyPolls
    write_units_by_item_per_event: dict[str, float]
    by_actor: dict[str, ActorUsage]
    functions: dict[str, FunctionUse]

    @model_validator(mode="after")
    def _named_actors_measured(self) -> Self:
        lane = self.actors.record_change_lane
        _require(self.by_actor, ["app", self.actors.durable_consumer, lane.pipe, lane.mapping], "by_actor")
        _require(self.functions, [self.actors.durable_consumer, lane.function], "functions")
        for actor, kind in REQUIRED_WRITE_CLASSES:
            if not self._classes(self._actor(actor), kind):
                raise ValueError(f"write_units_by_item_per_event has no {kind!r} written by {actor}")
        return self

    def _actor(self, role: str) -> str:
        return self.actors.durable_consumer if role == "durable_consumer" else role

    def _classes(self, actor: str, kind: str) -> list[float]:
        # Class names are "<actor> | <item kind>[ (transaction)]"
        return [
            units
            for name, units in self.write_units_by_item_per_event.items()
            if name.split(" | ")[0] == actor and kind in name.split(" | ")[1]
        ]

    def write_units(self, role: str, kind: str) -> float:
        """Write units per event that ``role`` ("app", "durable_consumer") spent on items of ``kind``."""
        return sum(self._classes(self._actor(role), kind))

    @property
    def durable_function(self) -> FunctionUse:
        return self.functions[self.actors.durable_consumer]

    @property
    def record_change_actors(self) -> tuple[str, str, str]:
        lane = self.actors.record_change_lane
        return lane.pipe, lane.mapping, lane.function

    @property
    def record_change_write_units(self) -> float:
        return sum(
            units
            for name, units in self.write_units_by_item_per_event.items()
            if name.split(" | ")[0] in self.record_change_actors
        )

    @property
    def workflow_lane_write_units(self) -> float:
        """The WORKFLOW lane's own writes: the settle pass's, the running index's row (put with the hand-off) and
        the row that makes a step's emit once (``benchmarks.cost_per_event.write_classifier``)."""
        return sum(
            units
            for name, units in self.write_units_by_item_per_event.items()
            if "Settler" in name.split(" | ")[0] or name.split(" | ")[1].startswith("workflow ")
        )


class CostFigures(Figures):
    runs: tuple[CostRun, ...]

    @model_validator(mode="after")
    def _both_cadences(self) -> Self:
        _require([run.cadence for run in self.runs], ["trickle", "burst"], "runs")
        return self

    def _run(self, cadence: str) -> CostRun:
        return next(run for run in self.runs if run.cadence == cadence)

    @property
    def trickle(self) -> CostRun:
        return self._run("trickle")

    @property
    def burst(self) -> CostRun:
        return self._run("burst")


# -- cold start (benchmarks.cold_start) -------------------------------------------------------------------


class ImportShare(Figures):
    package: str
    ms: float


class HandlerImport(Figures):
    key: str
    label: str
    module: str
    reference: bool
    variant: bool
    import_ms: Summary
    import_and_first_invocation_setup_ms: Summary
    import_ratio_to_reference: Summary
    import_profile: tuple[ImportShare, ...]


class EngineImport(Figures):
    """One of the durable consumer's own imports (or of those it defers), as ``python -X importtime`` measures it."""

    label: str
    modules: tuple[str, ...]
    at_import: bool  # the handler's import loads it; else measured right after, as it costs at first use
    ms: Summary


class PackageSize(Figures):
    package: str
    bytes: int


class LayerSize(Figures):
    files: int
    bytes: int
    zipped_bytes: int
    largest: tuple[PackageSize, ...]


class FunctionPackage(Figures):
    files: int
    bytes: int
    zipped_bytes: int
    handler_modules: tuple[str, ...]


class Sizes(Figures):
    layer: LayerSize
    function_packages: dict[str, FunctionPackage]


class FirstBatchConsumer(Figures):
    key: str
    label: str
    import_ms: Summary
    batch_ms: Summary
    import_cpu_ms: Summary
    batch_cpu_ms: Summary
    cold_start_cpu_ms: Summary
    cold_start_wall_ms: Summary


class FirstBatch(Figures):
    """Import plus the first batch, the durable consumer against the Powertools Idempotency handler."""

    batch_size: int
    rounds: int
    completed: dict[str, int]
    consumers: tuple[FirstBatchConsumer, ...]
    cpu_ratio: Summary
    wall_ratio: Summary

    @model_validator(mode="after")
    def _both_consumers_measured(self) -> Self:
        _require(self.by_key, ("durable_consumer", "idempotent_app_handler"), "consumers")
        return self

    @property
    def by_key(self) -> dict[str, FirstBatchConsumer]:
        return {consumer.key: consumer for consumer in self.consumers}

    @property
    def engine(self) -> FirstBatchConsumer:
        return self.by_key["durable_consumer"]

    @property
    def reference(self) -> FirstBatchConsumer:
        return self.by_key["idempotent_app_handler"]

    @property
    def cpu_gap_ms(self) -> float:
        """The durable consumer's cold start CPU less the Idempotency handler's (medians; negative: below it)."""
        return self.engine.cold_start_cpu_ms.median - self.reference.cold_start_cpu_ms.median


# The handlers the cold-start comparison is made of.
COMPARED_HANDLERS = (
    "durable_consumer",
    "durable_consumer_no_byte_code",
    "bare_batch_handler",
    "boto3_batch_handler",
    "idempotent_app_handler",
)


# The engine imports the report names in words: each must have been measured.
NAMED_ENGINE_IMPORTS = (
    "outbox",
    "outbox.log.envelope",
    "outbox.settings",
    "ulid",
    "rfc8785",
    "outbox.best_effort.changes",
)


class ColdStartFigures(Figures):
    rounds: int
    handlers: tuple[HandlerImport, ...]
    engine_imports: tuple[EngineImport, ...]
    first_batch: FirstBatch
    sizes: Sizes

    @model_validator(mode="after")
    def _compared_handlers_measured(self) -> Self:
        _require(self.by_key, COMPARED_HANDLERS, "handlers")
        _require(self.engine_import, NAMED_ENGINE_IMPORTS, "engine_imports")
        return self

    @property
    def by_key(self) -> dict[str, HandlerImport]:
        return {handler.key: handler for handler in self.handlers}

    @property
    def engine_import(self) -> dict[str, EngineImport]:
        """Each measured import by its first module: ``outbox`` is every engine module the handler imports."""
        return {entry.modules[0]: entry for entry in self.engine_imports}

    @property
    def deferred_import_ms(self) -> float:
        """What the measured imports the handler leaves to first use would cost its cold start (medians)."""
        return sum(entry.ms.median for entry in self.engine_imports if not entry.at_import)

    def _import(self, key: str) -> float:
        return self.by_key[key].import_ms.median

    def _setup(self, key: str) -> float:
        return self.by_key[key].import_and_first_invocation_setup_ms.median

    @property
    def import_ratio_to_boto3(self) -> float:
        return self._import("durable_consumer") / self._import("boto3_batch_handler")

    @property
    def import_ratio_to_idempotent(self) -> float:
        return self._import("durable_consumer") / self._import("idempotent_app_handler")

    @property
    def setup_ratio_to_idempotent(self) -> float:
        """Import plus the first invocation's setup, durable consumer over the Powertools Idempotency handler."""
        return self._setup("durable_consumer") / self._setup("idempotent_app_handler")

    @property
    def boto3_extra_ms(self) -> float:
        return self._import("boto3_batch_handler") - self._import("bare_batch_handler")

    @property
    def engine_extra_ms(self) -> float:
        return self._import("durable_consumer") - self._import("boto3_batch_handler")

    @property
    def byte_code_saving_ms(self) -> float:
        """What the layer's byte code saves the durable consumer's import (positive: a saving)."""
        return self._import("durable_consumer_no_byte_code") - self._import("durable_consumer")

    @property
    def no_byte_code_ratio_to_bare(self) -> float:
        return self._import("durable_consumer_no_byte_code") / self._import("bare_batch_handler")


# -- emit (benchmarks.emit_contention) ------------------------------------------------------------------


# The writer counts and calls of k events the hot tenant's table must show: emit (k = 1) and emit_many (5, 25).
HOT_TENANT_WRITERS = (1, 4, 16)
HOT_TENANT_SIZES = (1, 5, 25)


class HotRound(Figures):
    """``writers`` concurrent writers emitting calls of k events to one tenant, or to ``tenants`` shards of it."""

    writers: int
    k: int
    tenants: int
    events_per_second: Summary
    ratio_to_one_writer: Summary  # to one writer on one tenant with the same k, within each repetition
    ratio_to_one_writer_k1: Summary  # to one writer on one tenant emitting one event per call
    ratio_to_one_tenant: Summary  # to the same writers and k on one tenant
    retries_per_call: Summary  # cancelled transactions (lost races for the head) per call
    cpu_ms_per_event: Summary
    events: int
    calls: int
    gave_up: int  # calls that raised ChainHeadContentionError

    @property
    def gave_up_share(self) -> float:
        return self.gave_up / self.calls if self.calls else 0.0


class HotTenant(Figures):
    """One tenant's ceiling: every writer count and k on one tenant, and the writers split over its shards."""

    tenant: str
    shards: int
    seconds_per_round: float
    repetitions: int
    writers: tuple[int, ...]
    sizes: tuple[int, ...]
    rounds: tuple[HotRound, ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _every_writer_count_measured(self) -> Self:
        unsplit = {(r.writers, r.k) for r in self.rounds if r.tenants == 1}
        split = {r.writers for r in self.rounds if r.tenants == self.shards and r.k == 1}
        _require(
            unsplit,
            [(n, k) for k in HOT_TENANT_SIZES for n in HOT_TENANT_WRITERS],
            "rounds (writers, k) on one tenant",
        )
        _require(split, [n for n in HOT_TENANT_WRITERS if n > 1], f"rounds of writers at k = 1 on {self.shards} shards")
        return self

    @property
    def one_tenant(self) -> tuple[HotRound, ...]:
        """The rounds on one tenant, by k and then writers."""
        return tuple(sorted((r for r in self.rounds if r.tenants == 1), key=lambda r: (r.k, r.writers)))

    @property
    def split(self) -> tuple[HotRound, ...]:
        """The rounds on the tenant's shards, by writers."""
        return tuple(sorted((r for r in self.rounds if r.tenants == self.shards), key=lambda r: r.writers))

    def _by_k(self, writers: int) -> dict[str, HotRound]:
        return {str(r.k): r for r in self.one_tenant if r.writers == writers}

    @property
    def one_writer(self) -> dict[str, HotRound]:
        """One writer's rounds on one tenant, by k."""
        return self._by_k(min(self.writers))

    @property
    def most_writers(self) -> dict[str, HotRound]:
        """The rounds of the most writers on one tenant, by k."""
        return self._by_k(max(self.writers))

    @property
    def most_writers_split(self) -> HotRound:
        """The most writers over the tenant's shards."""
        return next(r for r in self.split if r.writers == max(self.writers))

    @property
    def worst(self) -> HotRound:
        """The round on one tenant whose calls gave up most often."""
        return max(self.one_tenant, key=lambda r: r.gave_up_share)


class TenantScale(Figures):
    tenants_present: tuple[int, int]
    emits: int
    cpu_ms_per_emit: dict[str, Summary]
    cpu_ratio: Summary

    @model_validator(mode="after")
    def _every_count_measured(self) -> Self:
        _require(self.cpu_ms_per_emit, [str(count) for count in self.tenants_present], "cpu_ms_per_emit")
        return self


class HeadCacheUse(Figures):
    requests_per_emit: float
    head_reads_per_emit: float


class HeadCache(Figures):
    head_cache_size: int
    active_tenants: dict[str, HeadCacheUse]


class BatchCost(Figures):
    events: int
    requests_per_event: float
    write_units_per_event: float
    cpu_ms_per_event: float


class Batches(Figures):
    """``emit_many``: per-event cost by k, one writer."""

    sizes: tuple[int, ...] = Field(min_length=1)
    by_size: dict[str, BatchCost]

    @model_validator(mode="after")
    def _every_size_measured(self) -> Self:
        _require(self.by_size, [str(size) for size in self.sizes], "by_size")
        return self

    @property
    def largest(self) -> BatchCost:
        return self.by_size[str(max(self.sizes))]


class EmitCost(Figures):
    requests_per_event: float
    write_units_per_event: float
    read_units_per_event: float
    cpu_ms_per_event: float


class HeadlessRound(Figures):
    store: str  # "head" (the engine's) or "headless" (benchmarks.headless_chain)
    writers: int
    events_per_second: Summary
    ratio_to_head: Summary  # against the engine's store with the same writers, within each repetition
    retries_per_call: Summary
    calls: int
    gave_up: int


class HeadlessChain(Figures):
    """The chain without its head row, measured beside the engine's (an idea, not shipped)."""

    emits: int
    cost: dict[str, EmitCost]
    rounds: tuple[HeadlessRound, ...] = Field(min_length=1)
    headless_logs_intact: bool

    @model_validator(mode="after")
    def _both_stores_measured(self) -> Self:
        _require(self.cost, ["head", "headless"], "cost")
        _require({r.store for r in self.rounds}, ["head", "headless"], "rounds")
        return self

    @property
    def side_by_side(self) -> list[tuple[HeadlessRound, HeadlessRound]]:
        """(with the head, without it) for each number of writers, fewest first."""
        by = {(r.store, r.writers): r for r in self.rounds}
        writers = sorted({r.writers for r in self.rounds})
        return [(by[("head", n)], by[("headless", n)]) for n in writers]


class EmitFigures(Figures):
    repetitions: int
    hot_tenant: HotTenant
    tenant_scale: TenantScale
    head_cache: HeadCache
    batches: Batches
    headless: HeadlessChain


# -- end to end (benchmarks.end_to_end), the assembly (benchmarks.assembly) and the run -------------------


class EndToEndFigures(Figures):
    events_per_run: int
    orders_per_run: int
    block: int
    repetitions: int
    runtime_events_per_second: Summary
    plain_loop_events_per_second: Summary
    runtime_to_plain_ratio: Summary
    share_of_runtime_time: dict[str, Summary]


class PrepareFigures(Figures):
    assembly: str
    layer: str
    layer_origin: str


class Machine(Figures):
    date: str
    nproc: int
    cpu_model: str
    platform: str
    python: str
    packages: dict[str, str]
    commit: str  # git rev-parse at the run, "(with uncommitted changes)" when the tree was dirty


class RunFigures(Figures):
    timings: dict[str, float]
    total_seconds: float
    machine: Machine


class CompletenessPassUse(Figures):
    """One completeness pass's DynamoDB use (``benchmarks.completeness_cost``)."""

    events_read: int
    missing: int
    requests: int
    read_units: float
    write_units: float


class CompletenessPerMillion(Figures):
    read_units_per_million: float
    write_units_per_million: float
    usd_per_million: float


class CompletenessCatalog(Figures):
    """The pass over one tenant's log of ``events``, each with ``subscriptions`` durable pairs completed."""

    events: int
    subscriptions: int
    first_pass: CompletenessPassUse  # the pass that judges them all
    next_pass: CompletenessPassUse  # the one after it, nothing new
    per_million: CompletenessPerMillion


class CompletenessFigures(Figures):
    rows: list[CompletenessCatalog]


class WorkflowPerExecution(Figures):
    """One execution of the example's workflow, on average (``benchmarks.workflow_cost``)."""

    durable_operations: float
    bytes_written: float
    invocations: float
    gb_seconds: float
    settle_requests: float
    settle_read_units: float
    settle_write_units: float
    lane_item_write_units: float


class WorkflowSettlePass(Figures):
    memory_mb: int
    ms_per_invocation: float
    index_read_units_per_pass: float


class WorkflowDollars(Figures):
    """US dollars per million executions (one per event the WORKFLOW subscription runs for), line by line."""

    durable_operations: float
    data_written: float
    data_retained: float
    invocations: float
    duration: float
    dynamodb: float
    total: float
    settle_pass_per_month: float  # fixed: one pass a minute, whatever the traffic


class WorkflowFigures(Figures):
    subscription: str
    executions: int
    per_execution: WorkflowPerExecution
    memory_mb: int
    retention_days: int
    settle_pass: WorkflowSettlePass
    function: str
    usd_per_million: WorkflowDollars


class Results(Figures):
    prepare: PrepareFigures
    consumer: ConsumerFigures
    cost: CostFigures
    cold_start: ColdStartFigures
    emit: EmitFigures
    end_to_end: EndToEndFigures
    completeness: CompletenessFigures
    workflow: WorkflowFigures
    run: RunFigures


# file stem -> what it holds, and the module that wrote it
FILES: dict[str, tuple[type[Figures], str]] = {
    "prepare": (PrepareFigures, "benchmarks.assembly"),
    "consumer": (ConsumerFigures, "benchmarks.consumer_overhead"),
    "cost": (CostFigures, "benchmarks.cost_per_event"),
    "cold_start": (ColdStartFigures, "benchmarks.cold_start"),
    "emit": (EmitFigures, "benchmarks.emit_contention"),
    "end_to_end": (EndToEndFigures, "benchmarks.end_to_end"),
    "completeness": (CompletenessFigures, "benchmarks.completeness_cost"),
    "workflow": (WorkflowFigures, "benchmarks.workflow_cost"),
    "run": (RunFigures, "the runner, benchmarks.__main__"),
}


def load(directory: Path) -> Results:
    """Every benchmark's figures in ``directory``, checked against the model."""
    return Results.model_validate({name: _load_one(directory, name) for name in FILES})


def _load_one(directory: Path, name: str) -> Figures:
    model, module = FILES[name]
    path = directory / f"{name}.json"
    who = f"benchmark {name} ({module}, {path})"
    try:
        raw = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise MissingFigureError(f"{who}: cannot read the figures: {exc}") from exc
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        raise MissingFigureError(f"{who}: {_describe(exc)}") from exc


def _describe(error: ValidationError) -> str:
    problems = []
    for problem in error.errors():
        where = ".".join(str(part) for part in problem["loc"])
        if problem["type"] == "missing":
            problems.append(f"missing figure {where}")
        else:
            problems.append(f"figure {where or '(top level)'}: {problem['msg']}")
    return "; ".join(problems)
