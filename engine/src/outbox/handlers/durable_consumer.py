"""Durable consumer: SQS FIFO batches -> every matching DURABLE subscription, once per (event, subscription).

Thin on purpose: the Powertools decorators, the settings, one call into the engine.
"""

from __future__ import annotations

import os
from functools import cache
from typing import Any

# Before the engine, which loads pydantic: Powertools' batch utility imports its pydantic parser models (SQS,
# DynamoDB, Kinesis, Kafka records) only when pydantic is already loaded. The engine uses none of them, and
# importing it first saves them at every cold start (make bench, section 3).
import aws_lambda_powertools.utilities.batch  # noqa: F401
from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.logging.utils import copy_config_to_registered_loggers
from aws_lambda_powertools.utilities.typing import LambdaContext

from outbox.clients import engine_dynamodb_client
from outbox.consumer import DurableConsumer
from outbox.inbox import Inbox
from outbox.settings import ConsumerSettings, load_catalog
from outbox.store import EventStore

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
    )


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return consumer().handle(event, context)
