"""2. Cost per event: every AWS request of a local run through the whole local runtime, counted.

The runtime boots from the synthesized assembly (as ``make demo`` does) and runs the example
application's happy path: orders placed and paid, each payment fanning out to four durable subscriptions,
one of which emits a follow-up event. Every boto3 client of the run (the application's, the pipes' and
event source mappings', and the functions' own, created inside their handlers) comes from the default
session, on whose event emitter ``AwsMeter`` is attached before anything starts; every request is
attributed to who made it (the application, a pipe, an event source mapping, a function). Function time
is measured around each invocation.

Two cadences: "trickle" steps the pipeline after every order (small batches, as under light traffic) and
"burst" emits a block of orders before draining (full batches of 10). GetRecords and ReceiveMessage calls
that return nothing are an artefact of how often the local runtime polls; they are counted apart and
left out of the per-event cost (AWS's pollers have a fixed idle cost instead, see RESULTS.md).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.assembly import ASSEMBLY_DIR, STACK_NAME
from benchmarks.metering import AwsMeter, MotoMeter, Usage, WriteClassifier, acting_as
from modules import build_catalog
from modules.commerce import Commerce
from modules.services import Services
from outbox import Lane
from outbox.local.runtime import LocalRuntime
from outbox.workflows.emits import STEP_PARTITION_PREFIX
from outbox.workflows.handoffs import RUNNING_PARTITION_PREFIX

TENANTS = ("acme", "globex", "initech", "umbrella")


def order_and_payment(store: Any, commerce: Commerce, n: int) -> None:
    """The workload every end-to-end benchmark drives: one order and its payment, tenants in turn."""
    tenant = TENANTS[n % len(TENANTS)]
    commerce.place_order(
        store,
        tenant=tenant,
        actor="bench",
        order_id=f"order-{n}",
        buyer_email=f"buyer-{n}@example.com",
        items=[{"sku": "pet-tag", "quantity": 2, "unit_price_cents": 750}],
    )
    commerce.complete_payment(
        store,
        tenant=tenant,
        actor="bench",
        order_id=f"order-{n}",
        payment_id=f"pay-{n}",
        amount_cents=1500,
        pet_tag_id=f"tag-{n}",
        shipping_address=f"{n} Main Street",
    )


VERIFY = "verification"


def short_name(logical_id: str) -> str:
    """``RelayPipe0DACAD41`` -> ``RelayPipe``: the logical id without CDK's hash."""
    return re.sub(r"[0-9A-F]{8}$", "", logical_id)


def write_classifier(runtime: LocalRuntime) -> WriteClassifier:
    """What an item written by the run is, by the table it is in (as the runtime named it) and its key."""
    events, inbox = runtime.output("EventsTableName"), runtime.output("InboxTableName")

    def classify(table: str, key: Mapping[str, Any]) -> str:
        partition = str(next(iter(key.get("pk", {}).values()), ""))
        if table == events:
            if partition.endswith("#HEAD"):
                return "chain head"
            if partition.endswith("#EVENT"):
                return "event row"
            if partition.startswith("TENANTS#"):
                return "tenant index"
            return "events table, other"
        if table == inbox:
            if partition.startswith("CLAIM#"):
                return "inbox claim row"
            if "#ORDER#" in partition:
                return "order row (watermark, deferrals)"
            if partition.startswith(RUNNING_PARTITION_PREFIX):  # the WORKFLOW lane's: put with a hand-off
                return "workflow running row"
            if partition.startswith(STEP_PARTITION_PREFIX):  # what makes a workflow step's emit once
                return "workflow emit row"
            return "inbox, other"
        return "application data"

    return classify


