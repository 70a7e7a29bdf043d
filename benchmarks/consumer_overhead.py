"""1. Consumer overhead: the durable consumer against Powertools Idempotency, on the same SQS batches.

Both consumers process the same Lambda events (10-message batches received from an SQS FIFO queue, each
body the raw stream image the relay pipe forwards) with 1 and 4 subscriptions per event, once with
handlers that do nothing and once with handlers that write one DynamoDB item. Both run on in-process
moto with the local runtime's AWS fixes installed (transactions cost O(touched items), as in AWS; without
the fixes moto deep-copies every table per transaction, which would charge the engine for moto).

CPU is ``time.process_time`` around the handler calls. Moto plays DynamoDB in the same process, so the
CPU it spends answering is measured apart (``MotoMeter``) and subtracted: "client CPU" is what the
function itself would spend in Lambda. Both figures are reported. Repetitions alternate which consumer
goes first, and every ratio is taken within one repetition.

The engine runs four ways: its subscriptions as they are by default (external effects: a lease per pair,
claim and completion), declared DynamoDB-only (``effects="dynamodb"``: no lease, the writes and a completion
marker in one transaction), "direct" in the figures, declared ordered (``ordered=True``: the lease path plus
the tenant's watermark, read with the batch's events and moved in the completion's transaction), "ordered",
and declared both ("ordered_direct": the next event in order commits its marker, the watermark and its writes
in one transaction, with no claim).
The batches hold each tenant's events in seq order, as the relay delivers them; what an event delivered
before its predecessor costs (deferred, then woken) is counted apart, on the same events with each tenant's
pairs swapped.

Also here: the consumer's cost per message with a catalog of 10 and of 1,000 subscriptions of which one
matches (hot-path work must not scale with the catalog), where the engine's client CPU goes, and what tracing
costs (``outbox.tracing``): the same consumer without OpenTelemetry (as if ``chained-outbox[otel]`` were not
installed), with its API and no SDK (every span a no-op), and with the SDK recording every span (a span per
pair, exported to a processor that keeps nothing: what an ADOT layer adds before its network export).
"""

from __future__ import annotations

import argparse
import gc
import json
import time
import timeit
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from benchmarks import aws
from benchmarks.baseline import PERSISTENCE_KEY, BaselineSubscription, PowertoolsIdempotentConsumer
from benchmarks.metering import AwsMeter, MotoMeter, ResponseRecorder, ResponseReplayer, Usage
from benchmarks.reference.order_app import sample_payload
from benchmarks.stats import Summary, ratios, summary
from outbox import Envelope, EventStore, tracing, writes
from outbox.clients import ENGINE_CLIENT_CONFIG
from outbox.delivery.consumer import DurableConsumer, parse_body
from outbox.inbox import Inbox, envelope_digest
from outbox.local.clock import VirtualClock
from outbox.local.lambda_context import LocalLambdaContext
from outbox.pairs.order import WakeUps
from outbox.subscriptions import Delivery, Effects, HandlerResult, Lane, Subscription, SubscriptionRegistry

EVENT_TYPE = "bench.order_paid"
TENANTS = ("acme", "globex", "initech", "umbrella")
MAX_ATTEMPTS = 5
FUNCTION_TIMEOUT = timedelta(seconds=60)
Batch = dict[str, Any]
# The engine with a lease per pair (its default), Powertools Idempotency, the engine DynamoDB-only, the engine
# with its subscriptions ordered, and ordered DynamoDB-only.
IMPLEMENTATIONS = ("ours", "baseline", "direct", "ordered", "ordered_direct")
Handle = Callable[[Batch, Any], Any]
# Replays of each recorded run; the client CPU is the least of them. A replay is deterministic work (the
# same requests, the same answers), so anything above its least time is the machine's noise, not the
# consumer's: timeit's reasoning. Each side gets the same number.
REPLAYS = 3
_tables = 0


