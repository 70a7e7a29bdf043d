"""Typed configuration of the Lambda functions, read from the environment once, at cold start."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from outbox.catalog import Catalog
from outbox.exceptions import OutboxValidationError
from outbox.redaction import ErrorDetail

CATALOG_REFERENCE = r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$"
SettingsT = TypeVar("SettingsT", bound=BaseModel)


def _from_env(model: type[SettingsT], environ: Mapping[str, str]) -> SettingsT:
    try:
        return model.model_validate(dict(environ))
    except ValidationError as exc:
        raise OutboxValidationError(f"the function's environment is incomplete or wrong: {exc}") from exc


class ConsumerSettings(BaseModel):
    """Environment of the durable consumer; the construct sets every variable (outbox_cdk.durable_consumer).
    The application's own variables (its table names, say) are its catalog builder's to read."""

    # Each function reads one of these models: deferred, the others' schemas are never built (cold start).
    model_config = ConfigDict(frozen=True, defer_build=True)

    events_table_name: str = Field(alias="EVENTS_TABLE_NAME", min_length=3)
    inbox_table_name: str = Field(alias="INBOX_TABLE_NAME", min_length=3)
    max_attempts: int = Field(alias="MAX_ATTEMPTS", ge=1, le=100)
    inbox_retention_days: int = Field(alias="INBOX_RETENTION_DAYS", ge=1, le=365)
    subscriptions: str = Field(alias="SUBSCRIPTIONS", pattern=CATALOG_REFERENCE)
    # What failures say in logs and dead letters (outbox.redaction); the construct always sets it.
    error_detail: ErrorDetail = Field(alias="ERROR_DETAIL")
    # Where deferred events of ordered subscriptions are sent back; set by the construct when the pipeline
    # has ordered subscriptions (OutboxPipeline(ordered_subscriptions=True)).
    durable_queue_url: str | None = Field(default=None, alias="DURABLE_QUEUE_URL")
    # The WORKFLOW subscriptions' durable functions, as JSON {subscription: {"arn", "execution_timeout"}}; set by the
    # construct when the catalog has any (outbox_cdk.workflow_function).
    workflow_functions: str | None = Field(default=None, alias="WORKFLOW_FUNCTIONS")

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> ConsumerSettings:
        return _from_env(cls, environ)

    @property
    def inbox_retention(self) -> timedelta:
        return timedelta(days=self.inbox_retention_days)


class RecordChangeSettings(BaseModel):
    """Environment of the record-change consumer."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    subscriptions: str = Field(alias="SUBSCRIPTIONS", pattern=CATALOG_REFERENCE)

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> RecordChangeSettings:
        return _from_env(cls, environ)


def load_catalog(reference: str) -> Catalog:
    """``"package.module:function"`` -> the catalog that function builds from the application's modules."""
    module_name, _, attribute = reference.partition(":")
    builder: Callable[[], Any] = getattr(importlib.import_module(module_name), attribute)
    catalog = builder()
    if not isinstance(catalog, Catalog):
        raise OutboxValidationError(f"{reference} returned {type(catalog).__name__}, not a Catalog")
    return catalog


