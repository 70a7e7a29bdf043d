"""A producer: places an order, invoked directly (``aws lambda invoke``, or behind an API of yours).

The order row and its ``order.created`` event commit in one ``emit()``; placing the same order again
answers with the first result, and other content under the same order id is refused. Everything after
that (payment, shipment, mail) is the pipeline's work.
"""

from __future__ import annotations

import os
from functools import cache
from typing import Any, Literal

import boto3
from aws_lambda_powertools import Logger
from aws_lambda_powertools.utilities.typing import LambdaContext
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from modules import build_catalog
from modules.commerce import Commerce, OrderConflictError
from modules.services import Services
from outbox import EventStore, OutboxValidationError

logger = Logger()
ACTOR = "place-order"


class PlaceOrderRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tenant: str = Field(min_length=1, max_length=64)
    order_id: str = Field(min_length=1, max_length=64)
    buyer_email: str = Field(min_length=3, max_length=254)
    items: list[dict[str, Any]] = Field(min_length=1)
    currency: str = "EUR"
    channel: Literal["web", "phone", "marketplace"] = "web"


@cache
def commerce() -> tuple[Commerce, EventStore]:
    """Built on the first invocation, then reused while the container is warm."""
    data_table = os.environ["DATA_TABLE_NAME"]
    store = EventStore(os.environ["EVENTS_TABLE_NAME"], client=boto3.client("dynamodb"), catalog=build_catalog())
    return Commerce(data_table, Services.from_env(os.environ)), store


@logger.inject_lambda_context
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """``{"tenant", "order_id", "buyer_email", "items": [...]}`` -> ``{"status": 201|200|400|409, ...}``."""
    try:
        request = PlaceOrderRequest.model_validate(event)
    except ValidationError as exc:
        return {"status": 400, "error": exc.errors(include_url=False, include_context=False)}
    module, store = commerce()
    try:
        result = module.place_order(store, actor=ACTOR, **request.model_dump())
    except OrderConflictError as exc:
        return {"status": 409, "error": str(exc)}
    except OutboxValidationError as exc:
        return {"status": 400, "error": str(exc)}
    logger.info("order placed", extra={"order_id": result.entity_id, "created": result.created})
    return {"status": 201 if result.created else 200, "order_id": result.entity_id, "event_id": result.event_id}
