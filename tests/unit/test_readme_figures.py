"""The figures of the README and docs/ come from their sources: the benchmarks' report and the mutation catalogue.

A figure in a page carries, in an HTML comment right after it, the row of ``benchmarks/RESULTS.md`` it
quotes (``0.91x<!-- figure: <the row's first cell> -->``); it must read as that row's figure (its median). The
mutation score docs/simulation.md states must be the catalogue's, and every seed the score table
lists must be the one ``simulation/mutants.py`` records.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from simulation.mutants import MUTANTS

ROOT = Path(__file__).resolve().parents[2]
# The README and every page of docs/, as one text: a figure may move between them.
PAGES = "\n".join(path.read_text() for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))])
RESULTS = (ROOT / "benchmarks" / "RESULTS.md").read_text()
SIMULATION_DOC = (ROOT / "docs" / "simulation.md").read_text()
FIGURE = re.compile(r"(?P<value>\$?\d[\d,]*(?:\.\d+)?)x?<!-- figure:\s+(?P<label>.+?)\s*-->", re.DOTALL)
NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?")
WORDS = ("no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")


def _spaced(text: str) -> str:
    return " ".join(text.split())


def results_rows() -> dict[str, str]:
    """Each table row of RESULTS.md: its first cell -> its second (the figure)."""
    rows: dict[str, str] = {}
    for line in RESULTS.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("|") and len(cells) >= 2:
            rows.setdefault(cells[0], cells[1])
    return rows


def quoted_figures() -> list[tuple[str, str]]:
    return [(match["value"], _spaced(match["label"])) for match in FIGURE.finditer(PAGES)]


def test_the_readme_quotes_figures_of_the_report() -> None:
    assert len(quoted_figures()) >= 4, "the performance summary's figures name their rows in RESULTS.md"


@pytest.mark.parametrize(("value", "label"), quoted_figures(), ids=[label[:40] for _, label in quoted_figures()])
def test_each_figure_of_the_readme_is_the_reports(value: str, label: str) -> None:
    rows = results_rows()
    assert label in rows, f"RESULTS.md has no row {label!r}"
    [reported, *_] = NUMBER.findall(rows[label].replace("*", ""))
    quoted = value.lstrip("$")
    decimals = len(quoted.partition(".")[2])
    assert round(float(reported.replace(",", "")), decimals) == float(quoted.replace(",", "")), (
        f"the docs say {value} for {label!r}; RESULTS.md says {rows[label]} (make bench rewrote it: "
        "copy the new figure)"
    )


def test_the_mutation_score_is_the_catalogues() -> None:
    telling = [m for m in MUTANTS if not m.equivalent]
    caught = [m for m in telling if m.seeds]  # a telling mutant without a recorded seed: no seed catches it now
    equivalent = len(MUTANTS) - len(telling)
    if len(caught) == len(telling):
        assert f"catches all {len(telling)} mutants that a run can" in _spaced(SIMULATION_DOC)
        score = f"All {len(telling)} mutants a run can tell from the engine are caught (100%)"
    else:
        assert f"catches {len(caught)} of the {len(telling)} mutants that a run can" in _spaced(SIMULATION_DOC)
        percent = round(100 * len(caught) / len(telling))
        score = f"{len(caught)} of the {len(telling)} mutants a run can tell from the engine are caught ({percent}%)"
    assert f"{WORDS[equivalent]} more are equivalent" in _spaced(SIMULATION_DOC)
    assert f"{score}; {len(caught)} of all" in SIMULATION_DOC
    assert f"of all {len(MUTANTS)}**" in SIMULATION_DOC


def test_the_score_table_lists_the_catalogues_seeds() -> None:
    table = dict(re.findall(r"^\| `([a-z0-9-]+)` \| `[a-z._]+` \| ([^|]+) \|$", SIMULATION_DOC, re.MULTILINE))
    for mutant in MUTANTS:
        listed = table.get(mutant.id, "").strip()
        expected = "equivalent" if mutant.equivalent else " ".join(str(seed) for seed in mutant.seeds) or "none"
        assert listed == expected, f"{mutant.id}: docs/simulation.md lists {listed!r}, the catalogue {expected!r}"
