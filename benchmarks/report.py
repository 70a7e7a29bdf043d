"""``benchmarks/RESULTS.md`` from the figures: the numbers are computed here, the words live elsewhere.

The tables are Jinja templates (``benchmarks/templates/``), every sentence is a section of
``benchmarks/explanations.md`` that a template includes by name (``explain("...")``; sections may cite
figures with ``{{ ... }}`` like the templates), and the targets with their thresholds are data
(``benchmarks/targets.toml``). This module loads those, derives what the figures imply in dollars and
shares (``Derived``), judges the targets and renders. A figure, a section or a name the templates use that
does not exist is an error, never an empty cell.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import astuple, dataclass
from pathlib import Path
from typing import Any

import jinja2
from jinja2 import nodes

from benchmarks.results import ConsumerFigures, CostRun, PerEvent, Results, Summary
from benchmarks.targets import Target, Verdict, judge

HERE = Path(__file__).resolve().parent
PRICES_FILE = HERE / "prices.json"
TEMPLATES_DIR = HERE / "templates"
EXPLANATIONS_FILE = HERE / "explanations.md"
MAIN_TEMPLATE = "RESULTS.md.j2"
LAMBDA_MB_PER_VCPU = 1769  # Lambda allocates one vCPU at 1,769 MB, proportionally below
# Lambda documents 4 GetRecords per second per shard for DynamoDB stream triggers.
STREAM_POLLS_PER_SHARD_DAY = 4 * 24 * 3600
# DynamoDB's write throughput per partition, and a transaction's cost: 2 write units per started KB of each item
# (prepare and commit). A tenant's head row and its event rows each have one partition key (outbox.keys).
PARTITION_WRITE_UNITS_PER_SECOND = 1000
TRANSACTION_WRITE_UNITS_PER_KB = 2
# A TransactWriteItems round trip inside a region, slow and fast: a tenant's chain commits one at a time.
TRANSACTION_ROUND_TRIP_MS = (25, 10)
SECTION = re.compile(r"^## (.+?)\s*$", re.MULTILINE)


class ExplanationsError(Exception):
    """The explanations lack a section the templates or targets name, or hold one nobody uses."""


class UnaccountedWritesError(Exception):
    """The comparison's lines do not add up to the run's measured write units: an item kind has no line."""


# -- prices ------------------------------------------------------------------------------------------


def load_prices(path: Path = PRICES_FILE) -> dict[str, Any]:
    prices: dict[str, Any] = json.loads(path.read_text())
    return prices


def unit_price(prices: Mapping[str, Any], name: str) -> float:
    """US dollars per single unit."""
    entry = prices["prices"][name]
    return float(entry["usd"]) / float(entry["per"])


@dataclass(frozen=True)
class Dollars:
    """US dollars per million events, by service."""

    dynamodb_writes: float
    dynamodb_reads: float
    dynamodb_streams: float
    pipes: float
    sqs: float
    lambda_requests: float
    lambda_duration: float

    @property
    def total(self) -> float:
        return float(sum(astuple(self)))


def dollars_per_million(per_event: PerEvent, prices: Mapping[str, Any]) -> Dollars:
    def million(name: str) -> float:
        return unit_price(prices, name) * 1_000_000

    return Dollars(
        dynamodb_writes=per_event.write_units * million("dynamodb_write_request_unit"),
        dynamodb_reads=per_event.read_units * million("dynamodb_read_request_unit"),
        dynamodb_streams=per_event.stream_read_units * million("dynamodb_streams_read_request_unit"),
        pipes=per_event.pipe_requests * million("pipes_request"),
        sqs=per_event.sqs_requests_fifo * million("sqs_fifo_request")
        + per_event.sqs_requests_standard * million("sqs_standard_request"),
        lambda_requests=per_event.lambda_invocations * million("lambda_request"),
        lambda_duration=per_event.gb_seconds * million("lambda_gb_second_arm64"),
    )


# -- what the figures imply ---------------------------------------------------------------------------


@dataclass(frozen=True)
class RecordLaneCost:
    """The record-change lane's part of the trickle run: shares of the requests, and its dollars."""

    pipe_share: float
    sqs_share: float
    dollars_per_million: float


