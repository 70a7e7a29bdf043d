"""How the operator's tools count things in a sentence."""

from __future__ import annotations


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    """``1 dead letter``, ``2 dead letters``; ``nouns`` where adding an s is wrong."""
    return f"{count} {noun if count == 1 else (nouns or noun + 's')}"
