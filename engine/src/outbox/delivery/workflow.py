"""The workflow path: claim a WORKFLOW pair, start its one durable execution, record the hand-off.

The claim is the one every path takes (``Run.claim_to_run``): a duplicate delivery of a handed pair finds it
HANDED and is acknowledged; one under a live lease comes back later; a lapsed lease is taken over. The start is
named by the pair and its attempt, with the same input every time (``outbox.workflows``), so a start whose
answer was lost, a crash between the start and its record, and a take-over all find the one execution; the claim
then records its ARN and becomes HANDED in one transaction with the running index's row. A start that fails is an
attempt that failed, classified as any handler's failure (released for a retry, or dead with its letter).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from outbox.delivery.observers import Told
from outbox.delivery.path import DeliveryOutcome
from outbox.delivery.run import Run
from outbox.delivery.runs import Runs
from outbox.exceptions import LeaseLostError, OutboxValidationError
from outbox.subscriptions import Lane, SubscriptionRegistry
from outbox.workflows import WorkflowInput, execution_name
from outbox.workflows.handoffs import Handoffs
from outbox.workflows.starter import QualifiedFunction, WorkflowStarter


class WorkflowPath:
    """Hands each WORKFLOW pair to a durable execution of its subscription's function (``functions``: subscription
    name -> qualified ARN), once."""

    def __init__(self, runs: Runs, starter: WorkflowStarter, functions: Mapping[str, str | Mapping[str, Any]]) -> None:
        self.runs = runs
        self.starter = starter
        self.functions = {name: QualifiedFunction.of(described) for name, described in functions.items()}
        self.handoffs = Handoffs(runs.inbox)

    def function_of(self, subscription: str) -> QualifiedFunction:
        found = self.functions.get(subscription)
        if found is None:
            raise OutboxValidationError(
                f"no durable function is deployed for the WORKFLOW subscription {subscription}: deploy the pipeline "
                "with this catalog (OutboxPipeline makes one per WORKFLOW subscription)"
            )
        return found

    def deliver(self, run: Run) -> DeliveryOutcome:
        # A pair deferred in an order the deployed catalog no longer routes it through (moved here from an ordered
        # DURABLE subscription) leaves the order with its count before it is handed.
        claim = run.claim_to_run()
        if isinstance(claim, DeliveryOutcome):
            return claim
        unfinished = run.unfinished(claim)
        if unfinished is not None:
            return unfinished
        envelope, subscription = run.envelope, run.subscription
        attempt = claim.workflow_attempt
        name = execution_name(envelope.id, subscription.name, attempt)
        try:
            function = self.function_of(subscription.name)
            payload = WorkflowInput(self.runs.delivered(envelope), subscription.name, attempt).payload()
            arn = self.starter.start(function, name, payload)
        except Exception as exc:  # every way a start fails is classified, never lost
            return run.fail(claim, exc)
        try:
            self.handoffs.hand_off(claim, arn, name, attempt, execution_timeout=function.execution_timeout)
        except LeaseLostError:
            # The new owner starts the same name, finds this execution, and records it.
            run.tell(Told.LEASE_LOST)
            return DeliveryOutcome.RETRY
        run.tell(Told.HANDED, key=claim.idempotency_key, execution=name)
        return DeliveryOutcome.HANDED


def workflow_path(
    registry: SubscriptionRegistry,
    runs: Runs,
    starter: WorkflowStarter | None,
    functions: Mapping[str, str | Mapping[str, Any]] | None,
) -> WorkflowPath:
    """The consumer's workflow path; refused without a starter, since a WORKFLOW pair would have nothing to be
    handed to."""
    names = sorted(s.name for s in registry.subscriptions if s.lane is Lane.WORKFLOW)
    if starter is None:
        raise OutboxValidationError(
            f"the WORKFLOW subscriptions {', '.join(names)} need workflows=WorkflowStarter(...) (outbox.workflows."
            "starter) and their functions (WORKFLOW_FUNCTIONS, set by OutboxPipeline)"
        )
    missing = sorted(set(names) - set(functions or {}))
    if missing:
        raise OutboxValidationError(
            f"no durable function is named for the WORKFLOW subscriptions {', '.join(missing)}: deploy the pipeline "
            "with this catalog (OutboxPipeline makes one per WORKFLOW subscription and names it in WORKFLOW_FUNCTIONS)"
        )
    return WorkflowPath(runs, starter, functions or {})
