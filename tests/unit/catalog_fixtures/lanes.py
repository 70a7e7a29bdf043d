"""Follow-ups on every lane: only the durable lane commits them, so only there do they produce a type."""

from __future__ import annotations

from typing import Any

from outbox import FollowUp, HandlerResult


def make_widget(store: Any) -> None:
    store.emit("widget.made", {"id": "w-1"}, tenant="acme", actor="test")


def ship_durably(_delivery: Any) -> HandlerResult:
    return HandlerResult(follow_up=FollowUp("widget.shipped", {"id": "w-1"}))


def ship_locally(_delivery: Any) -> HandlerResult:
    return HandlerResult(follow_up=FollowUp("widget.shipped", {"id": "w-1"}))


def shipped_follow_up() -> FollowUp:
    """A helper that builds a follow-up for some handler: it counts, as it may serve a durable one."""
    return FollowUp("widget.shipped", {"id": "w-2"})