@dataclass(frozen=True)
class Scenario:
    subscriptions: int
    effect_write: bool

    @property
    def label(self) -> str:
        effect = "one DynamoDB write" if self.effect_write else "no writes"
        return f"{self.subscriptions} subscription{'s' if self.subscriptions > 1 else ''}, handler: {effect}"


SCENARIOS = (Scenario(1, False), Scenario(4, False), Scenario(1, True), Scenario(4, True))


@dataclass
class Measurement:
    """One consumer's time over all measured batches of one repetition."""

    cpu_seconds: float  # on moto, moto's CPU included
    moto_cpu_seconds: float  # of which moto's dispatch
    replayed_cpu_seconds: float  # least of REPLAYS replays with moto's answers: the client alone
    wall_seconds: float
    messages: int
    deliveries: int

    @property
    def client_cpu_seconds(self) -> float:
        return self.cpu_seconds - self.moto_cpu_seconds


@dataclass
class Tools:
    clock: VirtualClock
    moto: MotoMeter
    recorder: ResponseRecorder
    replayer: ResponseReplayer


@dataclass
class Counted:
    """One consumer's DynamoDB requests and units over the same batches."""

    messages: int
    deliveries: int
    dynamodb: Usage
    by_operation: dict[str, int]


def make_batches(dynamodb: Any, sqs: Any, count: int, batch_size: int) -> list[Batch]:
    """Emit ``count`` events, send them as the relay pipe does and receive them as Lambda would."""
    aws.create_table(dynamodb, "events")
    store = EventStore("events", client=dynamodb, sleep=lambda _s: None, unchecked=True)
    queue_url = aws.create_fifo_queue(sqs, "bench-durable")
    arn = aws.queue_arn(sqs, queue_url)
    for n in range(count):
        envelope = store.emit(EVENT_TYPE, sample_payload(n), tenant=TENANTS[n % len(TENANTS)], actor="bench")
        sqs.send_message(
            QueueUrl=queue_url,
            MessageBody=aws.dumps(envelope.to_item()),
            MessageGroupId=envelope.tenant,
            MessageDeduplicationId=envelope.id,
        )
    batches: list[Batch] = []
    while True:
        records = aws.lambda_records(sqs, queue_url, arn, max_messages=batch_size)
        if not records:
            return batches
        batches.append({"Records": records})
        sqs.delete_message_batch(
            QueueUrl=queue_url,
            Entries=[{"Id": str(i), "ReceiptHandle": r["receiptHandle"]} for i, r in enumerate(records)],
        )


def effect_item(idempotency_key: str) -> dict[str, Any]:
    return {"pk": f"EFFECT#{idempotency_key}", "sk": "EFFECT", "status": "DONE", "amount_cents": 1500}