def record_lane_cost(run: CostRun, prices: Mapping[str, Any]) -> RecordLaneCost:
    lane = run.actors.record_change_lane
    pipes = [usage for actor, usage in run.by_actor.items() if actor.startswith("pipe:")]
    pipe_lane = run.by_actor[lane.pipe].message_chunks
    sqs_all = sum(
        _sqs_work(actor, u.sqs_requests_fifo + u.sqs_requests_standard, u.empty) for actor, u in run.by_actor.items()
    )
    sqs_lane = sum(
        _sqs_work(actor, run.by_actor[actor].sqs_requests_standard, run.by_actor[actor].empty)
        for actor in (lane.pipe, lane.mapping)
    )
    function = run.functions[lane.function]
    dollars = (
        pipe_lane * unit_price(prices, "pipes_request")
        + sqs_lane * unit_price(prices, "sqs_standard_request")
        + function.invocations * unit_price(prices, "lambda_request")
        + function.gb_seconds * unit_price(prices, "lambda_gb_second_arm64")
    )
    return RecordLaneCost(
        pipe_share=pipe_lane / sum(u.message_chunks for u in pipes),
        sqs_share=sqs_lane / sqs_all,
        dollars_per_million=dollars / run.events * 1_000_000,
    )


def _sqs_work(actor: str, requests: int, empty: int) -> int:
    """An actor's SQS requests that carried work. A pipe's empty polls are GetRecords, not SQS receives: its
    SQS requests are all sends; anyone else's empty ones are receives that returned nothing."""
    return requests if actor.startswith("pipe:") else requests - empty


@dataclass(frozen=True)
class WriteUnits:
    """Write units per event of one line of the comparison: the engine measured, the hand-made outbox with
    Powertools Idempotency assembled from measured parts."""

    engine: float
    hand_made: float


@dataclass(frozen=True)
class WriteUnitComparison:
    event_row: WriteUnits
    caller_writes: WriteUnits
    chain_head: WriteUnits
    tenant_index: WriteUnits
    emit_retries: WriteUnits
    claims: WriteUnits
    order_rows: WriteUnits
    handler_writes: WriteUnits
    follow_ups: WriteUnits
    consumer_retries: WriteUnits
    record_lane: WriteUnits
    workflow_lane: WriteUnits
    engine_total: float  # the run's measured total, which the lines above should add up to
    powertools_per_pair: float  # Powertools' two idempotency-record writes per (event, subscription)
    pairs_per_event: float

    @property
    def lines(self) -> list[WriteUnits]:
        return [value for value in vars(self).values() if isinstance(value, WriteUnits)]

    @property
    def hand_made_total(self) -> float:
        return sum(line.hand_made for line in self.lines)

    @property
    def application(self) -> float:
        """The application's own writes, as any outbox has them: the caller's, in its transaction with the
        outbox item, and the handlers', at the plain price (the engine commits them atomically with the
        completion, at the transactional price: that doubling is the engine's overhead)."""
        return self.caller_writes.hand_made + self.handler_writes.hand_made

    @property
    def engine_overhead(self) -> float:
        """What the engine writes per event beyond the application's own writes."""
        return self.engine_total - self.application

    @property
    def hand_made_overhead(self) -> float:
        return self.hand_made_total - self.application

    @property
    def engine_overhead_per_pair(self) -> float:
        return self.engine_overhead / self.pairs_per_event

    @property
    def hand_made_overhead_per_pair(self) -> float:
        return self.hand_made_overhead / self.pairs_per_event

    @property
    def overhead_ratio(self) -> float:
        """The engine's overhead against the hand-made outbox's, per event."""
        return self.engine_overhead / self.hand_made_overhead

    @property
    def engine_emit(self) -> float:
        """What the engine's emit itself writes, on top of the caller's own writes."""
        return sum(line.engine for line in (self.event_row, self.chain_head, self.tenant_index, self.emit_retries))


