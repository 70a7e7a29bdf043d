"""What an operator does: status, chain verification, dead letters, replay, redrive and reconciliation.
One implementation for the ``outbox`` CLI, the operator endpoint and the tests.

The rules every repair follows, so that none can rerun work that completed, at any age:

- Dead work is an (event, subscription) pair with a DEAD claim and an open dead letter. ``replay`` reruns
  exactly the selected pairs: it clears each DEAD claim and re-sends the event from the events table with
  a message that names those subscriptions only (``outbox.messages``), never the event's other
  subscriptions, whose completions the inbox may have forgotten.
- The durable DLQ is a transport backstop (messages the consumer could not process at all). ``redrive``
  moves them back unchanged and clears nothing: each subscription then runs, or is skipped as COMPLETED,
  or stays dead with its open dead letter (shown by ``status``, repaired by ``replay``).
- ``reconcile`` re-sends only events the inbox can still vouch for (younger than its retention), naming
  only the subscriptions without a claim (or with a claim long left waiting).
- Every repair message is vouched for by a claim row written before it is sent (REPLAYING: by replay from
  DEAD, by reconcile where there was none), so however late it arrives, the consumer knows the pair has
  not completed since; a missing row proves that only for an event younger than the inbox's retention.
- Put back before removing the old copy: an interruption leaves a duplicate, which the inbox absorbs.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from botocore.exceptions import ClientError

from outbox import clock as engine_clock
from outbox import keys
from outbox.catalog import Catalog
from outbox.chain import ChainReport, read_event_rows, verify_chain
from outbox.envelope import ULID_PATTERN, Envelope, format_timestamp
from outbox.exceptions import OutboxValidationError
from outbox.inbox import (
    COMPLETED,
    DEAD,
    PENDING,
    REPLAYING,
    VOUCH_MARGIN,
    DeadLetter,
    DeadReason,
    InboxReader,
    reconcile_row,
)
from outbox.messages import relay_body, repair_attributes
from outbox.outputs import StackOutput
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
    # How long the inbox remembers a completion; the stack's output (an older stack without it: the
    # shortest retention the inbox ever had, which only makes reconcile refuse sooner).
    inbox_retention_days: int = 7

    OUTPUTS = {
        "events_table": StackOutput.EVENTS_TABLE,
        "inbox_table": StackOutput.INBOX_TABLE,
        "durable_queue_url": StackOutput.DURABLE_QUEUE,
        "durable_dlq_url": StackOutput.DURABLE_DEAD_LETTER_QUEUE,
        "relay_dlq_url": StackOutput.RELAY_DEAD_LETTER_QUEUE,
        "record_change_queue_url": StackOutput.RECORD_CHANGE_QUEUE,
        "record_change_dlq_url": StackOutput.RECORD_CHANGE_DEAD_LETTER_QUEUE,
        "record_change_pipe_dlq_url": StackOutput.RECORD_CHANGE_PIPE_DEAD_LETTER_QUEUE,
        "relay_pipe_name": StackOutput.RELAY_PIPE,
        "record_change_pipe_name": StackOutput.RECORD_CHANGE_PIPE,
        "inbox_retention_days": StackOutput.INBOX_RETENTION_DAYS,
    }

    @classmethod
    def from_outputs(cls, outputs: dict[str, str]) -> Topology:
        missing = [name for field_name, name in cls.OUTPUTS.items() if name not in outputs and field_name in _REQUIRED]
        if missing:
            raise OperationRefusedError(f"the stack has no outputs {missing}: is it the outbox engine's stack?")
        found: dict[str, Any] = {field_name: outputs.get(name) for field_name, name in cls.OUTPUTS.items()}
        if found["inbox_retention_days"] is None:
            del found["inbox_retention_days"]
        else:
            found["inbox_retention_days"] = int(found["inbox_retention_days"])
        return cls(**found)

    @property
    def inbox_retention(self) -> timedelta:
        return timedelta(days=self.inbox_retention_days)

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
    claim_status: str | None  # REPLAYING: a replay stopped after clearing the claim, before re-sending
    forced: bool = False  # a COMPLETED or unverifiable pair the operator asked to rerun (--force)


@dataclass
class ReplayResult:
    cleared: list[ReplayItem] = field(default_factory=list)
    republished: list[str] = field(default_factory=list)  # event ids


@dataclass
class RedriveResult:
    moved: int = 0
    method: str = "receive-send-delete"
    status: str = "COMPLETED"  # the move task's status (RUNNING when it outlived the wait)
    remaining: int = 0  # messages still in the DLQ afterwards (in flight ones included)


@dataclass
class ReconcileResult:
    scanned: int = 0
    republished: list[str] = field(default_factory=list)
    already_handled: int = 0
    subscriptions: dict[str, list[str]] = field(default_factory=dict)  # event id -> the pairs re-sent


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
        sleep: Callable[[float], None] = engine_clock.sleep,
    ) -> None:
        self.topology = topology
        self.dynamodb = dynamodb
        self.sqs = sqs
        self.catalog = catalog
        self.pipes = pipes
        self.cloudwatch = cloudwatch
        self._clock = clock
        self._sleep = sleep

    def now(self) -> datetime:
        """The operations' clock: the system clock, or the local runtime's virtual one."""
        return self._clock()

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
        return InboxReader(self.topology.inbox_table, client=self.dynamodb).dead_letters(
            tenant,
            subscription=subscription,
            event_id=event_id,
            since=since,
            until=until,
            include_resolved=include_resolved,
        )

    def poison_pills(self, day: datetime | None = None) -> list[dict[str, Any]]:
        moment = day or self._clock()
        return self._query(self.topology.inbox_table, keys.poison_partition(moment))

    def claims(self, event_id: str) -> dict[str, dict[str, Any]]:
        """The inbox rows of one event, by subscription name."""
        return {row["sk"]["S"]: row for row in self._query(self.topology.inbox_table, keys.claim_partition(event_id))}

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
        """The (event, subscription) pairs a replay would rerun. Dead work is selected from the open dead
        letters of a tenant, or by event id. A COMPLETED pair (named by id) and a pair the inbox could not
        vouch for are refused unless ``force``: either may run an effect a second time."""
        ids = list(event_ids)
        for event_id in ids:
            if not _is_event_id(event_id):
                raise OperationRefusedError(f"{event_id!r} is not an event id (a 26-character ULID)")
        if ids and (since is not None or until is not None):
            raise OperationRefusedError(
                "--since/--until select a tenant's dead letters by time; with --event-id they would be ignored: "
                "give one or the other"
            )
        if subscription is not None and not any(s.name == subscription for s in self.catalog.registry.subscriptions):
            raise OperationRefusedError(f"unknown subscription {subscription!r}")
        if tenant is not None:
            self.require_tenant(tenant)
        if tenant is None and not ids:
            raise OperationRefusedError("select what to replay: a tenant, or one or more event ids")
        if ids:
            items = self._replay_by_ids(ids, tenant, subscription, force)
        else:
            assert tenant is not None
            items = self._replay_dead_letters(tenant, subscription, since, until, force)
        if not items:
            raise OperationRefusedError("the selection matches no dead work: nothing to replay")
        return items

    def _replay_dead_letters(
        self, tenant: str, subscription: str | None, since: datetime | None, until: datetime | None, force: bool
    ) -> list[ReplayItem]:
        items, unverifiable = [], 0
        for letter in self.dead_letters(tenant, subscription=subscription, since=since, until=until):
            if letter.reason == DeadReason.CONFLICT:
                continue  # not dead work: the original content already ran
            claim = self._claim(letter.event_id, letter.subscription)
            status = None if claim is None else claim["status"]["S"]
            if status == DEAD and _dead_reason(claim) == DeadReason.UNVERIFIABLE and not force:
                unverifiable += 1
                continue
            if status in (DEAD, REPLAYING):  # REPLAYING: a replay that stopped before it re-sent the event
                forced = _dead_reason(claim) == DeadReason.UNVERIFIABLE
                items.append(
                    ReplayItem(letter.tenant, letter.event_id, letter.event_seq, letter.subscription, status, forced)
                )
            # Anything else is not dead any more (a take-over completed it) or cannot be vouched for.
        if not items and unverifiable:
            raise OperationRefusedError(
                f"{unverifiable} dead letter(s) of {tenant} are unverifiable: the inbox had forgotten whether they "
                "completed. Replay them with --force only if you know they did not run."
            )
        return items

    def _replay_by_ids(
        self, ids: list[str], tenant: str | None, subscription: str | None, force: bool
    ) -> list[ReplayItem]:
        items = []
        for event_id in ids:
            claims = list(self.claims(event_id).values())
            if not claims:
                raise OperationRefusedError(f"event {event_id} has no claims: was it ever delivered? (try reconcile)")
            owner = claims[0]["tenant"]["S"]
            if tenant is not None and owner != tenant:
                raise OperationRefusedError(f"event {event_id} belongs to tenant {owner!r}, not {tenant!r}")
            for claim in claims:
                name, status = claim["sk"]["S"], claim["status"]["S"]
                if subscription is not None and name != subscription:
                    continue
                risky = status == COMPLETED or _dead_reason(claim) == DeadReason.UNVERIFIABLE
                if risky and not force:
                    what = "is COMPLETED" if status == COMPLETED else "may have completed (unverifiable)"
                    raise OperationRefusedError(
                        f"{event_id}:{name} {what}; replaying it could run the effect again (use --force)"
                    )
                if status == PENDING:
                    continue  # in progress: the inbox will finish or take it over
                seq = self._event_seq(claim)
                items.append(ReplayItem(owner, event_id, seq, name, status, forced=risky))
        return items

    def replay(self, items: list[ReplayItem]) -> ReplayResult:
        """Clear each selected claim (marking its dead letter as being replayed, in the same transaction),
        re-send each event naming only its selected subscriptions, then resolve the dead letters."""
        result = ReplayResult()
        now = self._clock()
        for item in items:
            allowed = (DEAD, COMPLETED) if item.forced else (DEAD,)
            if item.claim_status == REPLAYING or self._clear_claim(item, allowed, now):
                result.cleared.append(item)
        by_event: dict[tuple[str, int, str], list[str]] = {}
        for item in result.cleared:
            by_event.setdefault((item.tenant, item.event_seq, item.event_id), []).append(item.subscription)
        for (tenant, seq, event_id), subscriptions in sorted(by_event.items()):
            self._publish(
                self._event_image(tenant, seq),
                tenant,
                f"replay-{event_id}-{uuid.uuid4().hex[:12]}",
                targets=subscriptions,
            )
            result.republished.append(event_id)
        for item in result.cleared:
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
        wait: timedelta = timedelta(minutes=5),
    ) -> RedriveResult:
        """Move a DLQ's messages back to their source queue, unchanged; clear nothing.

        ``method``: "receive-send-delete" (works everywhere, resumable), "move-task" (SQS
        StartMessageMoveTask), or "auto" (the move task, falling back to the loop where SQS refuses it).
        A move task is followed until it ends or ``wait`` passes; the result says how many messages moved.
        """
        url, target = self.redrive_route(dlq)
        if method in ("auto", "move-task") and max_messages is None:
            try:
                result = self._redrive_with_move_task(url, wait)
            except ClientError as exc:
                if method == "move-task" or exc.response["Error"]["Code"] not in MOVE_TASK_UNSUPPORTED:
                    raise
            else:
                result.remaining = self._depth(url)
                return result
        result = self._redrive_loop(url, target, max_messages, on_message)
        result.remaining = self._depth(url)
        return result

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
        self, url: str, target: str, max_messages: int | None, on_message: Callable[[str], None] | None
    ) -> RedriveResult:
        result = RedriveResult()
        while max_messages is None or result.moved < max_messages:
            batch = self.sqs.receive_message(
                QueueUrl=url,
                MaxNumberOfMessages=10,
                VisibilityTimeout=60,
                MessageSystemAttributeNames=["All"],
                MessageAttributeNames=["All"],
            ).get("Messages", [])
            if not batch:
                break
            for message in batch[: None if max_messages is None else max_messages - result.moved]:
                self._move(message, url, target)
                result.moved += 1
                if on_message is not None:
                    on_message(message["MessageId"])
        return result

    def _move(self, message: dict[str, Any], url: str, target: str) -> None:
        attributes = message.get("Attributes", {})
        send: dict[str, Any] = {"QueueUrl": target, "MessageBody": message["Body"]}
        if message.get("MessageAttributes"):
            send["MessageAttributes"] = message["MessageAttributes"]  # a repair's targets travel on
        if "MessageGroupId" in attributes:
            send["MessageGroupId"] = attributes["MessageGroupId"]
            # Stable per DLQ message: a redrive interrupted after this send and run again is deduplicated.
            send["MessageDeduplicationId"] = f"redrive-{message['MessageId']}"
        self.sqs.send_message(**send)  # put back first ...
        self.sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])  # ... then remove

    def _redrive_with_move_task(self, url: str, wait: timedelta) -> RedriveResult:
        """Let SQS move every visible message back to its source queue, and follow the task to its end."""
        arn = self.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        handle = self.sqs.start_message_move_task(SourceArn=arn)["TaskHandle"]
        deadline = self._clock() + wait
        while True:
            # The newest task first; SQS names a task's handle only while it is RUNNING, and runs one task per
            # queue at a time, so the newest one is ours.
            tasks = self.sqs.list_message_move_tasks(SourceArn=arn, MaxResults=1).get("Results", [])
            task = tasks[0] if tasks and tasks[0].get("TaskHandle", handle) == handle else {}
            status = str(task.get("Status", "UNKNOWN"))
            if status != "RUNNING" or self._clock() >= deadline:
                moved = int(task.get("ApproximateNumberOfMessagesMoved", 0))
                return RedriveResult(moved=moved, method="move-task", status=status)
            self._sleep(2)

    def _depth(self, url: str) -> int:
        attributes = self.sqs.get_queue_attributes(
            QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
        )["Attributes"]
        return sum(int(value) for value in attributes.values())

    # -- reconcile ----------------------------------------------------------------------------------

    def reconcile_horizon(self) -> datetime:
        """The oldest moment reconcile can vouch for: before it, a missing claim may be a forgotten completion."""
        return self._clock() - self.topology.inbox_retention + VOUCH_MARGIN

    def reconcile(
        self, since: datetime, *, tenant: str | None = None, dry_run: bool = False, stale_after: timedelta | None = None
    ) -> ReconcileResult:
        """Re-send events (from ``since``) whose durable subscriptions have no claim (or a long-stale one),
        naming only those subscriptions: recovery for anything the stream no longer holds. Running it again
        publishes nothing new. ``since`` older than the inbox's retention is refused."""
        horizon = self.reconcile_horizon()
        if since < horizon:
            raise OperationRefusedError(
                f"the inbox remembers completions for {self.topology.inbox_retention_days} days, so reconcile can "
                f"vouch only for events since {format_timestamp(horizon)}: an older event without a claim may "
                "have completed and been forgotten. Use a later --since; rerun older work with replay --force."
            )
        tenants = [self.require_tenant(tenant)] if tenant else self.tenants()
        if not tenants:
            raise OperationRefusedError("there are no tenants: nothing to reconcile")
        stale = stale_after or timedelta(hours=1)
        result = ReconcileResult()
        now = self._clock()
        for tenant_name in tenants:
            for envelope in self._events_since(tenant_name, since):
                result.scanned += 1
                wanted = [s.name for s in self.catalog.registry.matching(envelope.type, Lane.DURABLE)]
                missing = self._unclaimed(envelope.id, wanted, stale)
                if missing and not dry_run:
                    # A stale claim is claimable as it is; a missing one first gets the row that vouches.
                    missing = {
                        s: status for s, status in missing.items() if status or self._open_for_repair(envelope, s, now)
                    }
                    if missing:
                        image = self._event_image(tenant_name, envelope.seq)
                        dedup = f"reconcile-{envelope.id}-{uuid.uuid4().hex[:12]}"
                        self._publish(image, tenant_name, dedup, targets=missing)
                if not missing:
                    result.already_handled += 1
                    continue
                result.republished.append(envelope.id)
                result.subscriptions[envelope.id] = sorted(missing)
        return result

    def _unclaimed(self, event_id: str, wanted: list[str], stale: timedelta) -> dict[str, str | None]:
        """The subscriptions of ``wanted`` that need a re-send, each with its claim's status: no claim (None),
        a lease long expired and never taken over (PENDING: the message itself was lost), or a repair whose
        message may never have been sent (REPLAYING)."""
        now = self._clock()
        claims = self.claims(event_id)
        missing: dict[str, str | None] = {}
        for name in wanted:
            claim = claims.get(name)
            if claim is None:
                missing[name] = None
                continue
            status = claim["status"]["S"]
            # A REPLAYING pair waits for a repair's message, which may never have been sent (a repair cut short):
            # re-send it at any age; a copy too many is absorbed by the inbox.
            lease_end = _lease_end(claim)
            if status == REPLAYING or (lease_end is not None and now - lease_end > stale):
                missing[name] = status
        return missing

    def _open_for_repair(self, envelope: Envelope, subscription: str, now: datetime) -> bool:
        """Give a pair without a claim the REPLAYING row that vouches for its re-sent message at any age (the
        row proves the pair has not completed since). False when a claim appeared since it was read: the pair
        is in hand, and nothing is re-sent for it."""
        try:
            self.dynamodb.put_item(
                TableName=self.topology.inbox_table,
                Item=reconcile_row(envelope, subscription, now),
                ConditionExpression="attribute_not_exists(pk)",
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "ConditionalCheckFailedException":
                raise
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

    def _claim(self, event_id: str, subscription: str) -> dict[str, Any] | None:
        item: dict[str, Any] | None = self.dynamodb.get_item(
            TableName=self.topology.inbox_table, Key=keys.claim_key(event_id, subscription), ConsistentRead=True
        ).get("Item")
        return item

    def _event_seq(self, claim: dict[str, Any]) -> int:
        if "event_seq" in claim:
            return int(claim["event_seq"]["N"])
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
            Key=keys.event_key(tenant, seq),
            ConsistentRead=True,
        ).get("Item")
        if item is None:
            raise OperationRefusedError(f"tenant {tenant!r} has no event at seq {seq}")
        return item

    def _publish(self, image: dict[str, Any], tenant: str, dedup_id: str, *, targets: Iterable[str]) -> None:
        """Send an event row as the relay pipe does (the raw image, group = tenant), naming the subscriptions
        it is for: each has a DEAD-turned-REPLAYING, or a REPLAYING, claim row that vouches for it."""
        self.sqs.send_message(
            QueueUrl=self.topology.durable_queue_url,
            MessageBody=relay_body(image),
            MessageGroupId=tenant,
            MessageDeduplicationId=dedup_id[:128],
            MessageAttributes=repair_attributes(targets),
        )

    def _clear_claim(self, item: ReplayItem, allowed: tuple[str, ...], now: datetime) -> bool:
        """Turn the claim into REPLAYING: claimable by the next delivery, and carrying the pair's open dead
        letter, which the completion resolves in its own transaction. An interrupted replay loses nothing
        (the row stays REPLAYING, and the next replay re-sends it) and done work never stays open work."""
        values: dict[str, Any] = {f":s{i}": {"S": status} for i, status in enumerate(allowed)}
        values.update({":replaying": {"S": REPLAYING}, ":zero": {"N": "0"}, ":now": {"S": format_timestamp(now)}})
        sets = "SET #status = :replaying, attempts = :zero, replayed_at = :now"
        removes = "REMOVE #owner, lease_expires_at, expires_at"
        letter = keys.dead_letter_sort_key(item.event_id, item.subscription)
        if self._has_dead_letter(keys.dead_letter_key(item.tenant, item.event_id, item.subscription)):
            sets += ", open_dead_letter = :letter"
            values[":letter"] = {"S": letter}
        else:
            removes += ", open_dead_letter"
        status_names = ", ".join(name for name in values if name.startswith(":s"))
        try:
            self.dynamodb.update_item(
                TableName=self.topology.inbox_table,
                Key=keys.claim_key(item.event_id, item.subscription),
                UpdateExpression=f"{sets} {removes}",
                ConditionExpression=f"#status IN ({status_names})",
                ExpressionAttributeNames={"#status": "status", "#owner": "owner"},
                ExpressionAttributeValues=values,
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] == "ConditionalCheckFailedException":
                return False  # already replayed, or picked up again meanwhile: leave it to the inbox
            raise
        return True

    def _has_dead_letter(self, key: dict[str, Any]) -> bool:
        found = self.dynamodb.get_item(TableName=self.topology.inbox_table, Key=key, ConsistentRead=True)
        return "Item" in found

    def _resolve_dead_letter(self, tenant: str, event_id: str, subscription: str, how: str) -> None:
        try:
            self.dynamodb.update_item(
                TableName=self.topology.inbox_table,
                Key=keys.dead_letter_key(tenant, event_id, subscription),
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


def _lease_end(claim: dict[str, Any]) -> datetime | None:
    """When a PENDING claim's lease ends (None for a claim in another state)."""
    if claim["status"]["S"] != PENDING:
        return None
    return datetime.fromtimestamp(int(claim.get("lease_expires_at", {}).get("N", "0")) / 1000, tz=UTC)


def _dead_reason(claim: dict[str, Any] | None) -> str | None:
    return None if claim is None else claim.get("dead_reason", {}).get("S")
