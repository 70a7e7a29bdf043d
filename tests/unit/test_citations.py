"""Every rule the code cites resolves to a heading of docs/aws-behaviour.md, and nothing points outside the
repository: a user who clones it can follow every reference."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("engine", "cdk", "layers", "lambdas", "modules", "simulation", "stacks", "tests", "benchmarks", "tools")
RULES_DOC = ROOT / "docs" / "aws-behaviour.md"
# A rule id next to the document's name, or in the lists of the runtime's fixes: "R4.1", "M17", "M7-M10".
CITATION = re.compile(r"\b([RM]\d+(?:\.\d+)?)\b")
OUTSIDE = re.compile(r"\.\./shared|AWS-SEMANTICS|DESIGN\.md|seeds/000_")


def project_files() -> list[Path]:
    missing = [folder for folder in SOURCES if not (ROOT / folder).is_dir()]
    assert missing == [], f"SOURCES names folders that do not exist (moved?): {missing}"
    files = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    for folder in SOURCES:
        files.extend(p for p in sorted((ROOT / folder).rglob("*.py")) if "__snapshots__" not in p.parts)
    return [path for path in files if path.exists() and path != Path(__file__)]


def headings() -> set[str]:
    return {line.removeprefix("### ").strip() for line in RULES_DOC.read_text().splitlines() if line.startswith("### ")}


def test_every_cited_rule_has_a_heading_in_the_project_s_own_docs() -> None:
    known = headings()
    dead = sorted(
        f"{path.relative_to(ROOT)}: {rule}"
        for path in project_files()
        for rule in set(CITATION.findall(path.read_text()))
        if rule not in known
    )

    assert dead == [], f"cited but not in docs/aws-behaviour.md: {dead}"


def test_nothing_points_outside_the_repository() -> None:
    outside = sorted(str(path.relative_to(ROOT)) for path in project_files() if OUTSIDE.search(path.read_text()))

    assert outside == []


LINK = re.compile(r"\]\(([^)\s]+)\)")


def _anchors(page: Path) -> set[str]:
    """The anchors GitHub makes of a page's headings: lower case, punctuation dropped, spaces as hyphens."""
    found = set()
    for line in page.read_text().splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            found.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return found


def dead_links(pages: list[Path]) -> list[str]:
    """Each relative link of ``pages`` that names no file, or an #anchor that names no heading of its page."""
    dead = []
    for page in pages:
        for target in LINK.findall(page.read_text()):
            if re.match(r"[a-z]+:", target):  # https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            resolved = (page.parent / path).resolve() if path else page
            if not resolved.exists():
                dead.append(f"{page.name}: {target}")
            elif anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved):
                dead.append(f"{page.name}: {target} (no such heading)")
    return dead


def test_every_link_of_the_readme_and_the_docs_leads_somewhere() -> None:
    """A page moved or a heading renamed breaks the links to it."""
    assert dead_links([ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]) == []


def test_the_link_check_finds_a_missing_page_and_a_missing_heading(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# A title\n\nSee [there](missing.md), [here](#a-title), [not](#nothing), [web](https://x.org).\n")
    assert dead_links([page]) == ["page.md: missing.md", "page.md: #nothing (no such heading)"]
