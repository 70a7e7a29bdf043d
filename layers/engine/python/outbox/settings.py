"""Typed configuration of the Lambda functions, read from the environment once, at cold start."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from outbox.exceptions import OutboxValidationError
from outbox.subscriptions import SubscriptionRegistry


class ConsumerSettings(BaseModel):
    """Environment of the durable consumer; the CDK stack sets every variable (stacks/constructs)."""

    model_config = ConfigDict(frozen=True)

    events_table_name: str = Field(alias="EVENTS_TABLE_NAME", min_length=3)
    inbox_table_name: str = Field(alias="INBOX_TABLE_NAME", min_length=3)
    max_receive_count: int = Field(alias="MAX_RECEIVE_COUNT", ge=1, le=1000)
    inbox_retention_days: int = Field(alias="INBOX_RETENTION_DAYS", ge=1, le=365)
    subscriptions: str = Field(alias="SUBSCRIPTIONS", pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> ConsumerSettings:
        try:
            return cls.model_validate(dict(environ))
        except ValidationError as exc:
            raise OutboxValidationError(f"the consumer's environment is incomplete or wrong: {exc}") from exc

    @property
    def inbox_retention(self) -> timedelta:
        return timedelta(days=self.inbox_retention_days)


def load_registry(reference: str) -> SubscriptionRegistry:
    """``"package.module:function"`` -> the registry that function builds (the application's modules)."""
    module_name, _, attribute = reference.partition(":")
    builder: Callable[[], Any] = getattr(importlib.import_module(module_name), attribute)
    registry = builder()
    if not isinstance(registry, SubscriptionRegistry):
        raise OutboxValidationError(f"{reference} returned {type(registry).__name__}, not a SubscriptionRegistry")
    return registry