class Consumers:
    """Builds each consumer on fresh tables (so every run starts from an empty inbox), its requests
    going through ``dynamodb``; ``admin`` creates the tables."""

    def __init__(self, dynamodb: Any, admin: Any, engine: Any | None = None, sqs: Any | None = None) -> None:
        self.dynamodb = dynamodb  # Powertools' client
        self.engine = engine if engine is not None else dynamodb  # the engine's
        self.admin = admin
        self.store = EventStore("events", client=self.engine, sleep=lambda _s: None, unchecked=True)
        self.sqs = sqs  # where ordered subscriptions send their wake-ups (none on in-order batches)
        self.wake_queue = aws.create_fifo_queue(sqs, "bench-wake-ups") if sqs is not None else "unused"
        self.created: list[str] = []  # every table a build made, in order
        self._reused: list[str] | None = None

    def reusing(self, names: Sequence[str]) -> Consumers:
        """The next build names its tables ``names`` and creates none: a replay of a recorded run, whose
        answers name the recorded run's tables (a BatchGetItem's answer is keyed by table name)."""
        self._reused = list(names)
        return self

    def _fresh(self, prefix: str, key: tuple[str, str | None] = ("pk", "sk")) -> str:
        global _tables
        if self._reused:
            return self._reused.pop(0)
        _tables += 1
        name = f"{prefix}-{_tables}"
        aws.create_table(self.admin, name, key=key)
        self.created.append(name)
        return name

    def ours(
        self,
        scenario: Scenario,
        catalog_size: int | None = None,
        effects: Effects = Effects.EXTERNAL,
        ordered: bool = False,
    ) -> Handle:
        inbox_table, effects_table = self._fresh("inbox"), self._fresh("effects")

        def handler(delivery: Delivery) -> HandlerResult | None:
            if not scenario.effect_write:
                return None
            return HandlerResult(writes=[writes.put(effects_table, effect_item(delivery.idempotency_key))])

        subscriptions = [
            Subscription(f"bench.sub_{i}", EVENT_TYPE, Lane.DURABLE, handler, effects=effects, ordered=ordered)
            for i in range(scenario.subscriptions)
        ]
        for i in range((catalog_size or scenario.subscriptions) - scenario.subscriptions):
            # The rest of a large catalog: other types, exact names and globs, none matching.
            pattern = f"other_{i}.*" if i % 2 else f"other.type_{i}"
            subscriptions.append(Subscription(f"other.sub_{i}", pattern, Lane.DURABLE, handler))
        inbox = Inbox(inbox_table, client=self.engine, max_attempts=MAX_ATTEMPTS)
        wake_ups = None
        if ordered:
            wake_ups = WakeUps(self.wake_queue, sqs=self.sqs, dynamodb=self.engine, events_table="events")
        consumer = DurableConsumer(SubscriptionRegistry.of(subscriptions), inbox, self.store, wake_ups=wake_ups)
        return consumer.handle

    def baseline(self, scenario: Scenario) -> Handle:
        table, effects_table = self._fresh("idempotency", key=PERSISTENCE_KEY), self._fresh("effects")
        dynamodb = self.dynamodb

        def handler(delivery: Any) -> None:
            if scenario.effect_write:
                key = f"{delivery['event_id']}:{delivery['subscription']}"
                dynamodb.put_item(TableName=effects_table, Item=writes.typed(effect_item(key)))

        subscriptions = [
            BaselineSubscription(f"bench.sub_{i}", EVENT_TYPE, handler) for i in range(scenario.subscriptions)
        ]
        return PowertoolsIdempotentConsumer(table, dynamodb, subscriptions).handle


def _timed(handle: Handle, batches: Sequence[Batch], context: Any) -> tuple[float, float]:
    gc.collect()
    # No collection while timing: moto's allocations would trigger collections that land, at random,
    # in the consumer's own code and charge it for the emulator's garbage.
    gc.disable()
    try:
        cpu, wall = time.process_time(), time.perf_counter()
        for batch in batches:
            _check(handle(batch, context))
        return time.process_time() - cpu, time.perf_counter() - wall
    finally:
        gc.enable()


def measure(
    build: Callable[[Consumers], Handle],
    on_moto: Consumers,
    replayed: Consumers,
    tools: Tools,
    warmup: Batch,
    batches: Sequence[Batch],
    deliveries_per_message: int,
) -> Measurement:
    """Time one consumer over the batches on moto, then again (``REPLAYS`` times, the least counts) with
    moto's recorded answers replayed."""
    context = LocalLambdaContext("bench-consumer", FUNCTION_TIMEOUT, tools.clock)
    made = len(on_moto.created)
    handle = build(on_moto)
    tables = on_moto.created[made:]
    tools.recorder.start()
    _check(handle(warmup, context))  # first-call work (memoised matching, compiled JMESPath) is not per message
    tools.moto.reset()
    cpu, wall = _timed(handle, batches, context)
    moto_cpu = tools.moto.total.cpu_seconds
    recorded = tools.recorder.stop()
    replayed_cpu = min(
        _replayed(build, replayed.reusing(tables), tools, recorded, warmup, batches, context) for _ in range(REPLAYS)
    )
    messages = sum(len(batch["Records"]) for batch in batches)
    return Measurement(
        cpu_seconds=cpu,
        moto_cpu_seconds=moto_cpu,
        replayed_cpu_seconds=replayed_cpu,
        wall_seconds=wall,
        messages=messages,
        deliveries=messages * deliveries_per_message,
    )


