"""What the pipeline left behind, read back after a run: the logs, the inbox, the data rows, the queues.

Read with the simulator's own queries, and for queue depths from moto's storage itself (the ground truth
that ``Operations.status()`` is checked against).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from outbox import Envelope, EnvelopeParseError, keys
from outbox.audit.findings import Finding
from outbox.audit.table import AuditLog
from outbox.inbox import DeadLetter
from outbox.local.clients import REGION
from outbox.local.resources import ACCOUNT
from outbox.local.runtime import LocalRuntime
from outbox.log.chain import read_event_rows
from outbox.log.verification import ChainReport, verify_chain
from outbox.ops import Status
from outbox.ops.groups import failure_key


@dataclass(frozen=True)
class DeadLetterRow:
    tenant: str
    event_id: str
    subscription: str
    reason: str
    error: str
    receive_count: int
    attempts: int
    resolved: bool
    group: str = ""  # the failure group outbox dead-letters groups lists it in (its id)

    @property
    def key(self) -> str:
        return f"{self.event_id}:{self.subscription}"


@dataclass
class State:
    logs: dict[str, list[Envelope]] = field(default_factory=dict)  # tenant -> events in seq order
    chains: dict[str, ChainReport] = field(default_factory=dict)  # verified from genesis, no anchor
    findings: dict[str, list[Finding]] = field(default_factory=dict)  # tenant -> its audit table's findings
    tamper_pipe_dead_letters: int = 0  # stream batches the tamper pipe could not deliver (alarmed)
    claims: dict[str, dict[str, Any]] = field(default_factory=dict)  # idempotency key -> claim row
    dead_letters: list[DeadLetterRow] = field(default_factory=list)
    data: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)  # (pk, sk) -> row
    queue_depths: dict[str, int] = field(default_factory=dict)  # queue url -> messages stored
    status: Status | None = None
    max_attempts: int = 0
    poison_pills: int = 0  # poison-pill rows in the inbox
    # Event rows the engine cannot read back as events (left out of ``logs``): "tenant seq: why".
    unreadable_rows: list[str] = field(default_factory=list)
    # Ordered subscriptions, per (tenant, subscription): the watermark row, and the deferred and skipped rows
    # by seq (the order partition of the inbox table, outbox.keys).
    watermarks: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    deferred: dict[tuple[str, str], dict[int, dict[str, Any]]] = field(default_factory=lambda: defaultdict(dict))
    skipped: dict[tuple[str, str], dict[int, dict[str, Any]]] = field(default_factory=lambda: defaultdict(dict))

    @property
    def events(self) -> dict[str, Envelope]:
        return {envelope.id: envelope for log in self.logs.values() for envelope in log}

    def open_dead_letters(self) -> dict[str, DeadLetterRow]:
        """Unresolved dead letters of work that failed, by idempotency key (a conflict is not dead work)."""
        return {row.key: row for row in self.dead_letters if not row.resolved and row.reason != "conflict"}

    def effect_amounts(self) -> dict[str, int]:
        """Idempotency key -> the amount its (last) DynamoDB effect was computed from."""
        return {
            f"{pk.removeprefix('SIMEFFECT#')}:{sk}": int(row["amount"]["N"])
            for (pk, sk), row in self.data.items()
            if pk.startswith("SIMEFFECT#") and "amount" in row
        }

    def ledger(self) -> dict[str, int]:
        """Idempotency key -> how often its DynamoDB effect was applied."""
        applied: dict[str, int] = defaultdict(int)
        for (pk, sk), row in self.data.items():
            if pk.startswith("SIMEFFECT#"):
                applied[f"{pk.removeprefix('SIMEFFECT#')}:{sk}"] = int(row["applied"]["N"])
        return applied


def read_state(runtime: LocalRuntime, dynamodb: Any, tenants: list[str], status: Status | None) -> State:
    events_table = runtime.output("EventsTableName")
    audit = AuditLog(runtime.output("AuditTableName"), dynamodb)
    state = State(status=status, max_attempts=max_attempts(runtime))
    for tenant in tenants:
        state.logs[tenant] = _read_log(state, dynamodb, events_table, tenant)
        state.chains[tenant] = verify_chain(dynamodb, events_table, tenant)
        state.findings[tenant] = list(audit.findings(tenant))
    _read_inbox(state, dynamodb, runtime.output("InboxTableName"))
    for item in _scan(dynamodb, runtime.output("DataTableName")):
        state.data[(item["pk"]["S"], item["sk"]["S"])] = item
    for url in runtime.resources.queue_urls.values():
        state.queue_depths[url] = stored_messages(url)
    state.tamper_pipe_dead_letters = stored_messages(runtime.output("TamperPipeDeadLetterQueueUrl"))
    return state


def read_alarm_state(runtime: LocalRuntime, dynamodb: Any, tenants: list[str], status: Status | None) -> State:
    """Only what the status check needs: which tenants have events, the dead letters, the queue depths."""
    events_table = runtime.output("EventsTableName")
    state = State(status=status, max_attempts=max_attempts(runtime))
    for tenant in tenants:
        state.logs[tenant] = _read_log(state, dynamodb, events_table, tenant)
    _read_inbox(state, dynamodb, runtime.output("InboxTableName"))
    for url in runtime.resources.queue_urls.values():
        state.queue_depths[url] = stored_messages(url)
    return state


def _read_log(state: State, dynamodb: Any, events_table: str, tenant: str) -> list[Envelope]:
    """The tenant's events as the engine reads them; a row it cannot read is noted (invariant 1 reports it), not
    a failure of the simulator."""
    log = []
    for item in read_event_rows(dynamodb, events_table, tenant):
        try:
            log.append(Envelope.from_item(item))
        except EnvelopeParseError as exc:
            state.unreadable_rows.append(f"{tenant} {item.get('sk', {}).get('S')}: {exc}")
    return log


def stored_messages(queue_url: str) -> int:
    """Messages SQS holds in the queue, visible or not: moto's own storage, not an API answer."""
    from moto.sqs.models import sqs_backends

    queue = sqs_backends[ACCOUNT][REGION].queues[queue_url.rsplit("/", 1)[1]]
    return len(queue._messages)