def actors(runtime: LocalRuntime) -> dict[str, Any]:
    """The meter's actor names of the durable consumer and of the record-change lane's three parts."""
    record_function = runtime.output("RecordChangeConsumerFunctionName")
    (record_mapping,) = [name for name, mapping in runtime.mappings.items() if mapping.function_name == record_function]
    record_pipe = runtime.stack.output_reference("RecordChangePipeName").logical_id
    return {
        "durable_consumer": f"λ:{short_name(runtime.output('DurableConsumerFunctionName'))}",
        "record_change_lane": {
            "pipe": f"pipe:{short_name(record_pipe)}",
            "mapping": f"esm:{short_name(record_mapping)}",
            "function": f"λ:{short_name(record_function)}",
        },
    }


@dataclass
class FunctionTime:
    invocations: int = 0
    wall_seconds: float = 0.0
    billed_ms: int = 0  # Lambda bills each invocation rounded up to the millisecond
    moto_wall_seconds: float = 0.0  # moto answering the function's requests, inside that time
    memory_mb: int = 0


@dataclass
class Instruments:
    meter: AwsMeter
    moto: MotoMeter
    functions: dict[str, FunctionTime] = field(default_factory=lambda: defaultdict(FunctionTime))


def instrument(runtime: LocalRuntime, instruments: Instruments) -> None:
    """Attribute each pipe's, mapping's and function's requests to it, and time every invocation."""
    for name, pipe in runtime.pipes.items():
        pipe.poll = _acting(f"pipe:{short_name(name)}", pipe.poll)  # type: ignore[method-assign]
    for name, mapping in runtime.mappings.items():
        mapping.poll = _acting(f"esm:{short_name(name)}", mapping.poll)  # type: ignore[method-assign]
    for name, function in runtime.functions.items():
        label = f"λ:{short_name(name)}"
        memory = runtime.stack.functions[name].memory_mb
        # Every function is in the figures, a function never invoked with zeros: the record-change consumer,
        # say, when no row the pipe carries changed.
        instruments.functions[label].memory_mb = memory
        original = function.invoke
        function.invoke = _timed(  # type: ignore[method-assign]
            label, original, instruments, memory
        )
        # A mapping holds its function's invoke from when the runtime started (outbox.local.runtime): it calls
        # the timed one from now on.
        for mapping in runtime.mappings.values():
            if mapping.handler == original:
                mapping.handler = function.invoke


def _acting(actor: str, poll: Callable[[], Any]) -> Callable[[], Any]:
    def wrapped() -> Any:
        with acting_as(actor):
            return poll()

    return wrapped


def _timed(label: str, invoke: Callable[..., Any], instruments: Instruments, memory_mb: int) -> Callable[..., Any]:
    def wrapped(event: dict[str, Any], context: Any = None) -> Any:
        moto_before = instruments.moto.total.wall_seconds
        start = time.perf_counter()
        try:
            with acting_as(label):
                return invoke(event, context)
        finally:
            elapsed = time.perf_counter() - start
            record = instruments.functions[label]
            record.invocations += 1
            record.wall_seconds += elapsed
            record.billed_ms += math.ceil(elapsed * 1000)
            record.moto_wall_seconds += instruments.moto.total.wall_seconds - moto_before
            record.memory_mb = memory_mb

    return wrapped


@contextmanager
def metered() -> Iterator[AwsMeter]:
    """Every client made inside the block (the runtime's, the application's, the functions') is metered."""
    meter = AwsMeter.on_moto()
    with meter.everywhere():
        yield meter


def run_workload(runtime: LocalRuntime, orders: int, cadence: str) -> Counter[str]:
    data_table = runtime.output("DataTableName")
    store = runtime.event_store(catalog=build_catalog(data_table=data_table, services=Services.fakes()))
    commerce = Commerce(data_table, Services.fakes())
    emitted: Counter[str] = Counter()
    block = 1 if cadence == "trickle" else 25
    for n in range(orders):
        order_and_payment(store, commerce, n)
        emitted.update({"order.created": 1, "payment.completed": 1})
        if (n + 1) % block == 0:
            if cadence == "trickle":
                runtime.step()
            else:
                runtime.run_until_idle()
    runtime.run_until_idle()
    return emitted