def write_unit_comparison(run: CostRun, consumer: ConsumerFigures) -> WriteUnitComparison:
    """No chain head, no tenant index and no retries for the hand-made outbox, two idempotency-record writes
    per pair, and the handlers' writes outside any transaction (half the units). ``UnaccountedWritesError``
    when the engine's lines do not add up to what the run measured (a kind of item without a line)."""
    comparison = _write_unit_comparison(run, consumer)
    accounted = sum(line.engine for line in comparison.lines)
    if abs(accounted - comparison.engine_total) > 1e-6 * max(1.0, comparison.engine_total):
        raise UnaccountedWritesError(
            f"the {run.cadence} run wrote {comparison.engine_total:.4f} write units per event but the comparison's "
            f"lines add up to {accounted:.4f}; give every item kind a line (measured: "
            f"{', '.join(sorted(run.write_units_by_item_per_event))})"
        )
    return comparison


def _write_unit_comparison(run: CostRun, consumer: ConsumerFigures) -> WriteUnitComparison:
    powertools_per_pair = consumer.shapes["1-sub-no-writes"].baseline.write_units_per_delivery
    pairs_per_event = run.pairs / run.events
    event_row = run.write_units("app", "event row")
    handler_writes = run.write_units("durable_consumer", "application data")
    follow_rows = run.write_units("durable_consumer", "event row")
    caller = run.write_units("app", "application data")
    record_lane = run.record_change_write_units
    return WriteUnitComparison(
        event_row=WriteUnits(event_row, event_row),
        caller_writes=WriteUnits(caller, caller),
        chain_head=WriteUnits(run.write_units("app", "chain head"), 0.0),
        tenant_index=WriteUnits(run.write_units("app", "tenant index"), 0.0),
        emit_retries=WriteUnits(run.write_units("app", "failed call"), 0.0),
        claims=WriteUnits(
            run.write_units("durable_consumer", "inbox claim row"), powertools_per_pair * pairs_per_event
        ),
        order_rows=WriteUnits(run.write_units("durable_consumer", "order row"), 0.0),
        handler_writes=WriteUnits(handler_writes, handler_writes / 2),
        follow_ups=WriteUnits(follow_rows + run.write_units("durable_consumer", "chain head"), follow_rows),
        consumer_retries=WriteUnits(run.write_units("durable_consumer", "failed call"), 0.0),
        record_lane=WriteUnits(record_lane, record_lane),
        # A hand-made outbox has no exactly-once hand-off to a durable function to write: none on its side.
        workflow_lane=WriteUnits(run.workflow_lane_write_units, 0.0),
        engine_total=run.per_event.write_units,
        powertools_per_pair=powertools_per_pair,
        pairs_per_event=pairs_per_event,
    )


@dataclass(frozen=True)
class ClientCpuGap:
    """The durable consumer's extra client CPU per message over the baseline, in the first handler shape,
    and what it costs at the function's memory size."""

    shape: str
    microseconds: float
    memory_mb: int
    billed_ms: float
    dollars_per_million_messages: float


def client_cpu_gap(consumer: ConsumerFigures, run: CostRun, prices: Mapping[str, Any]) -> ClientCpuGap:
    scenario = consumer.scenarios[0]
    gap_ms = scenario.ours.replayed_cpu_ms_per_message.median - scenario.baseline.replayed_cpu_ms_per_message.median
    memory_mb = run.durable_function.memory_mb
    billed_ms = gap_ms * LAMBDA_MB_PER_VCPU / memory_mb  # a function gets memory/1,769 of a vCPU
    gb_seconds = billed_ms / 1000 * memory_mb / 1024
    return ClientCpuGap(
        shape=scenario.label,
        microseconds=gap_ms * 1000,
        memory_mb=memory_mb,
        billed_ms=billed_ms,
        dollars_per_million_messages=gb_seconds * unit_price(prices, "lambda_gb_second_arm64") * 1_000_000,
    )


