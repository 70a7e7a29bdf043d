"""The mechanical mutation sample of ``make mutants-sample``, without running a seed: cosmic-ray's operators
enumerate the same mutants in the same order every time, the sample is drawn with its seed, a mutant applies
through the import hook of ``simulation.mutation`` (also under pytest, whose assertion rewriter would load the
engine itself) and leaves the source as it was."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cosmic_ray.ast import get_ast

from simulation.mechanical import (
    GUARANTEE_MODULES,
    Point,
    _annotation_nodes,
    covering_tests,
    diff,
    mutant,
    points,
    population,
    sample,
)
from simulation.mutants_sample import run_tests
from simulation.mutation import PROJECT_ROOT, module_path, mutated_source

# ``if not item:`` of ChainHead.from_item loses its ``not``: an empty head row is read as a written one.
KNOWN = Point("outbox.log.chain", 25, "ReplaceUnaryOperator_Delete_Not", 0)


@pytest.fixture(scope="module")
def everything() -> list[Point]:
    return population()


def test_the_enumeration_is_the_same_every_time_and_names_each_mutant_once(everything: list[Point]) -> None:
    some = ("outbox.log.chain", "outbox.ops.redrive")

    assert population(some) == population(some) == [p for p in everything if p.module in some]
    assert len({point.id for point in everything}) == len(everything)
    assert {point.module for point in everything} == set(GUARANTEE_MODULES)
    assert len(everything) > 1000  # thousands of points: a sample of 200 is a sample


def test_the_sample_is_drawn_with_its_seed(everything: list[Point]) -> None:
    drawn = sample(everything, 200)

    assert drawn == sample(everything, 200)
    assert drawn != sample(everything, 200, seed=51)
    assert len(set(drawn)) == 200
    assert set(drawn) <= set(everything)
    assert len({point.module for point in drawn}) > 10  # every part of the guarantee code has its chance


def test_no_point_lies_in_an_annotation() -> None:
    tree = get_ast("def f(a: int | None = 1 + 2) -> str | bytes:\n    x: list[int] = [a + 1]\n")
    inside = _annotation_nodes(tree)
    operators = [n for n in _walk(tree) if n.type == "operator" and n.value in ("|", "+")]

    assert [n.value for n in operators if id(n) in inside] == ["|", "|"]
    assert [n.value for n in operators if id(n) not in inside] == ["+", "+"]


def _walk(node: Any) -> list[Any]:
    return [node, *(inner for child in getattr(node, "children", []) for inner in _walk(child))]


def test_every_guarantee_module_has_tests_that_exist() -> None:
    for module in GUARANTEE_MODULES:
        files = covering_tests(module)
        missing = [f for f in files if not (PROJECT_ROOT / f).is_file()]
        assert files, module
        assert missing == [], module


def test_the_known_mutant_is_what_cosmic_ray_makes_of_that_line() -> None:
    assert KNOWN in points("outbox.log.chain")
    known = mutant(KNOWN)

    assert diff(known) == "-        if not item:\n+        if  item:\n"
    assert mutated_source(known) != module_path("outbox.log.chain").read_text()


def test_the_known_mutant_applies_in_its_process_and_leaves_the_source_as_it_was() -> None:
    before = module_path("outbox.log.chain").read_text()
    probe = (
        "from simulation.mutation import install\n"
        "from simulation.mechanical import mutant, Point\n"
        "install(mutant(Point('outbox.log.chain', 25, 'ReplaceUnaryOperator_Delete_Not', 0)))\n"
        "from outbox.log.chain import ChainHead\n"
        "try:\n    ChainHead.from_item('t', None)\nexcept TypeError:\n    print('mutated')\n"
    )
    mutated = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=PROJECT_ROOT)
    from outbox.log.chain import ChainHead

    assert mutated.stdout.strip() == "mutated", mutated.stderr
    assert module_path("outbox.log.chain").read_text() == before
    assert ChainHead.from_item("t", None).last_seq == 0  # this process never saw it


@pytest.mark.parametrize(("with_mutant", "code"), [(False, 0), (True, 1)])
def test_the_tests_step_sees_the_mutant_under_pytest(tmp_path: Path, with_mutant: bool, code: int) -> None:
    test_file = tmp_path / "test_probe.py"
    test_file.write_text(
        "from outbox.log.chain import ChainHead\n\n\n"
        "def test_an_empty_head_starts_the_chain():\n"
        "    assert ChainHead.from_item('t', None).last_seq == 0\n"
    )

    run = run_tests([str(test_file)], mutant(KNOWN) if with_mutant else None, timeout=120)

    assert run.code == code, run.tail
    if with_mutant:
        assert run.failed is not None
        assert "test_an_empty_head_starts_the_chain" in run.failed


def test_a_baseline_asked_for_by_mutants_measured_at_once_runs_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--jobs``: three mutants of one module reach its unmutated test run together; it runs once, all wait."""
    import threading

    from simulation import mutants_sample

    runs: list[tuple[str, ...]] = []
    release = threading.Event()

    def slow_unmutated_run(files: tuple[str, ...], mutant: Any) -> mutants_sample.PytestRun:
        runs.append(files)
        release.wait(5)
        return mutants_sample.PytestRun(0, None, "")

    monkeypatch.setattr(mutants_sample, "run_tests", slow_unmutated_run)
    baselines = mutants_sample.Baselines(Path("no-assembly"))
    together = threading.Barrier(3)
    answers: list[int | None] = []

    def ask() -> None:
        together.wait(5)
        answers.append(baselines.tests_pass(("tests/unit/test_chain.py",)).code)

    askers = [threading.Thread(target=ask) for _ in range(3)]
    for asker in askers:
        asker.start()
    threading.Timer(0.3, release.set).start()  # the first run ends once all three have asked
    for asker in askers:
        asker.join(10)
    assert runs == [("tests/unit/test_chain.py",)]
    assert answers == [0, 0, 0]


def test_jobs_below_one_is_refused_before_anything_runs() -> None:
    from simulation import mutants_sample

    with pytest.raises(SystemExit) as refused:
        mutants_sample.main(["--jobs", "0"])
    assert refused.value.code == 2