def _replayed(
    build: Callable[[Consumers], Handle],
    replayed: Consumers,
    tools: Tools,
    recorded: Sequence[Any],
    warmup: Batch,
    batches: Sequence[Batch],
    context: Any,
) -> float:
    """The client CPU of one replay of the recorded run, on a freshly built consumer."""
    tools.replayer.load(recorded)
    replay = build(replayed)
    _check(replay(warmup, context))
    cpu, _ = _timed(replay, batches, context)
    if not tools.replayer.exhausted:
        raise RuntimeError("the replayed run made fewer requests than the recorded one")
    return cpu


def count(
    handle: Handle,
    warmup: Batch,
    batches: Sequence[Batch],
    deliveries_per_message: int,
    meter: AwsMeter,
    clock: VirtualClock,
) -> Counted:
    """The DynamoDB requests and units of one consumer over the batches (a separate, untimed pass)."""
    context = LocalLambdaContext("bench-consumer", FUNCTION_TIMEOUT, clock)
    _check(handle(warmup, context))
    meter.reset()
    for batch in batches:
        _check(handle(batch, context))
    messages = sum(len(batch["Records"]) for batch in batches)
    return Counted(
        messages=messages,
        deliveries=messages * deliveries_per_message,
        dynamodb=meter.total(lambda _a, service, _o: service == "dynamodb"),
        by_operation={row["operation"]: int(row["requests"]) for row in meter.rows() if row["service"] == "dynamodb"},
    )


def count_out_of_order(
    consumers: Consumers, sqs: Any, warmup: Batch, batches: Sequence[Batch], meter: AwsMeter, clock: VirtualClock
) -> dict[str, float]:
    """What an ordered subscription spends per event when some arrive before their predecessor: the events of
    the in-order runs, each tenant's consecutive pairs swapped (seq 2 before 1, 4 before 3, ...), sent to one
    FIFO queue and received from it in batches, as Lambda would; the consumer's wake-ups go to the same
    queue, behind the tenant's other messages, and are received in their turn until the queue is empty. One
    subscription, whose handler writes one item. Counted, not timed."""
    context = LocalLambdaContext("bench-consumer", FUNCTION_TIMEOUT, clock)
    handle = consumers.ours(Scenario(1, True), ordered=True)
    _check(handle(warmup, context))
    queue = consumers.wake_queue
    records = _swapped_per_tenant([record for batch in batches for record in batch["Records"]])
    for n, record in enumerate(records):
        group = record["attributes"]["MessageGroupId"]
        sqs.send_message(
            QueueUrl=queue, MessageBody=record["body"], MessageGroupId=group, MessageDeduplicationId=f"ooo-{n}"
        )
    meter.reset()
    received, arn = 0, aws.queue_arn(sqs, queue)
    while batch := aws.lambda_records(sqs, queue, arn):
        received += len(batch)
        _check(handle({"Records": batch}, context))
        sqs.delete_message_batch(
            QueueUrl=queue, Entries=[{"Id": str(i), "ReceiptHandle": r["receiptHandle"]} for i, r in enumerate(batch)]
        )
    usage = meter.total(lambda _a, service, _o: service == "dynamodb")
    events = len(records)
    return {
        "events": events,
        "deliveries_per_event": received / events,
        "dynamodb_requests_per_event": usage.requests / events,
        "write_units_per_event": usage.write_units / events,
        "read_units_per_event": usage.read_units / events,
    }


