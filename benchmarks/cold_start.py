"""3. Cold start: import time of each handler against reference Powertools handlers, the durable consumer's
own imports (``python -X importtime``), the import plus the first batch against the Powertools Idempotency
handler, and package sizes.

Every measurement is a fresh interpreter that imports one handler module the way Lambda does (its code
folder first on ``sys.path``, the engine after it, as the layer would be), in the function's environment
from the synthesized template plus what Lambda sets (``LAMBDA_TASK_ROOT``, so Powertools' Tracer is on and
patches boto3, as with ``Tracing: Active``). It reports the import, and the import plus the work of the
first invocation that the handler defers to it (the engine's handlers build their consumer then, not at
import). Rounds visit every module in a rotating order; ratios are taken within a round.

Measured here on this machine's CPython with the virtualenv's packages (the same pinned versions as the
layer, whose wheels are built for Lambda's arm64 Python 3.13 and cannot load here).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import zipfile
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from functools import cache
from importlib.metadata import packages_distributions
from pathlib import Path
from typing import Any

from benchmarks.assembly import ASSEMBLY_DIR, STACK_NAME
from benchmarks.machine import PROJECT_ROOT
from benchmarks.stats import ratios, summary
from outbox.local.template import Reference, load_stack
from outbox_cdk import engine_layer

REFERENCE_DIR = Path(__file__).resolve().parent / "reference"
# What Lambda's Python runtime ships besides the standard library: boto3 and what it needs.
LAMBDA_RUNTIME_DISTRIBUTIONS = ("boto3", "botocore", "s3transfer", "jmespath", "urllib3", "python-dateutil", "six")
NOT_SHIPPED_VARIABLE = "BENCH_NOT_SHIPPED"
# Prepended to every script a measured function runs: the virtualenv's packages that neither the layer nor
# Lambda's runtime ships cannot be imported, as in Lambda (an optional import, OpenTelemetry's API or
# ``requests`` for the X-Ray SDK's patches, is then skipped there as it would be in AWS, not timed here).
NOT_SHIPPED = """
import os as _os, sys as _sys
class _NotShipped:
    hidden = frozenset(filter(None, _os.environ.get("BENCH_NOT_SHIPPED", "").split(",")))
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in self.hidden:
            raise ModuleNotFoundError(f"No module named {name!r} (neither the layer nor Lambda ships it)", name=name)
        return None
_sys.meta_path.insert(0, _NotShipped())
del _os, _sys
"""
WORK_DIR = PROJECT_ROOT / ".local" / "bench" / "cold-start"
MEASURE = """
import importlib, json, sys, time
name, init, first, last = sys.argv[1:5]
start = time.perf_counter()
for early in filter(None, first.split(",")):
    importlib.import_module(early)
module = importlib.import_module(name)
for late in filter(None, last.split(",")):
    importlib.import_module(late)
imported = time.perf_counter()
if init:
    getattr(module, init)()
ready = time.perf_counter()
print(json.dumps({"import": imported - start, "init": ready - imported}))
"""


FIRST_BATCH = """
import importlib, json, sys, time
name, event_file = sys.argv[1:3]
with open(event_file) as file:
    event = json.load(file)


class Context:  # what Lambda passes; the Powertools decorators read these
    function_name = "cold-start"
    function_version = "$LATEST"
    memory_limit_in_mb = 256
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:cold-start"
    aws_request_id = "00000000-0000-0000-0000-000000000000"
    log_group_name = "/aws/lambda/cold-start"
    log_stream_name = "cold-start"

    def get_remaining_time_in_millis(self):
        return 60_000


