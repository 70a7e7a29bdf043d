"""``make mutants-sample``: an unbiased mutation score. The catalogue of ``simulation.mutants`` was written by
the people who wrote the simulator, and is tuned to it; these mutants are not written by anyone. cosmic-ray's own
mutation operators (every core operator that takes no argument) enumerate every mutation point of the guarantee
modules, a random sample is drawn with a fixed seed, and each mutant is installed alone, in processes of its own,
by the import hook of ``simulation.mutation``:

1. the tests that cover its module run first (``simulation.mechanical.TESTS``, a fixed map; pytest in a
   subprocess, with ``--assert=plain``: the ``outbox`` distribution is a pytest plugin, so pytest's assertion
   rewriter would load the engine's modules from disk itself, in front of the hook); a failing test kills it;
2. if every test passed, the simulator's CI seeds 1..40, stopping at the first seed that reports a violation.

    python -m simulation.mutants_sample                          # 200 mutants drawn with seed 50
    python -m simulation.mutants_sample --sample 60 --resume      # go on where an interrupted run stopped
    python -m simulation.mutants_sample --jobs 2                  # two mutants at once (one per core)
    python -m simulation.mutants_sample --list                    # the mutation points of each module; run nothing

The population, the sample and the map of tests are ``simulation.mechanical``'s. A mutant whose code does not
compile is ``invalid``. A test file that fails without any mutant, or a seed that fails without one, would prove
nothing: each is run once unmutated before it is allowed to kill.
Results go to ``.local/mechanical-mutants.json``, rewritten after every mutant (``--resume`` reads it back).

Statuses: ``tests`` (killed by a test), ``seed`` (killed by the simulator seed ``killed_by``), ``survived``,
``crashed`` (the simulator crashed without reporting a violation: not counted as killed, as in ``make mutants``),
``timeout``, ``invalid`` and ``error`` (not measured). The score is killed / (killed + survived + crashed + timeout).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from simulation.mechanical import (
    SAMPLE,
    SAMPLE_SEED,
    Point,
    covering_tests,
    diff,
    mutant,
    operators,
    population,
    sample,
)
from simulation.mutants import Mutant
from simulation.mutation import (
    DEFAULT_SEEDS,
    PROJECT_ROOT,
    StaleMutantError,
    install,
    mutated_source,
    run_mutant,
    run_worker,
)

RESULTS_PATH = PROJECT_ROOT / ".local" / "mechanical-mutants.json"
TESTS_TIMEOUT = 600  # seconds for a mutant's tests; the unmutated run of the longest set takes about a minute
SEED_TIMEOUT = 120  # seconds per simulator seed (an unmutated CI seed takes a few)
PYTEST_ARGS = ("-q", "-x", "-p", "no:cacheprovider", "-n", "0", "--assert=plain", "-m", "not slow")
EXIT_UNEXERCISED = 7  # the tests never imported the mutated module
K = TypeVar("K")
V = TypeVar("V")


# -- the test step (in the worker process) ----------------------------------------------------------------


def tests_worker(argv: list[str]) -> int:
    """``--tests-worker MUTANT_JSON PYTEST_ARGS...``: the hook first, then pytest in this process."""
    finder = install(Mutant(**json.loads(argv[0])))
    import pytest

    code = int(pytest.main(argv[1:]))
    if code == 0 and not finder.loaded:
        return EXIT_UNEXERCISED
    return code


@dataclass
class PytestRun:
    code: int | None  # None: it ran out of time
    failed: str | None  # the first test reported failed or in error
    tail: str


def run_tests(files: Sequence[str], mutant: Mutant | None, timeout: int = TESTS_TIMEOUT) -> PytestRun:
    command = [sys.executable, "-m", "simulation.mutants_sample"]
    if mutant is not None:
        command += ["--tests-worker", json.dumps(asdict(mutant))]
    else:
        command = [sys.executable, "-m", "pytest"]
    command += [*PYTEST_ARGS, *files]
    environment = {**os.environ, "AWS_ACCOUNT_ID_ENDPOINT_MODE": "disabled"}
    process = subprocess.Popen(
        command,
        cwd=PROJECT_ROOT,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)  # the worker and anything it started: all ours
        output, _ = process.communicate()
        return PytestRun(None, None, _tail(output))
    failed = next((found[2] for line in output.splitlines() if (found := _SUMMARY.match(line))), None)
    return PytestRun(process.returncode, failed, _tail(output))


# pytest's short summary: "FAILED tests/x.py::test_y - reason" (a log line may begin with ERROR too)
_SUMMARY = re.compile(r"^(FAILED|ERROR) (\S+\.py(::\S+)?)")


def _tail(output: str) -> str:
    return " | ".join(output.strip().splitlines()[-3:])


# -- one mutant, both steps -------------------------------------------------------------------------------


@dataclass
class Result:
    id: str
    module: str
    line: int
    operator: str
    status: str  # tests | seed | survived | crashed | timeout | invalid | error
    diff: str = ""
    killed_by: str | int | None = None  # the first failing test, or the seed
    detail: str = ""  # the first violation, the crash, or why it was not measured
    seeds_run: int = 0
    seconds: float = 0.0


@dataclass
class Baselines:
    """What fails with no mutant: each test set and seed is run unmutated once, the first time it would kill
    (once however many mutants, measured at once, ask for it)."""

    assembly: Path
    seed_timeout: int = SEED_TIMEOUT
    tests: dict[str, PytestRun] = field(default_factory=dict)
    seeds: dict[int, bool] = field(default_factory=dict)
    _guard: threading.Lock = field(default_factory=threading.Lock)
    _runs: dict[Any, threading.Lock] = field(default_factory=dict)

    def tests_pass(self, files: tuple[str, ...]) -> PytestRun:
        key = " ".join(files)
        return self._once(self.tests, key, lambda: run_tests(files, None))

    def seed_clean(self, seed: int) -> bool:
        def clean() -> bool:
            run = run_worker(None, [seed], self.assembly, self.seed_timeout, 0)
            return run.error is None and all(not s["violations"] and not s["error"] for s in run.seeds)

        return self._once(self.seeds, seed, clean)

    def _once(self, known: dict[K, V], key: K, run: Callable[[], V]) -> V:
        with self._guard:
            lock = self._runs.setdefault((id(known), key), threading.Lock())
        with lock:  # a second asker waits for the first one's run instead of starting its own
            if key not in known:
                known[key] = run()
            return known[key]


def measure(point: Point, seeds: Sequence[int], baselines: Baselines) -> Result:
    started = time.monotonic()
    result = Result(point.id, point.module, point.line, point.operator, "error")
    try:
        candidate = mutant(point)
        result.diff = diff(candidate)
        mutated_source(candidate)
    except StaleMutantError as exc:
        result.status, result.detail = "invalid", str(exc)
        return result
    files = covering_tests(point.module)
    clean = baselines.tests_pass(files)
    if clean.code != 0:
        result.detail = f"the tests fail without a mutant ({clean.code}): {clean.tail}"
        return result
    tests = run_tests(files, candidate)
    if tests.code is None:
        result.status, result.detail = "timeout", f"the tests ran longer than {TESTS_TIMEOUT} s"
    elif tests.code in (1, 2):  # failed, or could not even collect (the mutated module does not import)
        result.status, result.killed_by, result.detail = "tests", tests.failed or "collection", tests.tail
    elif tests.code not in (0, EXIT_UNEXERCISED):
        result.detail = f"pytest exited with {tests.code}: {tests.tail}"
    else:
        _simulate(result, candidate, seeds, baselines)
    result.seconds = time.monotonic() - started
    return result


def _simulate(result: Result, candidate: Mutant, seeds: Sequence[int], baselines: Baselines) -> None:
    remaining = list(seeds)
    while remaining:
        run = run_mutant(candidate, remaining, baselines.assembly, seed_timeout=baselines.seed_timeout, enough=1)
        result.seeds_run += len(run.seeds_run)
        if run.caught_by and not baselines.seed_clean(run.caught_by[0]):
            remaining = [s for s in remaining if s > run.caught_by[0]]  # that seed fails anyway: go on after it
            continue
        if run.caught_by:
            result.status, result.killed_by, result.detail = "seed", run.caught_by[0], run.first_violation or ""
        elif run.error and "never imported" in run.error:
            result.status, result.detail = "survived", "the simulator never imports the module"
        elif run.error:
            result.detail = run.error
        elif run.first_crash and "ran longer than" in run.first_crash:
            result.status, result.detail = "timeout", run.first_crash
        elif run.crashed:
            result.status, result.detail = "crashed", run.first_crash or ""
        else:
            result.status = "survived"
        return
    result.status = "survived"


# -- the report -------------------------------------------------------------------------------------------

KILLED, MEASURED = ("tests", "seed"), ("tests", "seed", "survived", "crashed", "timeout")


def score_line(results: Sequence[Result]) -> str:
    counts = Counter(r.status for r in results)
    killed, measured = sum(counts[s] for s in KILLED), sum(counts[s] for s in MEASURED)
    percent = f"{100.0 * killed / measured:.0f}%" if measured else "-"
    parts = ", ".join(f"{counts[s]} {s}" for s in (*MEASURED, "invalid", "error") if counts[s])
    return f"mechanical mutation score: {killed}/{measured} killed ({percent}); {parts}"


def _say(line: str) -> None:
    print(line, flush=True)


def _commit() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=PROJECT_ROOT, capture_output=True, text=True)
    return done.stdout.strip() or "unknown"


def _write(path: Path, header: dict[str, Any], results: Sequence[Result]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    document = {**header, "score": score_line(results), "mutants": [asdict(r) for r in results]}
    path.write_text(json.dumps(document, indent=2) + "\n")


def _previous(path: Path, header: dict[str, Any]) -> Iterator[Result]:
    if not path.exists():
        return
    document = json.loads(path.read_text())
    if any(document.get(key) != header[key] for key in ("sample_seed", "population", "seeds")):
        raise SystemExit(f"{path} holds another sample (seed, population or seeds differ): --resume refused")
    for entry in document["mutants"]:
        if entry["status"] != "error":
            yield Result(**entry)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--tests-worker"]:
        return tests_worker(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m simulation.mutants_sample", description=__doc__.split("\n\n")[0])
    parser.add_argument("--sample", type=int, default=SAMPLE, help="how many mutants to draw")
    parser.add_argument("--sample-seed", type=int, default=SAMPLE_SEED, help="the seed of the draw")
    parser.add_argument("--seeds", type=int, default=DEFAULT_SEEDS, help="simulator seeds 1..N")
    parser.add_argument("--seed-timeout", type=int, default=SEED_TIMEOUT, help="seconds per simulator seed")
    parser.add_argument("--resume", action="store_true", help="keep the results of --json and run the rest")
    parser.add_argument("--list", action="store_true", help="only count the mutation points; run nothing")
    parser.add_argument("--assembly", type=Path, help="a synthesized cloud assembly (default: synthesize)")
    parser.add_argument("--json", type=Path, default=RESULTS_PATH, help="where the results are written")
    parser.add_argument("--jobs", type=int, default=1, help="mutants measured at once, each in processes of its own")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error("--jobs takes a whole number of at least 1")

    everything = population()
    if args.list:
        for module, count in Counter(p.module for p in everything).items():
            _say(f"{count:6d}  {module}")
        _say(f"{len(everything):6d}  mutants of cosmic-ray's {len(operators())} operators")
        return 0
    drawn = sample(everything, args.sample, args.sample_seed)
    seeds = list(range(1, args.seeds + 1))
    header = {
        "tool": "cosmic-ray " + _version("cosmic-ray"),
        "commit": _commit(),
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "population": len(everything),
        "sample_seed": args.sample_seed,
        "sample": args.sample,
        "seeds": seeds,
    }
    done = {r.id: r for r in _previous(args.json, header)} if args.resume else {}
    _say(
        f"{len(drawn)} of {len(everything)} mutants drawn with seed {args.sample_seed} (cosmic-ray's operators); "
        f"tests, then simulator seeds 1..{args.seeds}; {len(done)} already measured"
    )
    from simulation.cli import assembly

    baselines = Baselines(args.assembly or assembly(), args.seed_timeout)
    results = dict(done)  # by id; written in the order drawn
    order = {point.id: index for index, point in enumerate(drawn)}
    written = threading.Lock()

    def measured(index: int, point: Point) -> None:
        result = measure(point, seeds, baselines)
        with written:
            results[point.id] = result
            _write(args.json, header, sorted(results.values(), key=lambda r: order[r.id]))
            killer = f" {result.killed_by}" if result.killed_by is not None else ""
            _say(f"{index:4d} {result.id:<70} {result.status}{killer} ({result.seconds:.0f} s)")

    todo = [(index, point) for index, point in enumerate(drawn, 1) if point.id not in done]
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:  # each mutant runs in subprocesses: threads suffice
        for finished in [pool.submit(measured, index, point) for index, point in todo]:
            finished.result()
    _say(score_line(list(results.values())))
    for result in sorted(results.values(), key=lambda r: order[r.id]):
        if result.status in ("survived", "crashed", "timeout"):
            _say(f"{result.status}: {result.id}\n{result.diff}")
    return 2 if any(r.status == "error" for r in results.values()) else 0


def _version(distribution: str) -> str:
    from importlib.metadata import version

    return version(distribution)


if __name__ == "__main__":
    raise SystemExit(main())
