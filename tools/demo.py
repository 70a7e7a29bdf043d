"""``make demo``: synthesize, boot the local runtime, run a realistic workload with injected failures,
drain the pipeline, then print a summary and write it to .local/demo-report.json.

    python -m tools.demo [--seed N] [--orders N] [--serve PORT]

With ``--serve`` the runtime stays up after the report, and its pipeline keeps moving (as ``outbox local serve``
keeps an app's), so the repairs ``outbox --local`` sends are processed. Each run starts from empty tables and
queues, and nothing is kept when it stops: the report is of one seeded run, which a state carried over from an
earlier run (its events, dead letters and repairs) would make a different one. ``outbox local serve`` is what
keeps an app's state across restarts (``.local/state``); the demo says so when it starts serving.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from modules import build_catalog
from modules.commerce import Commerce
from modules.profile import Profile
from modules.services import FAKE, SERVICE_NAMES, SERVICES_VARIABLE, Services
from outbox import EventStore, Lane, TerminalError
from outbox.local import faults, setup
from outbox.local.clients import CREDENTIALS, REGION
from outbox.local.clock import VirtualClock
from outbox.local.pipe import PipeFaults
from outbox.local.resources import ACCOUNT as LOCAL_ACCOUNT
from outbox.local.runtime import LocalRuntime
from outbox.local.serve import catch_up, write_topology
from outbox.testing.services import FakeServiceServer

PROJECT_ROOT = Path(__file__).resolve().parents[1]
LOCAL_DIR = PROJECT_ROOT / ".local"
TENANTS = ("acme", "globex", "initech", "umbrella")
# Said when the demo starts serving: what it keeps (nothing), and what does keep a state.
KEEPS_NOTHING = (
    "the demo starts from empty tables and queues on every run and keeps nothing when it stops (its report is of "
    "this run alone); `outbox local serve` keeps your own app's state in .local/state across restarts"
)
STACK_NAME = "OutboxEngine"


def synthesize(outdir: Path) -> Path:
    """The same synth as `make synth`, in-process and without bundling (the runtime runs the source)."""
    from stacks.app_factory import build_app
    from stacks.settings import COMMERCE_SERVICES_CONTEXT, NO_ALARM_SUBSCRIBER_CONTEXT, OPERATOR_ARNS_CONTEXT

    context = json.loads((PROJECT_ROOT / "cdk.json").read_text())["context"]
    # A trial deployment says so (commerceServices=fake); the runtime then points the functions at the
    # fake services served on loopback (see booted), which the report names.
    trial = {
        COMMERCE_SERVICES_CONTEXT: FAKE,
        NO_ALARM_SUBSCRIBER_CONTEXT: "the local demo: CloudWatch is not emulated, nobody reads its alarms",
        # The local runtime enforces no IAM: a placeholder on-call role, never assumed.
        OPERATOR_ARNS_CONTEXT: f"arn:aws:iam::{LOCAL_ACCOUNT}:role/oncall",
    }
    build_app({**context, **trial, "aws:cdk:bundling-stacks": []}, outdir=str(outdir)).synth()
    return outdir


@dataclass
class Workload:
    """What the demo asked for, so the report can say what happened to each of it."""

    placed: int = 0
    paid: int = 0
    refused_inline: int = 0
    address_changes: int = 0
    poison_pills_sent: int = 0
    injected: Counter[str] = field(default_factory=Counter)


def run_workload(runtime: LocalRuntime, fakes: FakeServiceServer, seed: int, orders: int, console: Console) -> Workload:
    rng = random.Random(seed)
    data_table = runtime.output("DataTableName")
    services = Services.served_by(fakes)
    store = runtime.event_store(catalog=build_catalog(data_table=data_table, services=services))
    commerce = Commerce(data_table, services)
    dynamodb = runtime.client("dynamodb")
    profile = Profile(data_table, lambda: dynamodb)
    workload = Workload()

    # Failures the pipeline must absorb without losing or doubling an effect.
    fakes.services["storefront"].fail_next = 6  # a flaky storefront: 503s, then fine
    relay = runtime.pipe("RelayPipeName")
    duplicates = {"left": 2}
    relay.faults = PipeFaults(duplicate_delivery=lambda _records: _take(duplicates))
    with ExitStack() as stack:
        crashes = stack.enter_context(faults.crash_before_completion(times=3, subscription="shipping.book_shipment"))
        terminal = stack.enter_context(
            faults.fail_handler("pet_tag.mark_ordered", times=2, error=lambda: TerminalError("unknown pet tag"))
        )
        down = stack.enter_context(faults.fail_handler("notify.buyer", times=5, error=lambda: TimeoutError("smtp")))
        with Progress(console=console, transient=True) as progress:
            task = progress.add_task("placing and paying orders", total=orders)
            for n in range(orders):
                _order_and_payment(store, commerce, rng, n, workload)
                if n % 7 == 3:
                    tenant = rng.choice(TENANTS)
                    profile.change_address(
                        store, tenant=tenant, actor="demo", profile_id=f"buyer-{n}", address=f"{n} Elm St"
                    )
                    workload.address_changes += 1
                if n == orders // 2:
                    _send_poison(runtime, rng.choice(TENANTS))
                    workload.poison_pills_sent += 1
                runtime.step()  # the pipeline runs while the workload does, as it would in AWS
                progress.advance(task)
            drain = progress.add_task("draining the pipeline", total=None)
            runtime.run_until_idle(on_step=lambda _n: progress.advance(drain))
        workload.injected.update(
            {
                "worker crashes before completion": crashes.fired,
                "terminal handler errors": terminal.fired,
                "notifier timeouts": down.fired,
                "storefront 503s": 6 - fakes.services["storefront"].fail_next,
                "duplicated pipe deliveries": relay.counters.duplicate_sends,
            }
        )
    return workload


def _take(counter: dict[str, int]) -> bool:
    if counter["left"] <= 0:
        return False
    counter["left"] -= 1
    return True


def _order_and_payment(store: EventStore, commerce: Commerce, rng: random.Random, n: int, workload: Workload) -> None:
    tenant = TENANTS[n % len(TENANTS)]
    price = rng.randrange(500, 5000)
    quantity = rng.randrange(1, 4)
    # Every 17th payment is suspicious: the INLINE screening refuses it and nothing commits.
    if n % 17 == 16:
        price = 600_000
        quantity = 2
    commerce.place_order(
        store,
        tenant=tenant,
        actor="demo",
        order_id=f"order-{n}",
        buyer_email=f"buyer-{n}@example.com",
        items=[{"sku": "pet-tag", "quantity": quantity, "unit_price_cents": price}],
    )
    workload.placed += 1
    try:
        commerce.complete_payment(
            store,
            tenant=tenant,
            actor="demo",
            order_id=f"order-{n}",
            payment_id=f"pay-{n}",
            amount_cents=price * quantity,
            pet_tag_id=f"tag-{n}",
            shipping_address=f"{n} Main St",
        )
        workload.paid += 1
    except TerminalError:
        workload.refused_inline += 1


def _send_poison(runtime: LocalRuntime, tenant: str) -> None:
    runtime.client("sqs").send_message(
        QueueUrl=runtime.output("DurableQueueUrl"),
        MessageBody="<html>502 Bad Gateway</html>",
        MessageGroupId=tenant,
        MessageDeduplicationId="demo-poison",
    )


def build_report(runtime: LocalRuntime, fakes: FakeServiceServer, workload: Workload) -> dict[str, Any]:
    """Everything the summary shows, read back through the operator tools and the fake services."""
    catalog = build_catalog(data_table=runtime.output("DataTableName"), services=Services.served_by(fakes))
    operations = runtime.operations(catalog)
    store = runtime.event_store(catalog=operations.catalog)
    emitted: Counter[str] = Counter()
    runs: Counter[str] = Counter()
    completed: Counter[str] = Counter()
    dead: Counter[str] = Counter()
    lost: list[str] = []
    for tenant in TENANTS:
        letters = operations.dead_letters(tenant, include_resolved=True)
        dead.update(letter.reason for letter in letters)
        dead_work = {(letter.event_id, letter.subscription) for letter in letters if letter.reason != "conflict"}
        for envelope in store.events(tenant):
            emitted[envelope.type] += 1
            claims = operations.claims(envelope.id)
            registry = operations.catalog.registry
            for subscription in registry.matching(envelope.type, Lane.DURABLE) + registry.matching(
                envelope.type, Lane.WORKFLOW
            ):
                claim = claims.get(subscription.name)
                runs[subscription.name] += claim.attempts if claim else 0
                status = claim.status if claim else None
                if status == "COMPLETED":
                    completed[subscription.name] += 1
                elif not (status == "DEAD" and (envelope.id, subscription.name) in dead_work):
                    lost.append(f"{envelope.id}:{subscription.name}")  # neither done nor recorded as dead
    status = operations.status()
    calls = sum(sum(s.calls.values()) for s in fakes.services.values())
    effects = sum(len(s.effects) for s in fakes.services.values())
    relay = runtime.pipe("RelayPipeName").counters
    # The WORKFLOW lane's durable executions (the testing SDK ran them): how each ended, one per pair.
    executions: Counter[str] = Counter()
    if runtime.workflows is not None:
        service = runtime.workflows.service
        executions.update(str(service.status(e.arn)["Status"]) for e in service.executions())
    return {
        # What the functions call, as they see it: never an unannounced default.
        "services": runtime.function("DurableConsumerFunctionName").env.get(SERVICES_VARIABLE, "(not set)"),
        "workload": {
            "orders_placed": workload.placed,
            "payments_completed": workload.paid,
            "payments_refused_inline": workload.refused_inline,
            "address_changes": workload.address_changes,
            "poison_pills_sent": workload.poison_pills_sent,
            "injected_faults": dict(workload.injected),
        },
        "events_emitted": dict(sorted(emitted.items())),
        "events_delivered_by_relay": relay.delivered,
        "handler_runs": dict(sorted(runs.items())),
        "workflow_executions": dict(sorted(executions.items())),
        "completed_effects": dict(sorted(completed.items())),
        "duplicates_suppressed": {
            "pipe_duplicates_dropped_by_fifo_dedup": relay.duplicate_sends,
            "external_calls_absorbed_by_idempotency_keys": calls - effects,
        },
        "retries": sum(runs.values()) - sum(completed.values()) - sum(dead[r] for r in ("terminal", "exhausted")),
        "dead_letters": dict(sorted(dead.items())),
        "poison_pills": status.poison_pills_today,
        "chain_intact": {t.tenant: t.chain_intact for t in status.tenants},
        "queues": {name: depth.visible + depth.in_flight for name, depth in status.queues.items()},
        "lost": len(lost),
        "lost_items": lost[:20],
    }


def print_report(console: Console, report: dict[str, Any]) -> None:
    table = Table(title="outbox engine: local demo", show_lines=False)
    table.add_column("what")
    table.add_column("figure", justify="right")
    table.add_row("services called (fakes on loopback)", report["services"])
    for key, value in report["workload"].items():
        if key != "injected_faults":
            table.add_row(key.replace("_", " "), str(value))
    for key, value in report["workload"]["injected_faults"].items():
        table.add_row(f"injected: {key}", str(value))
    for event_type, count in report["events_emitted"].items():
        table.add_row(f"emitted {event_type}", str(count))
    table.add_row("delivered by the relay pipe", str(report["events_delivered_by_relay"]))
    for name, runs in report["handler_runs"].items():
        table.add_row(f"{name}: runs / completed", f"{runs} / {report['completed_effects'].get(name, 0)}")
    for status, count in report["workflow_executions"].items():
        table.add_row(f"workflow executions {status.lower()}", str(count))
    for key, value in report["duplicates_suppressed"].items():
        table.add_row(key.replace("_", " "), str(value))
    table.add_row("retries", str(report["retries"]))
    for reason, count in report["dead_letters"].items():
        table.add_row(f"dead letters ({reason})", str(count))
    table.add_row("poison pills recorded", str(report["poison_pills"]))
    for tenant, intact in report["chain_intact"].items():
        table.add_row(f"chain intact: {tenant}", "yes" if intact else "NO")
    for queue, depth in report["queues"].items():
        table.add_row(f"depth {queue}", str(depth))
    table.add_row("lost", f"[bold {'green' if report['lost'] == 0 else 'red'}]{report['lost']}[/]")
    console.print(table)


def verdict(report: dict[str, Any]) -> str:
    """What happened, in one sentence, and what to try next."""
    dead = sum(report["dead_letters"].values())
    if report["lost"] or not all(report["chain_intact"].values()):
        broken = [tenant for tenant, intact in report["chain_intact"].items() if not intact]
        return (
            f"verdict: NOT GOOD: {report['lost']} (event, subscription) pairs are neither done nor dead-lettered"
            f"{f' and the chains of {broken} are broken' if broken else ''}: the lost_items of the report name "
            "them; this is a bug, please report it with the seed."
        )
    injected = report["workload"]["injected_faults"]
    terminal = injected.get("terminal handler errors", 0)
    expected = (
        f"the {dead} dead letters are the {terminal} terminal handler errors injected, as expected"
        if dead == terminal
        else f"{dead} dead letters where {terminal} terminal handler errors were injected: look at them"
    )
    return (
        f"verdict: every effect happened once ({sum(report['completed_effects'].values())} completed, none lost, "
        f"every chain intact) despite {sum(injected.values())} injected faults; {expected}. Next: "
        '`make demo ARGS="--serve 4566"` keeps it running for `outbox --local dead-letters groups` (after '
        "`. .venv/bin/activate`), which groups them and names the command that repairs them."
    )


def aws_command(endpoint_url: str) -> str:
    """An AWS CLI command that works against the served runtime as printed: its region and (fake) credentials."""
    return (
        f"AWS_ACCESS_KEY_ID={CREDENTIALS} AWS_SECRET_ACCESS_KEY={CREDENTIALS} aws --endpoint-url {endpoint_url} "
        f"--region {REGION} dynamodb list-tables"
    )


def quiet_server() -> None:
    """No access log of each request the served runtime answers (thousands, before the report), nor botocore's
    notes on each client: as `outbox local serve`."""
    for noisy in ("werkzeug", "botocore", "boto3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


@contextmanager
def booted(
    seed: int, port: int | None, console: Console, out: Path
) -> Iterator[tuple[LocalRuntime, FakeServiceServer]]:
    with console.status("synthesizing the CDK app"):
        assembly = synthesize(out / "cdk.out")
    with FakeServiceServer(SERVICE_NAMES) as fakes:
        runtime = LocalRuntime.from_assembly(
            assembly,
            STACK_NAME,
            # Virtual time starts now, so dates in the report and in `outbox --local` read naturally.
            clock=VirtualClock(datetime.now(UTC).replace(microsecond=0)),
            port=port,
            environment={SERVICES_VARIABLE: fakes.url},
            function_log_level="CRITICAL",
        )
        with runtime:
            console.print(
                f"local runtime up: {len(runtime.stack.tables)} tables, {len(runtime.stack.queues)} queues, "
                f"{len(runtime.pipes)} pipes, {len(runtime.functions)} functions (seed {seed})"
            )
            yield runtime, fakes


def main(argv: list[str] | None = None, stop: threading.Event | None = None) -> int:
    """``stop``: ends serving (``--serve``) when set; else Ctrl-C does."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--orders", type=int, default=120)
    parser.add_argument("--serve", type=int, metavar="PORT", help="serve moto on 127.0.0.1:PORT and stay up")
    parser.add_argument("--out", type=Path, default=LOCAL_DIR, help="where the assembly and the report go")
    args = parser.parse_args(argv)
    if args.orders < 1:
        parser.error("--orders must be at least 1")
    console = Console()
    out: Path = args.out
    if args.serve:
        quiet_server()
    with booted(args.seed, args.serve, console, out) as (runtime, fakes):
        workload = run_workload(runtime, fakes, args.seed, args.orders, console)
        report = build_report(runtime, fakes, workload)
        print_report(console, report)
        console.print(verdict(report), highlight=False, markup=False)
        out.mkdir(parents=True, exist_ok=True)
        (out / "demo-report.json").write_text(json.dumps(report, indent=2) + "\n")
        console.print(f"report written to {out / 'demo-report.json'}")
        if args.serve:
            # As `outbox local serve` writes it: whole (a reader may find it the moment it appears), with the
            # served app's catalog and code, so `outbox --local` reads the demo as it reads a served app.
            write_topology(out / "topology.json", runtime, setup.durable_consumer(runtime))
            console.print(
                "the outbox CLI works against it: `. .venv/bin/activate`, then `outbox --local status` (the commands "
                "it suggests then work as printed)",
                highlight=False,
                markup=False,
            )
            console.print(KEEPS_NOTHING, highlight=False, markup=False)
            console.print(
                f"serving on {runtime.endpoint_url}: try `{aws_command(str(runtime.endpoint_url))}`; Ctrl-C to stop",
                highlight=False,
                markup=False,
                soft_wrap=True,
            )
            keep_serving(runtime, stop or threading.Event())
    return 0 if report["lost"] == 0 and all(report["chain_intact"].values()) else 1


def keep_serving(runtime: LocalRuntime, stop: threading.Event, interval: float = 1.0) -> None:
    """Until ``stop`` is set (or Ctrl-C): every ``interval``, the virtual clock catches up with this machine's and
    the pipeline runs until nothing moves, so what ``outbox --local replay``, ``reconcile`` and ``redrive`` send
    is processed, as ``outbox local serve`` does."""
    try:
        while not stop.wait(interval):
            catch_up(runtime.clock)
            try:
                runtime.run_until_idle()
            except Exception:  # a failing invocation is the pipeline's business (its DLQ); keep serving
                logging.getLogger(__name__).exception("the served pipeline could not settle")
    except KeyboardInterrupt:
        return


if __name__ == "__main__":
    raise SystemExit(main())
