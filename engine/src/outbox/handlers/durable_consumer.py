"""Durable consumer: SQS FIFO batches -> every matching DURABLE subscription, once per (event, subscription).

Thin on purpose: the Powertools decorators, the settings, one call into the engine.
"""

from __future__ import annotations

import os
from functools import cache
from typing import TYPE_CHECKING, Any

# Before the engine, which loads pydantic: Powertools' batch utility imports its pydantic parser models (SQS,
# DynamoDB, Kinesis, Kafka records) only when pydantic is already loaded. The engine uses none of them, and
# importing it first saves them at every cold start (make bench, section 3).
import aws_lambda_powertools.utilities.batch  # noqa: F401
import boto3
from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.logging.utils import copy_config_to_registered_loggers
from aws_lambda_powertools.utilities.typing import LambdaContext

from outbox.clients import engine_dynamodb_client
from outbox.delivery.consumer import DurableConsumer
from outbox.exceptions import OutboxValidationError
from outbox.inbox import Inbox
from outbox.log.store import EventStore
from outbox.settings import ConsumerSettings, load_catalog
from outbox.subscriptions import SubscriptionRegistry

if TYPE_CHECKING:
    from outbox.pairs.order import WakeUps

logger = Logger()
metrics = Metrics()
tracer = Tracer()
copy_config_to_registered_loggers(source_logger=logger, include={"outbox"})


@cache
def consumer() -> DurableConsumer:
    """Built on the first invocation (not at import), then reused while the container is warm."""
    settings = ConsumerSettings.from_env(os.environ)
    catalog = load_catalog(settings.subscriptions)
    dynamodb = engine_dynamodb_client()  # no client-side validation of the engine's own requests
    return DurableConsumer(
        catalog.registry,
        Inbox(
            settings.inbox_table_name,
            client=dynamodb,
            max_attempts=settings.max_attempts,
            retention=settings.inbox_retention,
        ),
        EventStore(settings.events_table_name, client=dynamodb, catalog=catalog),
        metrics=metrics,
        error_detail=settings.error_detail,
        wake_ups=wake_ups(settings, catalog.registry, dynamodb),
        log=logger,
        **workflows(settings),
    )


def workflows(settings: ConsumerSettings) -> dict[str, Any]:
    """The starter of WORKFLOW pairs' executions and their functions, only where the pipeline made any (a Lambda
    client costs cold start)."""
    if not settings.workflow_functions:
        return {}
    import json

    from outbox.workflows.starter import WorkflowStarter

    functions = json.loads(settings.workflow_functions)
    return {"workflows": WorkflowStarter(boto3.client("lambda")), "workflow_functions": functions}


def wake_ups(settings: ConsumerSettings, registry: SubscriptionRegistry, dynamodb: Any) -> WakeUps | None:
    """The sender of deferred events, only where a subscription is ordered (an SQS client costs cold start)."""
    ordered = sorted(s.name for s in registry.subscriptions if s.ordered)
    if not ordered:
        return None
    if settings.durable_queue_url is None:
        raise OutboxValidationError(
            f"the catalog has ordered subscriptions ({', '.join(ordered)}) but the function has no "
            "DURABLE_QUEUE_URL: deploy the pipeline with OutboxPipeline(..., ordered_subscriptions=True)"
        )
    from outbox.pairs.order import WakeUps  # ordering's modules only where a subscription is ordered

    return WakeUps(
        settings.durable_queue_url, sqs=boto3.client("sqs"), dynamodb=dynamodb, events_table=settings.events_table_name
    )


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return consumer().handle(event, context)
