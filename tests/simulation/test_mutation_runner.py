"""The mutation runner of ``make mutants``, without running a seed: the catalogue applies to today's engine,
the import hook serves a mutant in a fresh process (and leaves nothing behind), and a stale mutant is an
error, never a survivor."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import simulation.mutation
from simulation.mutants import MUTANTS
from simulation.mutation import (
    Mutant,
    MutantResult,
    Run,
    check,
    install,
    judge,
    mutated_source,
    run_mutant,
    run_worker,
    score,
    summary,
)

RUFF = Path(sys.executable).parent / "ruff"
GUARANTEE_MODULES = {
    "outbox.inbox.claims",
    "outbox.inbox.markers",
    "outbox.inbox.table",
    "outbox.inbox.dead_work",
    "outbox.inbox.rows",
    "outbox.delivery.consumer",
    "outbox.delivery.run",
    "outbox.delivery.runs",
    "outbox.delivery.direct",
    "outbox.delivery.ordered",
    "outbox.delivery.timing",
    "outbox.delivery.log_check",
    "outbox.messages",
    "outbox.log.store",
    "outbox.log.sealing",
    "outbox.log.transaction",
    "outbox.log.lanes",
    "outbox.log.chain",
    "outbox.log.verification",
    "outbox.audit.table",
    "outbox.audit.findings",
    "outbox.log.schemas",
    "outbox.pairs.order",
    "outbox.ops.ordering",
    "outbox.ops.replay",
    "outbox.ops.redrive",
    "outbox.ops.reconcile",
    "outbox.ops.status",
    "outbox.ops.groups",
    "outbox.log.canonical",
    "outbox.log.envelope",
    "outbox.local.runtime",
    "outbox.pairs.machine",
    "outbox.ops.completeness",
    "outbox.delivery.workflow",
    "outbox.workflows.ends",
    "outbox.workflows.handoffs",
    "outbox.workflows.starter",
}


def probe_mutant(original: str = "ANSWER = 41", replacement: str = "ANSWER = 42") -> Mutant:
    return Mutant("probe", "mutation_probe", original, replacement, "a throwaway mutant", "this test")


@pytest.fixture
def probe_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A tiny module, importable here and in child processes."""
    path = tmp_path / "mutation_probe.py"
    path.write_text("ANSWER = 41\nTWICE = 'x'\nTWICE = 'x'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])))
    return path


def run_python(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_every_mutant_of_the_catalogue_applies_exactly_once_to_todays_source() -> None:
    assert check(MUTANTS) == []


def test_no_mutant_names_what_its_module_does_not_define() -> None:
    """A replacement that names something its module lacks raises NameError where the bug should be: the
    simulator then measures a crash (or a retry for ever), not the bug. Moving code between modules is how a
    replacement loses a name it relied on."""
    undefined = []
    for mutant in MUTANTS:
        done = subprocess.run(
            [str(RUFF), "check", "--no-cache", "--isolated", "--select", "F821", "--stdin-filename", "mutant.py", "-"],
            input=mutated_source(mutant),
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            undefined.append(f"{mutant.id}: {done.stdout.strip()}")
    assert undefined == []


def test_the_catalogue_covers_every_guarantee_module() -> None:
    assert len(MUTANTS) >= 24
    assert {mutant.module for mutant in MUTANTS} == GUARANTEE_MODULES
    assert all(mutant.description and mutant.what_should_catch_it for mutant in MUTANTS)


def test_the_hook_serves_the_mutated_source_in_a_fresh_process(probe_module: Path) -> None:
    # As the worker does: load the runner by its path (importing the simulation package would import the
    # engine), install the mutant, then import.
    mutant = probe_mutant()
    code = f"""
import importlib.util, sys
spec = importlib.util.spec_from_file_location("runner", {simulation.mutation.__file__!r})
runner = importlib.util.module_from_spec(spec)
sys.modules["runner"] = runner
spec.loader.exec_module(runner)
finder = runner.install(runner.Mutant(**{mutant.__dict__!r}))
import mutation_probe
print(mutation_probe.ANSWER, mutation_probe.__file__, finder.loaded)
"""
    assert run_python(code) == f"42 {probe_module} True"
    # No bytecode of the mutant was cached: a plain import sees the original.
    assert run_python("import mutation_probe; print(mutation_probe.ANSWER)") == "41"


def test_a_mutant_cannot_be_installed_once_its_module_is_imported() -> None:
    with pytest.raises(RuntimeError, match="already imported"):
        install(Mutant("late", "json", "import", "import", "", ""))


@pytest.mark.parametrize(("original", "found"), [("ANSWER = 40", "does not occur"), ("TWICE = 'x'", "occurs 2 times")])
def test_a_stale_mutant_is_an_error_not_a_survivor(probe_module: Path, original: str, found: str) -> None:
    stale = probe_mutant(original)

    assert check([stale]) == [f"mutant probe: its original snippet {found} in mutation_probe ({probe_module})"]
    result = run_mutant(stale, [1], probe_module.parent)
    assert (result.status, result.seeds_run) == ("error", [])
    assert found in (result.error or "")
    report = "\n".join(summary([result]))
    assert "ERRORS (not measured" in report
    assert "survived" not in report
    assert "mutation score: 0/0" in report


def test_the_worker_itself_refuses_a_stale_mutant(probe_module: Path) -> None:
    # The source may change between the parent's check and the worker's start: the worker checks again.
    run = run_worker(probe_mutant("ANSWER = 40"), [1], probe_module.parent, seed_timeout=5, enough=3)

    assert run.seeds == []
    assert "does not occur" in (run.error or "")
    assert judge(probe_mutant(), run).status == "error"


def seed(number: int, violations: list[str] | None = None, error: str | None = None) -> dict[str, object]:
    return {"seed": number, "violations": violations or [], "error": error, "seconds": 1.0}


@pytest.mark.parametrize(
    ("seeds", "status"),
    [
        ([seed(1), seed(2, ["invariant 2: lost"])], "caught"),
        ([seed(1, error="KeyError: 'x'"), seed(2, ["invariant 2: lost"])], "caught"),
        ([seed(1, error="KeyError: 'x'"), seed(2)], "crashed"),
        ([seed(1), seed(2)], "survived"),
    ],
)
def test_a_crash_of_the_simulator_is_never_counted_as_caught(seeds: list[dict[str, object]], status: str) -> None:
    result = judge(probe_mutant(), Run(seeds))

    assert result.status == status
    text = "\n".join(summary([result]))
    assert ("mutation score: 1/1" in text) == (status == "caught")
    assert ("crashed the simulator" in text) == (status == "crashed")


def test_the_summary_says_what_should_catch_each_survivor() -> None:
    survivor = MutantResult("m", "outbox.inbox", "a bug", "a fault that would find it", "survived", [1, 2])

    assert "  m: a fault that would find it" in summary([survivor])


def equivalent_probe() -> Mutant:
    return Mutant("same", "mutation_probe", "ANSWER = 41", "ANSWER = 42", "a bug no run can see", "nothing", "why")


def test_an_equivalent_mutant_that_survives_is_left_out_of_the_score_with_its_reason() -> None:
    caught = judge(probe_mutant(), Run([seed(1, ["invariant 2: lost"])]))
    equivalent = judge(equivalent_probe(), Run([seed(1), seed(2)]))

    assert equivalent.status == "equivalent"
    assert score([caught, equivalent]) == 100.0
    text = "\n".join(summary([caught, equivalent], [probe_mutant(), equivalent_probe()]))
    assert "  same: why" in text
    assert "mutation score: 1/1 (100%); 1 equivalent mutant(s) left out, 1/2 of all" in text


def test_an_equivalent_mutant_that_is_caught_is_a_catalogue_error() -> None:
    result = judge(equivalent_probe(), Run([seed(1), seed(2, ["invariant 2: lost"])]))

    assert result.status == "error"
    assert "not equivalent" in (result.error or "")


def test_a_mutant_caught_by_one_seed_only_is_flagged() -> None:
    result = judge(probe_mutant(), Run([seed(1), seed(2, ["invariant 2: lost"]), seed(3)]))

    assert "caught by one seed only" in "\n".join(summary([result]))
