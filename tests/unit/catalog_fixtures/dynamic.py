"""A producer whose event type is computed: the contract cannot check it, so it refuses it."""

from __future__ import annotations

from typing import Any


def emit_anything(store: Any, kind: str) -> None:
    store.emit(f"widget.{kind}", {}, tenant="acme", actor="test")