def _swapped_per_tenant(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``records`` with each tenant's consecutive pairs in reverse order, at the same positions."""
    positions: dict[str, list[int]] = {}
    for index, record in enumerate(records):
        positions.setdefault(record["attributes"]["MessageGroupId"], []).append(index)
    swapped = list(records)
    for indexes in positions.values():
        for first, second in zip(indexes[0::2], indexes[1::2], strict=False):
            swapped[first], swapped[second] = records[second], records[first]
    return swapped


def _check(response: Any) -> None:
    if response and response.get("batchItemFailures"):
        raise RuntimeError(f"a benchmark batch failed: {response['batchItemFailures']}")


def _per_message(measurements: Sequence[Measurement], attribute: str) -> Summary:
    return summary([getattr(m, attribute) / m.messages * 1000 for m in measurements])


def describe(measurements: Sequence[Measurement], counted: Counted) -> dict[str, Any]:
    return {
        "cpu_ms_per_message": _per_message(measurements, "cpu_seconds"),
        "client_cpu_ms_per_message": _per_message(measurements, "client_cpu_seconds"),
        "replayed_cpu_ms_per_message": _per_message(measurements, "replayed_cpu_seconds"),
        "moto_cpu_ms_per_message": _per_message(measurements, "moto_cpu_seconds"),
        "wall_ms_per_message": _per_message(measurements, "wall_seconds"),
        "messages": counted.messages,
        "deliveries": counted.deliveries,
        "dynamodb_requests_per_message": counted.dynamodb.requests / counted.messages,
        "dynamodb_requests_per_delivery": counted.dynamodb.requests / counted.deliveries,
        "write_units_per_message": counted.dynamodb.write_units / counted.messages,
        "write_units_per_delivery": counted.dynamodb.write_units / counted.deliveries,
        "transactional_write_units_per_delivery": counted.dynamodb.transactional_write_units / counted.deliveries,
        "read_units_per_delivery": counted.dynamodb.read_units / counted.deliveries,
        "requests_by_operation_per_delivery": {
            operation: n / counted.deliveries for operation, n in sorted(counted.by_operation.items())
        },
    }


def cpu_breakdown(batches: Sequence[Batch], admin: Any, tools: Tools, repeat: int = 5) -> dict[str, float]:
    """Client CPU in microseconds of each step, per message or per (event, subscription), with moto's
    answers replayed: parsing a body, and each inbox request against the matching Powertools one."""
    from aws_lambda_powertools.utilities.idempotency import DynamoDBPersistenceLayer, IdempotencyConfig
    from boto3.dynamodb.types import TypeDeserializer

    bodies = [record["body"] for batch in batches for record in batch["Records"]]
    envelopes: list[Envelope] = [parse_body(body) for body in bodies]
    deliveries = [{"event_id": e.id, "subscription": "bench.sub_0", "envelope": e.model_dump()} for e in envelopes]
    deserializer = TypeDeserializer()
    lease = timedelta(seconds=60)
    # Each on the client it runs on: the engine's handler makes its own (outbox.clients), Powertools boto3's default.
    clients = {
        engine: (aws.client("dynamodb", config), aws.client("dynamodb", config))
        for engine, config in ((True, ENGINE_CLIENT_CONFIG), (False, None))
    }
    for recording, replaying in clients.values():
        tools.recorder.attach(recording.meta.events)
        tools.replayer.attach(replaying.meta.events)
    config = IdempotencyConfig(event_key_jmespath="[event_id, subscription]")

    def replayed(
        work: Callable[[Any, str], Callable[[], object]], prefix: str, key: tuple[str, str | None], engine: bool
    ) -> float:
        """Microseconds per item of ``work`` on the replaying client, after one recorded run on moto."""
        recording, replaying = clients[engine]
        best = float("inf")
        for attempt in range(repeat):
            table = f"{prefix}-breakdown-{attempt}"
            aws.create_table(admin, table, key=key)
            tools.recorder.start()
            work(recording, table)()
            tools.replayer.load(tools.recorder.stop())
            run = work(replaying, table)
            gc.collect()
            cpu = time.process_time()
            run()
            best = min(best, time.process_time() - cpu)
        return best / len(envelopes) * 1e6

    def claim_and_complete(client: Any, table: str) -> Callable[[], object]:
        inbox = Inbox(table, client=client, max_attempts=MAX_ATTEMPTS)

        def run() -> None:
            for envelope in envelopes:
                result = inbox.claim(envelope, "bench.sub_0", lease)
                assert result.claim is not None
                inbox.mark_completed(result.claim)

        return run

    def claim_only(client: Any, table: str) -> Callable[[], object]:
        inbox = Inbox(table, client=client, max_attempts=MAX_ATTEMPTS)
        return lambda: [inbox.claim(envelope, "bench.sub_0", lease) for envelope in envelopes]

    def persistence(client: Any, table: str, complete: bool) -> Callable[[], object]:
        layer = DynamoDBPersistenceLayer(table_name=table, boto3_client=client)
        layer.configure(config, function_name="bench.run_subscription")

        def run() -> None:
            for delivery in deliveries:
                layer.save_inprogress(data=delivery, remaining_time_in_millis=60_000)
                if complete:
                    layer.save_success(data=delivery, result={})

        return run

    def per_item(work: Callable[[], object], count: int) -> float:
        return min(timeit.repeat(work, number=1, repeat=repeat)) / count * 1e6

    claim = replayed(claim_only, "claims", ("pk", "sk"), engine=True)
    claim_complete = replayed(claim_and_complete, "completions", ("pk", "sk"), engine=True)
    inprogress = replayed(lambda c, t: persistence(c, t, complete=False), "inprogress", PERSISTENCE_KEY, engine=False)
    both = replayed(lambda c, t: persistence(c, t, complete=True), "success", PERSISTENCE_KEY, engine=False)
    return {
        "ours_parse_body_us_per_message": per_item(lambda: [parse_body(b) for b in bodies], len(bodies)),
        "ours_of_which_hash_check_us": per_item(lambda: [e.computed_hash() for e in envelopes], len(envelopes)),
        "baseline_parse_us_per_message": per_item(
            lambda: [{k: deserializer.deserialize(v) for k, v in json.loads(b).items()} for b in bodies], len(bodies)
        ),
        "ours_claim_us": claim,
        "ours_of_which_envelope_digest_us": per_item(lambda: [envelope_digest(e) for e in envelopes], len(bodies)),
        "ours_mark_completed_us": claim_complete - claim,
        "baseline_save_inprogress_us": inprogress,
        "baseline_save_success_us": both - inprogress,
    }


def run(
    repetitions: int = 5, batches: int = 5, batch_size: int = 10, catalog_sizes: tuple[int, int] = (10, 1000)
) -> dict[str, Any]:
    with aws.moto(fixes=True) as clock, MotoMeter() as moto:
        admin, sqs = aws.client("dynamodb"), aws.client("sqs")
        timed, replayed, metered = aws.client("dynamodb"), aws.client("dynamodb"), aws.client("dynamodb")
        # The engine's consumer runs on the client its handler makes (outbox.clients), Powertools on boto3's default.
        engine_timed, engine_replayed = (aws.client("dynamodb", config=ENGINE_CLIENT_CONFIG) for _ in range(2))
        tools = Tools(clock, moto, ResponseRecorder(), ResponseReplayer())
        for client in (timed, engine_timed):
            tools.recorder.attach(client.meta.events)
        for client in (replayed, engine_replayed):
            tools.replayer.attach(client.meta.events)
        meter = AwsMeter.on_moto()
        meter.attach(metered.meta.events)
        all_batches = make_batches(admin, sqs, (batches + 1) * batch_size, batch_size)
        warmup, measured = all_batches[0], all_batches[1:]
        on_moto = Consumers(timed, admin, engine=engine_timed, sqs=sqs)
        on_replay = Consumers(replayed, admin, engine=engine_replayed, sqs=sqs)
        counting = Consumers(metered, admin, sqs=sqs)
        results: dict[Scenario, dict[str, list[Measurement]]] = {
            s: {name: [] for name in IMPLEMENTATIONS} for s in SCENARIOS
        }
        catalog: dict[int, list[Measurement]] = {size: [] for size in catalog_sizes}
        for repetition in range(repetitions):
            for scenario in SCENARIOS:
                # Each implementation goes first in turn: no one is always measured on a warmer process.
                shift = repetition % len(IMPLEMENTATIONS)
                for implementation in IMPLEMENTATIONS[shift:] + IMPLEMENTATIONS[:shift]:
                    build = _builder(scenario, implementation)
                    results[scenario][implementation].append(
                        measure(build, on_moto, on_replay, tools, warmup, measured, scenario.subscriptions)
                    )
            sizes = catalog_sizes if repetition % 2 == 0 else tuple(reversed(catalog_sizes))
            for size in sizes:
                build = _builder(Scenario(1, False), "ours", catalog_size=size)
                catalog[size].append(measure(build, on_moto, on_replay, tools, warmup, measured, 1))
        moto_by_operation = moto.by_operation()
        counts = {
            (scenario, implementation): count(
                _builder(scenario, implementation)(counting), warmup, measured, scenario.subscriptions, meter, clock
            )
            for scenario in SCENARIOS
            for implementation in IMPLEMENTATIONS
        }
        catalog_counts = {
            size: count(_builder(Scenario(1, False), "ours", size)(counting), warmup, measured, 1, meter, clock)
            for size in catalog_sizes
        }
        breakdown = cpu_breakdown(measured, admin, tools)
        tracing_cost = measure_tracing(repetitions, on_moto, on_replay, tools, warmup, measured)
        out_of_order = count_out_of_order(counting, sqs, warmup, measured, meter, clock)
    small, large = catalog_sizes

    def ratio(runs: dict[str, list[Measurement]], attribute: str, ours: str = "ours") -> Summary:
        return ratios([getattr(m, attribute) for m in runs[ours]], [getattr(m, attribute) for m in runs["baseline"]])

    return {
        "aws_fixes": True,
        "repetitions": repetitions,
        "batch_size": batch_size,
        "batches": len(measured),
        "messages": sum(len(batch["Records"]) for batch in measured),
        "scenarios": [
            {
                "label": scenario.label,
                "subscriptions": scenario.subscriptions,
                "effect_write": scenario.effect_write,
                "ours": describe(runs["ours"], counts[(scenario, "ours")]),
                "baseline": describe(runs["baseline"], counts[(scenario, "baseline")]),
                "direct": describe(runs["direct"], counts[(scenario, "direct")]),
                "cpu_ratio": ratio(runs, "cpu_seconds"),
                "client_cpu_ratio": ratio(runs, "client_cpu_seconds"),
                "replayed_cpu_ratio": ratio(runs, "replayed_cpu_seconds"),
                "direct_replayed_cpu_ratio": ratio(runs, "replayed_cpu_seconds", ours="direct"),
                "ordered": describe(runs["ordered"], counts[(scenario, "ordered")]),
                # An ordered subscription against the same subscription unordered (the lease path), not Powertools.
                "ordered_replayed_cpu_ratio": ratios(
                    [m.replayed_cpu_seconds for m in runs["ordered"]], [m.replayed_cpu_seconds for m in runs["ours"]]
                ),
                "ordered_direct": describe(runs["ordered_direct"], counts[(scenario, "ordered_direct")]),
                # Ordered DynamoDB-only against the same subscriptions DynamoDB-only and unordered.
                "ordered_direct_replayed_cpu_ratio": ratios(
                    [m.replayed_cpu_seconds for m in runs["ordered_direct"]],
                    [m.replayed_cpu_seconds for m in runs["direct"]],
                ),
            }
            for scenario, runs in results.items()
        ],
        "catalog_scale": {
            "sizes": list(catalog_sizes),
            "replayed_cpu_ms_per_message": {
                str(size): _per_message(catalog[size], "replayed_cpu_seconds") for size in catalog_sizes
            },
            "dynamodb_requests_per_message": {
                str(size): catalog_counts[size].dynamodb.requests / catalog_counts[size].messages
                for size in catalog_sizes
            },
            "replayed_cpu_ratio": ratios(
                [m.replayed_cpu_seconds for m in catalog[large]], [m.replayed_cpu_seconds for m in catalog[small]]
            ),
        },
        "cpu_breakdown_us": breakdown,
        "tracing": tracing_cost,
        "ordered_out_of_order": out_of_order,
        "moto_cpu_ms_by_operation": {
            name: {"requests": t.requests, "cpu_ms_per_request": t.cpu_seconds / t.requests * 1000}
            for name, t in sorted(moto_by_operation.items())
            if t.requests
        },
    }


# How the consumer is traced: OpenTelemetry absent, its API alone (no SDK: no-op spans), its SDK recording.
TRACING_MODES = ("absent", "api", "recording")
TRACED_SCENARIO = Scenario(4, False)


@contextmanager
def traced(mode: str) -> Iterator[None]:
    """The engine's tracing as ``mode`` has it, for the duration."""
    if mode == "absent":
        with tracing.without_open_telemetry():
            yield
        return
    if mode == "api":
        yield
        return
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    class Dropped(InMemorySpanExporter):
        def export(self, spans: Any) -> Any:  # every span built and ended, none kept
            return super().export([])

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(Dropped()))
    tracing.use_tracer_provider(provider)
    try:
        yield
    finally:
        tracing.use_tracer_provider(None)
        provider.shutdown()


