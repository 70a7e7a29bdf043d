"""The shape of the house, from its imports: the engine never reaches up into its own test tools, and no
package of the project imports in a circle (a circle is two modules that can only be understood, changed and
imported together). Read from the source with ``ast``: nothing is imported to check it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ENGINE = ROOT / "engine" / "src"


def _module_name(path: Path, base: Path) -> str:
    parts = list(path.relative_to(base).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path, module: str) -> set[str]:
    """The absolute names ``path`` imports (relative imports resolved), at any depth of the file."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def _graph(base: Path, package: str) -> dict[str, set[str]]:
    """Module -> the modules of ``package`` it imports."""
    files = {_module_name(path, base): path for path in (base / package.replace(".", "/")).rglob("*.py")}
    return {
        module: {name for name in _imports(path, module) if name in files and name != module}
        for module, path in files.items()
    }


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_engine_imports_nothing_of_its_test_tools() -> None:
    """``outbox.testing`` is built on the engine and its local runtime; the engine (the local runtime and the
    CLI among it) may not import it back, or the Lambda layer and the test fixture would depend on each other."""
    graph = _graph(ENGINE, "outbox")
    upward = {
        module: sorted(name for name in targets if name.startswith("outbox.testing"))
        for module, targets in graph.items()
        if not module.startswith("outbox.testing")
    }
    assert {module: names for module, names in upward.items() if names} == {}


@pytest.mark.parametrize(
    ("base", "package"), [(ENGINE, "outbox"), (ROOT / "cdk" / "src", "outbox_cdk"), (ROOT, "simulation")]
)
def test_no_package_imports_in_a_circle(base: Path, package: str) -> None:
    graph = _graph(base, package)
    assert graph, f"no modules found for {package} under {base}"
    # ``from outbox import Envelope`` names the package's facade, which re-exports its modules: an arrow to
    # one's own ancestor package is not a circle of meaning (``from outbox import keys`` still names keys).
    graph = {
        module: {target for target in targets if not module.startswith(f"{target}.")}
        for module, targets in graph.items()
    }
    assert _circles(graph) == []


def test_the_circle_finder_finds_a_circle() -> None:
    """The check above can fail: two modules importing each other are a circle, a chain is not."""
    assert _circles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]
    assert _circles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


# A module longer than this is split by concern, or says in its docstring, in a paragraph that starts "One
# file:", why it reads best as one.
MODULE_LINES = 400
PACKAGES = (ENGINE / "outbox", ROOT / "cdk" / "src" / "outbox_cdk", ROOT / "simulation")


def _oversized(base: Path, root: Path = ROOT) -> list[str]:
    """The modules under ``base`` longer than MODULE_LINES whose docstring gives no "One file:" reason."""
    found = []
    for path in sorted(base.rglob("*.py")):
        text = path.read_text()
        if text.count("\n") <= MODULE_LINES:
            continue
        docstring = ast.get_docstring(ast.parse(text, str(path))) or ""
        if not any(paragraph.startswith("One file:") for paragraph in docstring.split("\n\n")):
            found.append(f"{path.relative_to(root)} ({text.count(chr(10))} lines)")
    return found


@pytest.mark.parametrize("base", PACKAGES, ids=lambda base: base.name)
def test_a_long_module_is_split_or_says_why_not(base: Path) -> None:
    oversized = _oversized(base)
    assert not oversized, f"split by concern, or give a 'One file:' reason in the docstring: {oversized}"


def test_the_size_rule_sees_a_long_module_without_a_reason(tmp_path: Path) -> None:
    body = "\n".join(f"X{n} = {n}" for n in range(MODULE_LINES + 1))
    (tmp_path / "long.py").write_text(f'"""A long module."""\n{body}\n')
    (tmp_path / "excused.py").write_text(f'"""A long module.\n\nOne file: a table read top to bottom."""\n{body}\n')
    (tmp_path / "short.py").write_text('"""A short module."""\nX = 1\n')

    assert [name.split(" ")[0] for name in _oversized(tmp_path, root=tmp_path)] == ["long.py"]
