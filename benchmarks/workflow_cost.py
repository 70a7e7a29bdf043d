"""7. The WORKFLOW lane: what the example's shipment workflow costs per million events it runs for.

The runtime boots from the synthesized assembly (as ``make demo`` does) and runs the example's happy path: each
order paid books a shipment (``shipment.booked``), which the WORKFLOW subscription ``shipping.print_label`` hands to
one durable execution (``modules.commerce.shipping``: a step, a durable wait, a step that emits). The testing SDK
runs each execution; what Lambda would bill is read from it, per execution:

- durable operations: every operation it checkpointed (the execution itself, each step and wait), priced as AWS
  publishes durable operations (``benchmarks/prices.json``, ``lambda_durable_operation``: an estimate that counts
  the execution's own operation too);
- data written: the bytes of its checkpoints and its input, priced per GB written, and kept for the retention
  (``WorkflowOptions(retention_days=...)``, 30 by default) at the price per GB-month;
- the durable function's invocations (one, and one more after the wait) and their time at its memory size: the
  handler's own time in each, as the local service measures it (a durable wait is not billed: the function is
  not running then).

And the lane's own requests, metered as section 2 meters them: the settle pass's (``λ:...Settler``) DynamoDB
requests and units for each pair it settles (the claim read, the settling transaction), and the write units of the
items only this lane writes (the running index's row, put with the hand-off; the step's row that makes its emit
once). The settle pass's invocations and its reads of the running index (one a minute each, whatever the traffic)
are a fixed cost, given apart per month. The event the workflow emits costs what any event costs (section 2).

    python -m benchmarks.workflow_cost [--orders 40] [--assembly DIR] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from benchmarks.assembly import ASSEMBLY_DIR
from benchmarks.cost_per_event import VERIFY, instrumented_runtime, order_and_payment, short_name, write_classifier
from benchmarks.metering import acting_as
from benchmarks.report import load_prices, unit_price
from modules import build_catalog
from modules.commerce import Commerce
from modules.services import Services
from outbox.local.runtime import LocalRuntime
from outbox_cdk.workflow_function import DEFAULT_RETENTION_DAYS

SUBSCRIPTION = "shipping.print_label"
MINUTES_A_MONTH = 30 * 24 * 60
LANE_ITEMS = ("workflow running row", "workflow emit row")  # what section 2's classifier calls the lane's items


def executions(runtime: LocalRuntime) -> list[dict[str, Any]]:
    """What the testing SDK kept of each execution (its operations, bytes checkpointed, invocations), and the
    handler's time in each invocation as Lambda bills it: rounded up to the millisecond, measured by the local
    service (the testing SDK's own invocation timestamps come from a clock that skips durable waits)."""
    assert runtime.workflows is not None, "the example app has a WORKFLOW subscription"
    service = runtime.workflows.service
    found = []
    for execution in service.executions():
        runner = service._functions[execution.function].runner
        kept = runner._executor._store.load(execution_arn=execution.arn)
        ran = service.invocation_times.seconds.get(execution.arn, [])
        if len(ran) != len(kept.invocation_completions):
            raise RuntimeError(f"{execution.arn}: {len(ran)} invocations timed, {len(kept.invocation_completions)} ran")
        found.append(
            {
                "status": str(service.status(execution.arn)["Status"]),
                "operations": len(kept.operations),
                "bytes_written": sum(kept.operation_size_bytes.values()) + len(execution.payload or b""),
                "invocations": len(ran),
                "billed_ms": sum(billed_ms(seconds) for seconds in ran),
            }
        )
    return found


def billed_ms(seconds: float) -> int:
    """Lambda bills an invocation's duration rounded up to the millisecond, and at least one."""
    return max(1, math.ceil(seconds * 1000))


def run(assembly: Path, orders: int) -> dict[str, Any]:
    with instrumented_runtime(assembly, write_classifier) as (runtime, instruments):
        data_table = runtime.output("DataTableName")
        store = runtime.event_store(catalog=build_catalog(data_table=data_table, services=Services.fakes()))
        commerce = Commerce(data_table, Services.fakes())
        for n in range(orders):
            order_and_payment(store, commerce, n)
            runtime.step()
        runtime.run_until_idle()
        with acting_as(VERIFY):
            ran = executions(runtime)
        (workflow_function,) = [
            spec for spec in runtime.stack.functions.values() if spec.handler.endswith("shipping.print_label")
        ]
        settler = next(label for label in instruments.functions if "Settler" in label)
        memory_mb = workflow_function.memory_mb
    meter = instruments.meter
    if len(ran) != orders or {r["status"] for r in ran} != {"SUCCEEDED"}:
        raise RuntimeError(f"expected {orders} executions, each SUCCEEDED: {[r['status'] for r in ran]}")
    # The settle pass reads the running index each pass (a query per shard, whatever the traffic: a fixed cost, as
    # its invocation), and per pair it settles, the claim and one transaction.
    settle = meter.total(lambda actor, service, op: actor == settler and service == "dynamodb" and op != "Query")
    index = meter.total(lambda actor, service, op: actor == settler and service == "dynamodb" and op == "Query")
    lane_write_units = sum(  # the running row's put with the hand-off, the step's row with the emit
        units
        for (actor, kind, _transactional), units in meter.write_units_by_class.items()
        if actor not in (VERIFY, settler) and kind in LANE_ITEMS
    )
    settle_function = instruments.functions[settler]
    passes = max(settle_function.invocations, 1)
    return {
        "subscription": SUBSCRIPTION,
        "executions": len(ran),
        "per_execution": {
            "durable_operations": sum(r["operations"] for r in ran) / len(ran),
            "bytes_written": sum(r["bytes_written"] for r in ran) / len(ran),
            "invocations": sum(r["invocations"] for r in ran) / len(ran),
            "gb_seconds": sum(r["billed_ms"] for r in ran) / len(ran) / 1000 * memory_mb / 1024,
            "settle_requests": settle.requests / len(ran),
            "settle_read_units": settle.read_units / len(ran),
            "settle_write_units": settle.write_units / len(ran),
            "lane_item_write_units": lane_write_units / len(ran),
        },
        "memory_mb": memory_mb,
        "retention_days": DEFAULT_RETENTION_DAYS,
        "settle_pass": {
            "memory_mb": settle_function.memory_mb,
            "ms_per_invocation": settle_function.billed_ms / passes,
            "index_read_units_per_pass": index.read_units / passes,
        },
        "function": short_name(workflow_function.logical_id),
    }


def priced(figures: Mapping[str, Any], prices: Mapping[str, Any]) -> dict[str, float]:
    """US dollars per million executions (one per ``shipment.booked`` event), line by line; and the settle pass's
    fixed monthly cost (one invocation a minute)."""
    per, million = figures["per_execution"], 1_000_000
    gb = per["bytes_written"] / 1e9
    lines = {
        "durable_operations": per["durable_operations"] * million * unit_price(prices, "lambda_durable_operation"),
        "data_written": gb * million * unit_price(prices, "lambda_durable_data_written_gb"),
        "data_retained": gb
        * figures["retention_days"]
        / 30
        * million
        * unit_price(prices, "lambda_durable_data_retained_gb_month"),
        "invocations": per["invocations"] * million * unit_price(prices, "lambda_request"),
        "duration": per["gb_seconds"] * million * unit_price(prices, "lambda_gb_second_arm64"),
        "dynamodb": (per["settle_write_units"] + per["lane_item_write_units"])
        * million
        * unit_price(prices, "dynamodb_write_request_unit")
        + per["settle_read_units"] * million * unit_price(prices, "dynamodb_read_request_unit"),
    }
    settle = figures["settle_pass"]
    monthly = MINUTES_A_MONTH * (
        unit_price(prices, "lambda_request")
        + settle["ms_per_invocation"] / 1000 * settle["memory_mb"] / 1024 * unit_price(prices, "lambda_gb_second_arm64")
        + settle["index_read_units_per_pass"] * unit_price(prices, "dynamodb_read_request_unit")
    )
    return {**lines, "total": sum(lines.values()), "settle_pass_per_month": monthly}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--orders", type=int, default=40)
    parser.add_argument("--assembly", type=Path, default=ASSEMBLY_DIR)
    parser.add_argument("--out", type=Path, help="also write the figures here, as JSON")
    args = parser.parse_args(argv)
    figures = run(args.assembly, args.orders)
    figures["usd_per_million"] = priced(figures, load_prices())
    if args.out:
        args.out.write_text(json.dumps(figures, indent=2) + "\n")
    per, usd = figures["per_execution"], figures["usd_per_million"]
    print(f"the WORKFLOW lane ({SUBSCRIPTION}), {figures['executions']} executions, per execution:")
    print(
        f"  {per['durable_operations']:.1f} durable operations, {per['bytes_written']:,.0f} bytes checkpointed, "
        f"{per['invocations']:.1f} invocations ({per['gb_seconds']:.4f} GB-s), the settle pass's "
        f"{per['settle_requests']:.1f} DynamoDB requests, {per['lane_item_write_units']:.1f} WRU of the lane's items"
    )
    lines = ", ".join(f"{name.replace('_', ' ')} ${value:.2f}" for name, value in usd.items() if name != "total")
    print(f"  ${usd['total']:.2f} per million events it runs for ({lines})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
