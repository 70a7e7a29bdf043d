"""Where the simulator and the local runtime still reach into the engine with ``mock.patch``, listed, so that the
list only shrinks: the design has them see the engine through observers and published seams (randomness through
``outbox.entropy``, for one), never by replacing its methods. A new patch of the engine fails here; one replaced by
a seam must leave the list too. Read from the source with ``ast``: nothing is imported to check it."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("simulation", "engine/src/outbox/local")
# The mutation catalogue's snippets are engine source text, not patches of the running engine.
NOT_SCANNED = {"simulation/mutants.py"}

# (file, what is patched, the attribute): each still to be replaced by an observer or a fault point. None is left.
STILL_PATCHED: set[tuple[str, str, str]] = set()

# Patches of what is not the engine: the AWS faults (``outbox.local.aws_faults``) change what moto's DynamoDB
# answers (its request handler, by operation: the name is computed), the AWS side of every call, where botocore's own
# retries see them as they see DynamoDB's.
COMPUTED = "<computed>"  # a patched attribute whose name the code computes
NOT_THE_ENGINE = {
    ("engine/src/outbox/local/aws_faults.py", "DynamoHandler", "batch_get_item"),
    ("engine/src/outbox/local/aws_faults.py", "DynamoHandler", COMPUTED),
}


def patches() -> set[tuple[str, str, str]]:
    """Every ``mock.patch.object(target, name, ...)`` (a name not written out is ``<computed>``) and every
    ``mock.patch("dotted.path")`` (as ``("file", "dotted.path", "")``) in the scanned folders."""
    found: set[tuple[str, str, str]] = set()
    for folder in SCANNED:
        for path in sorted((ROOT / folder).rglob("*.py")):
            name = str(path.relative_to(ROOT))
            if name in NOT_SCANNED:
                continue
            for node in ast.walk(ast.parse(path.read_text(), name)):
                if not isinstance(node, ast.Call) or not node.args:
                    continue
                called = ast.unparse(node.func)
                if called.endswith("patch.object") and len(node.args) >= 2:
                    attribute = node.args[1]
                    named = attribute.value if isinstance(attribute, ast.Constant) else COMPUTED
                    found.add((name, ast.unparse(node.args[0]), str(named)))
                elif called in ("patch", "mock.patch", "unittest.mock.patch") and isinstance(
                    node.args[0], ast.Constant
                ):
                    found.add((name, str(node.args[0].value), ""))
    return found


def test_no_new_patch_of_the_engine() -> None:
    added = patches() - STILL_PATCHED - NOT_THE_ENGINE
    assert not added, f"patched, where an observer or a published seam should be: {sorted(added)}"


def test_a_patch_replaced_by_a_seam_leaves_the_list() -> None:
    gone = (STILL_PATCHED | NOT_THE_ENGINE) - patches()
    assert not gone, f"no longer patched: take them out of STILL_PATCHED {sorted(gone)}"


def test_the_engine_s_randomness_is_never_patched() -> None:
    drawn_through_entropy = {"new_event_id", "random", "uuid"}
    assert not [p for p in patches() if p[2] in drawn_through_entropy]


def test_nothing_outside_the_delivery_package_imports_a_private_name_of_it() -> None:
    """A private method or function of ``outbox.delivery`` can be renamed without touching anything outside it (the
    mutation catalogue's snippets aside: they are the engine's text)."""
    reached = []
    for folder in ("engine/src/outbox", "simulation", "tests", "benchmarks", "tools", "stacks", "lambdas"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if "outbox/delivery/" in str(path):
                continue
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("outbox.delivery"):
                    reached += [f"{path.relative_to(ROOT)}: {a.name}" for a in node.names if a.name.startswith("_")]
    assert not reached
