"""Auditor: tamper findings from the tamper queue (``record_findings``, SQS) and the scheduled anchoring pass
(``anchor``, an EventBridge schedule), which also runs the completeness pass (``outbox.ops.completeness``).

Engine code only: it imports no application module, so no handler code of the application ever runs with
the auditor's right to write the audit table.
"""

from __future__ import annotations

import os
from functools import cache
from typing import Any

# Before the engine, which loads pydantic: Powertools' batch utility imports its pydantic parser models (SQS,
# DynamoDB, Kinesis, Kafka records) only when pydantic is already loaded. The engine uses none of them, and
# importing it first saves them at every cold start (make bench, section 3).
import aws_lambda_powertools.utilities.batch  # noqa: F401
import boto3
from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.logging.utils import copy_config_to_registered_loggers
from aws_lambda_powertools.utilities.typing import LambdaContext

from outbox import clock
from outbox.audit.auditor import Auditor
from outbox.audit.liveness import PipeWatch
from outbox.audit.table import AuditLog
from outbox.ops.anchoring import PassSettings, anchoring_pass, completeness_pass
from outbox.ops.completeness import CompletenessPass
from outbox.ops.topology import Topology
from outbox.settings import AuditorSettings

logger = Logger()
metrics = Metrics()
tracer = Tracer()
copy_config_to_registered_loggers(source_logger=logger, include={"outbox"})


@cache
def auditor() -> Auditor:
    settings = AuditorSettings.from_env(os.environ)
    client = boto3.client("dynamodb")
    return Auditor(settings.events_table_name, AuditLog(settings.audit_table_name, client), client, metrics=metrics)


@cache
def completeness_settings() -> PassSettings | None:
    """What the stack gives the completeness pass (its catalog made into data at synth, its bound, its re-sends),
    or None on a stack that did not configure it (its catalog not loadable at synth)."""
    settings = AuditorSettings.from_env(os.environ)
    if not settings.checks_completeness:
        return None
    assert settings.completeness_catalog is not None
    assert settings.completeness_bound_seconds is not None
    return PassSettings(
        settings.completeness_catalog, settings.completeness_bound_seconds, settings.completeness_repairs
    )


@cache
def completeness() -> CompletenessPass | None:
    """The completeness pass, or None on a stack that did not configure it."""
    given = completeness_settings()
    if given is None:
        return None
    settings = AuditorSettings.from_env(os.environ)
    assert settings.inbox_table_name is not None
    topology = Topology(
        events_table=settings.events_table_name,
        inbox_table=settings.inbox_table_name,
        durable_queue_url=settings.durable_queue_url or "",
        durable_dlq_url="",
        relay_dlq_url="",
        audit_table=settings.audit_table_name,
        inbox_retention_days=settings.inbox_retention_days,
    )
    client = boto3.client("dynamodb")
    sqs = boto3.client("sqs") if given.repairs else None
    return completeness_pass(topology, given, dynamodb=client, sqs=sqs, metrics=metrics)


@cache
def pipe_watch() -> PipeWatch:
    settings = AuditorSettings.from_env(os.environ)
    return PipeWatch(boto3.client("pipes"), settings.watched_pipes(), metrics=metrics)


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
def record_findings(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return auditor().record_findings(event, context)


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
def anchor(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Any invocation runs one pass (the schedule's event carries nothing the pass needs); it stops in time
    and leaves what it did not reach to the next. The pipes' states come first, so a pass that fails still
    publishes them (``log_metrics`` flushes on the way out); ``AnchoringPasses`` only when the pass ends."""
    pipes = pipe_watch().check()
    check, given = completeness(), completeness_settings()
    if check is not None and given is not None:
        check.log.remember(given)  # what `outbox anchor` runs the pass with

    def time_left() -> float:
        return context.get_remaining_time_in_millis() / 1000

    result = anchoring_pass(auditor(), check, clock.now(), time_left=time_left).as_dict()
    result["pipes"] = pipes
    logger.info("anchoring pass", extra=result)
    return result
