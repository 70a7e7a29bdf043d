"""The baseline a user would otherwise build: Powertools batch processing with Powertools Idempotency.

Built the way the Powertools documentation combines the two utilities: a batch processor over the SQS
FIFO records (``SqsFifoPartialProcessor``, as the durable consumer uses, so that only the inbox differs),
and ``@idempotent_function`` on the ``DynamoDBPersistenceLayer`` around the work of each
(event, subscription), keyed by ``[event_id, subscription]`` with a JMESPath expression. The body is
the raw stream image the relay pipe forwards, so the baseline un-types it with boto3's
``TypeDeserializer``, which is what a hand-made consumer of that pipe has to do.

What the baseline does not do, and the engine does: validate the envelope's fields, check the event's
hash, detect a conflicting payload under the same event id, size a lease from the remaining time,
release a claim for a retry, dead-letter on the last receive, commit the handler's DynamoDB writes
atomically with the completion.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from aws_lambda_powertools.utilities.batch import SqsFifoPartialProcessor, process_partial_response
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.idempotency import (
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
    idempotent_function,
)
from boto3.dynamodb.types import TypeDeserializer

SEVEN_DAYS = 7 * 24 * 3600  # the inbox's default retention, for a like-for-like expiry
PERSISTENCE_KEY = ("id", None)  # DynamoDBPersistenceLayer's default key: a partition key named "id"

BaselineHandler = Callable[[Mapping[str, Any]], Any]


@dataclass(frozen=True)
class BaselineSubscription:
    name: str
    event_type: str
    handler: BaselineHandler


class PowertoolsIdempotentConsumer:
    """A Lambda handler object: ``consumer.handle(event, context)`` returns the partial batch response."""

    def __init__(
        self,
        table_name: str,
        client: Any,
        subscriptions: Sequence[BaselineSubscription],
        *,
        expires_after_seconds: int = SEVEN_DAYS,
    ) -> None:
        self.persistence = DynamoDBPersistenceLayer(table_name=table_name, boto3_client=client)
        self.config = IdempotencyConfig(
            event_key_jmespath="[event_id, subscription]",
            raise_on_no_idempotency_key=True,
            expires_after_seconds=expires_after_seconds,
        )
        self._by_type: dict[str, list[BaselineSubscription]] = defaultdict(list)
        for subscription in subscriptions:
            self._by_type[subscription.event_type].append(subscription)
        self._deserializer = TypeDeserializer()
        self._run = idempotent_function(
            self._run_subscription,
            data_keyword_argument="delivery",
            config=self.config,
            persistence_store=self.persistence,
        )

    def handle(self, event: Mapping[str, Any], context: Any) -> dict[str, Any]:
        self.config.register_lambda_context(context)  # in-progress expiry from the remaining time
        processor = SqsFifoPartialProcessor(skip_group_on_error=True)
        response = process_partial_response(
            event=dict(event), record_handler=self.record_handler, processor=processor, context=context
        )
        return dict(response)

    def record_handler(self, record: SQSRecord) -> None:
        image = json.loads(record.body)
        envelope = {name: self._deserializer.deserialize(value) for name, value in image.items()}
        for subscription in self._by_type.get(envelope["type"], ()):
            self._run(
                delivery={"event_id": envelope["event_id"], "subscription": subscription.name, "envelope": envelope}
            )

    def _run_subscription(self, delivery: Mapping[str, Any]) -> Any:
        subscription = next(
            s for s in self._by_type[delivery["envelope"]["type"]] if s.name == delivery["subscription"]
        )
        return subscription.handler(delivery)
