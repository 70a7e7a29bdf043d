"""The catalog's contract, checked at synth: a subscription that would never run fails the synth, not production.

``OutboxPipeline`` imports the application's catalog from its code asset, the way every function imports it at
cold start (with the pipeline's ``environment``; a value only CloudFormation knows, a table name say, becomes a
placeholder), and fails the synth on ``Catalog.problems()``: a glob that matches nothing the code can emit, a
handler on a lane that never carries its events, a type declared that nothing emits. A problem the app accepts
is named, with why, in ``AcceptedCatalogProblem``; each is recorded in the template's metadata.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

from aws_cdk import Token
from aws_cdk import aws_lambda as lambda_

from outbox.catalog import ACCEPTED_PROBLEMS_METADATA, Catalog

__all__ = ["AcceptedCatalogProblem", "CatalogContractError", "check_catalog"]

# In the template's Metadata: the problems the app accepted, and why.
ACCEPTED_METADATA = ACCEPTED_PROBLEMS_METADATA


class CatalogContractError(ValueError):
    """The catalog cannot be loaded, or breaks its contract: the synth stops with what to fix."""


@dataclass(frozen=True)
class AcceptedCatalogProblem:
    """A catalog problem the app accepts: ``problem`` is a part of its text, ``reason`` why it is no problem."""

    problem: str
    reason: str

    def __post_init__(self) -> None:
        if not self.problem.strip() or not self.reason.strip():
            raise ValueError("AcceptedCatalogProblem needs the problem's text (a part of it) and the reason")


def check_catalog(
    code: lambda_.Code, reference: str, environment: Mapping[str, str], accepted: Sequence[AcceptedCatalogProblem]
) -> list[AcceptedCatalogProblem]:
    """Load ``reference`` (``package.module:function``) from the ``code`` asset and check its contract. The
    acceptances that matched a problem; raises ``CatalogContractError`` with every problem not accepted, and
    for an acceptance that matches none (the problem it was for is gone: remove it)."""
    return load_checked_catalog(code, reference, environment, accepted)[1]


def load_checked_catalog(
    code: lambda_.Code, reference: str, environment: Mapping[str, str], accepted: Sequence[AcceptedCatalogProblem]
) -> tuple[Catalog | None, list[AcceptedCatalogProblem]]:
    """``check_catalog``, and the catalog it loaded (None for inline or S3 code, which the synth cannot import):
    the completeness pass is given it as data (``outbox.ops.completeness.catalog_data``)."""
    source = _asset_path(code)
    if source is None:
        return None, []  # inline or S3 code: nothing here to import; the functions check it at cold start
    with _importable(source), _environment(environment):
        catalog = _load(reference, source)
        problems = catalog.problems()
    used = [a for a in accepted if any(a.problem in problem for problem in problems)]
    unaccepted = [p for p in problems if not any(a.problem in p for a in accepted)]
    stale = [a for a in accepted if a not in used]
    if unaccepted or stale:
        lines = [f"  - {problem}" for problem in unaccepted]
        lines += [f"  - accepted, but no problem of the catalog reads {a.problem!r}: remove it" for a in stale]
        raise CatalogContractError(
            f"the catalog {reference!r} (in {source}) breaks its contract:\n" + "\n".join(lines) + "\n"
            "Fix each, or accept one on purpose: OutboxPipeline(..., accept_catalog_problems=["
            "AcceptedCatalogProblem(problem='<part of its text>', reason='<why>')])"
        )
    return catalog, used


def _asset_path(code: lambda_.Code) -> Path | None:
    path = getattr(code, "path", None)
    return Path(path).resolve() if isinstance(code, lambda_.AssetCode) and path else None


def _load(reference: str, source: Path) -> Catalog:
    module_name, _, function_name = reference.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise CatalogContractError(
            f"catalog {reference!r}: no module {exc.name!r} in the code asset {source} (is the name spelled as "
            "the package's folders are, and does each folder have an __init__.py?)"
        ) from exc
    builder = getattr(module, function_name, None)
    if not callable(builder):
        raise CatalogContractError(f"catalog {reference!r}: {module_name} has no function {function_name!r}")
    try:
        catalog = builder()
    except Exception as exc:  # the user's builder: whatever it raises, the synth says where
        raise CatalogContractError(
            f"catalog {reference!r} raised {type(exc).__name__}: {exc} (it runs at synth with the pipeline's "
            "environment, unresolved values as placeholders)"
        ) from exc
    if not isinstance(catalog, Catalog):
        raise CatalogContractError(f"catalog {reference!r} returned {type(catalog).__name__}, not outbox.Catalog")
    return catalog


@contextmanager
def _importable(source: Path) -> Iterator[None]:
    sys.path.insert(0, str(source))
    try:
        yield
    finally:
        sys.path.remove(str(source))


def _environment(environment: Mapping[str, str]) -> Any:
    """The pipeline's environment, as a function would see it, until the block ends; a token (a table name
    CloudFormation will choose, say) becomes a placeholder that names its variable."""
    values = {name: f"synth-placeholder-{name}" if Token.is_unresolved(v) else v for name, v in environment.items()}
    return mock.patch.dict(os.environ, values)
