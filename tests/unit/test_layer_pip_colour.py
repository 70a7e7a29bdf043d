"""The layer's pip runs print no terminal escape codes where the output is not a terminal, or NO_COLOR is set.

The CDK CLI runs the app with ``FORCE_COLOR=3`` whatever its output is, so pip coloured its warnings and errors
into a pipe or a log: raw escape codes, the last of which began the synth's next line (the engine layer's
WARNING). pip runs here as the synth runs it (``FORCE_COLOR=3``), on a download that fails (so it says something),
with its stderr a pipe or a terminal (a pty), with and without ``NO_COLOR``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from outbox_cdk.engine_layer import pip_colour_options
from tests.unit.terminal_run import on_a_terminal

ESCAPE = b"\x1b["
RUN_PIP = """
import subprocess, sys
from outbox_cdk.engine_layer import _pip
try:
    _pip("download", "--no-index", "--dest", sys.argv[1], "no-such-package-for-this-test")
except subprocess.CalledProcessError:
    pass
"""


def pip_says(tmp_path: Path, *, terminal: bool, no_color: bool) -> bytes:
    env = {**os.environ, "FORCE_COLOR": "3"}
    env.pop("NO_COLOR", None)
    if no_color:
        env["NO_COLOR"] = "1"
    command = [sys.executable, "-c", RUN_PIP, str(tmp_path)]
    if not terminal:
        return subprocess.run(command, env=env, capture_output=True, check=True, timeout=120).stderr
    return on_a_terminal(command, env)


@pytest.mark.parametrize(
    ("terminal", "no_color"), [(False, False), (False, True), (True, True), (True, False)], ids=str
)
def test_pip_colours_only_a_terminal_without_no_color(tmp_path: Path, terminal: bool, no_color: bool) -> None:
    said = pip_says(tmp_path, terminal=terminal, no_color=no_color)
    assert b"no-such-package-for-this-test" in said, said
    assert (ESCAPE in said) is (terminal and not no_color), said


@pytest.mark.parametrize("value", ["1", "true", "0"])
def test_any_no_color_value_turns_colour_off_and_an_empty_one_does_not(value: str) -> None:
    class Terminal:
        def isatty(self) -> bool:
            return True

    assert pip_colour_options(Terminal(), {"NO_COLOR": value}) == ["--no-color"]  # type: ignore[arg-type]
    assert pip_colour_options(Terminal(), {"NO_COLOR": ""}) == []  # type: ignore[arg-type]
    assert pip_colour_options(Terminal(), {}) == []  # type: ignore[arg-type]