def verify(runtime: LocalRuntime) -> dict[str, int]:
    """Read back what the run produced: events per type, and completed claims per subscription."""
    catalog = build_catalog(data_table=runtime.output("DataTableName"), services=Services.fakes())
    store = runtime.event_store(catalog=catalog)
    dynamodb, inbox = runtime.client("dynamodb"), runtime.output("InboxTableName")
    events: Counter[str] = Counter()
    pairs = completed = 0
    for tenant in TENANTS:
        for envelope in store.events(tenant):
            events[envelope.type] += 1
            # The pairs the durable consumer runs: DURABLE ones, and WORKFLOW ones (completed by their execution's end)
            pairs += len(catalog.registry.matching(envelope.type, Lane.DURABLE))
            pairs += len(catalog.registry.matching(envelope.type, Lane.WORKFLOW))
    paginator = dynamodb.get_paginator("scan")
    for page in paginator.paginate(
        TableName=inbox,
        FilterExpression="#s = :completed",
        ExpressionAttributeNames={"#s": "status"},
        ExpressionAttributeValues={":completed": {"S": "COMPLETED"}},
    ):
        completed += page["Count"]
    return {"events": sum(events.values()), "pairs": pairs, "completed": completed, **events}


def summarise(instruments: Instruments, events: int, pairs: int, named: Mapping[str, Any]) -> dict[str, Any]:
    meter = instruments.meter

    def total(predicate: Callable[[str, str, str], bool]) -> Usage:
        return meter.total(lambda actor, service, operation: actor != VERIFY and predicate(actor, service, operation))

    actors = sorted({actor for actor, _, _ in meter.usage if actor != VERIFY})
    by_actor = {}
    for actor in actors:
        usage = meter.total(_made_by(actor))
        by_actor[actor] = {
            "requests": usage.requests,
            "by_operation": {
                f"{service}.{operation}": u.requests
                for (a, service, operation), u in sorted(meter.usage.items())
                if a == actor
            },
            **{name: value for name, value in usage.as_dict().items() if name != "requests"},
        }
    dynamodb = total(lambda _a, service, _o: service == "dynamodb")
    streams = total(lambda _a, service, operation: service == "dynamodbstreams" and operation == "GetRecords")
    sqs = total(lambda _a, service, _o: service == "sqs")
    pipe_sends = total(lambda actor, service, operation: actor.startswith("pipe:") and operation == "SendMessageBatch")
    sqs_empty_receives = total(lambda _a, _s, operation: operation == "ReceiveMessage").empty
    functions = {
        label: {
            "invocations": record.invocations,
            "billed_ms": record.billed_ms,
            "wall_ms_per_invocation": record.wall_seconds / max(record.invocations, 1) * 1000,
            "moto_share_of_wall": record.moto_wall_seconds / record.wall_seconds if record.wall_seconds else 0.0,
            "memory_mb": record.memory_mb,
            "gb_seconds": record.billed_ms / 1000 * record.memory_mb / 1024,
            "gb_seconds_without_moto": (record.wall_seconds - record.moto_wall_seconds) * record.memory_mb / 1024,
        }
        for label, record in sorted(instruments.functions.items())
    }
    invocations = sum(f["invocations"] for f in functions.values())
    gb_seconds = sum(f["gb_seconds"] for f in functions.values())
    classes: dict[str, float] = defaultdict(float)
    for (actor, kind, transactional), units in meter.write_units_by_class.items():
        if actor != VERIFY:
            classes[f"{actor} | {kind}{' (transaction)' if transactional else ''}"] += units
    per_event = {
        "dynamodb_requests": dynamodb.requests / events,
        "write_units": dynamodb.write_units / events,
        "write_units_of_failed_calls": dynamodb.failed_write_units / events,
        "read_units": dynamodb.read_units / events,
        "stream_read_units": (streams.stream_read_units - streams.empty) / events,
        "stream_read_units_incl_empty_polls": streams.stream_read_units / events,
        "pipe_requests": pipe_sends.message_chunks / events,
        "sqs_requests_fifo": _work_requests(meter, fifo=True) / events,
        "sqs_requests_standard": _work_requests(meter, fifo=False) / events,
        "sqs_requests_incl_empty_receives": (sqs.sqs_requests_fifo + sqs.sqs_requests_standard) / events,
        "lambda_invocations": invocations / events,
        "gb_seconds": gb_seconds / events,
    }
    return {
        "events": events,
        "pairs": pairs,
        "per_event": per_event,
        "per_pair": {name: value * events / pairs for name, value in per_event.items()},
        "actors": named,
        "durable_consumer_dynamodb_requests_per_pair": total(
            lambda actor, service, _o: actor == named["durable_consumer"] and service == "dynamodb"
        ).requests
        / pairs,
        "empty_polls": {"GetRecords": streams.empty, "ReceiveMessage": sqs_empty_receives},
        "write_units_by_item_per_event": {name: units / events for name, units in sorted(classes.items())},
        "by_actor": by_actor,
        "functions": functions,
    }