class OperatorSettings(BaseModel):
    """Environment of the operator endpoint: where everything it reports on lives."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    events_table_name: str = Field(alias="EVENTS_TABLE_NAME", min_length=3)
    inbox_table_name: str = Field(alias="INBOX_TABLE_NAME", min_length=3)
    durable_queue_url: str = Field(alias="DURABLE_QUEUE_URL")
    durable_dlq_url: str = Field(alias="DURABLE_DLQ_URL")
    relay_dlq_url: str = Field(alias="RELAY_DLQ_URL")
    relay_pipe_name: str = Field(alias="RELAY_PIPE_NAME")
    audit_table_name: str = Field(alias="AUDIT_TABLE_NAME", min_length=3)
    tamper_pipe_name: str = Field(alias="TAMPER_PIPE_NAME")
    tamper_queue_url: str = Field(alias="TAMPER_QUEUE_URL")
    tamper_dlq_url: str = Field(alias="TAMPER_DLQ_URL")
    tamper_pipe_dlq_url: str = Field(alias="TAMPER_PIPE_DLQ_URL")
    anchoring_dlq_url: str = Field(alias="ANCHORING_DLQ_URL")
    workflow_settle_dlq_url: str | None = Field(default=None, alias="WORKFLOW_SETTLE_DLQ_URL")
    # The record-change lane is optional (a pipeline without a source table has none).
    record_change_queue_url: str | None = Field(default=None, alias="RECORD_CHANGE_QUEUE_URL")
    record_change_dlq_url: str | None = Field(default=None, alias="RECORD_CHANGE_DLQ_URL")
    record_change_pipe_dlq_url: str | None = Field(default=None, alias="RECORD_CHANGE_PIPE_DLQ_URL")
    record_change_pipe_name: str | None = Field(default=None, alias="RECORD_CHANGE_PIPE_NAME")
    subscriptions: str = Field(alias="SUBSCRIPTIONS", pattern=CATALOG_REFERENCE)

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> OperatorSettings:
        return _from_env(cls, environ)


class AuditorSettings(BaseModel):
    """Environment of the auditor: the log it watches and the table it alone (with the operator role) writes."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    events_table_name: str = Field(alias="EVENTS_TABLE_NAME", min_length=3)
    audit_table_name: str = Field(alias="AUDIT_TABLE_NAME", min_length=3)
    # The stack's pipes, comma-separated, whose state each anchoring pass publishes (outbox.audit.liveness). Set on
    # the anchoring function only: the tamper recorder watches nothing.
    watched_pipe_names: str | None = Field(default=None, alias="WATCHED_PIPE_NAMES")
    # The completeness pass (outbox.ops.completeness), on the anchoring function only: the deployed catalog as data
    # made at synth, the bound derived from the stack's settings, the inbox it reads, and, for its optional
    # self-repair, how many pairs a pass may re-send and the queue it sends them to.
    completeness_catalog: str | None = Field(default=None, alias="COMPLETENESS_CATALOG")
    completeness_bound_seconds: int | None = Field(default=None, alias="COMPLETENESS_BOUND_SECONDS", ge=60)
    completeness_repairs: int = Field(default=0, alias="COMPLETENESS_REPAIRS", ge=0, le=1000)
    inbox_table_name: str | None = Field(default=None, alias="INBOX_TABLE_NAME", min_length=3)
    inbox_retention_days: int = Field(default=30, alias="INBOX_RETENTION_DAYS", ge=1, le=365)
    durable_queue_url: str | None = Field(default=None, alias="DURABLE_QUEUE_URL")

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> AuditorSettings:
        return _from_env(cls, environ)

    @property
    def checks_completeness(self) -> bool:
        """Whether the pass is configured: a stack whose catalog was not loadable at synth has no catalog data."""
        given = [self.completeness_catalog, self.completeness_bound_seconds, self.inbox_table_name]
        if any(value is None for value in given) and any(value is not None for value in given):
            raise OutboxValidationError(
                "the anchoring function's environment names only part of the completeness pass (COMPLETENESS_CATALOG, "
                "COMPLETENESS_BOUND_SECONDS, INBOX_TABLE_NAME): deploy the stack again"
            )
        if self.completeness_repairs and self.durable_queue_url is None:
            raise OutboxValidationError("COMPLETENESS_REPAIRS needs DURABLE_QUEUE_URL, where the re-sends go")
        return self.completeness_catalog is not None

    def watched_pipes(self) -> tuple[str, ...]:
        """The pipes to watch; refused when none are named, since a watch of nothing would report all is well."""
        names = tuple(name.strip() for name in (self.watched_pipe_names or "").split(",") if name.strip())
        if not names:
            raise OutboxValidationError("the anchoring function's environment names no pipe (WATCHED_PIPE_NAMES)")
        return names
