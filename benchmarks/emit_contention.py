"""4. Emit under contention: one hot tenant, emit with many tenants present, and emit_many's cost.

One tenant, 1, 4 and 16 concurrent writers, each with its own ``EventStore`` and client (as separate Lambda
containers would), each emitting for a fixed time per round: ``emit`` (k = 1 event per call) and ``emit_many``
of k = 5 and 25 events under one head update. Then the same writers with the tenant split into 8 shards
(``acme.0`` ... ``acme.7``, one chosen at random per emit), k = 1. moto runs with the AWS fixes, which make every
DynamoDB request atomic across threads (one lock, as DynamoDB applies each request atomically); a lost race
for the tenant's chain head is then a cancelled transaction, retried by the engine with jittered backoff in
real time. Reported per writers and k: committed events per second, as a ratio to one writer with the same k
and to one writer emitting one event at a time (each ratio taken within one repetition), cancelled
transactions per call, CPU per committed event, and the calls that gave up (ChainHeadContentionError after
five lost races). moto serialises every request behind that lock, and the client work of every writer shares
one interpreter, so 16 writers take turns: the absolute throughput is moto's, not DynamoDB's; the ratios and
the contention figures (retries, gave up) are what carries over.

Also: ``emit_many`` of k events (1, 5, 25) under one head update, its DynamoDB requests and write units per
event, with one writer.

And: emit time with 1 and with 1,000 tenants already present (nothing on the hot path may scale with
them), and what a head cache (``cache_heads=True``) smaller than the number of active tenants costs (one
extra read per emit).
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks import aws
from benchmarks.headless_chain import HeadlessStore, log_is_gapless_and_linked
from benchmarks.metering import AwsMeter
from benchmarks.reference.order_app import sample_payload
from benchmarks.stats import ratios, summary
from outbox import ChainHeadContentionError, EventStore, NewEvent

EVENT_TYPE = "bench.order_paid"
BATCH_SIZES = (1, 5, 25)  # events per call: emit (1), emit_many (5, 25)
WRITERS = (1, 4, 16)  # concurrent writers on the hot tenant
HOT_TENANT = "acme"
SHARDS = 8  # the hot tenant split into acme.0 ... acme.7
_tables = 0


def _fresh_table(admin: Any) -> str:
    global _tables
    _tables += 1
    name = f"events-{_tables}"
    aws.create_table(admin, name, stream=True)
    return name


@dataclass
class Round:
    events: int  # committed
    calls: int  # emit or emit_many calls made, committed or given up
    gave_up: int  # of those, ChainHeadContentionError: the head retries ran out
    wall_seconds: float
    cpu_seconds: float
    cancelled: int  # cancelled transactions: lost races for the head
    table: str = ""


class Writers:
    """One metered DynamoDB client per writer, made and warmed once (its first requests apart) and reused by
    every round, as a warm Lambda container reuses its client."""

    def __init__(self, admin: Any, count: int) -> None:
        self.meter = AwsMeter()  # counts only (no item sizes): cheap enough to leave on while timing
        self.clients: list[Any] = []
        table = _fresh_table(admin)
        for index in range(count):
            client = aws.client("dynamodb")
            self.meter.attach(client.meta.events)
            EventStore(table, client=client, unchecked=True).emit(
                EVENT_TYPE, sample_payload(index), tenant=f"warm-up-{index}", actor="warm-up"
            )
            self.clients.append(client)


def hot_round(
    admin: Any,
    pool: Writers,
    writers: int,
    k: int,
    shards: int,
    seconds: float,
    seed: int,
    store_class: type[EventStore] = EventStore,
) -> Round:
    """``writers`` threads emitting calls of k events for ``seconds`` to one tenant, or to ``shards`` of it."""
    table = _fresh_table(admin)
    tenants = [HOT_TENANT] if shards == 1 else [f"{HOT_TENANT}.{shard}" for shard in range(shards)]
    stores = [store_class(table, client=client, unchecked=True) for client in pool.clients[:writers]]
    for tenant in tenants:  # each tenant's first emit (which also writes its index row) apart
        stores[0].emit(EVENT_TYPE, sample_payload(0), tenant=tenant, actor="warm-up")
    counts = [[0, 0, 0] for _ in range(writers)]  # per writer: events committed, calls, calls given up
    start = threading.Barrier(writers + 1)
    deadline = [0.0]

    def worker(index: int) -> None:
        rng = random.Random(seed * 100 + index)
        store, mine = stores[index], counts[index]
        start.wait()
        first = 0
        while time.perf_counter() < deadline[0]:
            tenant = rng.choice(tenants)
            try:
                if k == 1:
                    store.emit(EVENT_TYPE, sample_payload(first), tenant=tenant, actor=f"writer-{index}")
                else:
                    store.emit_many(batch(k, first), tenant=tenant, actor=f"writer-{index}")
                mine[0] += k
            except ChainHeadContentionError:
                mine[2] += 1
            mine[1] += 1
            first += k

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(writers)]
    for thread in threads:
        thread.start()
    gc.collect()
    pool.meter.reset()
    cpu, wall = time.process_time(), time.perf_counter()
    deadline[0] = wall + seconds
    start.wait()
    for thread in threads:
        thread.join()  # a call under way at the deadline finishes, and counts
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    transactions = pool.meter.total(lambda _a, _s, operation: operation == "TransactWriteItems")
    events, calls, gave_up = (sum(column) for column in zip(*counts, strict=True))
    return Round(events, calls, gave_up, wall, cpu, transactions.errors, table)


def hot_tenant(
    admin: Any, writers: Sequence[int], sizes: Sequence[int], shards: int, seconds: float, repetitions: int
) -> dict[str, Any]:
    """One tenant's ceiling: every (writers, k) on one tenant, then each writer count above one at k = 1 on
    ``shards`` shards of it. The rounds alternate their order, and every ratio is taken within a repetition."""
    cells = [(n, k, 1) for k in sizes for n in writers] + [(n, 1, shards) for n in writers if n > 1]
    found: dict[tuple[int, int, int], list[Round]] = {cell: [] for cell in cells}
    pool = Writers(admin, max(writers))
    for repetition in range(repetitions):
        for cell in cells if repetition % 2 == 0 else list(reversed(cells)):
            n, k, tenants = cell
            found[cell].append(hot_round(admin, pool, n, k, tenants, seconds, seed=repetition))

    def rates(cell: tuple[int, int, int]) -> list[float]:
        return [r.events / r.wall_seconds for r in found[cell]]

    one_writer_one_event = rates((min(writers), 1, 1))
    rows = []
    for cell in cells:
        n, k, tenants = cell
        rounds = found[cell]
        rows.append(
            {
                "writers": n,
                "k": k,
                "tenants": tenants,
                "events_per_second": summary(rates(cell)),
                "ratio_to_one_writer": ratios(rates(cell), rates((min(writers), k, 1))),
                "ratio_to_one_writer_k1": ratios(rates(cell), one_writer_one_event),
                "ratio_to_one_tenant": ratios(rates(cell), rates((n, k, 1))),  # the same writers and k, unsplit
                "retries_per_call": summary([r.cancelled / max(r.calls, 1) for r in rounds]),
                "cpu_ms_per_event": summary([r.cpu_seconds / max(r.events, 1) * 1000 for r in rounds]),
                "events": sum(r.events for r in rounds),
                "calls": sum(r.calls for r in rounds),
                "gave_up": sum(r.gave_up for r in rounds),
            }
        )
    return {
        "tenant": HOT_TENANT,
        "shards": shards,
        "writers": list(writers),
        "sizes": list(sizes),
        "seconds_per_round": seconds,
        "repetitions": repetitions,
        "rounds": rows,
    }


STORES: dict[str, type[EventStore]] = {"head": EventStore, "headless": HeadlessStore}


def headless_chain(admin: Any, writers: Sequence[int], emits: int, seconds: float, repetitions: int) -> dict[str, Any]:
    """The chain without its head row (``benchmarks.headless_chain``) against the engine's, side by side: what
    one emit costs with one writer, and one tenant's rate with each number of writers (k = 1), the two stores'
    rounds alternating, each ratio taken within a repetition; every headless log is checked gapless and linked."""
    cost = {}
    for name, store_class in STORES.items():
        table = _fresh_table(admin)
        client = aws.client("dynamodb")
        meter = AwsMeter.on_moto()
        meter.attach(client.meta.events)
        store = store_class(table, client=client, unchecked=True)
        store.emit(EVENT_TYPE, sample_payload(0), tenant=HOT_TENANT, actor="warm-up")  # its first emit apart
        meter.reset()
        gc.collect()
        cpu = time.process_time()
        for n in range(emits):
            store.emit(EVENT_TYPE, sample_payload(n), tenant=HOT_TENANT, actor="bench")
        cpu = time.process_time() - cpu
        usage = meter.total(lambda _a, service, _o: service == "dynamodb")
        cost[name] = {
            "requests_per_event": usage.requests / emits,
            "write_units_per_event": usage.write_units / emits,
            "read_units_per_event": usage.read_units / emits,
            "cpu_ms_per_event": cpu / emits * 1000,
        }
    pool = Writers(admin, max(writers))
    found: dict[tuple[str, int], list[Round]] = {(name, n): [] for name in STORES for n in writers}
    intact = True
    for repetition in range(repetitions):
        names = list(STORES) if repetition % 2 == 0 else list(reversed(STORES))
        for n in writers:
            for name in names:
                played = hot_round(admin, pool, n, 1, 1, seconds, seed=repetition, store_class=STORES[name])
                found[(name, n)].append(played)
                if name == "headless":
                    intact = intact and log_is_gapless_and_linked(admin, played.table, HOT_TENANT)

    def rates(name: str, n: int) -> list[float]:
        return [r.events / r.wall_seconds for r in found[(name, n)]]

    rows = [
        {
            "store": name,
            "writers": n,
            "events_per_second": summary(rates(name, n)),
            "ratio_to_head": ratios(rates(name, n), rates("head", n)),
            "retries_per_call": summary([r.cancelled / max(r.calls, 1) for r in found[(name, n)]]),
            "calls": sum(r.calls for r in found[(name, n)]),
            "gave_up": sum(r.gave_up for r in found[(name, n)]),
        }
        for n in writers
        for name in STORES
    ]
    return {"emits": emits, "cost": cost, "rounds": rows, "headless_logs_intact": intact}


def batch(k: int, first: int = 0) -> list[NewEvent]:
    return [NewEvent(EVENT_TYPE, sample_payload(first + n)) for n in range(k)]


def batch_cost(admin: Any, sizes: Sequence[int], events: int) -> dict[str, Any]:
    """Requests, write units and CPU per event of ``emit_many`` with k events, on one tenant."""
    found = {}
    for k in sizes:
        table = _fresh_table(admin)
        client = aws.client("dynamodb")
        meter = AwsMeter.on_moto()
        meter.attach(client.meta.events)
        store = EventStore(table, client=client, unchecked=True)
        store.emit(EVENT_TYPE, sample_payload(0), tenant="acme", actor="warm-up")  # the tenant's first emit apart
        meter.reset()
        gc.collect()
        cpu = time.process_time()
        for first in range(0, events, k):
            store.emit_many(batch(k, first), tenant="acme", actor="bench")
        cpu = time.process_time() - cpu
        usage = meter.total(lambda _a, service, _o: service == "dynamodb")
        committed = events // k * k
        found[str(k)] = {
            "events": committed,
            "requests_per_event": usage.requests / committed,
            "write_units_per_event": usage.write_units / committed,
            "cpu_ms_per_event": cpu / committed * 1000,
        }
    return {"sizes": list(sizes), "by_size": found}


def seed_tenants(store: EventStore, count: int) -> list[str]:
    names = [f"tenant-{i:04d}" for i in range(count)]
    for n, tenant in enumerate(names):
        store.emit(EVENT_TYPE, sample_payload(n), tenant=tenant, actor="seed")
    return names


def timed_emits(store: EventStore, tenants: Sequence[str], emits: int) -> tuple[float, float]:
    """CPU and wall seconds per emit, round-robin over ``tenants``."""
    gc.collect()
    cpu, wall = time.process_time(), time.perf_counter()
    for n in range(emits):
        store.emit(EVENT_TYPE, sample_payload(n), tenant=tenants[n % len(tenants)], actor="bench")
    return (time.process_time() - cpu) / emits, (time.perf_counter() - wall) / emits


def tenant_scale(admin: Any, present: Sequence[int], emits: int, repetitions: int) -> dict[str, Any]:
    """Emit to one tenant of a table that holds 1 or 1,000 tenants (each with a chain)."""
    tables = {}
    for count in present:
        table = _fresh_table(admin)
        tables[count] = (table, seed_tenants(EventStore(table, client=admin, unchecked=True), count))
    cpu: dict[int, list[float]] = {count: [] for count in present}
    wall: dict[int, list[float]] = {count: [] for count in present}
    for repetition in range(repetitions):
        for count in present if repetition % 2 == 0 else list(reversed(present)):
            table, names = tables[count]
            store = EventStore(table, client=aws.client("dynamodb"), unchecked=True)
            store.emit(EVENT_TYPE, sample_payload(0), tenant=names[0], actor="warm-up")  # reads the head once
            per_emit_cpu, per_emit_wall = timed_emits(store, names[:1], emits)
            cpu[count].append(per_emit_cpu)
            wall[count].append(per_emit_wall)
    small, large = present
    return {
        "tenants_present": list(present),
        "emits": emits,
        "cpu_ms_per_emit": {str(c): summary([v * 1000 for v in cpu[c]]) for c in present},
        "wall_ms_per_emit": {str(c): summary([v * 1000 for v in wall[c]]) for c in present},
        "cpu_ratio": ratios(cpu[large], cpu[small]),
    }


def head_cache_cliff(admin: Any, cache_size: int, active: Sequence[int], emits: int) -> dict[str, Any]:
    """Requests per emit when a store's active tenants fit its head cache, and when they do not."""
    results = {}
    for count in active:
        table = _fresh_table(admin)
        names = seed_tenants(EventStore(table, client=admin, unchecked=True), count)
        client = aws.client("dynamodb")
        meter = AwsMeter()
        meter.attach(client.meta.events)
        # The cache is off by default (several writers make it stale): the cliff is that of a store that opts in.
        store = EventStore(table, client=client, cache_heads=True, head_cache_size=cache_size, unchecked=True)
        for tenant in names:  # one pass to warm the cache as far as it holds
            store.emit(EVENT_TYPE, sample_payload(0), tenant=tenant, actor="warm-up")
        meter.reset()
        timed_emits(store, names, emits)
        usage = meter.total()
        results[str(count)] = {
            "requests_per_emit": usage.requests / emits,
            "head_reads_per_emit": meter.total(lambda _a, _s, op: op == "GetItem").requests / emits,
        }
    return {"head_cache_size": cache_size, "active_tenants": results}


def run(seconds: float = 1.0, repetitions: int = 3) -> dict[str, Any]:
    with aws.moto(fixes=True):
        admin = aws.client("dynamodb")
        hot = hot_tenant(admin, WRITERS, BATCH_SIZES, SHARDS, seconds=seconds, repetitions=repetitions)
        scale = tenant_scale(admin, (1, 1000), emits=100, repetitions=repetitions)
        cliff = head_cache_cliff(admin, cache_size=32, active=(16, 64), emits=128)
        cost = batch_cost(admin, BATCH_SIZES, events=100)
        headless = headless_chain(admin, WRITERS, emits=100, seconds=seconds, repetitions=repetitions)
    return {
        "aws_fixes": True,
        "repetitions": repetitions,
        "hot_tenant": hot,
        "tenant_scale": scale,
        "head_cache": cliff,
        "batches": cost,
        "headless": headless,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=1.0, help="how long the writers of each hot-tenant round emit")
    args = parser.parse_args(argv)
    figures = run(seconds=args.seconds, repetitions=args.repetitions)
    args.out.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
