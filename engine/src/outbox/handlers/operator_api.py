"""Operator endpoint (Function URL, IAM auth): per tenant, chain_intact next to the dead-letter count,
and the queue and DLQ depths (``/status``); one tenant's chain (``/tenants/<t>/chain``); the open dead letters
grouped by failure (``/dead-letters/groups``, as ``outbox dead-letters groups``). Read only."""

from __future__ import annotations

import os
from functools import cache
from typing import Any

from aws_lambda_powertools import Logger, Tracer
from aws_lambda_powertools.event_handler import LambdaFunctionUrlResolver
from aws_lambda_powertools.event_handler.exceptions import NotFoundError
from aws_lambda_powertools.utilities.typing import LambdaContext

from outbox.handlers.operator_reads import read_only_operations
from outbox.ops import OperationRefusedError, Operations

logger = Logger()
tracer = Tracer()
app = LambdaFunctionUrlResolver()


@cache
def operations() -> Operations:
    return read_only_operations(os.environ)


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
