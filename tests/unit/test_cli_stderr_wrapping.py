"""The CLI's lines for the person (stderr) wrap between words at the terminal's width on a terminal, and not at all
elsewhere: rich broke them at 80 columns in a log or a pipe, and a terminal folded the others mid-word.

The commands run as a person runs them, their stderr a terminal (a pty 60 columns wide) or a pipe: a usage error
(click's message) and a refusal (rich's), each longer than the terminal is wide."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from outbox.local.terminal import wrapped
from tests.unit.terminal_run import on_a_terminal

WIDTH = 60
ANSI = re.compile(r"\x1b\[[0-9;]*m")
OUTBOX = [sys.executable, "-m", "outbox.cli", "--local", "status"]


def no_topology(folder: Path) -> None:
    """`outbox --local` with nothing served here: click's usage error."""


def an_app_without_outputs(folder: Path) -> None:
    """A topology whose stack has none of the pipeline's outputs: the CLI's own refusal, printed by rich."""
    (folder / ".local").mkdir()
    topology = {"endpoint_url": "http://127.0.0.1:9", "outputs": {}, "catalog": "x:y", "code": "."}
    (folder / ".local" / "topology.json").write_text(json.dumps(topology))


def environment() -> dict[str, str]:
    return {name: value for name, value in os.environ.items() if name not in ("COLUMNS", "LINES", "FORCE_COLOR")}


def through_a_pipe(folder: Path) -> str:
    return subprocess.run(OUTBOX, cwd=folder, env=environment(), capture_output=True, text=True, timeout=120).stderr


def shown_on_a_terminal(folder: Path) -> str:
    said = on_a_terminal(OUTBOX, environment(), columns=WIDTH, cwd=folder)
    return ANSI.sub("", said.decode()).replace("\r\n", "\n")


@pytest.mark.parametrize("situation", [no_topology, an_app_without_outputs], ids=lambda f: f.__name__)
def test_a_long_message_wraps_between_words_on_a_terminal_and_not_at_all_in_a_pipe(tmp_path: Path, situation) -> None:
    situation(tmp_path)
    piped, shown = through_a_pipe(tmp_path), shown_on_a_terminal(tmp_path)

    longest = max(piped.splitlines(), key=len)
    assert len(longest) > 80, "a pipe gets the message whole, on one line (rich broke it at 80 columns)"
    lines = shown.splitlines()
    assert all(len(line.rstrip()) <= WIDTH for line in lines), shown
    assert len(lines) > len(piped.splitlines()), "the terminal's copy is wrapped"
    assert shown.split() == piped.split(), "the same words, none split, none lost"


WORD = st.text(st.sampled_from("abcdefghij-_./:`'"), min_size=1, max_size=30)


@given(
    words=st.lists(WORD, min_size=1, max_size=40),
    indent=st.integers(min_value=0, max_value=6),
    width=st.integers(min_value=8, max_value=100),
)
def test_a_line_is_wrapped_between_words_keeping_its_indentation_and_every_word_whole(
    words: list[str], indent: int, width: int
) -> None:
    line = " " * indent + " ".join(words)
    lines = wrapped(line, width).split("\n")

    assert [word for part in lines for word in part.split()] == words, "no word split, none lost"
    assert all(part.startswith(" " * indent) for part in lines)
    for part in lines:
        assert len(part) <= width or len(part.split()) == 1, "only a word longer than the width overflows, alone"
    assert wrapped(line, None) == line, "not a terminal: as it is"


def test_each_line_of_a_message_is_wrapped_on_its_own() -> None:
    text = "Usage: outbox status [OPTIONS]\n\nError: " + "word " * 30
    shown = wrapped(text, 40).split("\n")
    assert shown[:2] == ["Usage: outbox status [OPTIONS]", ""]
    assert all(len(part) <= 40 for part in shown)
