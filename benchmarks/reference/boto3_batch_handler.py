"""The reference handler plus boto3, which any handler that writes to DynamoDB through boto3 imports: the
difference between this and the engine's handler is what the engine itself costs at cold start."""

from __future__ import annotations

import json
from functools import cache
from typing import Any

import boto3
from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.utilities.batch import SqsFifoPartialProcessor, process_partial_response
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

logger = Logger()
metrics = Metrics()
tracer = Tracer()


@cache
def dynamodb() -> Any:
    return boto3.client("dynamodb")


def record_handler(record: SQSRecord) -> None:
    logger.debug("received", extra={"body": json.loads(record.body)})


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    processor = SqsFifoPartialProcessor(skip_group_on_error=True)
    return dict(
        process_partial_response(event=event, record_handler=record_handler, processor=processor, context=context)
    )
