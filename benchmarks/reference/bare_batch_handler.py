"""The reference: a bare Powertools SQS FIFO batch handler, with the decorator stack the engine's handlers
use (Logger, Tracer, Metrics) and a record handler that parses its JSON body. No inbox, no engine."""

from __future__ import annotations

import json
from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.utilities.batch import SqsFifoPartialProcessor, process_partial_response
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

logger = Logger()
metrics = Metrics()
tracer = Tracer()


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
