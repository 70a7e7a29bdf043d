"""The WORKFLOW lane's settle pass, on a schedule: every handed pair whose durable execution ended is settled
(``outbox.workflows.ends``). Thin on purpose: the Powertools decorators, the settings, one call into the engine."""

from __future__ import annotations

import os
from datetime import timedelta
from functools import cache
from typing import Any

import boto3
from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.logging.utils import copy_config_to_registered_loggers
from aws_lambda_powertools.utilities.typing import LambdaContext
from pydantic import BaseModel, ConfigDict, Field

from outbox.clients import engine_dynamodb_client
from outbox.inbox import Inbox
from outbox.redaction import ErrorDetail
from outbox.settings import _from_env
from outbox.workflows.ends import OLDEST_METRIC, SETTLED_METRICS, Settled, WorkflowEnds
from outbox.workflows.starter import WorkflowStarter

logger = Logger()
metrics = Metrics()
copy_config_to_registered_loggers(source_logger=logger, include={"outbox"})


class WorkflowEndsSettings(BaseModel):
    """Environment of the settle pass; the construct sets every variable (outbox_cdk.workflow_function)."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    inbox_table_name: str = Field(alias="INBOX_TABLE_NAME", min_length=3)
    inbox_retention_days: int = Field(alias="INBOX_RETENTION_DAYS", ge=1, le=365)
    error_detail: ErrorDetail = Field(alias="ERROR_DETAIL")


@cache
def ends() -> WorkflowEnds:
    settings = _from_env(WorkflowEndsSettings, os.environ)
    inbox = Inbox(
        settings.inbox_table_name,
        client=engine_dynamodb_client(),
        max_attempts=1,  # it claims nothing
        retention=timedelta(days=settings.inbox_retention_days),
    )
    return WorkflowEnds(inbox, WorkflowStarter(boto3.client("lambda")), error_detail=settings.error_detail)


@logger.inject_lambda_context
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, int]:
    settle = ends()
    counts = settle.settle_all()
    # Only what is there: a pass with nothing to count publishes nothing (no empty flush either), so an idle stack
    # pays for no custom metric (five a minute would be $1.50 a month); the alarm on the dead treats no data as none.
    found = {metric: counts[outcome] for outcome, metric in SETTLED_METRICS.items() if counts.get(outcome)}
    for metric, count in found.items():
        metrics.add_metric(name=metric, unit="Count", value=count)
    if settle.oldest_running_seconds:
        metrics.add_metric(name=OLDEST_METRIC, unit="Seconds", value=settle.oldest_running_seconds)
    if found or settle.oldest_running_seconds:
        metrics.flush_metrics()
    return {outcome.value: counts.get(outcome, 0) for outcome in Settled}