def queue_bodies(queue_url: str) -> list[str]:
    """The bodies SQS holds in the queue, visible or not, read from moto's storage (nothing is received)."""
    from moto.sqs.models import sqs_backends

    queue = sqs_backends[ACCOUNT][REGION].queues[queue_url.rsplit("/", 1)[1]]
    return [message.body for message in queue._messages]


def _read_inbox(state: State, dynamodb: Any, inbox_table: str) -> None:
    for item in _scan(dynamodb, inbox_table):
        pk = item["pk"]["S"]
        if pk.startswith("CLAIM#"):
            state.claims[f"{pk.removeprefix('CLAIM#')}:{item['sk']['S']}"] = item
        elif item.get("kind", {}).get("S") == "DEAD_LETTER":
            state.dead_letters.append(_dead_letter(item))
        elif item.get("kind", {}).get("S") == "POISON":
            state.poison_pills += 1
        elif pk.startswith("TENANT#") and "#ORDER#" in pk:
            _read_order_row(state, item)


def _read_order_row(state: State, item: dict[str, Any]) -> None:
    tenant, _, subscription = item["pk"]["S"].removeprefix("TENANT#").partition("#ORDER#")
    sort_key = item["sk"]["S"]
    if sort_key == keys.WATERMARK_SORT_KEY:
        state.watermarks[(tenant, subscription)] = item
    elif sort_key.startswith(keys.DEFERRED_PREFIX):
        state.deferred[(tenant, subscription)][int(item["seq"]["N"])] = item
    elif sort_key.startswith(keys.SKIPPED_PREFIX):
        state.skipped[(tenant, subscription)][int(item["seq"]["N"])] = item


def max_attempts(runtime: LocalRuntime) -> int:
    """The durable consumer's attempts per (event, subscription), as the stack configures it."""
    consumer = runtime.stack.output_reference("DurableConsumerFunctionName").logical_id
    return int(runtime.stack.functions[consumer].environment["MAX_ATTEMPTS"])


def _dead_letter(item: dict[str, Any]) -> DeadLetterRow:
    return DeadLetterRow(
        tenant=item["tenant"]["S"],
        event_id=item["event_id"]["S"],
        subscription=item["subscription"]["S"],
        reason=item["reason"]["S"],
        error=item.get("error", {}).get("S", ""),
        receive_count=int(item.get("receive_count", {}).get("N", "0")),
        attempts=int(item.get("attempts", {}).get("N", "0")),
        resolved="resolved" in item,
        group=failure_key(DeadLetter.from_item(item)).id,
    )


def _scan(dynamodb: Any, table: str) -> list[dict[str, Any]]:
    pages = dynamodb.get_paginator("scan").paginate(TableName=table, ConsistentRead=True)
    return [item for page in pages for item in page["Items"]]
