"""The small interface the end-to-end scenarios are written against, and its two implementations:
the local runtime (always), and a deployed stack (when OUTBOX_E2E_STACK names one and credentials exist)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import boto3

from modules import build_catalog
from modules.commerce import Commerce
from modules.profile import Profile
from modules.services import SERVICE_NAMES, SERVICES_VARIABLE, Services
from outbox import EventStore
from outbox.local.functions import LocalFunction
from outbox.local.runtime import LocalRuntime
from outbox.testing.pipeline import LocalPipeline
from outbox.testing.services import FakeService, FakeServiceServer
from stacks.app_factory import STACK_NAME


class Backend(Protocol):
    name: str
    fault_injection: bool  # crash, flaky services, pipe faults: only the local runtime can do these

    def store(self) -> EventStore: ...
    def commerce(self) -> Commerce: ...
    def profile(self) -> Profile: ...
    def client(self, service: str) -> Any: ...
    def output(self, name: str) -> str: ...
    def settle(self) -> None: ...


@dataclass
class LocalBackend:
    runtime: LocalRuntime
    fakes: FakeServiceServer
    name: str = "local"
    fault_injection: bool = True

    def store(self) -> EventStore:
        catalog = build_catalog(data_table=self.output("DataTableName"), services=Services.served_by(self.fakes))
        return self.runtime.event_store(catalog=catalog)

    def commerce(self) -> Commerce:
        return Commerce(self.output("DataTableName"), Services.served_by(self.fakes))

    def profile(self) -> Profile:
        client = self.runtime.client("dynamodb")
        return Profile(self.output("DataTableName"), lambda: client)

    def client(self, service: str) -> Any:
        return self.runtime.client(service)

    def output(self, name: str) -> str:
        return self.runtime.output(name)

    def settle(self) -> None:
        self.runtime.run_until_idle()

    def service(self, name: str) -> FakeService:
        return self.fakes.services[name]

    def function_running(self, handler: str) -> LocalFunction:
        """The one function of the template that runs ``handler``: those without a stack output naming them."""
        [function] = [f for f in self.runtime.functions.values() if f.handler_path == handler]
        return function


@contextmanager
def local_backend(assembly_dir: Path, **options: Any) -> Iterator[LocalBackend]:
    """The example stack booted the way a user's tests boot theirs (``outbox.testing.LocalPipeline``), with
    the commerce module's remote services served on loopback."""
    with FakeServiceServer(SERVICE_NAMES) as fakes:
        environment = {SERVICES_VARIABLE: fakes.url}
        with LocalPipeline.boot(assembly_dir, STACK_NAME, environment=environment, **options) as pipeline:
            yield LocalBackend(pipeline.runtime, fakes)


@dataclass
class AwsBackend:
    """A deployed stack. External services are whatever commerceServices the stack was deployed with."""

    stack_name: str
    name: str = "aws"
    fault_injection: bool = False
    settle_timeout_seconds: float = 180.0

    def __post_init__(self) -> None:
        stack = boto3.client("cloudformation").describe_stacks(StackName=self.stack_name)["Stacks"][0]
        self._outputs = {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])}

    def output(self, name: str) -> str:
        return self._outputs[name]

    def client(self, service: str) -> Any:
        return boto3.client(service)

    def store(self) -> EventStore:
        catalog = build_catalog(data_table=self.output("DataTableName"), services=Services.fakes())  # emits only
        return EventStore(self.output("EventsTableName"), client=self.client("dynamodb"), catalog=catalog)

    def commerce(self) -> Commerce:
        return Commerce(self.output("DataTableName"), Services.fakes())  # commands call no service

    def profile(self) -> Profile:
        return Profile(self.output("DataTableName"), lambda: self.client("dynamodb"))

    def settle(self) -> None:
        """Wait until both lanes' queues have been empty (visible and in flight) for three checks."""
        sqs = self.client("sqs")
        queues = [self.output("DurableQueueUrl"), self.output("RecordChangeQueueUrl")]
        deadline, quiet = time.monotonic() + self.settle_timeout_seconds, 0
        time.sleep(5)  # the pipes poll the streams a few times a second; give them a head start
        while time.monotonic() < deadline and quiet < 3:
            depth = 0
            for url in queues:
                attributes = sqs.get_queue_attributes(
                    QueueUrl=url,
                    AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
                )["Attributes"]
                depth += sum(int(value) for value in attributes.values())
            quiet = quiet + 1 if depth == 0 else 0
            time.sleep(2)


def send_raw(backend: Backend, body: str, group: str, dedup_id: str) -> None:
    """Put a message on the durable queue as something other than the pipe would (poison, duplicates)."""
    backend.client("sqs").send_message(
        QueueUrl=backend.output("DurableQueueUrl"),
        MessageBody=body,
        MessageGroupId=group,
        MessageDeduplicationId=dedup_id,
    )


def event_image(backend: Backend, tenant: str, seq: int) -> dict[str, Any]:
    from outbox.keys import event_partition, seq_sort_key

    item: dict[str, Any] = backend.client("dynamodb").get_item(
        TableName=backend.output("EventsTableName"),
        Key={"pk": {"S": event_partition(tenant)}, "sk": {"S": seq_sort_key(seq)}},
        ConsistentRead=True,
    )["Item"]
    return item


def inbox_rows(backend: Backend, partition: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = backend.client("dynamodb").query(
        TableName=backend.output("InboxTableName"),
        KeyConditionExpression="pk = :pk",
        ExpressionAttributeValues={":pk": {"S": partition}},
        ConsistentRead=True,
    )["Items"]
    return items


def claim_statuses(backend: Backend, event_id: str) -> dict[str, str]:
    return {row["sk"]["S"]: row["status"]["S"] for row in inbox_rows(backend, f"CLAIM#{event_id}")}


def data_row(backend: Backend, pk: str, sk: str) -> dict[str, Any] | None:
    item: dict[str, Any] | None = (
        backend.client("dynamodb")
        .get_item(
            TableName=backend.output("DataTableName"), Key={"pk": {"S": pk}, "sk": {"S": sk}}, ConsistentRead=True
        )
        .get("Item")
    )
    return item


def queue_depth(backend: Backend, output_name: str) -> int:
    attributes = backend.client("sqs").get_queue_attributes(
        QueueUrl=backend.output(output_name),
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    return sum(int(value) for value in attributes.values())


def dumps(item: dict[str, Any]) -> str:
    return json.dumps(item)