wall, cpu = time.perf_counter(), time.process_time()
module = importlib.import_module(name)
imported_wall, imported_cpu = time.perf_counter(), time.process_time()
response = module.handler(event, Context())
done_wall, done_cpu = time.perf_counter(), time.process_time()
print(json.dumps({
    "import": imported_wall - wall, "import_cpu": imported_cpu - cpu,
    "batch": done_wall - imported_wall, "batch_cpu": done_cpu - imported_cpu,
    "failures": len(response.get("batchItemFailures", [])),
}))
"""
FIRST_BATCH_SIZE = 10
EVENTS_TABLE = "events"
INBOX_TABLE = "inbox"
IDEMPOTENCY_TABLE = "idempotency"
# The first batch's two consumers: the engine's durable consumer, and the Powertools Idempotency handler.
FIRST_BATCH_KEYS = ("durable_consumer", "idempotent_app_handler")


@dataclass(frozen=True)
class Target:
    key: str  # the report's name for the measurement
    label: str
    module: str
    code_root: Path
    init: str  # the function a first invocation calls to build what the handler defers; "" for none
    environment: dict[str, str]
    reference: bool = False
    first: str = ""  # modules imported (and timed) before the handler: a proposed change, measured
    last: str = ""  # modules imported (and timed) after it
    variant: bool = False  # a proposed change to an engine handler, not a handler as shipped


def _distribution(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@cache
def not_shipped_modules() -> tuple[str, ...]:
    """The top-level modules of this virtualenv's distributions that neither the engine layer
    (``layers/engine/requirements.txt``) nor Lambda's Python runtime ships."""
    layer = engine_layer.LAYER_REQUIREMENTS.read_text().splitlines()
    shipped = {_distribution(line.split("==")[0]) for line in layer if "==" in line and not line.startswith("#")}
    shipped |= {_distribution(name) for name in LAMBDA_RUNTIME_DISTRIBUTIONS}
    return tuple(
        sorted(
            module
            for module, distributions in packages_distributions().items()
            if not any(_distribution(d) in shipped for d in distributions)
        )
    )


def lambda_environment(
    function_name: str, code_root: Path, engine_root: Path, variables: dict[str, str]
) -> dict[str, str]:
    """What the Lambda runtime sets, plus the function's own variables (and the modules Lambda would not find,
    for ``NOT_SHIPPED``)."""
    return {
        NOT_SHIPPED_VARIABLE: ",".join(not_shipped_modules()),
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "LANG": "C.UTF-8",
        "PYTHONPATH": os.pathsep.join([str(code_root), str(engine_root)]),
        # Lambda cannot write byte code into /var/task or /opt: the function code and the engine (copied
        # into the layer without __pycache__) compile at every cold start; pip-installed packages ship theirs.
        "PYTHONDONTWRITEBYTECODE": "1",
        "LAMBDA_TASK_ROOT": str(code_root),
        "AWS_EXECUTION_ENV": "AWS_Lambda_python3.13",
        "AWS_LAMBDA_FUNCTION_NAME": function_name,
        "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "256",
        "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
        "AWS_REGION": "us-east-1",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "cold-start",
        "AWS_SECRET_ACCESS_KEY": "cold-start",
        "AWS_ACCOUNT_ID_ENDPOINT_MODE": "disabled",
        "_X_AMZN_TRACE_ID": "Root=1-00000000-000000000000000000000000;Parent=0000000000000000;Sampled=0",
        **variables,
    }


def _without_bytecode(source: Path, target: Path) -> Path:
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return target


def engine_copy(*, compiled: bool) -> Path:
    """The engine's files as the layer holds them (``/opt/python``), with or without the layer's byte code."""
    root = WORK_DIR / ("opt-compiled" if compiled else "opt") / "python"
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    engine_layer.copy_engine(root)
    if compiled:
        # The bundler compiles with Lambda's Python; this interpreter stands in for it, in the same mode.
        engine_layer.compile_byte_code(root, sys.executable)
    return root


