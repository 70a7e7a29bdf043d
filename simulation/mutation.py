"""``make mutants``: what the simulator can catch, measured. Each mutant of ``simulation.mutants`` (one small,
realistic bug in the engine's guarantee code) is applied alone, in a fresh process, and the default seeds
run against it until three of them report a violation.

    python -m simulation.mutation                      # every mutant, seeds 1..40, 2 processes
    python -m simulation.mutation --only claim-no-takeover --seeds 10
    python -m simulation.mutation --check              # only: does every snippet still occur exactly once?
    python -m simulation.mutation --min-score 80       # exit 1 below 80 % caught

A mutant is source text: its ``original`` must occur exactly once in its module's source, or the mutant is
stale and reported as an error (never as survived). The worker process installs an import hook before
anything imports the engine, so every ``from outbox.inbox import Inbox`` sees the mutated module. The
unmutated engine runs the same seeds first (the baseline): a seed that fails without any mutant proves
nothing about one and is left out. Results go to ``.local/mutants.json``.

A seed that crashes the simulator (``SeedResult.error``) never counts as catching a mutant: a mutant only
crashed is listed apart. The exit status is 0 whatever the score; 1 below ``--min-score``; 2 when something
could not be measured (a stale mutant, a failed worker, a baseline without a clean seed).

This module imports nothing of the project at the top: the worker loads it by file path before the engine
is imported (``import simulation`` alone would import the engine).

One file: the worker process loads this module by its path before anything of the project is imported
(the import hook must be installed first), so the hook, the worker and the parent that starts it stay in it.
"""

from __future__ import annotations

import argparse
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import FrameType, ModuleType
from typing import Any

from simulation.mutants import MUTANTS, Mutant

PROJECT_ROOT = Path(__file__).resolve().parents[1]
RESULTS_PATH = PROJECT_ROOT / ".local" / "mutants.json"
DEFAULT_SEEDS = 40  # the CI seeds of tests/simulation/test_simulation.py: 1..40
ENOUGH = 3  # seeds that caught a mutant: more than one shows it is not a fluke of one schedule
SEED_TIMEOUT = 300  # seconds; a seed that runs longer is recorded as a crash of the simulator
MAX_TIMEOUTS = 2  # a mutant that hangs the simulator twice is not run on further seeds


class StaleMutantError(Exception):
    """A mutant whose snippet no longer occurs exactly once: the catalogue must follow the engine."""


# -- the source of a mutant ---------------------------------------------------------------------------------


def module_path(module: str) -> Path:
    """Where ``module``'s source is, found the way ``import`` would, without importing anything."""
    search: Sequence[str] | None = None
    spec = None
    parts = module.split(".")
    for depth in range(1, len(parts) + 1):
        spec = importlib.machinery.PathFinder.find_spec(".".join(parts[:depth]), search)
        if spec is None:
            raise StaleMutantError(f"module {module} not found on sys.path")
        search = spec.submodule_search_locations
    assert spec is not None
    if spec.origin is None or not spec.origin.endswith(".py"):
        raise StaleMutantError(f"module {module} has no Python source ({spec.origin})")
    return Path(spec.origin)


def mutated_source(mutant: Mutant) -> str:
    """The module's current source with the mutant applied; StaleMutantError unless the snippet occurs
    exactly once, or if the result does not compile."""
    path = module_path(mutant.module)
    source = path.read_text()
    count = source.count(mutant.original)
    if count != 1:
        where = "does not occur" if count == 0 else f"occurs {count} times"
        raise StaleMutantError(f"mutant {mutant.id}: its original snippet {where} in {mutant.module} ({path})")
    mutated = source.replace(mutant.original, mutant.replacement)
    try:
        compile(mutated, str(path), "exec", dont_inherit=True)
    except SyntaxError as exc:
        raise StaleMutantError(f"mutant {mutant.id}: the mutated {mutant.module} does not compile: {exc}") from exc
    return mutated


