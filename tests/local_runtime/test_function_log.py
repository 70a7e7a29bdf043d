"""A function's log holds what its own invocations printed, whatever container configured the logger first.

Powertools configures a service's logger once per process, and a logging handler keeps the stream it found when
it was made: a later container of the function (a cold start, the next test's runtime) reuses that handler. Its
lines must still reach its own log, never the first container's (a test reading ``function_log()`` would find
nothing, or another test's lines).
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from outbox.local.clock import VirtualClock
from outbox.local.functions import LocalFunction

HANDLER = """
import logging
import sys

log = logging.getLogger("function-log-probe")
if not log.handlers:  # as Powertools does: once per process, on the stdout of the moment
    log.addHandler(logging.StreamHandler(sys.stdout))
    log.setLevel(logging.INFO)
    log.propagate = False


def handler(event, context):
    log.info("invocation %s", event["n"])
"""


def a_container(code_root: Path) -> LocalFunction:
    return LocalFunction("probe", "probe.handler", code_root, timedelta(seconds=3), {}, VirtualClock())


def test_each_containers_lines_reach_its_own_log(tmp_path: Path) -> None:
    (tmp_path / "probe.py").write_text(HANDLER)
    first, second = a_container(tmp_path), a_container(tmp_path)

    first.invoke({"n": 1})
    second.invoke({"n": 2})
    first.invoke({"n": 3})

    assert list(first.log.lines) == ["invocation 1", "invocation 3"]
    assert list(second.log.lines) == ["invocation 2"]
