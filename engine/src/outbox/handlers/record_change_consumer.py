"""Record-change consumer: data-table row changes -> every matching BEST_EFFORT subscription."""

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

from outbox.best_effort.consumer import RecordChangeConsumer
from outbox.settings import RecordChangeSettings, load_catalog

logger = Logger()
metrics = Metrics()
tracer = Tracer()
copy_config_to_registered_loggers(source_logger=logger, include={"outbox"})


@cache
def consumer() -> RecordChangeConsumer:
    settings = RecordChangeSettings.from_env(os.environ)
    return RecordChangeConsumer(load_catalog(settings.subscriptions).registry, metrics=metrics, log=logger)


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return consumer().handle(event, context)
