"""What an operator does: status, chain verification, dead letters, replay, inbox-aware redrive and
reconciliation. One implementation for the ``outbox`` CLI, the operator endpoint and the tests.

The rule every repair follows: clear the inbox state that would block the rerun *before* putting the
message back (a dead claim makes a redelivered message a silent skip), and put it back before removing
the old copy (an interruption leaves a duplicate, which the inbox absorbs, never a loss).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any

from botocore.exceptions import ClientError

from outbox import clock as engine_clock
from outbox import keys
from outbox.catalog import Catalog
from outbox.chain import ChainReport, read_event_rows, verify_chain
from outbox.envelope import ULID_PATTERN, Envelope, format_timestamp
from outbox.exceptions import EnvelopeParseError, OutboxValidationError
from outbox.inbox import COMPLETED, DEAD, PENDING, claim_key, dead_letter_partition
from outbox.subscriptions import Lane

MOVE_TASK_UNSUPPORTED = {"UnsupportedOperation", "InvalidParameterValue", "AccessDenied", "NotImplementedError"}


class OperationRefusedError(OutboxValidationError):
    """An operation refused before changing anything: unknown tenant, malformed id, empty selection."""


@dataclass(frozen=True)
class Topology:
    """Where everything is. Built from the stack's outputs (CLI) or the function's environment (endpoint)."""

    events_table: str
    inbox_table: str
    durable_queue_url: str
    durable_dlq_url: str
    relay_dlq_url: str
    record_change_queue_url: str | None = None
    record_change_dlq_url: str | None = None
    record_change_pipe_dlq_url: str | None = None
    relay_pipe_name: str | None = None
    record_change_pipe_name: str | None = None

    OUTPUTS = {
        "events_table": "EventsTableName",
        "inbox_table": "InboxTableName",
        "durable_queue_url": "DurableQueueUrl",
        "durable_dlq_url": "DurableDeadLetterQueueUrl",
        "relay_dlq_url": "RelayDeadLetterQueueUrl",
        "record_change_queue_url": "RecordChangeQueueUrl",
        "record_change_dlq_url": "RecordChangeDeadLetterQueueUrl",
        "record_change_pipe_dlq_url": "RecordChangePipeDeadLetterQueueUrl",
        "relay_pipe_name": "RelayPipeName",
        "record_change_pipe_name": "RecordChangePipeName",
    }

    @classmethod
    def from_outputs(cls, outputs: dict[str, str]) -> Topology:
        missing = [name for field_name, name in cls.OUTPUTS.items() if name not in outputs and field_name in _REQUIRED]
        if missing:
            raise OperationRefusedError(f"the stack has no outputs {missing}: is it the outbox engine's stack?")
        return cls(**{field_name: outputs.get(name) for field_name, name in cls.OUTPUTS.items()})  # type: ignore[arg-type]

    def queues(self) -> dict[str, str]:
        named = {
            "durable": self.durable_queue_url,
            "durable-dlq": self.durable_dlq_url,
            "relay-pipe-dlq": self.relay_dlq_url,
            "record-change": self.record_change_queue_url,
            "record-change-dlq": self.record_change_dlq_url,
            "record-change-pipe-dlq": self.record_change_pipe_dlq_url,
        }
        return {name: url for name, url in named.items() if url}


_REQUIRED = {"events_table", "inbox_table", "durable_queue_url", "durable_dlq_url", "relay_dlq_url"}


@dataclass(frozen=True)
class QueueDepth:
    visible: int
    in_flight: int
    oldest_age_seconds: float | None  # from CloudWatch; None where no metric is available


@dataclass(frozen=True)
class DeadLetter:
    tenant: str
    event_id: str
    event_seq: int
    event_type: str
    subscription: str
    reason: str
    error: str
    error_type: str
    attempts: int | None
    dead_at: str
    resolved: str | None  # "replayed at ..." / "redriven at ..." once an operator acted on it

    @classmethod
    def from_item(cls, item: dict[str, Any]) -> DeadLetter:
        return cls(
            tenant=item["tenant"]["S"],
            event_id=item["event_id"]["S"],
            event_seq=int(item["event_seq"]["N"]),
            event_type=item["event_type"]["S"],
            subscription=item["subscription"]["S"],
            reason=item["reason"]["S"],
            error=item["error"]["S"],
            error_type=item["error_type"]["S"],
            attempts=int(item["attempts"]["N"]) if "attempts" in item else None,
            dead_at=item["dead_at"]["S"],
            resolved=item.get("resolved", {}).get("S"),
        )


@dataclass(frozen=True)
class TenantStatus:
    tenant: str
    chain_intact: bool
    head_seq: int
    first_broken_seq: int | None
    dead_letters: int


@dataclass(frozen=True)
class Status:
    queues: dict[str, QueueDepth]
    pipes: dict[str, str]
    tenants: list[TenantStatus]
    poison_pills_today: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class ReplayItem:
    tenant: str
    event_id: str
    event_seq: int
    subscription: str
    claim_status: str | None
    forced: bool = False  # a COMPLETED claim the operator asked to rerun (--force)


@dataclass
class ReplayResult:
    cleared: list[ReplayItem] = field(default_factory=list)
    republished: list[str] = field(default_factory=list)  # event ids


@dataclass
class RedriveResult:
    moved: int = 0
    claims_cleared: int = 0
    kept_unparseable: int = 0
    method: str = "receive-send-delete"


@dataclass
class ReconcileResult:
    scanned: int = 0
    republished: list[str] = field(default_factory=list)
    already_handled: int = 0


class Operations:
    """Every operator action, over injected clients (AWS, or the local runtime)."""

    def __init__(
        self,
        topology: Topology,
        *,
        dynamodb: Any,
        sqs: Any,
        catalog: Catalog,
        pipes: Any | None = None,
        cloudwatch: Any | None = None,
        clock: Callable[[], datetime] = engine_clock.now,
    ) -> None:
        self.topology = topology
        self.dynamodb = dynamodb
        self.sqs = sqs
        self.catalog = catalog
        self.pipes = pipes
        self.cloudwatch = cloudwatch
        self._clock = clock

    # -- reading ------------------------------------------------------------------------------------

    def tenants(self) -> list[str]:
        found: list[str] = []
        for partition in keys.tenant_index_partitions():
            found.extend(item["sk"]["S"] for item in self._query(self.topology.events_table, partition))
        return sorted(found)

    def require_tenant(self, tenant: str) -> str:
        if not keys.is_valid_tenant(tenant):
            raise OperationRefusedError(f"{tenant!r} is not a tenant name ({keys.TENANT_PATTERN.pattern})")
        if tenant not in self.tenants():
            raise OperationRefusedError(f"unknown tenant {tenant!r}: it has never emitted an event")
        return tenant

    def queue_depths(self) -> dict[str, QueueDepth]:
        depths = {}
        for name, url in self.topology.queues().items():
            attributes = self.sqs.get_queue_attributes(
                QueueUrl=url,
                AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
            )["Attributes"]
            depths[name] = QueueDepth(
                int(attributes["ApproximateNumberOfMessages"]),
                int(attributes["ApproximateNumberOfMessagesNotVisible"]),
                self._oldest_age(url),
            )
        return depths

    def _oldest_age(self, queue_url: str) -> float | None:
        """SQS has no attribute for it: CloudWatch's ApproximateAgeOfOldestMessage, last 5 minutes."""
        if self.cloudwatch is None:
            return None
        now = self._clock()
        try:
            result = self.cloudwatch.get_metric_data(
                MetricDataQueries=[
                    {
                        "Id": "age",
                        "MetricStat": {
                            "Metric": {
                                "Namespace": "AWS/SQS",
                                "MetricName": "ApproximateAgeOfOldestMessage",
                                "Dimensions": [{"Name": "QueueName", "Value": queue_url.rsplit("/", 1)[1]}],
                            },
                            "Period": 60,
                            "Stat": "Maximum",
                        },
                    }
                ],
                StartTime=now - timedelta(minutes=5),
                EndTime=now,
            )
        except ClientError:
            return None
        values = result["MetricDataResults"][0].get("Values", [])
        return float(values[0]) if values else None

    def pipe_states(self) -> dict[str, str]:
        names = [n for n in (self.topology.relay_pipe_name, self.topology.record_change_pipe_name) if n]
        if self.pipes is None:
            return dict.fromkeys(names, "unknown")
        states = {}
        for name in names:
            try:
                states[name] = self.pipes.describe_pipe(Name=name)["CurrentState"]
            except ClientError as exc:
                states[name] = f"unknown ({exc.response['Error']['Code']})"
        return states

    def dead_letters(
        self,
        tenant: str,
        *,
        subscription: str | None = None,
        event_id: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        include_resolved: bool = False,
    ) -> list[DeadLetter]:
        rows = [
            DeadLetter.from_item(item) for item in self._query(self.topology.inbox_table, dead_letter_partition(tenant))
        ]
        return [
            row
            for row in rows
            if (include_resolved or row.resolved is None)
            and (subscription is None or row.subscription == subscription)
            and (event_id is None or row.event_id == event_id)
            and (since is None or row.dead_at >= format_timestamp(since))
            and (until is None or row.dead_at <= format_timestamp(until))
        ]

    def poison_pills(self, day: datetime | None = None) -> list[dict[str, Any]]:
        moment = day or self._clock()
        return self._query(self.topology.inbox_table, f"POISON#{moment.strftime('%Y-%m-%d')}")

    def claims(self, event_id: str) -> dict[str, dict[str, Any]]:
        """The inbox rows of one event, by subscription name."""
        return {row["sk"]["S"]: row for row in self._query(self.topology.inbox_table, f"CLAIM#{event_id}")}

    def verify(self, tenant: str) -> ChainReport:
        return verify_chain(self.dynamodb, self.topology.events_table, tenant)

    def status(self) -> Status:
        tenants = []
        for tenant in self.tenants():
            report = self.verify(tenant)
            tenants.append(
                TenantStatus(
                    tenant, report.intact, report.head_seq, report.first_broken_seq, len(self.dead_letters(tenant))
                )
            )
        return Status(self.queue_depths(), self.pipe_states(), tenants, len(self.poison_pills()))

    # -- replay -------------------------------------------------------------------------------------

    def plan_replay(
        self,
        *,
        tenant: str | None = None,
        event_ids: Iterable[str] = (),
        subscription: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        force: bool = False,
    ) -> list[ReplayItem]:
        """What a replay would rerun. Dead work is selected from the dead letters; naming an event id also
        selects its claims, and a COMPLETED one is refused unless ``force`` (it would run the effect again)."""
        ids = list(event_ids)
        for event_id in ids:
            if not _is_event_id(event_id):
                raise OperationRefusedError(f"{event_id!r} is not an event id (a 26-character ULID)")
        if subscription is not None and not any(s.name == subscription for s in self.catalog.registry.subscriptions):
            raise OperationRefusedError(f"unknown subscription {subscription!r}")
        if tenant is not None:
            self.require_tenant(tenant)
        if tenant is None and not ids:
            raise OperationRefusedError("select what to replay: a tenant, or one or more event ids")
        items = self._replay_by_ids(ids, subscription, force) if ids else []
        if tenant is not None and not ids:
            items = [
                ReplayItem(d.tenant, d.event_id, d.event_seq, d.subscription, status)
                for d in self.dead_letters(tenant, subscription=subscription, since=since, until=until)
                if d.reason != "conflict"  # a conflict is not dead work: the original content already ran
                # Only work that is still dead (or whose claim is already cleared): a claim that was taken
                # over and COMPLETED since is done, whatever its old dead letter says.
                and (status := self._claim_status(d.event_id, d.subscription)) in (DEAD, None)
            ]
        if not items:
            raise OperationRefusedError("the selection matches no dead work: nothing to replay")
        return items

    def _replay_by_ids(self, ids: list[str], subscription: str | None, force: bool) -> list[ReplayItem]:
        items = []
        for event_id in ids:
            claims = list(self.claims(event_id).values())
            if not claims:
                raise OperationRefusedError(f"event {event_id} has no claims: was it ever delivered? (try reconcile)")
            for claim in claims:
                name, status = claim["sk"]["S"], claim["status"]["S"]
                if subscription is not None and name != subscription:
                    continue
                if status == COMPLETED and not force:
                    raise OperationRefusedError(
                        f"{event_id}:{name} is COMPLETED; replaying it would run the effect again (use --force)"
                    )
                if status == PENDING:
                    continue  # in progress: the inbox will finish or take it over
                seq = self._event_seq(claim)
                items.append(ReplayItem(claim["tenant"]["S"], event_id, seq, name, status, forced=status == COMPLETED))
        return items

    def replay(self, items: list[ReplayItem]) -> ReplayResult:
        """Clear each selected claim, then re-send each event from the events table with a fresh dedup id."""
        result = ReplayResult()
        for item in items:
            self._clear_claim(item.event_id, item.subscription, allowed=(DEAD, COMPLETED) if item.forced else (DEAD,))
            result.cleared.append(item)
        for tenant, seq, event_id in sorted({(i.tenant, i.event_seq, i.event_id) for i in items}):
            self._publish(self._event_image(tenant, seq), tenant, f"replay-{event_id}-{uuid.uuid4().hex[:12]}")
            result.republished.append(event_id)
        for item in items:
            self._resolve_dead_letter(item.tenant, item.event_id, item.subscription, "replayed")
        return result

    # -- redrive ------------------------------------------------------------------------------------

    def redrive(
        self,
        dlq: str = "durable-dlq",
        *,
        max_messages: int | None = None,
        method: str = "auto",
        on_message: Callable[[str], None] | None = None,
    ) -> RedriveResult:
        """Move a DLQ's messages back to their source queue, clearing the dead claims of their events first.

        ``method``: "receive-send-delete" (works everywhere, resumable), "move-task" (SQS
        StartMessageMoveTask), or "auto" (the move task, falling back to the loop where SQS refuses it).
        """
        url, target = self.redrive_route(dlq)
        if method in ("auto", "move-task") and max_messages is None:
            try:
                return self._redrive_with_move_task(url, dlq)
            except ClientError as exc:
                if method == "move-task" or exc.response["Error"]["Code"] not in MOVE_TASK_UNSUPPORTED:
                    raise
        return self._redrive_loop(url, target, dlq, max_messages, on_message)

    def redrive_route(self, dlq: str) -> tuple[str, str]:
        routes = {
            "durable-dlq": (self.topology.durable_dlq_url, self.topology.durable_queue_url),
            "record-change-dlq": (self.topology.record_change_dlq_url, self.topology.record_change_queue_url),
        }
        if dlq not in routes or not routes[dlq][0] or not routes[dlq][1]:
            raise OperationRefusedError(
                f"cannot redrive {dlq!r}: choose one of {sorted(routes)} (a pipe's DLQ holds batch metadata, "
                "not events: recover those with reconcile)"
            )
        url, target = routes[dlq]
        assert url is not None
        assert target is not None
        return url, target

    def _redrive_loop(
        self, url: str, target: str, dlq: str, max_messages: int | None, on_message: Callable[[str], None] | None
    ) -> RedriveResult:
        result = RedriveResult()
        kept: set[str] = set()
        while max_messages is None or result.moved < max_messages:
            batch = self.sqs.receive_message(
                QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=60, MessageSystemAttributeNames=["All"]
            ).get("Messages", [])
            fresh = [m for m in batch if m["MessageId"] not in kept]
            if not fresh:
                break
            for message in fresh:
                if max_messages is not None and result.moved >= max_messages:
                    break
                if not self._redrive_one(message, url, target, dlq, result):
                    kept.add(message["MessageId"])
                elif on_message is not None:
                    on_message(message["MessageId"])
        return result

    def _redrive_one(self, message: dict[str, Any], url: str, target: str, dlq: str, result: RedriveResult) -> bool:
        attributes = message.get("Attributes", {})
        if dlq == "durable-dlq":
            try:
                envelope = _envelope_of(message["Body"])
            except EnvelopeParseError:
                result.kept_unparseable += 1  # left in the DLQ for a person to look at
                return False
            result.claims_cleared += self._clear_dead_claims(envelope)
        send: dict[str, Any] = {"QueueUrl": target, "MessageBody": message["Body"]}
        if "MessageGroupId" in attributes:
            send["MessageGroupId"] = attributes["MessageGroupId"]
            # Stable per DLQ message: a redrive interrupted after this send and run again is deduplicated.
            send["MessageDeduplicationId"] = f"redrive-{message['MessageId']}"
        self.sqs.send_message(**send)  # put back first ...
        self.sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])  # ... then remove
        result.moved += 1
        return True

    def _redrive_with_move_task(self, url: str, dlq: str) -> RedriveResult:
        """Peek every message to clear its claims, make them visible again, then let SQS move them."""
        result = RedriveResult(method="move-task")
        if dlq == "durable-dlq":
            peeked: dict[str, dict[str, Any]] = {}
            while True:
                batch = self.sqs.receive_message(
                    QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=120, MessageSystemAttributeNames=["All"]
                ).get("Messages", [])
                if not batch or all(m["MessageId"] in peeked for m in batch):
                    break
                peeked.update({m["MessageId"]: m for m in batch})
            for message in peeked.values():
                try:
                    result.claims_cleared += self._clear_dead_claims(_envelope_of(message["Body"]))
                except EnvelopeParseError:
                    result.kept_unparseable += 1
                self.sqs.change_message_visibility(
                    QueueUrl=url, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=0
                )
        arn = self.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        handle = self.sqs.start_message_move_task(SourceArn=arn)["TaskHandle"]
        for task in self.sqs.list_message_move_tasks(SourceArn=arn).get("Results", []):
            if task.get("TaskHandle") == handle:
                result.moved = int(task.get("ApproximateNumberOfMessagesMoved", 0))
        return result

    # -- reconcile ----------------------------------------------------------------------------------

    def reconcile(
        self, since: datetime, *, tenant: str | None = None, dry_run: bool = False, stale_after: timedelta | None = None
    ) -> ReconcileResult:
        """Re-publish events (from ``since``) whose durable subscriptions have no completed or dead claim:
        recovery for anything the stream no longer holds. Running it again publishes nothing new."""
        tenants = [self.require_tenant(tenant)] if tenant else self.tenants()
        if not tenants:
            raise OperationRefusedError("there are no tenants: nothing to reconcile")
        stale = stale_after or timedelta(hours=1)
        result = ReconcileResult()
        for name in tenants:
            for envelope in self._events_since(name, since):
                result.scanned += 1
                wanted = {s.name for s in self.catalog.registry.matching(envelope.type, Lane.DURABLE)}
                if not wanted or self._handled(envelope.id, wanted, stale):
                    result.already_handled += 1
                    continue
                if not dry_run:
                    self._publish(self._event_image(name, envelope.seq), name, f"reconcile-{envelope.id}")
                result.republished.append(envelope.id)
        return result

    def _handled(self, event_id: str, wanted: set[str], stale: timedelta) -> bool:
        now_ms = int(self._clock().timestamp() * 1000)
        claims = self.claims(event_id)
        for name in wanted:
            claim = claims.get(name)
            if claim is None:
                return False
            status = claim["status"]["S"]
            if status == PENDING:
                lease = int(claim.get("lease_expires_at", {}).get("N", "0"))
                # A lease long expired with no redelivery means the message itself was lost.
                if lease and now_ms - lease > stale.total_seconds() * 1000:
                    return False
        return True

    def _events_since(self, tenant: str, since: datetime) -> Iterator[Envelope]:
        threshold = format_timestamp(since)
        for item in read_event_rows(self.dynamodb, self.topology.events_table, tenant):
            if item["occurred_at"]["S"] >= threshold:
                yield Envelope.from_item(item)

    # -- helpers ------------------------------------------------------------------------------------

    def _query(self, table: str, partition: str) -> list[dict[str, Any]]:
        pages = self.dynamodb.get_paginator("query").paginate(
            TableName=table,
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": {"S": partition}},
            ConsistentRead=True,
        )
        return [item for page in pages for item in page["Items"]]

    def _claim_status(self, event_id: str, subscription: str) -> str | None:
        item = self.dynamodb.get_item(
            TableName=self.topology.inbox_table, Key=claim_key(event_id, subscription), ConsistentRead=True
        ).get("Item")
        return None if item is None else str(item["status"]["S"])

    def _event_seq(self, claim: dict[str, Any]) -> int:
        rows = self.dead_letters(claim["tenant"]["S"], event_id=claim["event_id"]["S"], include_resolved=True)
        if rows:
            return rows[0].event_seq
        for item in read_event_rows(self.dynamodb, self.topology.events_table, claim["tenant"]["S"]):
            if item["event_id"]["S"] == claim["event_id"]["S"]:
                return int(item["seq"]["N"])
        raise OperationRefusedError(f"event {claim['event_id']['S']} is not in its tenant's log")

    def _event_image(self, tenant: str, seq: int) -> dict[str, Any]:
        item: dict[str, Any] | None = self.dynamodb.get_item(
            TableName=self.topology.events_table,
            Key={"pk": {"S": keys.event_partition(tenant)}, "sk": {"S": keys.seq_sort_key(seq)}},
            ConsistentRead=True,
        ).get("Item")
        if item is None:
            raise OperationRefusedError(f"tenant {tenant!r} has no event at seq {seq}")
        return item

    def _publish(self, image: dict[str, Any], tenant: str, dedup_id: str) -> None:
        """Send an event row as the relay pipe does: the raw image, group = tenant."""
        self.sqs.send_message(
            QueueUrl=self.topology.durable_queue_url,
            MessageBody=json.dumps(image),
            MessageGroupId=tenant,
            MessageDeduplicationId=dedup_id[:128],
        )

    def _clear_claim(self, event_id: str, subscription: str, allowed: tuple[str, ...]) -> bool:
        values = {f":s{i}": {"S": status} for i, status in enumerate(allowed)}
        try:
            self.dynamodb.delete_item(
                TableName=self.topology.inbox_table,
                Key=claim_key(event_id, subscription),
                ConditionExpression=f"#status IN ({', '.join(values)})",
                ExpressionAttributeNames={"#status": "status"},
                ExpressionAttributeValues=values,
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] == "ConditionalCheckFailedException":
                return False  # already cleared, or picked up again meanwhile: leave it to the inbox
            raise
        return True

    def _clear_dead_claims(self, envelope: Envelope) -> int:
        cleared = 0
        for claim in self.claims(envelope.id).values():
            if claim["status"]["S"] == DEAD and self._clear_claim(envelope.id, claim["sk"]["S"], allowed=(DEAD,)):
                self._resolve_dead_letter(envelope.tenant, envelope.id, claim["sk"]["S"], "redriven")
                cleared += 1
        return cleared

    def _resolve_dead_letter(self, tenant: str, event_id: str, subscription: str, how: str) -> None:
        try:
            self.dynamodb.update_item(
                TableName=self.topology.inbox_table,
                Key={"pk": {"S": dead_letter_partition(tenant)}, "sk": {"S": f"{event_id}#{subscription}"}},
                UpdateExpression="SET resolved = :how",
                ConditionExpression="attribute_exists(pk)",
                ExpressionAttributeValues={":how": {"S": f"{how} at {format_timestamp(self._clock())}"}},
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "ConditionalCheckFailedException":
                raise


def _is_event_id(value: str) -> bool:
    import re

    return bool(re.fullmatch(ULID_PATTERN, value))


def _envelope_of(body: str) -> Envelope:
    from outbox.consumer import parse_body

    return parse_body(body)