def targets(assembly: Path) -> list[Target]:
    """Each handler's code and the engine copied without byte code, as Lambda finds them."""
    stack = load_stack(assembly, STACK_NAME)
    source_engine = engine_copy(compiled=False)
    engine_root = engine_copy(compiled=True)
    found = []
    measured: set[str] = set()
    inits = {
        "outbox.handlers.durable_consumer": "consumer",
        "outbox.handlers.record_change_consumer": "consumer",
        "outbox.handlers.operator_api": "operations",
        "outbox.handlers.status_widget": "operations",
    }
    for spec in stack.functions.values():
        module = spec.handler.rsplit(".", 1)[0]
        # A module is imported once whichever of its functions starts (the auditor's two share one).
        if spec.asset_path is None or not module.startswith("outbox.handlers.") or module in measured:
            continue
        measured.add(module)
        code_root = WORK_DIR / "task" / spec.asset_path
        if not code_root.exists():
            _without_bytecode(assembly / spec.asset_path, code_root)
        variables = {name: _placeholder(value) for name, value in spec.environment.items()}
        key = module.rsplit(".", 1)[1]
        found.append(
            Target(
                key=key,
                label=key.replace("_", " "),
                module=module,
                code_root=code_root,
                init=inits.get(module, ""),
                environment=lambda_environment(spec.logical_id, code_root, engine_root, variables),
            )
        )
    durable = next(t for t in found if t.module == "outbox.handlers.durable_consumer")
    found.append(
        replace(
            durable,
            key="durable_consumer_no_byte_code",
            label="durable consumer, layer without byte code (synthesized without Python 3.13)",
            variant=True,
            environment={
                **durable.environment,
                "PYTHONPATH": os.pathsep.join([str(durable.code_root), str(source_engine)]),
            },
        )
    )
    reference_variables = {"POWERTOOLS_SERVICE_NAME": "reference", "INBOX_TABLE_NAME": "InboxTable"}
    reference_root = _without_bytecode(REFERENCE_DIR, WORK_DIR / "task" / "reference")
    for module, label in (
        ("bare_batch_handler", "reference: Powertools batch handler (Logger, Tracer, Metrics)"),
        ("minimal_batch_handler", "reference: Powertools batch processor alone"),
        ("boto3_batch_handler", "reference: Powertools batch handler + boto3"),
        ("idempotent_app_handler", "reference: Powertools batch + Idempotency on DynamoDB"),
    ):
        found.append(
            Target(
                key=module,
                label=label,
                module=module,
                code_root=reference_root,
                init="dynamodb" if module == "boto3_batch_handler" else "",
                environment=lambda_environment(module, reference_root, engine_root, reference_variables),
                reference=True,
            )
        )
    return sorted(found, key=lambda t: (t.reference, t.variant, t.label))


def _placeholder(raw: Any) -> str:
    if isinstance(raw, dict) and "Fn::Join" in raw:  # WORKFLOW_FUNCTIONS: JSON around the functions' ARNs
        separator, parts = raw["Fn::Join"]
        return str(separator).join(_placeholder(part) for part in parts)
    reference = Reference.parse(raw)
    if reference is not None and reference.logical_id.startswith("OutboxWorkflows"):  # a durable function's alias
        return f"arn:aws:lambda:us-east-1:123456789012:function:{reference.logical_id}:live"
    if reference is not None:
        # Names and URLs are only read at import or first invocation, never called: any value will do.
        if "Queue" in reference.logical_id:
            return f"https://sqs.us-east-1.amazonaws.com/123456789012/{reference.logical_id}"
        return reference.logical_id
    return str(raw)


def _run_script(target: Target, script: str, *arguments: str) -> dict[str, float]:
    """Run ``script`` in a fresh interpreter as the target's function would start; its last line is JSON."""
    result = subprocess.run(
        [sys.executable, "-c", NOT_SHIPPED + script, target.module, *arguments],
        cwd=target.code_root,
        env=target.environment,
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"starting {target.module} failed:\n{result.stderr[-3000:]}")
    figures: dict[str, float] = json.loads(result.stdout.strip().splitlines()[-1])
    return figures


def measure_once(target: Target) -> dict[str, float]:
    return _run_script(target, MEASURE, target.init, target.first, target.last)


@contextmanager
def moto_server() -> Iterator[str]:
    """A moto server in this process, with the local runtime's AWS fixes; yields its endpoint URL."""
    from moto.server import ThreadedMotoServer

    from outbox.local import aws_fixes
    from outbox.local.clock import VirtualClock

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # a line per request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    uninstall = aws_fixes.install(VirtualClock(datetime.now(UTC).replace(microsecond=0)))
    try:
        host, port = server.get_host_and_port()
        yield f"http://{host}:{port}"
    finally:
        uninstall()
        server.stop()


def first_batch_targets(found: list[Target], endpoint: str) -> dict[str, Target]:
    """The durable consumer as shipped and the Powertools Idempotency handler, both on ``order_app`` and on
    the moto server: the same user code and the same DynamoDB under each."""
    durable = next(t for t in found if t.key == "durable_consumer")
    reference_root = next(t for t in found if t.reference).code_root
    engine_root = durable.environment["PYTHONPATH"].split(os.pathsep)[-1]
    served = {"AWS_ENDPOINT_URL": endpoint}
    engine = replace(
        durable,
        code_root=reference_root,
        environment={
            **durable.environment,
            **served,
            "PYTHONPATH": os.pathsep.join([str(reference_root), engine_root]),
            "LAMBDA_TASK_ROOT": str(reference_root),
            "EVENTS_TABLE_NAME": EVENTS_TABLE,
            "INBOX_TABLE_NAME": INBOX_TABLE,
            "SUBSCRIPTIONS": "engine_app:build_catalog",
        },
    )
    idempotent = next(t for t in found if t.key == "idempotent_app_handler")
    reference = replace(
        idempotent, environment={**idempotent.environment, **served, "INBOX_TABLE_NAME": IDEMPOTENCY_TABLE}
    )
    return {"durable_consumer": engine, "idempotent_app_handler": reference}


