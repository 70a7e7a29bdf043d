"""``python -m benchmarks`` (``make bench``): every benchmark, one process per comparison, then the report.

    python -m benchmarks [--quick] [--no-write] [--render-only] [--results PATH]

Each benchmark module runs in its own interpreter (no warm caches, no moto state or patches shared between
comparisons) and writes its figures as JSON under ``.local/bench/full/`` (``quick/`` with ``--quick``); this
runner loads them into the results model (``benchmarks.results``), judges the targets
(``benchmarks/targets.toml``), renders the report (``benchmarks.report``: the templates and
``benchmarks/explanations.md``), prints it and writes ``benchmarks/RESULTS.md``. ``--quick`` shrinks every
benchmark to a smoke run (its figures are too small to mean anything, and it never writes RESULTS.md);
``--render-only`` rebuilds the report from the figures the last run left (the last quick run's with
``--quick``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks import machine, report, results, targets
from benchmarks.assembly import BENCH_DIR

RESULTS_FILE = Path(__file__).resolve().parent / "RESULTS.md"

# name -> (module, arguments for a full run, arguments for --quick)
STEPS: dict[str, tuple[str, list[str], list[str]]] = {
    "prepare": ("benchmarks.assembly", [], []),
    "consumer": (
        "benchmarks.consumer_overhead",
        ["--repetitions", "5", "--batches", "5"],
        ["--repetitions", "1", "--batches", "1"],
    ),
    "cost": (
        "benchmarks.cost_per_event",
        ["--trickle-orders", "400", "--burst-orders", "150"],
        ["--trickle-orders", "8", "--burst-orders", "25"],
    ),
    "cold_start": ("benchmarks.cold_start", ["--rounds", "7"], ["--rounds", "1"]),
    "emit": (
        "benchmarks.emit_contention",
        ["--repetitions", "3", "--seconds", "1"],
        ["--repetitions", "1", "--seconds", "0.2"],
    ),
    "end_to_end": (
        "benchmarks.end_to_end",
        ["--orders", "60", "--repetitions", "3"],
        ["--orders", "4", "--repetitions", "1"],
    ),
    "completeness": ("benchmarks.completeness_cost", ["--events", "1000"], ["--events", "20"]),
    "workflow": ("benchmarks.workflow_cost", ["--orders", "40"], ["--orders", "4"]),
}


def run_step(name: str, module: str, arguments: list[str], out_dir: Path) -> tuple[dict[str, Any], float]:
    out = out_dir / f"{name}.json"
    env = {**os.environ, "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20", "PYTHONWARNINGS": "ignore"}
    started = time.perf_counter()
    print(f"-- {name}: python -m {module} {' '.join(arguments)}", flush=True)
    subprocess.run([sys.executable, "-m", module, "--out", str(out), *arguments], check=True, env=env)
    elapsed = time.perf_counter() - started
    print(f"   {elapsed:.0f} s", flush=True)
    figures: dict[str, Any] = json.loads(out.read_text())
    return figures, elapsed


def run_all(out_dir: Path, quick: bool) -> None:
    started = time.perf_counter()
    timings: dict[str, float] = {}
    prepared: dict[str, Any] = {}
    for name, (module, full, smoke) in STEPS.items():
        arguments = list(smoke if quick else full)
        if name in ("cost", "end_to_end", "workflow"):
            arguments += ["--assembly", prepared["assembly"]]
        if name == "cold_start":
            arguments += ["--assembly", prepared["assembly"], "--layer", prepared["layer"]]
        figures, timings[name] = run_step(name, module, arguments, out_dir)
        if name == "prepare":
            prepared = figures
    run = {"timings": timings, "total_seconds": time.perf_counter() - started, "machine": machine.describe()}
    (out_dir / "run.json").write_text(json.dumps(run, indent=2) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a smoke run: tiny sizes, RESULTS.md untouched")
    parser.add_argument("--no-write", action="store_true", help="print the tables, leave RESULTS.md alone")
    parser.add_argument(
        "--render-only", action="store_true", help="report the last run's figures again (the quick run's with --quick)"
    )
    parser.add_argument("--results", type=Path, default=RESULTS_FILE)
    args = parser.parse_args(argv)
    out_dir = BENCH_DIR / ("quick" if args.quick else "full")
    out_dir.mkdir(parents=True, exist_ok=True)
    if not args.render_only:
        run_all(out_dir, args.quick)
    try:
        text = report.render(
            results.load(out_dir), report.load_prices(), targets.load_targets(), report.load_explanations()
        )
    except (
        results.MissingFigureError,
        targets.TargetsError,
        report.ExplanationsError,
        report.UnaccountedWritesError,
    ) as exc:
        print(f"cannot render the report: {exc}", file=sys.stderr)
        return 1
    print()
    print(text)
    if not (args.quick or args.no_write):
        args.results.write_text(text)
        print(f"written to {args.results}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
