"""``make simulate``: run many seeds (over a few processes), or replay one with its trace.

    python -m simulation                      # seeds 1..150 on 2 processes (under 3 minutes)
    python -m simulation --seeds 5000         # a longer run
    python -m simulation --seed 1234          # one seed, with the trace of every fault and delivery
    python -m simulation --regression         # every seed in simulation/regression_seeds.txt
    python -m simulation --shrink 1234        # a failing seed's smallest schedule that still fails, and its trace
    python -m simulation --soak 2000          # 2000 seeds from a random first seed, failures grouped by kind

Prints each failing seed with its violations and ends with ``violations: N across M schedules``; the exit
status is 1 when any invariant broke.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import subprocess
import sys
import time
import warnings
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from outbox.local.template import StackSpec, load_stack
from simulation.reach import reachable
from simulation.schedule import Schedule
from simulation.shrink import Cuts, shrink
from simulation.workers import DEATHS_PER_SEED, in_workers

PROJECT_ROOT = Path(__file__).resolve().parents[1]
ASSEMBLY_DIR = PROJECT_ROOT / ".local" / "simulation" / "cdk.out"
REGRESSION_SEEDS = Path(__file__).resolve().parent / "regression_seeds.txt"
# Every seed a soak ever found failing: a soak runs them first, so no bug it once saw comes back unnoticed.
SOAK_FAILURES = Path(__file__).resolve().parent / "soak_failures.txt"
STACK_NAME = "OutboxEngine"
DEFAULT_SEEDS = 150
DEFAULT_JOBS = 2
# Where a soak's first seed is drawn from: far from the seeds that make simulate and CI run every day.
SOAK_FIRST_SEEDS = (1_000_000, 9_000_000)


@dataclass(frozen=True)
class Outcome:
    """What a worker process sends back about one seed (small and picklable)."""

    seed: int
    violations: tuple[str, ...]
    error: str | None
    faults: dict[str, int] = field(default_factory=dict)
    trace_digest: str = ""
    seconds: float = 0.0
    reached: dict[str, int] = field(default_factory=dict)  # transitions of the pair's machine ("STATE step")

    @property
    def ok(self) -> bool:
        return not self.violations and self.error is None


def regression_seeds(path: Path = REGRESSION_SEEDS) -> list[tuple[int, str]]:
    """``<seed> [cuts]  # what it found`` per line; blank lines and lines starting with # are skipped."""
    return [(seed, comment) for seed, _, comment in _regression_lines(path)]


def regression_cuts(path: Path = REGRESSION_SEEDS) -> dict[int, Cuts]:
    """The seeds kept shrunk: each with the cuts (``simulation.shrink``) its line names after the seed."""
    return {seed: Cuts.parse(cuts) for seed, cuts, _ in _regression_lines(path) if cuts}


def _regression_lines(path: Path) -> list[tuple[int, str, str]]:
    lines = []
    for line in path.read_text().splitlines():
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        head, _, comment = text.partition("#")
        number, _, cuts = head.strip().partition(" ")
        lines.append((int(number), cuts.strip(), comment.strip()))
    return lines