def first_batches(endpoint: str, count: int) -> list[dict[str, Any]]:
    """``count`` Lambda events of new events, each one receive of 10 from a FIFO queue of the relay pipe's
    bodies (the raw stream image), on fresh tables."""
    from benchmarks import aws
    from benchmarks.reference.order_app import EVENT_TYPE, sample_payload
    from outbox import EventStore

    dynamodb = boto3_client("dynamodb", endpoint)
    sqs = boto3_client("sqs", endpoint)
    for table in (EVENTS_TABLE, INBOX_TABLE):
        aws.create_table(dynamodb, table)
    aws.create_table(dynamodb, IDEMPOTENCY_TABLE, key=("id", None))
    store = EventStore(EVENTS_TABLE, client=dynamodb, sleep=lambda _s: None, unchecked=True)
    queue_url = aws.create_fifo_queue(sqs, "cold-start")
    arn = aws.queue_arn(sqs, queue_url)
    events = []
    for n in range(count):
        for m in range(FIRST_BATCH_SIZE):
            envelope = store.emit(EVENT_TYPE, sample_payload(n * 100 + m), tenant=f"tenant-{m % 4}", actor="bench")
            sqs.send_message(
                QueueUrl=queue_url,
                MessageBody=aws.dumps(envelope.to_item()),
                MessageGroupId=envelope.tenant,
                MessageDeduplicationId=envelope.id,
            )
        records = aws.lambda_records(sqs, queue_url, arn, max_messages=FIRST_BATCH_SIZE)
        if len(records) != FIRST_BATCH_SIZE:
            raise RuntimeError(f"received {len(records)} of the batch's {FIRST_BATCH_SIZE} messages")
        sqs.delete_message_batch(
            QueueUrl=queue_url,
            Entries=[{"Id": str(i), "ReceiptHandle": r["receiptHandle"]} for i, r in enumerate(records)],
        )
        events.append({"Records": records})
    return events


def boto3_client(service: str, endpoint: str) -> Any:
    import boto3

    return boto3.client(
        service,
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="cold-start",
        aws_secret_access_key="cold-start",
    )


def measure_first_batch(target: Target, event: dict[str, Any]) -> dict[str, float]:
    event_file = WORK_DIR / "first-batch-event.json"
    event_file.write_text(json.dumps(event))
    figures = _run_script(target, FIRST_BATCH, str(event_file))
    if figures["failures"]:
        raise RuntimeError(f"{target.module} failed {figures['failures']} messages of its first batch")
    return figures


def completed_deliveries(endpoint: str) -> dict[str, int]:
    """What each consumer's table says it completed: a figure of the run, checked against the batches."""
    dynamodb = boto3_client("dynamodb", endpoint)

    def count(table: str, status_attribute: str, completed: str) -> int:
        items = dynamodb.get_paginator("scan").paginate(TableName=table).build_full_result()["Items"]
        return sum(1 for item in items if item.get(status_attribute, {}).get("S") == completed)

    return {
        "durable_consumer": count(INBOX_TABLE, "status", "COMPLETED"),
        "idempotent_app_handler": count(IDEMPOTENCY_TABLE, "status", "COMPLETED"),
    }


