"""The shipment's label, a workflow (``Lane.WORKFLOW``): once the carrier booked a shipment, ask it for the label,
give the carrier the night to print it (a durable wait: no invocation runs, nothing is paid meanwhile), then announce
``shipment.labelled``. Each step runs once per event: its result is checkpointed, the carrier deduplicates a step
run again by the step's idempotency key, and the announcement is emitted once per execution (``WorkflowEmits``).

Why a workflow and not a DURABLE handler with a follow-up event: the wait. A handler cannot wait twelve hours; a
chain of follow-up events would need a scheduler and a table to carry the state between the steps, which the
durable execution keeps for it (docs/workflows.md).

Lambda imports this module at its cold start: the environment is read here, once, and the clients are made from it
once, for every invocation of the container.
"""

from __future__ import annotations

import os
from functools import cache
from typing import Any

import boto3
from aws_durable_execution_sdk_python import DurableContext, durable_execution
from aws_durable_execution_sdk_python.config import Duration

from modules.commerce.events import ShipmentBooked, ShipmentLabelled
from modules.services import Services
from outbox import EventStore
from outbox.workflows import WorkflowInput
from outbox.workflows.emits import WorkflowEmits

# This function's environment, as Lambda (or the local runtime) set it for the import.
ENVIRONMENT = dict(os.environ)
# How long the carrier takes to print a label, waited durably between the two steps.
PRINTING = Duration.from_hours(12)


@cache
def _outside() -> tuple[Services, EventStore]:
    """The carrier, and the events table to announce on, made once from the environment read at import."""
    from modules import build_catalog

    session = boto3.session.Session(region_name=ENVIRONMENT.get("AWS_REGION") or ENVIRONMENT.get("AWS_DEFAULT_REGION"))
    client = session.client("dynamodb", endpoint_url=ENVIRONMENT.get("AWS_ENDPOINT_URL"))
    catalog = build_catalog(dynamodb=lambda: client, environ=ENVIRONMENT)
    return Services.from_env(ENVIRONMENT), EventStore(ENVIRONMENT["EVENTS_TABLE_NAME"], client=client, catalog=catalog)


@durable_execution
def print_label(event: dict[str, Any], context: DurableContext) -> dict[str, str]:
    given = WorkflowInput.of(event)
    shipment = ShipmentBooked.model_validate(given.envelope.payload)
    services, store = _outside()

    def ask_for_the_label(_step: Any) -> str:
        answer = services.carrier.call(
            "labels",
            f"{given.idempotency_key}:label",  # the step's own key: run again, the carrier answers the same label
            {"order_id": shipment.order_id, "reference": shipment.carrier_reference},
        )
        return str(answer["reference"])

    label = context.step(ask_for_the_label, name="label")
    context.wait(PRINTING, name="printing")
    labelled = ShipmentLabelled(order_id=shipment.order_id, carrier_reference=shipment.carrier_reference, label=label)
    emits = WorkflowEmits(store, given, context, inbox_table=ENVIRONMENT["INBOX_TABLE_NAME"])
    emits.emit("shipment.labelled", labelled.model_dump(), step="announce")
    return {"label": label}
