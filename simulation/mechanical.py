"""The population of ``make mutants-sample``: every mutant cosmic-ray's own mutation operators make of the
guarantee modules (every core operator that takes no argument), a random sample of them drawn with a fixed seed,
and each as a mutant of ``simulation.mutation`` (the fewest whole lines around the change that occur once in the
module, and what cosmic-ray made of them), so that the import hook of ``make mutants`` installs it.

A mutant is named ``module:line:operator#occurrence`` (the occurrence is cosmic-ray's: the index of the operator's
position in the module, in the order its ``MutationVisitor`` counts). A point inside a type annotation is left out
of the population: every guarantee module has ``from __future__ import annotations``, so no run evaluates an
annotation and each such mutant is equivalent by construction.

Nothing of the engine is imported here: the worker of ``simulation.mutants_sample`` imports this module before it
installs the hook.
"""

from __future__ import annotations

import difflib
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from simulation.mutants import Mutant
from simulation.mutation import StaleMutantError, module_path

SAMPLE = 200
SAMPLE_SEED = 50  # the issue that asked for the score; fixed, so every run draws the same sample

GUARANTEE_MODULES: tuple[str, ...] = (
    *(
        f"outbox.inbox.{name}"
        for name in ("__init__", "claims", "dead_work", "markers", "reader", "records", "rows", "table")
    ),
    *(
        f"outbox.delivery.{name}"
        for name in (
            "batch",
            "carried",
            "direct",  # lease: one line, Run.under_lease, no point of its own
            "left_out",
            "log_check",
            "ordered",
            "path",
            "run",
            "runs",
            "timing",
            "workflow",
        )
    ),
    "outbox.pairs.order",
    "outbox.log.store",
    "outbox.log.transaction",
    "outbox.log.chain",
    "outbox.log.sealing",
    "outbox.ops.replay",
    "outbox.ops.reconcile",
    "outbox.ops.redrive",
    "outbox.ops.groups",
    "outbox.log.verification",
)

# Which tests run against a mutant of a module: the longest prefix of the module's name that is a key.
# The deploys' tests reach the inbox's repairs (a claim restored to COMPLETED, a widened order): without them a
# mutant of restore_applied survived the inbox's own tests (the first sample, docs/simulation.md).
_INBOX = (
    "tests/functional/test_inbox_claim.py",
    "tests/functional/test_inbox_delivery.py",
    "tests/functional/test_pairs_across_deploys.py",
)
_DELIVERY = (
    "tests/functional/test_inbox_delivery.py",
    "tests/functional/test_direct_completion.py",
    "tests/functional/test_ordered_direct.py",
    "tests/functional/test_ordered_subscriptions.py",  # the wake-ups: without it a swallowed one survived
)
_EMIT = (
    "tests/functional/test_emit.py",
    "tests/functional/test_emit_many.py",
    "tests/functional/test_emit_unknown_outcomes.py",
    "tests/functional/test_inline_reseal.py",
)
_REPAIRS = ("tests/functional/test_pairs_across_deploys.py", "tests/functional/test_replay_after_a_removal.py")
TESTS: dict[str, tuple[str, ...]] = {
    "outbox.inbox": (*_INBOX, "tests/functional/test_inbox_readers.py", "tests/functional/test_poison_corpus.py"),
    "outbox.delivery": _DELIVERY,
    "outbox.pairs.order": ("tests/functional/test_ordered_direct.py", "tests/functional/test_ordered_subscriptions.py"),
    "outbox.log.store": _EMIT,
    "outbox.log.transaction": _EMIT,
    "outbox.log.chain": (*_EMIT, "tests/functional/test_verify_chain.py"),
    "outbox.log.sealing": (*_EMIT, "tests/functional/test_verify_chain.py"),
    "outbox.ops.replay": _REPAIRS,
    "outbox.ops.reconcile": (*_REPAIRS, "tests/functional/test_completeness_pass.py"),
    "outbox.ops.redrive": ("tests/e2e/test_runbook.py", "tests/unit/test_cli_hints.py"),
    "outbox.ops.groups": (
        "tests/unit/test_failure_keys.py",
        "tests/unit/test_failure_keys_of_hashes.py",
        "tests/functional/test_failure_groups_of_conflicts.py",
    ),
    "outbox.log.verification": (
        "tests/functional/test_verify_chain.py",
        "tests/unit/test_audit_anchors.py",
        "tests/unit/test_anchor_reset_scope.py",
    ),
}


def covering_tests(module: str) -> tuple[str, ...]:
    parts = module.split(".")
    for depth in range(len(parts), 0, -1):
        if (key := ".".join(parts[:depth])) in TESTS:
            return TESTS[key]
    raise KeyError(f"no tests are mapped to {module}: add it to simulation.mechanical.TESTS")


