"""The smallest Powertools SQS batch handler: the batch processor alone, no Logger, Tracer or Metrics."""

from __future__ import annotations

import json
from typing import Any

from aws_lambda_powertools.utilities.batch import SqsFifoPartialProcessor, process_partial_response
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord


def record_handler(record: SQSRecord) -> None:
    json.loads(record.body)


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    processor = SqsFifoPartialProcessor(skip_group_on_error=True)
    return dict(
        process_partial_response(event=event, record_handler=record_handler, processor=processor, context=context)
    )
