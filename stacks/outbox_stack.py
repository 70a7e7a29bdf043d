"""The example app's stack: its own data table, and the outbox pipeline over it. A user of the construct
library like any other; what may change between deployments comes from CDK context (``ExampleSettings``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

from aws_cdk import CfnOutput, Duration, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from modules.services import SERVICES_VARIABLE
from outbox_cdk import Alarms, ConsumerOptions, OperatorAccess, OutboxPipeline, PipeLogs, RecordChanges
from outbox_cdk.lambda_defaults import UNRESERVED_POOL, EngineFunction
from stacks.data_table import DataTable
from stacks.settings import ExampleSettings

PROJECT_ROOT: Final = Path(__file__).resolve().parents[1]
# The functions' code is the project root filtered down to the application modules (the engine and every
# dependency come from the layer). Glob mode, the last matching pattern decides: "*" and ".*" exclude
# everything (a pattern without a slash matches any base name; "*" alone skips dot files such as .git and
# .venv), the package is taken back, and byte code is dropped again.
CODE_PACKAGES: Final = ("lambdas", "modules")
CODE_EXCLUDE: Final = [
    "*",
    ".*",
    *(f"!{package}{tail}" for package in CODE_PACKAGES for tail in ("", "/**")),
    "**/__pycache__",
    "*.pyc",
]
# The example's producer (lambdas/), in the same code asset as the modules.
PLACE_ORDER_HANDLER: Final = "lambdas.place_order.handler"
PLACE_ORDER_DATA_ACTIONS: Final = ("dynamodb:PutItem", "dynamodb:GetItem")
# The example's catalog, loaded by every function at cold start (outbox.settings.load_catalog).
CATALOG: Final = "modules:build_catalog"


class OutboxStack(Stack):
    def __init__(self, scope: Construct, construct_id: str, **kwargs: Any) -> None:
        super().__init__(scope, construct_id, **kwargs)
        settings = ExampleSettings.from_context(self.node)

        self.data = DataTable(self, "Data")
        self.pipeline = OutboxPipeline(
            self,
            "Outbox",
            code=lambda_.Code.from_asset(str(PROJECT_ROOT), exclude=CODE_EXCLUDE),
            catalog=CATALOG,
            data_tables=[self.data.table],
            # The BEST_EFFORT lane: the data table's row changes, of the entities its subscriptions watch.
            record_changes=RecordChanges(
                self.data.table,
                entities=settings.record_change_entities,
                consumer=ConsumerOptions(max_concurrency=settings.record_change_max_concurrency),
            ),
            # What modules.build_catalog reads in every function.
            environment={
                "DATA_TABLE_NAME": self.data.table.table_name,
                SERVICES_VARIABLE: settings.commerce_services,
            },
            alarms=Alarms(email_address=settings.alarm_email, no_subscriber_reason=settings.no_alarm_subscriber),
            # Named, never the whole account: the operator role is the one role the event-row Deny exempts.
            operators=[iam.ArnPrincipal(arn) for arn in settings.operator_arns],
            # And with MFA (or a principal tag: -c operatorTrust=tag:team=oncall), every assumption of both roles.
            operator_access=OperatorAccess(trust=settings.operator_trust),
            inbox_retention_days=settings.inbox_retention_days,
            durable_consumer=ConsumerOptions(max_concurrency=settings.consumer_max_concurrency),
            pipe_logs=PipeLogs(level=settings.pipe_log_level, execution_data=settings.pipe_log_execution_data),
            ordered_subscriptions=True,  # the order journal (modules.commerce) applies each tenant's orders in order
            # The secure choice: a lifted policy, a stopped pipe or a silenced alarm is reported on the alarm topic
            # (it needs a CloudTrail trail in the account: docs/operating.md, Control-plane change).
            watch_control_plane=True,
        )
        self.place_order = self._producer()
        CfnOutput(self, "DataTableName", value=self.data.table.table_name)
        CfnOutput(self, "PlaceOrderFunctionName", value=self.place_order.function.function_name)

    def _producer(self) -> EngineFunction:
        """The example's producer: an order placed is an order row and its event, in one emit()."""
        producer = EngineFunction(
            self,
            "PlaceOrder",
            handler=PLACE_ORDER_HANDLER,
            service_name="place-order",
            description="Places an order: the order row and its order.created event in one emit()",
            timeout=Duration.seconds(10),
            application=self.pipeline.application,
            environment={"EVENTS_TABLE_NAME": self.pipeline.events_table.table_name},
        )
        self.pipeline.grant_emit(producer.function)
        # What lambdas/place_order.py asks of the data table, and no more (a user copies this): the order row's
        # Put, inside emit()'s TransactWriteItems, and the GetItem that answers a repeated order from it.
        self.data.table.grant(producer.function, *PLACE_ORDER_DATA_ACTIONS)
        producer.acknowledge_synchronous_invocation(
            failures="Lambda's DeadLetterConfig applies to asynchronous invocations only; the producer is "
            "invoked synchronously and answers every outcome (placed, duplicate, refused) to its caller.",
            concurrency="Invoked by the example's callers only, each order one short emit(). " + UNRESERVED_POOL,
        )
        return producer
