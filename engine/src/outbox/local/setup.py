"""The application's side of a booted runtime: its catalog, and the checks that it can run at all.

A test fixture (``outbox.testing.LocalPipeline``) and ``outbox local serve`` boot the same stack and must
refuse it for the same causes, with the cause, before any message moves: a catalog that cannot be built or
breaks its contract (but for the problems the stack accepted, ``accept_catalog_problems``), and a durable
consumer that cannot start.
"""

from __future__ import annotations

import importlib
from typing import Any

from outbox.catalog import ACCEPTED_PROBLEMS_METADATA, Catalog
from outbox.local.functions import code_on_path, environment, function_output
from outbox.local.runtime import LocalRuntime
from outbox.outputs import StackOutput
from outbox.settings import load_catalog

__all__ = ["PipelineSetupError", "check_setup", "durable_consumer", "load_app_catalog"]


class PipelineSetupError(Exception):
    """The application cannot run on this pipeline: its catalog, or its durable consumer's start."""


def durable_consumer(runtime: LocalRuntime) -> Any:
    return runtime.function(StackOutput.DURABLE_CONSUMER_FUNCTION)


def load_app_catalog(runtime: LocalRuntime) -> Catalog:
    """The application's catalog, built by the reference the durable consumer loads (``SUBSCRIPTIONS``), in
    that function's environment: the same event types, subscriptions and table names."""
    function = durable_consumer(runtime)
    with environment(function.env), code_on_path(function.code_root):
        return load_catalog(function.env["SUBSCRIPTIONS"])


def check_setup(runtime: LocalRuntime) -> Catalog:
    """Fail now, with the cause, what would fail every invocation far from it (``PipelineSetupError``); the
    catalog it built, when it passes."""
    reference = durable_consumer(runtime).env.get("SUBSCRIPTIONS", "?")
    try:
        catalog = load_app_catalog(runtime)
    except Exception as exc:  # the application's builder: whatever it raises
        raise PipelineSetupError(f"the catalog {reference} could not be built: {type(exc).__name__}: {exc}") from exc
    accepted = [entry["problem"] for entry in runtime.stack.metadata.get(ACCEPTED_PROBLEMS_METADATA, [])]
    problems = [problem for problem in catalog.problems() if not any(part in problem for part in accepted)]
    if problems:
        listed = "".join(f"\n  - {problem}" for problem in problems)
        raise PipelineSetupError(f"the catalog {reference} breaks its contract:{listed}")
    _check_consumer_starts(runtime)
    return catalog


def _check_consumer_starts(runtime: LocalRuntime) -> None:
    """Build the durable consumer as its cold start does, in its environment (the permissions an ordered
    subscription needs, say), without waiting for a message to find out."""
    function = durable_consumer(runtime)
    module_name = function.handler_path.rsplit(".", 1)[0]
    # Its log as its invocations' (the handler module configures its logger once per process: here, if first).
    with environment(function.env), code_on_path(function.code_root), function_output(function.log):
        build = getattr(importlib.import_module(module_name), "consumer", None)
        if build is None:
            return
        try:
            getattr(build, "__wrapped__", build)()  # past the module's cache: this check builds its own
        except Exception as exc:
            raise PipelineSetupError(
                f"the durable consumer ({function.name}) cannot start: {type(exc).__name__}: {exc}"
            ) from exc