@dataclass(frozen=True)
class PaperCeiling:
    """One tenant's events per second on DynamoDB in calls of k events (``emit``: 1), by what bounds them: its
    head row (one transaction per call, 2 write units), its event partition (2 write units per event of up to
    1 KB) and its serial chain (one transaction round trip per call)."""

    k: int
    head_row: float
    event_partition: float
    chain_slow: float  # at the slow round trip
    chain_fast: float  # at the fast one

    @property
    def low(self) -> float:
        """The ceiling at the slow round trip: the rate above which the tenant must be split."""
        return min(self.head_row, self.event_partition, self.chain_slow)

    @property
    def high(self) -> float:
        return min(self.head_row, self.event_partition, self.chain_fast)


def paper_ceiling(k: int) -> PaperCeiling:
    per_second = PARTITION_WRITE_UNITS_PER_SECOND / TRANSACTION_WRITE_UNITS_PER_KB  # transactions or 1 KB rows
    slow, fast = (1000 / ms for ms in TRANSACTION_ROUND_TRIP_MS)
    return PaperCeiling(
        k=k, head_row=per_second * k, event_partition=per_second, chain_slow=slow * k, chain_fast=fast * k
    )


@dataclass(frozen=True)
class Derived:
    money: dict[str, Dollars]  # by cadence
    record_lane: RecordLaneCost
    write_units: WriteUnitComparison
    cpu_gap: ClientCpuGap
    minutes_for_10k_events: float  # the trickle run's pace
    dollars_per_million_read_units: float
    dollars_per_million_write_units: float
    stream_polls_per_shard_day: int
    stream_polling_dollars_per_shard_day: float
    paper_ceiling: dict[str, PaperCeiling]  # by the hot tenant's k
    transaction_round_trip_ms: tuple[int, int]  # slow, fast


def derive(results: Results, prices: Mapping[str, Any]) -> Derived:
    trickle = results.cost.trickle
    return Derived(
        money={run.cadence: dollars_per_million(run.per_event, prices) for run in results.cost.runs},
        record_lane=record_lane_cost(trickle, prices),
        write_units=write_unit_comparison(trickle, results.consumer),
        cpu_gap=client_cpu_gap(results.consumer, trickle, prices),
        minutes_for_10k_events=10_000 * trickle.seconds / trickle.events / 60,
        dollars_per_million_read_units=unit_price(prices, "dynamodb_read_request_unit") * 1_000_000,
        dollars_per_million_write_units=unit_price(prices, "dynamodb_write_request_unit") * 1_000_000,
        stream_polls_per_shard_day=STREAM_POLLS_PER_SHARD_DAY,
        stream_polling_dollars_per_shard_day=STREAM_POLLS_PER_SHARD_DAY
        * unit_price(prices, "dynamodb_streams_read_request_unit"),
        paper_ceiling={str(k): paper_ceiling(k) for k in results.emit.hot_tenant.sizes},
        transaction_round_trip_ms=TRANSACTION_ROUND_TRIP_MS,
    )


# -- explanations ------------------------------------------------------------------------------------


def load_explanations(path: Path = EXPLANATIONS_FILE) -> dict[str, str]:
    """The document's ``## `` sections by heading; what precedes the first is notes for its editors."""
    parts = SECTION.split(path.read_text())
    sections: dict[str, str] = {}
    for name, text in zip(parts[1::2], parts[2::2], strict=True):
        if name in sections:
            raise ExplanationsError(f"{path}: section {name!r} appears twice")
        sections[name] = text.strip()
    return sections


def explained_in_templates(environment: jinja2.Environment) -> set[str]:
    """The section names the templates pass to ``explain()`` (each must be a literal)."""
    names = set()
    for template in environment.list_templates():
        source = environment.loader.get_source(environment, template)[0]  # type: ignore[union-attr]
        for call in environment.parse(source).find_all(nodes.Call):
            if isinstance(call.node, nodes.Name) and call.node.name == "explain":
                (argument,) = call.args
                if not isinstance(argument, nodes.Const):
                    raise ExplanationsError(f"{template}: explain() takes a literal section name")
                names.add(str(argument.value))
    return names