def run_first_batch(found: list[Target], rounds: int) -> dict[str, Any]:
    """Each round: each consumer, in alternating order, starts cold and processes one new batch."""
    with moto_server() as endpoint:
        compared = first_batch_targets(found, endpoint)
        events = iter(first_batches(endpoint, rounds * len(compared)))
        samples: dict[str, list[dict[str, float]]] = {key: [] for key in compared}
        for round_number in range(rounds):
            order = list(FIRST_BATCH_KEYS) if round_number % 2 == 0 else list(reversed(FIRST_BATCH_KEYS))
            for key in order:
                samples[key].append(measure_first_batch(compared[key], next(events)))
        completed = completed_deliveries(endpoint)
    expected = rounds * FIRST_BATCH_SIZE
    if any(count != expected for count in completed.values()):
        raise RuntimeError(f"expected {expected} completed deliveries per consumer, the tables hold {completed}")

    def cold_cpu(key: str) -> list[float]:
        return [s["import_cpu"] + s["batch_cpu"] for s in samples[key]]

    def cold_wall(key: str) -> list[float]:
        return [s["import"] + s["batch"] for s in samples[key]]

    engine, reference = FIRST_BATCH_KEYS
    return {
        "batch_size": FIRST_BATCH_SIZE,
        "rounds": rounds,
        "completed": completed,
        "consumers": [
            {
                "key": key,
                "label": compared[key].label,
                "import_ms": summary([s["import"] * 1000 for s in samples[key]]),
                "batch_ms": summary([s["batch"] * 1000 for s in samples[key]]),
                "import_cpu_ms": summary([s["import_cpu"] * 1000 for s in samples[key]]),
                "batch_cpu_ms": summary([s["batch_cpu"] * 1000 for s in samples[key]]),
                "cold_start_cpu_ms": summary([c * 1000 for c in cold_cpu(key)]),
                "cold_start_wall_ms": summary([w * 1000 for w in cold_wall(key)]),
            }
            for key in FIRST_BATCH_KEYS
        ],
        "cpu_ratio": ratios(cold_cpu(engine), cold_cpu(reference)),
        "wall_ratio": ratios(cold_wall(engine), cold_wall(reference)),
    }


def _import_times(target: Target, code: str) -> list[tuple[str, float]]:
    """Run ``code`` under ``python -X importtime`` as the target's function would start: each module it
    imported, in the order its import finished, with its self time in milliseconds (its nested imports
    excluded). A line ``DEFERRED_MARK`` that the code writes to stderr comes back as a name."""
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", NOT_SHIPPED + code],
        cwd=target.code_root,
        env=target.environment,
        capture_output=True,
        text=True,
        check=True,
    )
    found = []
    for line in result.stderr.splitlines():
        if line == DEFERRED_MARK:
            found.append((DEFERRED_MARK, 0.0))
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        self_us, _cumulative, name = (part.strip() for part in line.split(":", 1)[1].split("|"))
        found.append((name, int(self_us) / 1000))
    return found


def import_profile(target: Target, top: int = 8) -> list[dict[str, Any]]:
    """``python -X importtime``: milliseconds per top-level package, the costliest first."""
    code = (
        "".join(f"import {m}; " for m in target.first.split(",") if m)
        + f"import {target.module}"
        + "".join(f"; import {m}" for m in target.last.split(",") if m)
    )
    by_package: dict[str, float] = defaultdict(float)
    for name, ms in _import_times(target, code):
        by_package[name.split(".")[0]] += ms
    ranked = sorted(by_package.items(), key=lambda item: -item[1])
    return [{"package": package, "ms": ms} for package, ms in ranked[:top]]


# The durable consumer's own imports, and those it leaves to first use (issue #34 asked for each): a row's
# figure is the self time of its modules and their submodules, where the cold start imports them, or, for a
# row the handler's import does not load, measured right after it, as it would cost at first use. Label,
# modules.
ENGINE_IMPORTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("the envelope model (`outbox.log.envelope`)", ("outbox.log.envelope",)),
    ("the trace context model (`outbox.tracing`), the first pydantic model built", ("outbox.tracing",)),
    ("the functions' settings models (`outbox.settings`)", ("outbox.settings",)),
    ("python-ulid (`ulid`): new event ids, for emit()", ("ulid",)),
    ("rfc8785: canonical JSON the standard library's encoder does not write alike", ("rfc8785",)),
    ("the record-change lane's model (`outbox.best_effort.changes`)", ("outbox.best_effort.changes",)),
    ("every engine module the handler imports (`outbox.*`)", ("outbox",)),
)
DEFERRED_MARK = "-- deferred --"


def _matches(name: str, modules: tuple[str, ...]) -> bool:
    return any(name == module or name.startswith(f"{module}.") for module in modules)