def assembly(outdir: Path = ASSEMBLY_DIR) -> Path:
    """The synthesized stack (bundling skipped), reused while nothing it is built from has changed."""
    template = outdir / f"{STACK_NAME}.template.json"
    # The template comes from stacks/ and the constructs (cdk/src/); the functions' code (lambdas/, modules/)
    # is staged into the assembly.
    sources = [
        PROJECT_ROOT / "cdk.json",
        *(p for d in ("stacks", "cdk/src", "lambdas", "modules") for p in (PROJECT_ROOT / d).rglob("*.py")),
    ]
    if template.exists() and template.stat().st_mtime >= max(p.stat().st_mtime for p in sources):
        return outdir
    # In a child process: the synth starts a Node.js kernel that forked workers should not inherit.
    script = "import sys; from pathlib import Path; from tools.demo import synthesize; synthesize(Path(sys.argv[1]))"
    done = subprocess.run([sys.executable, "-c", script, str(outdir)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"synthesis failed:\n{done.stderr}")
    return outdir


# -- running seeds ------------------------------------------------------------------------------------------

_STACK: StackSpec | None = None  # set before the workers fork, so each inherits it without pickling
_CUTS: dict[int, Cuts] = {}  # the seeds run shrunk (regression_seeds.txt), set with _STACK


def run_one(seed: int) -> Outcome:
    from simulation.drawing import generate
    from simulation.runner import run_seed

    assert _STACK is not None
    started = time.monotonic()
    cuts = _CUTS.get(seed)
    result = run_seed(seed, _STACK, cuts.apply(generate(seed)) if cuts else None)
    error = f"{type(result.error).__name__}: {result.error}" if result.error is not None else None
    violations = tuple(str(v) for v in result.violations)
    elapsed = time.monotonic() - started
    digest = result.trace.digest()
    return Outcome(seed, violations, error, dict(result.faults_fired), digest, elapsed, dict(result.reached))


PROGRESS_EVERY = 20.0  # seconds between progress lines of a survey


def run_many(
    seeds: Iterable[int], stack: StackSpec, jobs: int, cuts: dict[int, Cuts] | None = None
) -> Iterator[Outcome]:
    """Each seed's outcome, as the workers finish them (in no particular order); a seed in ``cuts`` runs its
    schedule with those cuts."""
    global _STACK, _CUTS
    _STACK, _CUTS = stack, dict(cuts or {})
    seeds = list(seeds)
    warm_up()
    if jobs <= 1:
        yield from (run_one(seed) for seed in seeds)
        return
    yield from in_workers(run_one, seeds, jobs, died=worker_died)


def worker_died(seed: int) -> Outcome:
    return Outcome(seed, (), f"its worker process died {DEATHS_PER_SEED} times running it (killed by the system?)")


def warm_up() -> None:
    """Import everything and load boto3's service models once, before the workers fork and share it."""
    import simulation.runner  # noqa: F401 - imported for its imports
    from outbox.local.clients import local_client

    for service in ("dynamodb", "dynamodbstreams", "sqs", "pipes"):
        local_client(service)


# -- the command ----------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m simulation", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=DEFAULT_SEEDS, help="how many seeds to run (from --first)")
    parser.add_argument("--first", type=int, help="the first seed (default 1, or a random one with --soak)")
    parser.add_argument("--seed", type=int, help="replay this one seed and print its trace")
    parser.add_argument("--cuts", default="", help="with --seed: replay the seed's schedule with these cuts")
    parser.add_argument("--shrink", type=int, metavar="SEED", help="cut a failing seed's schedule to the smallest")
    parser.add_argument("--regression", action="store_true", help="run the seeds in regression_seeds.txt")
    parser.add_argument("--soak", type=int, metavar="N", help="run N seeds from a random first seed; group failures")
    parser.add_argument("--jobs", type=int, default=min(DEFAULT_JOBS, os.cpu_count() or 1))
    parser.add_argument("--assembly", type=Path, help="a synthesized cloud assembly to use (default: synthesize)")
    args = parser.parse_args(argv)
    try:
        cuts = Cuts.parse(args.cuts)
    except ValueError as exc:
        parser.error(f"--cuts: {exc}")
    # Powertools warns on every invocation that published no metric: expected here, and noise.
    warnings.filterwarnings("ignore", "No application metrics to publish")
    stack = load_stack(args.assembly or assembly(), STACK_NAME)
    if args.shrink is not None:
        return shrink_and_show(args.shrink, stack)
    if args.seed is not None:
        return replay(args.seed, stack, cuts)
    if args.soak is not None:
        first = soak_first(args.first)
        again = f"seeds {first}..{first + args.soak - 1} (run them again: {soak_command(first, args.soak)})"
        known = [seed for seed, _ in regression_seeds(SOAK_FAILURES)]
        print(f"soak: the {len(known)} seeds earlier soaks found failing, then {again}", flush=True)
        status = survey([*known, *range(first, first + args.soak)], stack, args.jobs, by_kind=True)
        print(f"soak: {again}")
        return status
    first = 1 if args.first is None else args.first
    seeds = [seed for seed, _ in regression_seeds()] if args.regression else range(first, first + args.seeds)
    return survey(list(seeds), stack, args.jobs, cuts=regression_cuts() if args.regression else None)


def soak_first(first: int | None) -> int:
    """The first seed of a soak: the one asked for, or a random one far from the everyday seeds."""
    return first if first is not None else random.SystemRandom().randint(*SOAK_FIRST_SEEDS)


def soak_command(first: int, count: int) -> str:
    return f"python -m simulation --first {first} --seeds {count}"


def replay(seed: int, stack: StackSpec, cuts: Cuts | None = None) -> int:
    from simulation.drawing import generate
    from simulation.runner import run_seed

    schedule = (cuts or Cuts()).apply(generate(seed))
    print("\n".join(schedule.describe()))
    print()
    result = run_seed(seed, stack, schedule)
    print(result.trace.render())
    print()
    for violation in result.violations:
        print(f"VIOLATION (seed {seed}): {violation}")
    if result.error is not None:
        print(f"SIMULATOR ERROR (seed {seed}): {type(result.error).__name__}: {result.error}")
    print(f"trace digest {result.trace.digest()}")
    print(f"violations: {len(result.violations)} across 1 schedule")
    return 0 if result.ok else 1


def shrink_and_show(seed: int, stack: StackSpec) -> int:
    """``--shrink``: the smallest schedule of ``seed`` that still fails as the whole one does, and its trace."""
    from simulation.runner import run_seed

    def run(schedule: Schedule) -> tuple[str, ...]:
        result = run_seed(seed, stack, schedule)
        error = () if result.error is None else (f"the simulator failed: {type(result.error).__name__}",)
        return tuple(str(v) for v in result.violations) + error

    try:
        shrunk = shrink(seed, run, kind_of)
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return 2
    before, after = shrunk.sizes
    print(f"seed {seed} shrunk from size {before} to {after} in {shrunk.runs} runs, still failing: {shrunk.kind}")
    print(f"cuts: {shrunk.cuts.render() or '(none: nothing could be cut)'}")
    print(f"keep it: add '{seed} {shrunk.cuts.render()}  # <what it found>' to simulation/regression_seeds.txt")
    print(f"replay it: python -m simulation --seed {seed} --cuts '{shrunk.cuts.render()}'")
    print()
    replay(seed, stack, shrunk.cuts)
    return 1


def survey(
    seeds: list[int], stack: StackSpec, jobs: int, *, by_kind: bool = False, cuts: dict[int, Cuts] | None = None
) -> int:
    """Run the seeds, printing each violation the moment its seed ends (with the command that replays it)
    and a progress line now and then; the totals come last (and, ``by_kind``, the failing seeds by kind)."""
    started = time.monotonic()
    outcomes: list[Outcome] = []
    fired: Counter[str] = Counter()
    last_progress = started
    for outcome in run_many(seeds, stack, jobs, cuts):
        outcomes.append(outcome)
        fired.update(outcome.faults)
        for violation in outcome.violations:
            print(f"seed {outcome.seed}: {violation}  (replay: make simulate SEED={outcome.seed})", flush=True)
        if outcome.error is not None:
            print(f"seed {outcome.seed}: the simulator failed: {outcome.error}", flush=True)
        now = time.monotonic()
        if now - last_progress >= PROGRESS_EVERY or len(outcomes) == len(seeds):
            last_progress = now
            bad = sum(not o.ok for o in outcomes)
            print(f"... {len(outcomes)}/{len(seeds)} schedules, {bad} failing, {now - started:.0f} s", flush=True)
    outcomes.sort(key=lambda outcome: outcome.seed)
    failing = [outcome.seed for outcome in outcomes if not outcome.ok]
    elapsed = time.monotonic() - started
    print(f"{len(outcomes)} schedules in {elapsed:.0f} s on {jobs} process(es); faults fired: " + _totals(fired))
    slowest = sorted(outcomes, key=lambda outcome: -outcome.seconds)[:3]
    print("slowest seeds: " + ", ".join(f"{o.seed} ({o.seconds:.1f} s)" for o in slowest))
    print(reach_report(outcomes))
    if failing:
        print(f"failing seeds: {' '.join(map(str, failing))}  (replay one: make simulate SEED=<seed>)")
    if by_kind and failing:
        groups = by_kinds(outcomes)
        print(f"failing seeds by kind of violation ({len(groups)} kind(s)):")
        for kind, seeds_of_kind in groups.items():
            print(f"  {kind}\n      seeds {' '.join(map(str, seeds_of_kind))}")
    violations = sum(len(outcome.violations) + (outcome.error is not None) for outcome in outcomes)
    print(f"violations: {violations} across {len(outcomes)} schedules")
    return 1 if failing else 0


_INVARIANT = re.compile(r"invariant (\d+) \([^)]*\): ")  # how a violation starts: "invariant 2 (exactly once): "
_IDS = re.compile(r"\b(?=[0-9A-Za-z-]*\d)[0-9A-Za-z-]{20,}\b")  # event ids (ULIDs), message ids (UUIDs)
_NUMBERS = re.compile(r"\d+")  # seqs, counts, the trace's names (e4, w2, m7), tenants (t0), operations (op3)


def reach_report(outcomes: list[Outcome]) -> str:
    """The transitions of the pair's machine these seeds reached none of, and the weakest: reached by the fewest
    seeds (per 100), so that one seed in 150 shows as the weak spot it is."""
    seeds_reaching = reach_per_seed(outcomes)
    never = sorted(name for name in seeds_reaching if not seeds_reaching[name])
    reached = sorted((count, name) for name, count in seeds_reaching.items() if count)
    per_100 = ", ".join(f"{name} {100 * count / len(outcomes):.0f}" for count, name in reached[:5])
    unreached = ", ".join(never) or "none"
    return f"transitions never reached: {unreached}; reached by the fewest seeds (per 100): {per_100}"


def reach_per_seed(outcomes: list[Outcome]) -> dict[str, int]:
    """Each transition the CI seeds must reach (``simulation.reach.reachable``), and how many seeds reached it."""
    names = {f"{state} {step}" for state, step in reachable()}
    return {name: sum(1 for o in outcomes if o.reached.get(name)) for name in sorted(names)}


def kind_of(violation: str) -> str:
    """A violation's kind: its text with every id made ``ID`` and every number ``N``, so that one bug seen in
    many pairs, seeds and tenants is one kind (``invariant 2 (exactly once): eN:sim.charge: lost: ...``); the
    invariant's own number is kept."""
    invariant = _INVARIANT.match(violation)
    head = invariant.group(0) if invariant else ""
    return head + _NUMBERS.sub("N", _IDS.sub("ID", violation[len(head) :]))


def by_kinds(outcomes: Iterable[Outcome]) -> dict[str, list[int]]:
    """Each kind of violation (and of simulator failure) with the seeds that showed it, in seed order; the
    kinds in the order of their invariant (the simulator's failures first), then of their text."""
    groups: dict[str, set[int]] = {}
    for outcome in outcomes:
        kinds = [kind_of(violation) for violation in outcome.violations]
        if outcome.error is not None:
            kinds.append("the simulator failed: " + kind_of(outcome.error))
        for kind in kinds:
            groups.setdefault(kind, set()).add(outcome.seed)
    return {kind: sorted(groups[kind]) for kind in sorted(groups, key=_kind_order)}


def _kind_order(kind: str) -> tuple[int, str]:
    invariant = _INVARIANT.match(kind)
    return (int(invariant.group(1)) if invariant else 0, kind)


def _totals(fired: Counter[str]) -> str:
    return ", ".join(f"{name} {count}" for name, count in sorted(fired.items())) or "none"
