"""The application's modules: their event types and subscriptions. Lambda functions load the registry
through ``SUBSCRIPTIONS=modules:build_registry``."""

from __future__ import annotations

from outbox.subscriptions import SubscriptionRegistry


def build_registry() -> SubscriptionRegistry:
    """Every subscription of every module, built fresh (tests build their own)."""
    return SubscriptionRegistry.of([])
