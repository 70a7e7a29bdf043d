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
# answers, the AWS side of every call.
NOT_THE_ENGINE = {
    ("engine/src/outbox/local/aws_faults.py", "DynamoHandler", "batch_get_item"),
}


def patches() -> set[tuple[str, str, str]]:
    """Every ``mock.patch.object(target, "name", ...)`` in the scanned folders."""
    found: set[tuple[str, str, str]] = set()
    for folder in SCANNED:
        for path in sorted((ROOT / folder).rglob("*.py")):
            name = str(path.relative_to(ROOT))
            if name in NOT_SCANNED:
                continue
            for node in ast.walk(ast.parse(path.read_text(), name)):
                if _patch_object(node):
                    assert isinstance(node, ast.Call)
                    found.add((name, ast.unparse(node.args[0]), node.args[1].value))  # type: ignore[attr-defined]
    return found


def _patch_object(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and ast.unparse(node.func).endswith("patch.object")
        and len(node.args) >= 2
        and isinstance(node.args[1], ast.Constant)
    )


def test_no_new_patch_of_the_engine() -> None:
    added = patches() - STILL_PATCHED - NOT_THE_ENGINE
    assert not added, f"patched, where an observer or a published seam should be: {sorted(added)}"


def test_a_patch_replaced_by_a_seam_leaves_the_list() -> None:
    gone = (STILL_PATCHED | NOT_THE_ENGINE) - patches()
    assert not gone, f"no longer patched: take them out of STILL_PATCHED {sorted(gone)}"


def test_the_engine_s_randomness_is_never_patched() -> None:
    drawn_through_entropy = {"new_event_id", "random", "uuid"}
    assert not [p for p in patches() if p[2] in drawn_through_entropy]
