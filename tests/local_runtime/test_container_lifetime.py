"""A container's module lives as long as the container: a cold start, or a stopped runtime, lets it go.

A long-lived process (the simulator's soak worker, a notebook, ``outbox dev``) starts runtime after runtime; a
module left in ``sys.modules`` keeps everything its handler reached (the consumer it cached, the registry, every
application object of that run), and the soak's workers grew by gigabytes until the kernel killed them.
"""

from __future__ import annotations

import gc
import sys
import weakref
from datetime import timedelta
from pathlib import Path

from outbox.local.clock import VirtualClock
from outbox.local.functions import LocalFunction

HANDLER = """
class Kept:
    pass


KEPT = Kept()  # what a handler module keeps at import: a client, a cached consumer


def handler(event, context):
    return id(KEPT)
"""


def a_container(code_root: Path) -> LocalFunction:
    return LocalFunction("lifetime", "probe.handler", code_root, timedelta(seconds=3), {}, VirtualClock())


def private_modules() -> set[str]:
    return {name for name in sys.modules if name.startswith("_lambda_lifetime_")}


def test_a_warm_container_keeps_its_module_and_a_cold_start_lets_it_go(tmp_path: Path) -> None:
    (tmp_path / "probe.py").write_text(HANDLER)
    container = a_container(tmp_path)

    first = container.invoke({})
    assert container.invoke({}) == first, "a warm container reuses what its module made at import"
    (name,) = private_modules()
    kept = weakref.ref(sys.modules[name].KEPT)

    container.new_container()
    gc.collect()
    assert private_modules() == set()
    assert kept() is None, "the old container's module is still reachable"

    container.invoke({})
    assert len(private_modules()) == 1, "the cold start imported the module afresh"
    container.new_container()


def test_a_stopped_runtime_leaves_no_module_of_its_functions(outbox_assembly: Path, aws_credentials: None) -> None:
    from outbox.local.runtime import LocalRuntime

    before = {name for name in sys.modules if name.startswith("_lambda_")}
    with LocalRuntime.from_assembly(outbox_assembly) as runtime:
        for function in runtime.functions.values():
            function.resolve()
        assert {name for name in sys.modules if name.startswith("_lambda_")} - before
    assert {name for name in sys.modules if name.startswith("_lambda_")} == before
