"""What ``outbox status`` (and ``GET /status``) reads per tenant as the log grows: flat with an anchor.

For logs of 10, 1,000 and 100,000 events of one tenant (on moto), the DynamoDB requests and read units of one
tenant's status row (``outbox.ops.status.tenant_status``: the chain since the anchor, the dead letters, the
tamper findings), measured three ways: with no anchor yet (the whole log is verified, as every status did
before anchors), right after the hourly anchoring pass (nothing appended since), and with 10 events appended
since. Also the full verification (``outbox verify-chain``), which stays linear by design.

    python -m benchmarks.status_reads [--sizes 10 1000 100000]

The log is written straight into the table (valid rows, chained hashes, the head and the tenant index), not
through emit(): a hundred thousand emits on moto would take many minutes and measure nothing here.
"""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime
from typing import Any

from ulid import ULID

from benchmarks import aws
from benchmarks.metering import AwsMeter
from outbox import keys
from outbox.audit.table import AuditLog
from outbox.catalog import Catalog
from outbox.log.canonical import GENESIS_HASH, chain_hash
from outbox.log.chain import read_head
from outbox.log.envelope import Envelope
from outbox.ops.context import OperatorContext
from outbox.ops.status import tenant_status, verify
from outbox.ops.topology import Topology

TENANT = "acme"
EVENTS, INBOX, AUDIT = "events", "inbox", "audit"
APPENDED = 10


def append(client: Any, count: int, tenant: str = TENANT) -> None:
    """``count`` more valid events at the end of the tenant's log, the head moved with them."""
    head = read_head(client, EVENTS, tenant)
    seq, prev = head.last_seq, head.last_hash
    batch: list[dict[str, Any]] = []
    last_id = ""
    for _ in range(count):
        seq += 1
        draft = Envelope(
            id=str(ULID()),
            type="bench.order_paid",
            tenant=tenant,
            seq=seq,
            correlation_id=f"order-{seq}",
            actor="bench",
            occurred_at=datetime.now(UTC).replace(microsecond=0),
            schema_version=1,
            payload={"order_id": f"order-{seq}", "total": 1500, "currency": "EUR"},
            prev_hash=prev,
            hash=GENESIS_HASH,
        )
        envelope = draft.model_copy(update={"hash": chain_hash(prev, draft.hashed_body())})
        prev, last_id = envelope.hash, envelope.id
        batch.append({"PutRequest": {"Item": envelope.to_item()}})
        if len(batch) == 25:
            client.batch_write_item(RequestItems={EVENTS: batch})
            batch = []
    if batch:
        client.batch_write_item(RequestItems={EVENTS: batch})
    client.put_item(
        TableName=EVENTS,
        Item={
            **keys.head_key(tenant),
            "kind": {"S": keys.KIND_HEAD},
            "tenant": {"S": tenant},
            "last_seq": {"N": str(seq)},
            "last_hash": {"S": prev},
            "last_event_id": {"S": last_id},
        },
    )
    client.put_item(TableName=EVENTS, Item={"pk": {"S": keys.tenant_index_partition(tenant)}, "sk": {"S": tenant}})


def measured(meter: AwsMeter, action: Any) -> dict[str, Any]:
    meter.reset()
    result = action()
    usage = meter.total(lambda _actor, service, _operation: service == "dynamodb")
    return {"requests": usage.requests, "read_units": usage.read_units, "result": result}


def one_size(size: int) -> dict[str, Any]:
    with aws.moto():
        admin = aws.client("dynamodb")
        for name in (EVENTS, INBOX, AUDIT):
            aws.create_table(admin, name)
        append(admin, size)
        meter = AwsMeter.on_moto()
        client = aws.client("dynamodb")
        meter.attach(client.meta.events)
        topology = Topology(
            events_table=EVENTS, inbox_table=INBOX, durable_queue_url="-", durable_dlq_url="-", relay_dlq_url="-",
            audit_table=AUDIT,
        )  # fmt: skip
        context = OperatorContext(topology, dynamodb=client, sqs=None, catalog=Catalog(modules=[]))
        audit = AuditLog(AUDIT, client)
        row: dict[str, Any] = {"events": size}
        row["no_anchor"] = measured(meter, lambda: tenant_status(context, TENANT).verified_from_seq)
        audit.advance(verify(context, TENANT), datetime.now(UTC))  # what the hourly pass does
        row["anchored"] = measured(meter, lambda: tenant_status(context, TENANT).verified_from_seq)
        append(admin, APPENDED)
        row["appended_since"] = measured(meter, lambda: tenant_status(context, TENANT).verified_from_seq)
        row["full_verification"] = measured(meter, lambda: verify(context, TENANT).events_checked)
        return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 1_000, 100_000])
    parser.add_argument("--json", action="store_true", help="the figures as JSON")
    arguments = parser.parse_args()
    rows = [one_size(size) for size in arguments.sizes]
    if arguments.json:
        print(json.dumps(rows, indent=2))
        return
    print("status reads per tenant (DynamoDB requests / read units), by log length")
    print(f"{'events':>8} | {'no anchor':>18} | {'anchored':>14} | {f'+{APPENDED} since':>14} | {'verify-chain':>18}")
    for row in rows:
        cells = [
            f"{row[k]['requests']:>5} / {row[k]['read_units']:>8.1f}"
            for k in ("no_anchor", "anchored", "appended_since", "full_verification")
        ]
        print(f"{row['events']:>8} | {cells[0]:>18} | {cells[1]:>14} | {cells[2]:>14} | {cells[3]:>18}")


if __name__ == "__main__":
    main()