def measure_tracing(
    repetitions: int, on_moto: Consumers, on_replay: Consumers, tools: Tools, warmup: Batch, batches: Sequence[Batch]
) -> dict[str, Any]:
    """Client CPU per message of the 4-subscription consumer in each tracing mode, each mode first in turn."""
    runs: dict[str, list[Measurement]] = {mode: [] for mode in TRACING_MODES}
    build = _builder(TRACED_SCENARIO, "ours")
    for repetition in range(repetitions):
        shift = repetition % len(TRACING_MODES)
        for mode in TRACING_MODES[shift:] + TRACING_MODES[:shift]:
            with traced(mode):
                runs[mode].append(measure(build, on_moto, on_replay, tools, warmup, batches, 4))
    absent = [m.replayed_cpu_seconds for m in runs["absent"]]
    return {
        "label": TRACED_SCENARIO.label,
        "modes": list(TRACING_MODES),
        "replayed_cpu_ms_per_message": {mode: _per_message(runs[mode], "replayed_cpu_seconds") for mode in runs},
        "api_ratio": ratios([m.replayed_cpu_seconds for m in runs["api"]], absent),
        "recording_ratio": ratios([m.replayed_cpu_seconds for m in runs["recording"]], absent),
    }


def _builder(scenario: Scenario, implementation: str, catalog_size: int | None = None) -> Callable[[Consumers], Handle]:
    if implementation == "ours":
        return lambda consumers: consumers.ours(scenario, catalog_size)
    if implementation == "direct":
        return lambda consumers: consumers.ours(scenario, catalog_size, effects=Effects.DYNAMODB)
    if implementation == "ordered":
        return lambda consumers: consumers.ours(scenario, catalog_size, ordered=True)
    if implementation == "ordered_direct":
        return lambda consumers: consumers.ours(scenario, catalog_size, effects=Effects.DYNAMODB, ordered=True)
    return lambda consumers: consumers.baseline(scenario)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--repetitions", type=int, default=5)
    parser.add_argument("--batches", type=int, default=5)
    args = parser.parse_args(argv)
    figures = run(repetitions=args.repetitions, batches=args.batches)
    args.out.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
