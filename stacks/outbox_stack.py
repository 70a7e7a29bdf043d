"""The stack: thin, it only composes one construct per concern."""

from __future__ import annotations

from typing import Any

from aws_cdk import CfnOutput, Stack
from constructs import Construct

from stacks.constructs.engine_layer import EngineLayer
from stacks.constructs.events_table import EventsTable


class OutboxStack(Stack):
    def __init__(self, scope: Construct, construct_id: str, **kwargs: Any) -> None:
        super().__init__(scope, construct_id, **kwargs)
        self.events = EventsTable(self, "Events")
        self.engine = EngineLayer(self, "Engine")

        CfnOutput(self, "EventsTableName", value=self.events.table.table_name)
        CfnOutput(self, "OperatorRoleArn", value=self.events.operator_role.role_arn)
