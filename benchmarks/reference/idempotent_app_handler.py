"""The alternative, running the first-batch comparison's application (``order_app``): a Powertools batch
handler with Powertools Idempotency on DynamoDB, as the Powertools documentation combines them (persistence
layer and config built at import). The body is the raw stream image the relay pipe forwards, un-typed with
boto3's ``TypeDeserializer``, as a hand-made consumer of that pipe has to."""

from __future__ import annotations

import json
import os
from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.utilities.batch import SqsFifoPartialProcessor, process_partial_response
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.idempotency import (
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
    idempotent_function,
)
from aws_lambda_powertools.utilities.typing import LambdaContext
from boto3.dynamodb.types import TypeDeserializer
from order_app import check_payment

logger = Logger()
metrics = Metrics()
tracer = Tracer()
persistence = DynamoDBPersistenceLayer(table_name=os.environ["INBOX_TABLE_NAME"])
config = IdempotencyConfig(event_key_jmespath="[event_id, subscription]", raise_on_no_idempotency_key=True)
deserializer = TypeDeserializer()


@idempotent_function(data_keyword_argument="delivery", config=config, persistence_store=persistence)  # type: ignore[untyped-decorator]
def run_subscription(delivery: dict[str, Any]) -> None:
    check_payment(delivery["payload"])


def record_handler(record: SQSRecord) -> None:
    image = json.loads(record.body)
    envelope = {name: deserializer.deserialize(value) for name, value in image.items()}
    run_subscription(
        delivery={
            "event_id": envelope["event_id"],
            "subscription": "bench.check_payment",
            "payload": envelope["payload"],
        }
    )


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    config.register_lambda_context(context)
    processor = SqsFifoPartialProcessor(skip_group_on_error=True)
    return dict(
        process_partial_response(event=event, record_handler=record_handler, processor=processor, context=context)
    )
