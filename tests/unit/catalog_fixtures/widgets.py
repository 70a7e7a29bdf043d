"""A module's code as the contract reads it: the producers are the emit() and FollowUp() calls below."""

from __future__ import annotations

from typing import Any

from outbox import FollowUp, HandlerResult


def make_widget(store: Any) -> None:
    store.emit("widget.made", {"id": "w-1"}, tenant="acme", actor="test")


def ship_widget(_delivery: Any) -> HandlerResult:
    return HandlerResult(follow_up=FollowUp("widget.shipped", {"id": "w-1"}))
