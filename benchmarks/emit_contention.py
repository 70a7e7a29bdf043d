"""4. Emit under contention, and emit with many tenants present.

Threads call ``emit()`` at once, each with its own ``EventStore`` and client (as separate Lambda containers
would), on one tenant and spread over 8 tenants. moto runs with the AWS fixes, which make every DynamoDB
request atomic across threads (one lock, as DynamoDB applies each request atomically); a lost race for
the tenant's chain head is then a cancelled transaction, retried by the engine with jittered backoff in
real time. Reported: throughput, CPU per emit, and how many transaction attempts, retries and head reads
each committed emit took. moto serialises every request behind that lock, so the absolute throughput is
moto's, not DynamoDB's: the contention figures (retries) are what carries over.

Also: ``emit_many`` of k events (1, 5, 25) under one head update, its DynamoDB requests and write units per
event, and the ceiling of one tenant with N concurrent writers of batches of k, as events per second relative to
one writer emitting one event at a time.

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
from benchmarks.metering import AwsMeter
from benchmarks.reference.order_app import sample_payload
from benchmarks.stats import ratios, summary
from outbox import ChainHeadContentionError, EventStore, NewEvent

EVENT_TYPE = "bench.order_paid"
BATCH_SIZES = (1, 5, 25)  # events per emit_many
_tables = 0


def _fresh_table(admin: Any) -> str:
    global _tables
    _tables += 1
    name = f"events-{_tables}"
    aws.create_table(admin, name, stream=True)
    return name


@dataclass
class Round:
    committed: int
    gave_up: int  # ChainHeadContentionError: the head retries ran out
    wall_seconds: float
    cpu_seconds: float
    transactions: int
    cancelled: int
    head_reads: int


def contend(admin: Any, threads: int, tenants: int, emits: int, seed: int) -> Round:
    table = _fresh_table(admin)
    tenant_names = [f"tenant-{i}" for i in range(tenants)]
    meter = AwsMeter()  # counts only (no item sizes): cheap enough to leave on while timing
    stores = []
    for _ in range(threads):
        client = aws.client("dynamodb")
        meter.attach(client.meta.events)
        stores.append(EventStore(table, client=client))
    per_thread = emits // threads
    outcomes = {"committed": 0, "gave_up": 0}
    lock = threading.Lock()
    start = threading.Barrier(threads + 1)

    def worker(index: int) -> None:
        rng = random.Random(seed * 100 + index)
        store = stores[index]
        start.wait()
        for n in range(per_thread):
            try:
                store.emit(EVENT_TYPE, sample_payload(n), tenant=rng.choice(tenant_names), actor=f"thread-{index}")
                outcome = "committed"
            except ChainHeadContentionError:
                outcome = "gave_up"
            with lock:
                outcomes[outcome] += 1

    workers = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for worker_thread in workers:
        worker_thread.start()
    gc.collect()
    cpu, wall = time.process_time(), time.perf_counter()
    start.wait()
    for worker_thread in workers:
        worker_thread.join()
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    transactions = meter.total(lambda _a, _s, operation: operation == "TransactWriteItems")
    reads = meter.total(lambda _a, _s, operation: operation == "GetItem")
    return Round(
        committed=outcomes["committed"],
        gave_up=outcomes["gave_up"],
        wall_seconds=wall,
        cpu_seconds=cpu,
        transactions=transactions.requests,
        cancelled=transactions.errors,
        head_reads=reads.requests,
    )


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
        store = EventStore(table, client=client)
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


def batch_ceiling(admin: Any, sizes: Sequence[int], writers: Sequence[int], events: int, repetitions: int) -> Any:
    """One tenant, N writers each emitting batches of k: committed events per second, and that as a ratio to one
    writer emitting one event at a time, measured in the same repetition."""
    rates: dict[tuple[int, int], list[float]] = {(n, k): [] for n in writers for k in sizes}
    retries: dict[tuple[int, int], list[float]] = {key: [] for key in rates}
    for repetition in range(repetitions):
        for key in rates if repetition % 2 == 0 else list(reversed(list(rates))):
            threads, k = key
            committed, wall, cancelled, batches = _batched_round(admin, threads, k, events)
            rates[key].append(committed / wall)
            retries[key].append(cancelled / max(batches, 1))
    one = rates[(min(writers), min(sizes))]
    return {
        "writers": list(writers),
        "sizes": list(sizes),
        "events_per_round": events,
        "rounds": [
            {
                "writers": threads,
                "k": k,
                "events_per_second": summary(rates[(threads, k)]),
                "retries_per_batch": summary(retries[(threads, k)]),
                "ratio_to_one_writer": ratios(rates[(threads, k)], one),
            }
            for threads, k in sorted(rates)
        ],
    }


def _batched_round(admin: Any, threads: int, k: int, events: int) -> tuple[int, float, int, int]:
    table = _fresh_table(admin)
    meter = AwsMeter()
    stores = []
    for _ in range(threads):
        client = aws.client("dynamodb")
        meter.attach(client.meta.events)
        stores.append(EventStore(table, client=client))
    per_thread = max(events // threads // k, 1)
    committed = [0] * threads
    start = threading.Barrier(threads + 1)

    def worker(index: int) -> None:
        start.wait()
        for n in range(per_thread):
            try:
                stores[index].emit_many(batch(k, n * k), tenant="acme", actor=f"thread-{index}")
                committed[index] += k
            except ChainHeadContentionError:
                pass

    workers = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for worker_thread in workers:
        worker_thread.start()
    wall = time.perf_counter()
    start.wait()
    for worker_thread in workers:
        worker_thread.join()
    wall = time.perf_counter() - wall
    transactions = meter.total(lambda _a, _s, operation: operation == "TransactWriteItems")
    return sum(committed), wall, transactions.errors, transactions.requests


def describe(rounds: Sequence[Round]) -> dict[str, Any]:
    return {
        "emits_per_second": summary([r.committed / r.wall_seconds for r in rounds]),
        "cpu_ms_per_emit": summary([r.cpu_seconds / max(r.committed, 1) * 1000 for r in rounds]),
        "transactions_per_emit": summary([r.transactions / max(r.committed, 1) for r in rounds]),
        "retries_per_emit": summary([r.cancelled / max(r.committed, 1) for r in rounds]),
        "head_reads_per_emit": summary([r.head_reads / max(r.committed, 1) for r in rounds]),
        "gave_up": sum(r.gave_up for r in rounds),
        "committed": sum(r.committed for r in rounds),
    }


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
        tables[count] = (table, seed_tenants(EventStore(table, client=admin), count))
    cpu: dict[int, list[float]] = {count: [] for count in present}
    wall: dict[int, list[float]] = {count: [] for count in present}
    for repetition in range(repetitions):
        for count in present if repetition % 2 == 0 else list(reversed(present)):
            table, names = tables[count]
            store = EventStore(table, client=aws.client("dynamodb"))
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
        names = seed_tenants(EventStore(table, client=admin), count)
        client = aws.client("dynamodb")
        meter = AwsMeter()
        meter.attach(client.meta.events)
        # The cache is off by default (several writers make it stale): the cliff is that of a store that opts in.
        store = EventStore(table, client=client, cache_heads=True, head_cache_size=cache_size)
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


def run(
    thread_counts: Sequence[int] = (1, 2, 4, 8),
    tenant_counts: Sequence[int] = (1, 8),
    emits: int = 96,
    repetitions: int = 3,
) -> dict[str, Any]:
    with aws.moto(fixes=True):
        admin = aws.client("dynamodb")
        rounds: dict[tuple[int, int], list[Round]] = {(t, n): [] for n in tenant_counts for t in thread_counts}
        for repetition in range(repetitions):
            for key in rounds if repetition % 2 == 0 else list(reversed(list(rounds))):
                threads, tenants = key
                rounds[key].append(contend(admin, threads, tenants, emits, seed=repetition))
        scale = tenant_scale(admin, (1, 1000), emits=100, repetitions=repetitions)
        cliff = head_cache_cliff(admin, cache_size=32, active=(16, 64), emits=128)
        cost = batch_cost(admin, BATCH_SIZES, events=100)
        ceiling = batch_ceiling(admin, BATCH_SIZES, (1, 4), events=max(emits, 100), repetitions=repetitions)
    return {
        "aws_fixes": True,
        "emits_per_round": emits,
        "repetitions": repetitions,
        "contention": [
            {"threads": threads, "tenants": tenants, **describe(found)}
            for (threads, tenants), found in sorted(rounds.items(), key=lambda item: (item[0][1], item[0][0]))
        ],
        "tenant_scale": scale,
        "head_cache": cliff,
        "batches": {**cost, "ceiling": ceiling},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--emits", type=int, default=96)
    args = parser.parse_args(argv)
    figures = run(emits=args.emits, repetitions=args.repetitions)
    args.out.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
