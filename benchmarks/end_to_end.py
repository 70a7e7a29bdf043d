"""5. End to end: events per second through the local runtime, against a plain moto queue loop.

The runtime run emits the example application's orders and payments (with their follow-up events) in
blocks and drains the pipeline after each: emit, stream, relay pipe, SQS FIFO, event source mapping,
durable consumer (and the record-change lane beside it). The messages the relay pipe sent are kept, and
then pushed through a plain loop on the same moto (with the same AWS fixes): send each, receive ten at a
time, delete each. The ratio of the two rates is the runtime's whole overhead over moving the same
messages through SQS; the breakdown says how much of the runtime's time moto spent playing DynamoDB,
Streams and SQS, how much the functions and the application spent in their own code, and what is left
for the runtime's emulation itself (pipes, event source mappings, the template wiring).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from benchmarks import aws
from benchmarks.assembly import ASSEMBLY_DIR, STACK_NAME
from benchmarks.cost_per_event import Instruments, instrument, order_and_payment, short_name
from benchmarks.metering import AwsMeter, MotoMeter, current_actor
from benchmarks.stats import ratios, summary
from modules import build_catalog
from modules.commerce import Commerce
from modules.services import Services
from outbox.local.runtime import LocalRuntime


class RelayCapture:
    """Keeps every message the relay pipe sends (a botocore hook on every session, like the meter's)."""

    def __init__(self) -> None:
        self.messages: list[dict[str, str]] = []
        self.relay = ""  # the relay pipe's actor name, known once the runtime has booted

    def _before(self, model: Any, params: Mapping[str, Any], **_: Any) -> None:
        if model.name == "SendMessageBatch" and current_actor() == self.relay:
            for entry in params.get("Entries", []):
                self.messages.append(
                    {
                        "MessageBody": entry["MessageBody"],
                        "MessageGroupId": entry.get("MessageGroupId", ""),
                        "MessageDeduplicationId": entry.get("MessageDeduplicationId", ""),
                    }
                )

    @contextmanager
    def everywhere(self) -> Iterator[RelayCapture]:
        from botocore import handlers

        spec = ("before-parameter-build.sqs", self._before)
        handlers.BUILTIN_HANDLERS.append(spec)
        try:
            yield self
        finally:
            handlers.BUILTIN_HANDLERS.remove(spec)


def runtime_run(assembly: Path, orders: int, block: int) -> dict[str, Any]:
    with RelayCapture().everywhere() as capture, MotoMeter() as moto:
        instruments = Instruments(AwsMeter(), moto)
        with LocalRuntime.from_assembly(assembly, STACK_NAME, function_log_level="CRITICAL") as runtime:
            instrument(runtime, instruments)
            capture.relay = f"pipe:{short_name(runtime.stack.output_reference('RelayPipeName').logical_id)}"
            data_table = runtime.output("DataTableName")
            store = runtime.event_store(catalog=build_catalog(data_table=data_table, services=Services.fakes()))
            commerce = Commerce(data_table, Services.fakes())
            application = application_moto = 0.0
            moto.reset()
            started = time.perf_counter()
            for first in range(0, orders, block):
                emit_start, moto_start = time.perf_counter(), moto.total.wall_seconds
                for n in range(first, min(first + block, orders)):
                    order_and_payment(store, commerce, n)
                application += time.perf_counter() - emit_start
                application_moto += moto.total.wall_seconds - moto_start
                runtime.run_until_idle()
            elapsed = time.perf_counter() - started
        functions_wall = sum(f.wall_seconds for f in instruments.functions.values())
        functions_moto = sum(f.moto_wall_seconds for f in instruments.functions.values())
        total_moto = moto.total.wall_seconds
    events = len(capture.messages)
    if not events:
        raise RuntimeError(f"no message of the relay pipe ({capture.relay}) was captured")
    return {
        "events": events,
        "seconds": elapsed,
        "messages": capture.messages,
        "breakdown_seconds": {
            "moto, for the application's emits": application_moto,
            "moto, for the functions": functions_moto,
            "moto, for the pipes and event source mappings": total_moto - application_moto - functions_moto,
            "application code (emit)": application - application_moto,
            "function code (handlers, engine, Powertools)": functions_wall - functions_moto,
            "runtime emulation (pipes, event source mappings, wiring)": elapsed
            - application
            - functions_wall
            - (total_moto - application_moto - functions_moto),
        },
    }


def plain_loop(messages: list[dict[str, str]]) -> float:
    """Seconds to send, receive (ten at a time) and delete the same messages on a FIFO queue."""
    with aws.moto(fixes=True):
        sqs = aws.client("sqs")
        url = aws.create_fifo_queue(sqs, "plain-loop")
        started = time.perf_counter()
        for message in messages:
            sqs.send_message(QueueUrl=url, **message)
        received = 0
        while received < len(messages):
            batch = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
            if not batch:
                raise RuntimeError(f"the plain loop found {received} of {len(messages)} messages")
            for message in batch:
                sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
            received += len(batch)
        return time.perf_counter() - started


def run(assembly: Path = ASSEMBLY_DIR, orders: int = 60, block: int = 20, repetitions: int = 3) -> dict[str, Any]:
    runtime_rates, plain_rates, breakdowns = [], [], []
    events = 0
    for _ in range(repetitions):
        measured = runtime_run(assembly, orders, block)
        events = measured["events"]
        runtime_rates.append(events / measured["seconds"])
        plain_rates.append(events / plain_loop(measured["messages"]))
        breakdowns.append({name: value / measured["seconds"] for name, value in measured["breakdown_seconds"].items()})
    return {
        "events_per_run": events,
        "orders_per_run": orders,
        "block": block,
        "repetitions": repetitions,
        "runtime_events_per_second": summary(runtime_rates),
        "plain_loop_events_per_second": summary(plain_rates),
        "runtime_to_plain_ratio": ratios(runtime_rates, plain_rates),
        "share_of_runtime_time": {name: summary([b[name] for b in breakdowns]) for name in breakdowns[0]},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--assembly", type=Path, default=ASSEMBLY_DIR)
    parser.add_argument("--orders", type=int, default=60)
    parser.add_argument("--repetitions", type=int, default=3)
    args = parser.parse_args(argv)
    figures = run(args.assembly, args.orders, repetitions=args.repetitions)
    args.out.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