def _made_by(actor: str) -> Callable[[str, str, str], bool]:
    return lambda made_by, _service, _operation: made_by == actor


def _work_requests(meter: AwsMeter, *, fifo: bool) -> int:
    """SQS requests (64 KB chunks) that carried work: every request but receives that returned nothing."""
    chunks = 0
    for (actor, service, operation), usage in meter.usage.items():
        if actor == VERIFY or service != "sqs":
            continue
        requests = usage.sqs_requests_fifo if fifo else usage.sqs_requests_standard
        if operation == "ReceiveMessage":
            requests -= usage.empty  # an empty receive is one chunk
        chunks += requests
    return max(chunks, 0)


@contextmanager
def instrumented_runtime(
    assembly: Path, classify: Callable[[LocalRuntime], WriteClassifier] = write_classifier
) -> Iterator[tuple[LocalRuntime, Instruments]]:
    """The runtime booted from ``assembly``, every request of it metered (its writes' items told apart by
    ``classify``) and every invocation timed, from zero: creating the tables and queues is not per event."""
    with metered() as meter, MotoMeter() as moto:
        instruments = Instruments(meter, moto)
        runtime = LocalRuntime.from_assembly(assembly, STACK_NAME, function_log_level="CRITICAL")
        with runtime:
            instrument(runtime, instruments)
            meter.classifier = classify(runtime)
            meter.reset()
            yield runtime, instruments


def run_cadence(assembly: Path, orders: int, cadence: str) -> dict[str, Any]:
    with instrumented_runtime(assembly) as (runtime, instruments):
        started = time.perf_counter()
        run_workload(runtime, orders, cadence)
        elapsed = time.perf_counter() - started
        with acting_as(VERIFY):
            produced = verify(runtime)
        named = actors(runtime)
    if produced["completed"] != produced["pairs"]:
        raise RuntimeError(f"the run did not complete every (event, subscription): {produced}")
    figures = summarise(instruments, produced["events"], produced["pairs"], named)
    return {"cadence": cadence, "orders": orders, "seconds": elapsed, "produced": produced, **figures}


def run(assembly: Path = ASSEMBLY_DIR, trickle_orders: int = 400, burst_orders: int = 150) -> dict[str, Any]:
    return {"runs": [run_cadence(assembly, trickle_orders, "trickle"), run_cadence(assembly, burst_orders, "burst")]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--assembly", type=Path, default=ASSEMBLY_DIR)
    parser.add_argument("--trickle-orders", type=int, default=400)
    parser.add_argument("--burst-orders", type=int, default=150)
    args = parser.parse_args(argv)
    figures = run(args.assembly, args.trickle_orders, args.burst_orders)
    args.out.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