# -- the population: every mutation point of cosmic-ray's operators -----------------------------------------


@dataclass(frozen=True)
class Point:
    """One mechanical mutant: cosmic-ray's ``operator`` applied at its ``occurrence`` in ``module``."""

    module: str
    line: int
    operator: str
    occurrence: int

    @property
    def id(self) -> str:
        return f"{self.module}:{self.line}:{self.operator}#{self.occurrence}"


def operators() -> dict[str, Any]:
    """cosmic-ray's core operators that need no argument (the two that do pick variables by hand or at random)."""
    from cosmic_ray.operators.provider import OperatorProvider

    provider = OperatorProvider()
    return {name: provider[name]() for name in sorted(provider) if not provider[name].arguments()}


def _annotation_nodes(tree: Any) -> set[int]:
    """The ids of every node inside a type annotation (never evaluated: ``from __future__ import annotations``)."""
    from cosmic_ray.ast import ast_nodes

    roots = []
    for node in ast_nodes(tree):
        if node.type in ("funcdef", "param") and getattr(node, "annotation", None) is not None:
            roots.append(node.annotation)
        elif node.type == "annassign":
            roots.append(node.children[1])
    return {id(inner) for root in roots for inner in ast_nodes(root)}


def points(module: str) -> list[Point]:
    """Every mutation point of ``module`` outside its annotations, in cosmic-ray's order (operator by operator,
    each in the order its ``MutationVisitor`` counts occurrences: the parse tree, node before children)."""
    from cosmic_ray.ast import ast_nodes, get_ast

    source = module_path(module).read_text()
    if "from __future__ import annotations" not in source:
        raise ValueError(f"{module} evaluates its annotations: its annotation mutants are not equivalent")
    tree = get_ast(source)  # cosmic-ray's parse: parso's tree, as its operators expect
    nodes = list(ast_nodes(tree))
    annotations = _annotation_nodes(tree)
    found = []
    for name, operator in operators().items():
        occurrence = 0
        for node in nodes:
            for (line, _column), _end in operator.mutation_positions(node):
                if id(node) not in annotations:
                    found.append(Point(module, line, name, occurrence))
                occurrence += 1
    return found


def population(modules: Sequence[str] = GUARANTEE_MODULES) -> list[Point]:
    return [point for module in modules for point in points(module)]


def sample(population: Sequence[Point], size: int, seed: int = SAMPLE_SEED) -> list[Point]:
    """A uniform random sample, the same for the same population and seed (any prefix of it is one too)."""
    return random.Random(seed).sample(list(population), min(size, len(population)))


def mutant(point: Point) -> Mutant:
    """The point as a mutant of ``simulation.mutation``: the fewest whole lines around the change that occur
    exactly once in the module, and what cosmic-ray made of them. StaleMutantError if nothing changes."""
    from cosmic_ray.mutating import MutationVisitor

    source = module_path(point.module).read_text()
    mutated = MutationVisitor.mutate_code(source, operators()[point.operator], point.occurrence)
    if mutated is None or mutated == source:
        raise StaleMutantError(f"{point.id}: cosmic-ray changes nothing there (the module changed?)")
    # cosmic-ray's ExceptionReplacer names its own exception class, which its runner makes importable; here the
    # name is spelled as the import of that class, so the hook's process needs nothing more.
    mutated = mutated.replace(_RAY, _RAY_IMPORTED) if _RAY not in source else mutated
    original, replacement = _unique_snippet(source, mutated)
    return Mutant(point.id, point.module, original, replacement, f"cosmic-ray {point.operator}", "")


_RAY = "CosmicRayTestingException"
_RAY_IMPORTED = f'__import__("cosmic_ray.exceptions").exceptions.{_RAY}'


def _unique_snippet(source: str, mutated: str) -> tuple[str, str]:
    before, after = source.splitlines(keepends=True), mutated.splitlines(keepends=True)
    start = 0
    while start < min(len(before), len(after)) and before[start] == after[start]:
        start += 1
    tail = 0
    while tail < min(len(before), len(after)) - start and before[-1 - tail] == after[-1 - tail]:
        tail += 1
    for context in range(len(before) + 1):
        first, end = max(0, start - context), min(len(before), len(before) - tail + context)
        original = "".join(before[first:end])
        replacement = "".join(after[first : end + len(after) - len(before)])
        if original and source.count(original) == 1 and source.replace(original, replacement) == mutated:
            return original, replacement
    raise AssertionError("the whole module is unique in itself")  # pragma: no cover


def diff(mutant: Mutant) -> str:
    lines = difflib.unified_diff(
        mutant.original.splitlines(keepends=True), mutant.replacement.splitlines(keepends=True), n=0
    )
    return "".join(line for line in lines if not line.startswith(("---", "+++", "@@")))