def check(mutants: Iterable[Mutant]) -> list[str]:
    """What is wrong with the catalogue against today's source (empty when every mutant applies)."""
    problems = []
    seen: set[str] = set()
    for mutant in mutants:
        if mutant.id in seen:
            problems.append(f"mutant {mutant.id}: two mutants have this id")
        seen.add(mutant.id)
        if mutant.original == mutant.replacement:
            problems.append(f"mutant {mutant.id}: the replacement is the original")
        try:
            mutated_source(mutant)
        except StaleMutantError as exc:
            problems.append(str(exc))
    return problems


# -- the import hook (in the worker process) ----------------------------------------------------------------


class MutantFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves the mutated source for one module; every other import goes the usual way. The code is
    compiled from memory and never cached as bytecode, so no later import can pick the mutant up."""

    def __init__(self, mutant: Mutant) -> None:
        self.mutant = mutant
        self.path = module_path(mutant.module)
        self.source = mutated_source(mutant)
        self.loaded = False

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.mutant.module:
            return None
        package = [str(self.path.parent)] if self.path.name == "__init__.py" else None
        return importlib.util.spec_from_file_location(
            fullname, self.path, loader=self, submodule_search_locations=package
        )

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return None  # the default module object

    def exec_module(self, module: ModuleType) -> None:
        self.loaded = True
        exec(compile(self.source, str(self.path), "exec", dont_inherit=True), module.__dict__)


def install(mutant: Mutant) -> MutantFinder:
    """Put the mutant in front of every other importer. Refused once its module is imported: objects
    already handed out would keep the original code."""
    if mutant.module in sys.modules:
        raise RuntimeError(f"{mutant.module} is already imported: the mutant {mutant.id} would not take effect")
    finder = MutantFinder(mutant)
    sys.meta_path.insert(0, finder)
    return finder


# -- one worker process: one mutant (or none: the baseline) over the seeds ----------------------------------

# The worker is started as ``python -c _BOOTSTRAP <this file> ...``: loaded by path, so that importing it does
# not import the ``simulation`` package (and with it the engine) before the hook is in place.
_BOOTSTRAP = """
import importlib.util, sys
spec = importlib.util.spec_from_file_location("simulation_mutation_worker", sys.argv[1])
module = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = module
spec.loader.exec_module(module)
raise SystemExit(module.worker(sys.argv[2:]))
"""
EXIT_STALE = 3


class SeedTimeoutError(KeyboardInterrupt):
    """A seed ran past its time limit: an interrupt, as Ctrl-C is, so that neither the simulator nor the local
    runtime takes it for a crash of the code it runs (the event source mapping fails a batch for any other
    exception and goes on)."""


def _on_alarm(_signum: int, _frame: FrameType | None) -> None:
    raise SeedTimeoutError


def worker(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="simulation mutation worker")
    parser.add_argument("--mutant", help="the mutant as JSON (none: the unmutated engine)")
    parser.add_argument("--seeds", type=int, nargs="+", required=True)
    parser.add_argument("--assembly", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True, help="one JSON line per seed is appended here")
    parser.add_argument("--enough", type=int, default=0, help="stop after this many seeds caught it (0: never)")
    parser.add_argument("--seed-timeout", type=int, default=SEED_TIMEOUT)
    args = parser.parse_args(argv)
    finder = None
    if args.mutant:
        mutant = Mutant(**json.loads(args.mutant))
        try:
            finder = install(mutant)
        except StaleMutantError as exc:
            print(exc, file=sys.stderr)
            return EXIT_STALE
    # Only now may the engine be imported.
    import warnings

    from outbox.local.template import load_stack
    from simulation.cli import STACK_NAME
    from simulation.runner import run_seed

    warnings.filterwarnings("ignore", "No application metrics to publish")
    stack = load_stack(args.assembly, STACK_NAME)
    signal.signal(signal.SIGALRM, _on_alarm)
    caught = timeouts = 0
    with args.out.open("a") as out:
        for seed in args.seeds:
            started = time.monotonic()
            signal.alarm(args.seed_timeout)
            try:
                result = run_seed(seed, stack)
                violations = [str(v) for v in result.violations]
                error = None if result.error is None else f"{type(result.error).__name__}: {result.error}"
            except SeedTimeoutError:
                violations, error = [], f"the seed ran longer than {args.seed_timeout} s"
                timeouts += 1
            except (KeyboardInterrupt, SystemExit):
                raise
            except BaseException as exc:  # out of run_seed's own net (it catches Exception only)
                violations, error = [], f"{type(exc).__name__}: {exc} (raised out of run_seed)"
            finally:
                signal.alarm(0)
            line = {"seed": seed, "violations": violations[:5], "error": error, "seconds": time.monotonic() - started}
            out.write(json.dumps(line) + "\n")
            out.flush()
            caught += bool(violations)
            if (args.enough and caught >= args.enough) or timeouts >= MAX_TIMEOUTS:
                break
    if finder is not None and not finder.loaded:
        print(f"the simulation never imported {finder.mutant.module}: the mutant was not exercised", file=sys.stderr)
        return 1
    return 0


# -- the parent: running the workers ------------------------------------------------------------------------


@dataclass
class Run:
    """What one worker process reported, seed by seed."""

    seeds: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None  # the worker failed (stale mutant, unexercised module, a crash of its own)
    seconds: float = 0.0


def run_worker(mutant: Mutant | None, seeds: Sequence[int], assembly: Path, seed_timeout: int, enough: int) -> Run:
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="mutant-") as scratch:
        out, log = Path(scratch) / "seeds.jsonl", Path(scratch) / "log.txt"
        command = [sys.executable, "-c", _BOOTSTRAP, __file__, "--assembly", str(assembly), "--out", str(out)]
        command += ["--seeds", *map(str, seeds), "--enough", str(enough), "--seed-timeout", str(seed_timeout)]
        if mutant is not None:
            command += ["--mutant", json.dumps(asdict(mutant))]
        environment = {
            **os.environ,
            "AWS_ACCOUNT_ID_ENDPOINT_MODE": "disabled",
            "JSII_SILENCE_WARNING_UNTESTED_NODE_VERSION": "1",
        }
        with log.open("w") as sink:
            done = subprocess.run(
                command, cwd=PROJECT_ROOT, env=environment, stdout=sink, stderr=subprocess.STDOUT, check=False
            )
        lines = out.read_text().splitlines() if out.exists() else []
        run = Run([json.loads(line) for line in lines], seconds=time.monotonic() - started)
        if done.returncode != 0:
            tail = log.read_text().strip().splitlines()[-3:]
            run.error = f"the worker exited with {done.returncode}: " + " | ".join(tail)
    return run


@dataclass
class MutantResult:
    id: str
    module: str
    description: str
    what_should_catch_it: str
    status: str  # caught | crashed (the simulator, never an invariant) | survived | equivalent | error
    seeds_run: list[int] = field(default_factory=list)
    caught_by: list[int] = field(default_factory=list)
    crashed: list[int] = field(default_factory=list)
    first_violation: str | None = None
    first_crash: str | None = None
    error: str | None = None
    seconds: float = 0.0


def judge(mutant: Mutant, run: Run) -> MutantResult:
    caught = [s for s in run.seeds if s["violations"]]
    crashed = [s for s in run.seeds if s["error"] is not None]
    error = run.error
    if caught and mutant.equivalent:
        status = "error"
        error = f"caught by seed {caught[0]['seed']}, so not equivalent: drop its `equivalent` reason"
    elif caught:
        status = "caught"
    elif run.error is not None:
        status = "error"
    elif crashed:
        status = "crashed"
    else:
        status = "equivalent" if mutant.equivalent else "survived"
    return MutantResult(
        mutant.id,
        mutant.module,
        mutant.description,
        mutant.what_should_catch_it,
        status,
        seeds_run=[s["seed"] for s in run.seeds],
        caught_by=[s["seed"] for s in caught],
        crashed=[s["seed"] for s in crashed],
        first_violation=caught[0]["violations"][0] if caught else None,
        first_crash=f"seed {crashed[0]['seed']}: {crashed[0]['error']}" if crashed else None,
        error=error,
        seconds=run.seconds,
    )


def run_mutant(
    mutant: Mutant, seeds: Sequence[int], assembly: Path, *, seed_timeout: int = SEED_TIMEOUT, enough: int = ENOUGH
) -> MutantResult:
    """Run the seeds against one mutant, in a process of its own. A stale mutant is an error at once."""
    try:
        mutated_source(mutant)
    except StaleMutantError as exc:
        return judge(mutant, Run(error=str(exc)))
    return judge(mutant, run_worker(mutant, seeds, assembly, seed_timeout, enough))


def baseline(seeds: Sequence[int], assembly: Path, jobs: int, seed_timeout: int) -> tuple[list[int], str | None]:
    """The seeds that fail with no mutant at all (and a worker's error, if one failed)."""
    chunks = [list(seeds[i::jobs]) for i in range(jobs) if seeds[i::jobs]]
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        runs = list(pool.map(lambda chunk: run_worker(None, chunk, assembly, seed_timeout, 0), chunks))
    failing = sorted(s["seed"] for run in runs for s in run.seeds if s["violations"] or s["error"])
    errors = [run.error for run in runs if run.error]
    return failing, errors[0] if errors else None


# -- the report -----------------------------------------------------------------------------------------------


def progress_line(result: MutantResult) -> str:
    seeds = f"{len(result.caught_by)}/{len(result.seeds_run)} seeds"
    if result.status == "caught":
        detail = f"caught by {seeds} ({' '.join(map(str, result.caught_by))}): {result.first_violation}"
    elif result.status == "crashed":
        detail = f"crashed the simulator on {len(result.crashed)} seed(s), no violation: {result.first_crash}"
    elif result.status == "error":
        detail = f"ERROR: {result.error}"
    elif result.status == "equivalent":
        detail = f"survived {len(result.seeds_run)} seeds, as an equivalent mutant should"
    else:
        detail = f"survived {len(result.seeds_run)} seeds"
    return f"{result.id:<40} {result.status:<8} {result.seconds:6.0f} s  {_brief(detail, 220)}"


def summary(results: list[MutantResult], mutants: Sequence[Mutant] = ()) -> list[str]:
    lines = ["", f"{'mutant':<40} {'status':<8} {'caught':>7} {'crashed':>7} {'run':>4}  module"]
    for r in results:
        caught, crashed = len(r.caught_by), len(r.crashed)
        lines.append(f"{r.id:<40} {r.status:<8} {caught:>7} {crashed:>7} {len(r.seeds_run):>4}  {r.module}")
    by_status = {status: [r for r in results if r.status == status] for status in ("caught", "crashed", "survived")}
    errors = [r for r in results if r.status == "error"]
    equivalent = [r for r in results if r.status == "equivalent"]
    reasons = {m.id: m.equivalent for m in mutants}
    once = [r for r in by_status["caught"] if len(r.caught_by) < 2]
    if once:
        lines.append("")
        lines.append("caught by one seed only (a change of schedule may lose it; strengthen the faults):")
        lines.extend(f"  {r.id}: seed {r.caught_by[0]} of {len(r.seeds_run)}" for r in once)
    if equivalent:
        lines.append("")
        lines.append("equivalent (no run can tell them from the engine; not in the score):")
        lines.extend(f"  {r.id}: {reasons.get(r.id, '')}" for r in equivalent)
    if by_status["crashed"]:
        lines.append("")
        lines.append("crashed the simulator (no invariant reported them; weaker evidence, not in the score):")
        lines.extend(f"  {r.id}: {_brief(r.first_crash or '', 200)}" for r in by_status["crashed"])
    if by_status["survived"]:
        lines.append("")
        lines.append("survived (what should catch each):")
        lines.extend(f"  {r.id}: {r.what_should_catch_it}" for r in by_status["survived"])
    if errors:
        lines.append("")
        lines.append("ERRORS (not measured: fix the catalogue or the worker):")
        lines.extend(f"  {r.id}: {r.error}" for r in errors)
    measured = sum(len(group) for group in by_status.values())
    caught = len(by_status["caught"])
    lines.append("")
    lines.append(
        f"mutation score: {caught}/{measured} ({_percent(caught, measured)}%)"
        + (
            f"; {len(equivalent)} equivalent mutant(s) left out, {caught}/{measured + len(equivalent)} of all"
            if equivalent
            else ""
        )
    )
    if by_status["crashed"]:
        with_crashes = caught + len(by_status["crashed"])
        lines.append(f"counting the simulator crashes as caught: {with_crashes}/{measured}")
    return lines


def score(results: list[MutantResult]) -> float:
    """Caught, in per cent of the mutants measured (errors and surviving equivalent mutants left out)."""
    measured = [r for r in results if r.status not in ("error", "equivalent")]
    return 100.0 * sum(r.status == "caught" for r in measured) / len(measured) if measured else 0.0


def _percent(part: int, whole: int) -> str:
    return f"{100.0 * part / whole:.0f}" if whole else "0"


def _brief(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _say(line: str) -> None:
    print(line, flush=True)


# -- the command ----------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:

    parser = argparse.ArgumentParser(prog="python -m simulation.mutation", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=DEFAULT_SEEDS, help="how many seeds (from --first)")
    parser.add_argument("--first", type=int, default=1, help="the first seed")
    parser.add_argument("--only", nargs="+", metavar="ID", help="run only these mutants")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), help="processes at a time")
    parser.add_argument("--check", action="store_true", help="only check that every mutant applies; run nothing")
    parser.add_argument("--min-score", type=float, metavar="P", help="exit 1 when fewer than P %% are caught")
    parser.add_argument("--no-baseline", action="store_true", help="do not run the unmutated engine first")
    parser.add_argument("--seed-timeout", type=int, default=SEED_TIMEOUT, help="seconds per seed")
    parser.add_argument("--assembly", type=Path, help="a synthesized cloud assembly (default: synthesize)")
    parser.add_argument("--json", type=Path, default=RESULTS_PATH, help="where the results are written")
    args = parser.parse_args(argv)

    mutants = list(MUTANTS)
    if args.only:
        unknown = sorted(set(args.only) - {m.id for m in mutants})
        if unknown:
            parser.error(f"no mutant is called {', '.join(unknown)}")
        mutants = [m for m in mutants if m.id in args.only]
    if args.check:
        problems = check(mutants)
        for problem in problems:
            _say(f"STALE {problem}")
        _say(f"{len(mutants) - len(problems)}/{len(mutants)} mutants apply to today's source")
        return 1 if problems else 0

    from simulation.cli import assembly

    outdir = args.assembly or assembly()
    seeds = list(range(args.first, args.first + args.seeds))
    started = time.monotonic()
    if not args.no_baseline:
        failing, error = baseline(seeds, outdir, args.jobs, args.seed_timeout)
        if error is not None:
            _say(f"the baseline run failed: {error}")
            return 2
        if failing:
            _say(f"baseline: seeds {' '.join(map(str, failing))} fail without any mutant; they are left out")
        seeds = [seed for seed in seeds if seed not in failing]
        _say(f"baseline: {len(seeds)} clean seeds in {time.monotonic() - started:.0f} s")
        if not seeds:
            _say("no seed is clean without a mutant: fix the simulator or the engine first")
            return 2
    _say(f"{len(mutants)} mutants, seeds {_ranges(seeds)}, {args.jobs} at a time, stop at {ENOUGH} catching seeds")
    results: dict[str, MutantResult] = {}
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = [pool.submit(run_mutant, mutant, seeds, outdir, seed_timeout=args.seed_timeout) for mutant in mutants]
        for future in as_completed(futures):
            result = future.result()
            results[result.id] = result
            _say(progress_line(result))
    ordered = [results[m.id] for m in mutants]
    for line in summary(ordered, mutants):
        _say(line)
    _say(f"{len(mutants)} mutants in {time.monotonic() - started:.0f} s")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    document = {"seeds": seeds, "score": score(ordered), "mutants": [asdict(r) for r in ordered]}
    args.json.write_text(json.dumps(document, indent=2) + "\n")
    if any(r.status == "error" for r in ordered):
        return 2
    if args.min_score is not None and score(ordered) < args.min_score:
        _say(f"the score is below --min-score {args.min_score:g}%")
        return 1
    return 0


def _ranges(seeds: Sequence[int]) -> str:
    """1..12 14..40 for a sorted list of seeds."""
    parts: list[str] = []
    start = previous = None
    for seed in [*seeds, None]:
        if seed is not None and previous is not None and seed == previous + 1:
            previous = seed
            continue
        if start is not None:
            parts.append(str(start) if start == previous else f"{start}..{previous}")
        start = previous = seed
    return " ".join(parts)


if __name__ == "__main__":
    raise SystemExit(main())
