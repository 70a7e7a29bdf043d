"""3. Cold start: import time of each handler against reference Powertools handlers, and package sizes.

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
import compileall
import json
import os
import shutil
import subprocess
import sys
import zipfile
from collections import defaultdict
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from benchmarks.assembly import ASSEMBLY_DIR, ENGINE_SOURCE, STACK_NAME
from benchmarks.machine import PROJECT_ROOT
from benchmarks.stats import ratios, summary
from outbox.local.template import Reference, load_stack
from outbox_cdk import engine_layer

REFERENCE_DIR = Path(__file__).resolve().parent / "reference"
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


def lambda_environment(
    function_name: str, code_root: Path, engine_root: Path, variables: dict[str, str]
) -> dict[str, str]:
    """What the Lambda runtime sets, plus the function's own variables."""
    return {
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


def _compiled(source: Path, target: Path) -> Path:
    """A copy with byte code compiled ahead (what shipping it in the layer or package would give)."""
    _without_bytecode(source, target)
    compileall.compile_dir(str(target), quiet=1)
    return target


def targets(assembly: Path) -> list[Target]:
    """Each handler's code and the engine copied without byte code, as Lambda finds them."""
    stack = load_stack(assembly, STACK_NAME)
    engine_root = WORK_DIR / "opt" / "python"
    if not (engine_root / "outbox").exists():
        engine_root.mkdir(parents=True, exist_ok=True)
        engine_layer.copy_engine(engine_root)
    found = []
    measured: set[str] = set()
    inits = {
        "outbox.handlers.durable_consumer": "consumer",
        "outbox.handlers.record_change_consumer": "consumer",
        "outbox.handlers.operator_api": "operations",
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
    compiled_engine = _compiled(ENGINE_SOURCE, WORK_DIR / "opt-compiled" / "python" / "outbox").parent
    compiled_code = _compiled(durable.code_root, WORK_DIR / "task-compiled" / durable.code_root.name)
    found.append(
        replace(
            durable,
            key="durable_consumer_byte_code",
            label="durable consumer, proposed: byte code shipped in the layer and package",
            code_root=compiled_code,
            variant=True,
            environment={
                **durable.environment,
                "PYTHONPATH": os.pathsep.join([str(compiled_code), str(compiled_engine)]),
                "LAMBDA_TASK_ROOT": str(compiled_code),
            },
        )
    )
    reference_variables = {"POWERTOOLS_SERVICE_NAME": "reference", "INBOX_TABLE_NAME": "InboxTable"}
    reference_root = _without_bytecode(REFERENCE_DIR, WORK_DIR / "task" / "reference")
    for module, label in (
        ("bare_batch_handler", "reference: Powertools batch handler (Logger, Tracer, Metrics)"),
        ("minimal_batch_handler", "reference: Powertools batch processor alone"),
        ("boto3_batch_handler", "reference: Powertools batch handler + boto3"),
        ("idempotent_batch_handler", "reference: Powertools batch + Idempotency on DynamoDB"),
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
    reference = Reference.parse(raw)
    if reference is not None:
        # Names and URLs are only read at import or first invocation, never called: any value will do.
        if "Queue" in reference.logical_id:
            return f"https://sqs.us-east-1.amazonaws.com/123456789012/{reference.logical_id}"
        return reference.logical_id
    return str(raw)


def measure_once(target: Target) -> dict[str, float]:
    result = subprocess.run(
        [sys.executable, "-c", MEASURE, target.module, target.init, target.first, target.last],
        cwd=target.code_root,
        env=target.environment,
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"importing {target.module} failed:\n{result.stderr[-3000:]}")
    figures: dict[str, float] = json.loads(result.stdout.strip().splitlines()[-1])
    return figures


def import_profile(target: Target, top: int = 8) -> list[dict[str, Any]]:
    """``python -X importtime``: milliseconds per top-level package, the costliest first."""
    result = subprocess.run(
        [
            sys.executable,
            "-X",
            "importtime",
            "-c",
            "".join(f"import {m}; " for m in target.first.split(",") if m)
            + f"import {target.module}"
            + "".join(f"; import {m}" for m in target.last.split(",") if m),
        ],
        cwd=target.code_root,
        env=target.environment,
        capture_output=True,
        text=True,
        check=True,
    )
    by_package: dict[str, float] = defaultdict(float)
    for line in result.stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        self_us, _cumulative, name = (part.strip() for part in line.split(":", 1)[1].split("|"))
        by_package[name.split(".")[0]] += int(self_us) / 1000
    ranked = sorted(by_package.items(), key=lambda item: -item[1])
    return [{"package": package, "ms": ms} for package, ms in ranked[:top]]


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
    figures: dict[str, Any] = {"rounds": rounds, "reference": reference.label, "handlers": results}
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
