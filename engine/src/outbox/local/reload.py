"""A served runtime's code reloaded in place (``outbox local serve`` watching the app's folder): the same tables,
queues, pipes and mappings, and their state, with the functions of a new synth of the app."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

from outbox.local.runtime import LocalRuntime
from outbox.local.template import StackSpec


def reload_code(runtime: LocalRuntime, stack: StackSpec) -> None:
    """Run ``stack``'s code from now on: a synth of the same app after a code change, with the same tables, queues,
    pipes and mappings (``outbox.local.state.resources_digest``; the state stays as it is). Each function's next
    invocation is a cold start of its new code, in its new environment, and the modules the old code's staged
    assets had imported are forgotten, so the new code imports its own; a durable execution's next invocation runs
    its function's new code."""
    staged = {f.code_root for f in runtime.functions.values() if f.code_root.name.startswith("asset.")}
    runtime.stack = stack
    for name, module in list(sys.modules.items()):
        source = getattr(module, "__file__", None)
        if source and any(Path(source).is_relative_to(root) for root in staged):
            del sys.modules[name]
    importlib.invalidate_caches()
    for spec in stack.functions.values():
        fresh = runtime.build_function(spec)
        if fresh is None:
            continue
        current = runtime.functions.setdefault(spec.logical_id, fresh)
        runtime.resources.function_names[spec.logical_id] = spec.logical_id
        current.handler_path, current.code_root = fresh.handler_path, fresh.code_root
        current.timeout, current.env = fresh.timeout, fresh.env
        current.new_container()
    if runtime.workflows is not None:  # the durable functions' handlers, of the new code too
        runtime.workflows.reload(stack, runtime.functions)
