"""AWS CDK constructs of the outbox: ``OutboxPipeline`` adds the whole pipeline to a stack of yours."""

from outbox_cdk.catalog_check import AcceptedCatalogProblem, CatalogContractError
from outbox_cdk.grants import OperatorTrust
from outbox_cdk.options import (
    Alarms,
    ConsumerOptions,
    OperatorAccess,
    PipeLogs,
    RecordChanges,
    WorkflowOptions,
)
from outbox_cdk.pipeline import OutboxPipeline
from outbox_cdk.workflow_function import WorkflowFunction

__all__ = [
    "AcceptedCatalogProblem",
    "Alarms",
    "CatalogContractError",
    "ConsumerOptions",
    "OperatorAccess",
    "OperatorTrust",
    "OutboxPipeline",
    "PipeLogs",
    "RecordChanges",
    "WorkflowFunction",
    "WorkflowOptions",
]
