"""Lines for the person at a terminal (stderr): wrapped between words at the terminal's width when stderr is a
terminal, and not at all when it is not (a log, a pipe, a test), where a line broken at 80 columns would only be
broken: a command cut in two cannot be pasted, a message cut in two cannot be searched for.

Used by the ``outbox`` CLI (its notes, refusals and usage errors) and ``outbox local serve`` (what it says about
its state and code reloads). Standard library only: the CLI without the ``[local]`` extra imports it too.
"""

from __future__ import annotations

import os
import sys
import textwrap
from typing import TextIO

__all__ = ["is_terminal", "terminal_width", "wrapped"]


def is_terminal(stream: TextIO | None = None) -> bool:
    """Whether ``stream`` (stderr by default) is a terminal."""
    stream = sys.stderr if stream is None else stream
    try:
        return os.isatty(stream.fileno())
    except (AttributeError, OSError, ValueError):  # no descriptor: captured (a test's, click's runner)
        return False


def terminal_width(stream: TextIO | None = None) -> int | None:
    """The width to wrap ``stream``'s lines at: its terminal's (``COLUMNS`` wins, as everywhere), or None when it
    is not a terminal."""
    stream = sys.stderr if stream is None else stream
    if not is_terminal(stream):
        return None
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    try:
        return os.get_terminal_size(stream.fileno()).columns or 80
    except OSError:
        return 80


def wrapped(text: str, width: int | None) -> str:
    """``text`` with each of its lines wrapped between words at ``width`` (None: as it is). A continuation keeps
    its line's indentation; a word longer than the width (a path, a URL) stays whole on a line of its own, never
    split; a hyphenated word is never split at its hyphen (``--fresh`` stays one)."""
    if width is None or width <= 0:
        return text
    out = []
    for line in text.split("\n"):
        if len(line) <= width:
            out.append(line)
            continue
        indent = line[: len(line) - len(line.lstrip(" "))]
        out.append(
            textwrap.fill(
                line.strip(" "),
                width=width,
                initial_indent=indent,
                subsequent_indent=indent,
                break_long_words=False,
                break_on_hyphens=False,
            )
        )
    return "\n".join(out)
