"""The simulated application's workflow (``sim.ship``, ``Lane.WORKFLOW``): a durable function of the simulator's own.

Once an item is created, pack it (a step whose effect the world records: a doubled step shows as a count of 2), ask
the simulated carrier to take it and wait for its answer (a durable wait on a callback: no invocation runs until the
simulator, as the carrier, answers it), and end. A carrier that refuses makes the workflow fail (its execution ends
FAILED). No timed wait (``context.wait``): the engine sees nothing of one, and each costs the testing SDK another
invocation of every execution.

The local runtime imports this module as Lambda would (once per container, with the function's environment) and
runs the handler in the AWS Durable Execution Testing SDK's threads: the run's ``World`` is found by the
``SIMULATION_RUN`` variable read at import. The module has a private name per container there, so what an
execution's error names (its type, fully qualified) is defined in ``simulation.catalog``. The waits on the
carrier are what keeps a seed deterministic: nothing of an execution ends while the simulator is not waiting for it
(``simulation.workflows``).
"""

from __future__ import annotations

import json
import os
from typing import Any

from aws_durable_execution_sdk_python import DurableContext, durable_execution

from outbox.workflows import WorkflowInput
from simulation.catalog import CarrierRefusedError
from simulation.world import world_of

# This function's environment, as the local runtime set it for the import (SIMULATION_RUN: the run's World).
RUN = os.environ.get("SIMULATION_RUN", "")
CARRIER = "carrier"  # the callback the workflow waits on
REFUSED = "refused"  # the carrier's answer that fails the workflow


@durable_execution
def ship(event: dict[str, Any], context: DurableContext) -> dict[str, str]:
    given = WorkflowInput.of(event)
    world = world_of(RUN)
    execution = context.execution_context.durable_execution_arn  # what the world keeps its records by

    def pack(_step: Any) -> str:
        world.workflow_packed[execution] += 1
        return str(given.envelope.payload["item_id"])

    item = context.step(pack, name="pack")

    def ask_the_carrier(callback_id: str, _context: Any) -> None:
        world.workflow_waiting[execution] = callback_id

    answer = context.wait_for_callback(ask_the_carrier, name=CARRIER)
    if (json.loads(answer) if isinstance(answer, str | bytes) else answer) == REFUSED:
        raise CarrierRefusedError(f"the carrier refused {item}")
    return {"item": item}
