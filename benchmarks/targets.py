"""The performance targets (``benchmarks/targets.toml``) and their verdicts against the measured figures."""

from __future__ import annotations

import math
import operator
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields, is_dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from benchmarks.results import Figures, MissingFigureError, Results, Summary

TARGETS_FILE = Path(__file__).resolve().parent / "targets.toml"
Comparison = Literal["<=", ">=", "=="]
COMPARE: dict[str, Callable[[float, float], bool]] = {
    "<=": operator.le,
    ">=": operator.ge,
    "==": lambda measured, threshold: math.isclose(measured, threshold, rel_tol=1e-9),
}


class TargetsError(Exception):
    """The targets file is malformed, or a target names a measure the results model does not have."""


class Target(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    title: str
    measure: str
    comparison: Comparison
    threshold: float
    unit: str
    explanation: str | None = None


@dataclass(frozen=True)
class Verdict:
    target: Target
    value: float  # what was compared: the median of a figure with a range
    spread: Summary | None  # the figure's range over repetitions, when it has one
    met: bool


def load_targets(path: Path = TARGETS_FILE) -> tuple[Target, ...]:
    try:
        raw = tomllib.loads(path.read_text())
        targets = tuple(Target.model_validate(entry) for entry in raw["target"])
    except (OSError, KeyError, tomllib.TOMLDecodeError, ValidationError) as exc:
        raise TargetsError(f"{path}: {exc}") from exc
    ids = [target.id for target in targets]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise TargetsError(f"{path}: target ids used twice: {', '.join(duplicates)}")
    return targets


def resolve(results: Results, target: Target, derived: Any = None) -> Any:
    """The object at ``target.measure``: each dotted part a field or property of a model, or a mapping key;
    a measure that starts with ``derived.`` starts from what the report derives from several benchmarks'
    figures (``benchmarks.report.Derived``: the dollars, the write units against the hand-made outbox)."""
    found: Any = results
    parts = target.measure.split(".")
    if parts[0] == "derived":
        if derived is None:
            raise TargetsError(f"target {target.id}: measure {target.measure!r} needs the report's derived figures")
        found, parts = derived, parts[1:]
    for part in parts:
        found = _step(found, part, target)
    return found


def _step(found: Any, part: str, target: Target) -> Any:
    where = f"target {target.id}: measure {target.measure!r}"
    if isinstance(found, Mapping):
        if part not in found:
            raise MissingFigureError(f"{where}: no {part!r} among {', '.join(map(str, found))}")
        return found[part]
    if isinstance(found, Figures) and _is_figure(type(found), part):
        return getattr(found, part)
    if is_dataclass(found) and not isinstance(found, type) and _is_derived_figure(found, part):
        return getattr(found, part)
    raise TargetsError(f"{where}: {type(found).__name__} has no figure {part!r}")


def _is_figure(model: type[Figures], name: str) -> bool:
    return name in model.model_fields or isinstance(getattr(model, name, None), property)


def _is_derived_figure(found: Any, name: str) -> bool:
    return name in {f.name for f in fields(found)} or isinstance(getattr(type(found), name, None), property)


def judge(results: Results, targets: Sequence[Target], derived: Any = None) -> list[Verdict]:
    return [_verdict(target, resolve(results, target, derived)) for target in targets]


def _verdict(target: Target, measured: Any) -> Verdict:
    spread = measured if isinstance(measured, Summary) else None
    value = measured.median if spread is not None else measured
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TargetsError(f"target {target.id}: {target.measure!r} is not a number but {type(measured).__name__}")
    return Verdict(target, float(value), spread, COMPARE[target.comparison](float(value), target.threshold))
