"""What the hourly completeness pass costs per million events, with four durable subscriptions and with one.

On moto, one tenant's log of ``--events`` events (written straight into the table, as ``status_reads`` does),
every pair of each completed (its claim row COMPLETED, as the consumer leaves it), then the pass
(``outbox.ops.completeness.CompletenessPass``) run past the bound, metered: the DynamoDB requests, read and write
units of the pass that judges them all (the first past the bound: one query of the log per page, one query of
each event's claims), and of the pass after it (nothing new: its watermark and open pairs only). Dollars per
million events at the on-demand prices of ``benchmarks/prices.json``.

    python -m benchmarks.completeness_cost [--events 1000] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from benchmarks import aws
from benchmarks.metering import AwsMeter
from benchmarks.report import load_prices, unit_price
from benchmarks.status_reads import AUDIT, EVENTS, INBOX, TENANT, append
from outbox.catalog import Catalog, Module
from outbox.inbox import COMPLETED, unclaimed_row
from outbox.log.chain import read_event_rows
from outbox.log.envelope import Envelope
from outbox.ops.completeness import CompletenessLog, CompletenessPass
from outbox.ops.context import OperatorContext
from outbox.ops.topology import Topology
from outbox.subscriptions import Lane, Subscription

BOUND = timedelta(hours=23)  # the stack's default bound, to the hour: the cost does not depend on it
SUBSCRIPTION_COUNTS = (4, 1)


def _complete_every_pair(client: Any, names: list[str], now: datetime) -> None:
    batch: list[dict[str, Any]] = []
    for item in read_event_rows(client, EVENTS, TENANT):
        envelope = Envelope.from_item(item)
        for name in names:
            batch.append({"PutRequest": {"Item": unclaimed_row(envelope, name, COMPLETED, now)}})
            if len(batch) == 25:
                client.batch_write_item(RequestItems={INBOX: batch})
                batch = []
    if batch:
        client.batch_write_item(RequestItems={INBOX: batch})


def one_catalog(events: int, subscriptions: int) -> dict[str, Any]:
    with aws.moto():
        admin = aws.client("dynamodb")
        for name in (EVENTS, INBOX, AUDIT):
            aws.create_table(admin, name)
        started = datetime.now(UTC)
        names = [f"bench.sub{index}" for index in range(subscriptions)]
        append(admin, events)
        _complete_every_pair(admin, names, started)
        meter = AwsMeter.on_moto()
        client = aws.client("dynamodb")
        meter.attach(client.meta.events)
        later = started + BOUND + timedelta(minutes=5)
        topology = Topology(
            events_table=EVENTS, inbox_table=INBOX, durable_queue_url="-", durable_dlq_url="-", relay_dlq_url="-",
            audit_table=AUDIT,
        )  # fmt: skip
        deployed = tuple(Subscription(name, "bench.*", Lane.DURABLE, print) for name in names)
        catalog = Catalog([Module("bench", (), subscriptions=deployed)])
        context = OperatorContext(topology, dynamodb=client, sqs=None, catalog=catalog, clock=lambda: later)
        log = CompletenessLog(AUDIT, client)
        log.first_seen(names, started - timedelta(days=1))  # a pass saw the catalog before the events
        check = CompletenessPass(context, log, bound=BOUND)
        row: dict[str, Any] = {"events": events, "subscriptions": subscriptions}
        for label in ("first_pass", "next_pass"):
            meter.reset()
            result = check.run([TENANT])
            usage = meter.total(lambda _actor, service, _operation: service == "dynamodb")
            row[label] = {
                "events_read": result.events_read,
                "missing": result.missing_count,
                "requests": usage.requests,
                "read_units": usage.read_units,
                "write_units": usage.write_units,
            }
        return row


def priced(row: dict[str, Any], prices: dict[str, Any]) -> dict[str, float]:
    """Read and write units, and US dollars, per million events, of the pass that judged them."""
    first, events = row["first_pass"], row["events"]
    read = first["read_units"] * 1_000_000 / events
    write = first["write_units"] * 1_000_000 / events
    usd = read * unit_price(prices, "dynamodb_read_request_unit") + write * unit_price(
        prices, "dynamodb_write_request_unit"
    )
    return {"read_units_per_million": read, "write_units_per_million": write, "usd_per_million": usd}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--events", type=int, default=1000)
    parser.add_argument("--out", type=Path, help="also write the figures here, as JSON")
    arguments = parser.parse_args()
    prices = load_prices()
    rows = []
    for count in SUBSCRIPTION_COUNTS:
        row = one_catalog(arguments.events, count)
        row["per_million"] = priced(row, prices)
        rows.append(row)
    if arguments.out:
        arguments.out.write_text(json.dumps({"rows": rows}, indent=2) + "\n")
    print(f"completeness pass over {arguments.events} events of one tenant, every pair completed")
    header = f"{'subscriptions':>13} | {'requests':>8} | {'read units':>10} | {'write units':>11}"
    print(f"{header} | {'per million events':>40}")
    for row in rows:
        first, per = row["first_pass"], row["per_million"]
        million = (
            f"{per['read_units_per_million']:>9,.0f} RRU {per['write_units_per_million']:>6,.0f} WRU "
            f"${per['usd_per_million']:.3f}"
        )
        print(
            f"{row['subscriptions']:>13} | {first['requests']:>8} | {first['read_units']:>10.1f} | "
            f"{first['write_units']:>11.1f} | {million:>40}"
        )
        following = row["next_pass"]
        print(f"{'':>13}   the next pass, nothing new: {following['requests']} requests, {following['read_units']} RRU")


if __name__ == "__main__":
    main()
