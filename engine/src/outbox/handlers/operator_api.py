"""Operator endpoint (Function URL, IAM auth): per tenant, chain_intact next to the dead-letter count,
and the queue and DLQ depths (``/status``); one tenant's chain (``/tenants/<t>/chain``); the open dead letters
grouped by failure (``/dead-letters/groups``, as ``outbox dead-letters groups``). Read only."""

from __future__ import annotations

import os
from functools import cache
from typing import Any

import boto3
from aws_lambda_powertools import Logger, Tracer
from aws_lambda_powertools.event_handler import LambdaFunctionUrlResolver
from aws_lambda_powertools.event_handler.exceptions import NotFoundError
from aws_lambda_powertools.utilities.typing import LambdaContext

from outbox.ops import OperationRefusedError, Operations, Topology
from outbox.settings import OperatorSettings, load_catalog

logger = Logger()
tracer = Tracer()
app = LambdaFunctionUrlResolver()


@cache
def operations() -> Operations:
    settings = OperatorSettings.from_env(os.environ)
    topology = Topology(
        events_table=settings.events_table_name,
        inbox_table=settings.inbox_table_name,
        durable_queue_url=settings.durable_queue_url,
        durable_dlq_url=settings.durable_dlq_url,
        relay_dlq_url=settings.relay_dlq_url,
        audit_table=settings.audit_table_name,
        tamper_pipe_name=settings.tamper_pipe_name,
        tamper_queue_url=settings.tamper_queue_url,
        tamper_dlq_url=settings.tamper_dlq_url,
        tamper_pipe_dlq_url=settings.tamper_pipe_dlq_url,
        anchoring_dlq_url=settings.anchoring_dlq_url,
        record_change_queue_url=settings.record_change_queue_url,
        record_change_dlq_url=settings.record_change_dlq_url,
        record_change_pipe_dlq_url=settings.record_change_pipe_dlq_url,
        relay_pipe_name=settings.relay_pipe_name,
        record_change_pipe_name=settings.record_change_pipe_name,
    )
    return Operations(
        topology,
        dynamodb=boto3.client("dynamodb"),
        sqs=boto3.client("sqs"),
        pipes=boto3.client("pipes"),
        cloudwatch=boto3.client("cloudwatch"),
        catalog=load_catalog(settings.subscriptions),
    )


@app.get("/status")
@tracer.capture_method
def status() -> dict[str, Any]:
    return operations().status().as_dict()


@app.get("/dead-letters/groups")
@tracer.capture_method
def failure_groups() -> list[dict[str, Any]]:
    return [group.as_dict() for group in operations().failure_groups()]


@app.get("/tenants/<tenant>/chain")
@tracer.capture_method
def chain(tenant: str) -> dict[str, Any]:
    try:
        operations().require_tenant(tenant)
    except OperationRefusedError as exc:
        raise NotFoundError(str(exc)) from exc
    report = operations().verify(tenant)
    return {**report.__dict__, "reason": report.reason.value if report.reason else None}


@logger.inject_lambda_context
@tracer.capture_lambda_handler
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return app.resolve(event, context)