def check_explanations(sections: Mapping[str, str], used: Iterable[str]) -> None:
    used = set(used)
    missing, unused = sorted(used - set(sections)), sorted(set(sections) - used)
    if missing:
        raise ExplanationsError(f"{EXPLANATIONS_FILE.name} has no section {', '.join(map(repr, missing))}")
    if unused:
        raise ExplanationsError(f"{EXPLANATIONS_FILE.name}: no template or target uses {', '.join(map(repr, unused))}")


# -- rendering ---------------------------------------------------------------------------------------


def _spread(value: Summary, digits: int = 2, scale: float = 1.0) -> str:
    """``1.23 (1.10-1.40)``: the median and the range over repetitions."""
    median, low, high = (v * scale for v in (value.median, value.low, value.high))
    return f"{median:.{digits}f} ({low:.{digits}f}-{high:.{digits}f})"


def _number(value: float | Summary, digits: int = 2) -> str:
    return _spread(value, digits) if isinstance(value, Summary) else f"{value:.{digits}f}"


def _ratio(value: float | Summary, digits: int = 2) -> str:
    return f"{_number(value, digits)}x"


def _with_unit(value: float | Summary, unit: str) -> str:
    if unit == "$":
        return f"${_number(value)}"
    return _ratio(value) if unit == "x" else f"{_number(value)} {unit}"


def _measured(verdict: Verdict) -> str:
    return _with_unit(verdict.spread or verdict.value, verdict.target.unit)


FILTERS = {
    "spread": _spread,
    "num": _number,
    "ratio": _ratio,
    "with_unit": _with_unit,
    "measured": _measured,
    "signed": lambda value, digits=0: f"{value:+.{digits}f}",
    "dollars": lambda value, digits=2: f"${value:.{digits}f}",
    "percent": lambda share, digits=0: f"{share * 100:.{digits}f} %",
    "thousands": lambda value: f"{value:,}",
    "megabytes": lambda size: f"{size / 1e6:.1f} MB",
    "kilobytes": lambda size: f"{size / 1e3:.1f} kB",
    "comparison": lambda symbol: {"<=": "≤", ">=": "≥", "==": "="}[symbol],
}


def environment(explanations: Mapping[str, str] | None = None) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES_DIR),
        undefined=jinja2.StrictUndefined,
        autoescape=False,  # Markdown, not HTML
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters.update(FILTERS)

    @jinja2.pass_context
    def explain(context: jinja2.runtime.Context, name: str) -> str:
        if explanations is None or name not in explanations:
            raise ExplanationsError(f"{EXPLANATIONS_FILE.name} has no section {name!r}")
        return env.from_string(explanations[name]).render(context.get_all())

    # explain("literal") in the templates is checked before rendering; explain_target(name) takes the names
    # targets.toml gives, checked with the targets.
    env.globals["explain"] = env.globals["explain_target"] = explain
    return env


def context(results: Results, prices: Mapping[str, Any], targets: Sequence[Target]) -> dict[str, Any]:
    derived = derive(results, prices)
    verdicts = judge(results, targets, derived)
    unmet = [v.target.explanation for v in verdicts if not v.met and v.target.explanation]
    return {
        **{name: getattr(results, name) for name in Results.model_fields},
        "derived": derived,
        "verdicts": verdicts,
        "unmet_explanations": list(dict.fromkeys(unmet)),
    }


def render(
    results: Results, prices: Mapping[str, Any], targets: Sequence[Target], explanations: Mapping[str, str]
) -> str:
    env = environment(explanations)
    check_explanations(
        explanations, explained_in_templates(env) | {t.explanation for t in targets if t.explanation is not None}
    )
    return env.get_template(MAIN_TEMPLATE).render(context(results, prices, targets))