def engine_import_times(target: Target, rounds: int) -> list[dict[str, Any]]:
    """``ENGINE_IMPORTS``, each over ``rounds`` fresh interpreters that import the handler, then what it defers.

    The collector is off: a collection's pause lands on whichever module's allocations happened to trigger it
    (the same one every run), and would be charged to it as if the module's own."""
    deferred = [m for _label, modules in ENGINE_IMPORTS for m in modules if m != "outbox"]
    code = (
        f"import gc, sys; gc.disable(); import {target.module}; sys.stderr.write({DEFERRED_MARK!r} + '\\n'); "
        + "; ".join(f"import {module}" for module in deferred)
    )
    samples: dict[str, list[float]] = defaultdict(list)
    at_import: dict[str, bool] = {}
    for _ in range(rounds):
        times = _import_times(target, code)
        mark = times.index((DEFERRED_MARK, 0.0))
        for label, modules in ENGINE_IMPORTS:
            imported = [ms for name, ms in times[:mark] if _matches(name, modules)]
            later = [ms for name, ms in times[mark + 1 :] if _matches(name, modules)]
            if imported or later:
                at_import[label] = bool(imported)
                samples[label].append(sum(imported) if imported else sum(later))
    return [
        {"label": label, "modules": list(modules), "at_import": at_import[label], "ms": summary(samples[label])}
        for label, modules in ENGINE_IMPORTS
        if label in samples
    ]


def tree_size(root: Path) -> dict[str, Any]:
    files = [p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    return {"files": len(files), "bytes": sum(p.stat().st_size for p in files)}


def zipped_size(root: Path, scratch: Path) -> int:
    """The deployment package as CDK uploads it: a deflated zip of the folder."""
    scratch.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(scratch, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
            archive.write(path, path.relative_to(root))
    size = scratch.stat().st_size
    scratch.unlink()
    return size


def largest_packages(python_dir: Path, top: int = 6) -> list[dict[str, Any]]:
    sizes = [
        {"package": child.name, "bytes": tree_size(child)["bytes"] if child.is_dir() else child.stat().st_size}
        for child in python_dir.iterdir()
        if not child.name.endswith(".dist-info") and child.name != "__pycache__"
    ]
    return sorted(sizes, key=lambda s: -int(s["bytes"]))[:top]


def sizes(assembly: Path, layer: Path) -> dict[str, Any]:
    scratch = PROJECT_ROOT / ".local" / "bench" / "size-check.zip"
    stack = load_stack(assembly, STACK_NAME)
    functions = {}
    for spec in stack.functions.values():
        if spec.asset_path is None:
            continue
        staged = assembly / spec.asset_path
        functions[spec.asset_path] = {
            **tree_size(staged),
            "zipped_bytes": zipped_size(staged, scratch),
            "handler_modules": sorted(
                {f.handler.rsplit(".", 1)[0] for f in stack.functions.values() if f.asset_path == spec.asset_path}
            ),
        }
    return {
        "layer": {
            **tree_size(layer / "python"),
            "zipped_bytes": zipped_size(layer, scratch),
            "largest": largest_packages(layer / "python"),
        },
        "function_packages": functions,
    }


def run(assembly: Path = ASSEMBLY_DIR, layer: Path | None = None, rounds: int = 7) -> dict[str, Any]:
    found = targets(assembly)
    samples: dict[str, list[dict[str, float]]] = {t.label: [] for t in found}
    for round_number in range(rounds):
        shift = round_number % len(found)
        for target in found[shift:] + found[:shift]:
            samples[target.label].append(measure_once(target))
    reference = next(t for t in found if t.module == "bare_batch_handler")
    reference_imports = [s["import"] for s in samples[reference.label]]
    results = []
    for target in found:
        imports = [s["import"] for s in samples[target.label]]
        ready = [s["import"] + s["init"] for s in samples[target.label]]
        results.append(
            {
                "key": target.key,
                "label": target.label,
                "module": target.module,
                "reference": target.reference,
                "variant": target.variant,
                "import_ms": summary([i * 1000 for i in imports]),
                "import_and_first_invocation_setup_ms": summary([r * 1000 for r in ready]),
                "import_ratio_to_reference": ratios(imports, reference_imports),
                "setup_ratio_to_reference": ratios(ready, reference_imports),
                "import_profile": import_profile(target),
            }
        )
    durable = next(t for t in found if t.key == "durable_consumer")
    figures: dict[str, Any] = {
        "rounds": rounds,
        "reference": reference.label,
        "handlers": results,
        "engine_imports": engine_import_times(durable, rounds),
        "first_batch": run_first_batch(found, rounds),
    }
    if layer is not None:
        figures["sizes"] = sizes(assembly, layer)
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--assembly", type=Path, default=ASSEMBLY_DIR)
    parser.add_argument("--layer", type=Path)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args(argv)
    figures = run(args.assembly, args.layer, args.rounds)
    args.out.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
