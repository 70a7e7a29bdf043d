"""Counting AWS requests and their billing units with botocore event hooks, and the CPU moto spends.

``AwsMeter.attach(events)`` registers ``before-parameter-build`` (which sees the API parameters) and
``after-call`` (which sees the response) handlers on a client's (or a session's) event emitter. Every
API call is then recorded under ``(actor, service, operation)``, where the actor is whoever is running
(``acting_as("relay pipe")``), with the units AWS bills for it:

- DynamoDB: write units by item size (1 per started KB of the larger of the item's old and new image,
  at least 1; twice that inside a transaction, which DynamoDB prepares and commits), read units (1 per
  started 4 KB for a strongly consistent read, half that for an eventually consistent one, twice that
  in a transaction; a query or scan rounds the sum of the items it returns). Item sizes are read from
  moto's in-process backend before and after the call, so updates are charged by what they really wrote.
- DynamoDB Streams: one read request unit per GetRecords call.
- SQS: one request per started 64 KB of payload, FIFO and standard queues apart.

``MotoMeter`` times moto's request dispatch (the ``before-send`` stub that plays AWS), so a benchmark can
tell the CPU its own code spent from the CPU the emulator spent playing DynamoDB and SQS: in AWS the
latter is the service's, billed in units above, not in Lambda time.
"""

from __future__ import annotations

import math
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from outbox.log.limits import item_size

KB = 1024
SQS_CHUNK = 64 * KB
REGION = "us-east-1"

_actor: ContextVar[str] = ContextVar("benchmark_actor", default="app")


@contextmanager
def acting_as(actor: str) -> Iterator[None]:
    """Attribute every AWS request made inside the block to ``actor``."""
    token = _actor.set(actor)
    try:
        yield
    finally:
        _actor.reset(token)


def current_actor() -> str:
    return _actor.get()


# -- units by DynamoDB's published rules (item sizes are the engine's, which checks them before a write) --


def write_units(size: int) -> int:
    """Write request units of one item write: one per started KB, at least one."""
    return max(1, math.ceil(size / KB))


def read_units(size: int, *, consistent: bool) -> float:
    """Read request units of one read of ``size`` bytes: one per started 4 KB (strong), half (eventual)."""
    units = max(1, math.ceil(size / (4 * KB)))
    return float(units) if consistent else units / 2


def sqs_chunks(payload_bytes: int) -> int:
    """SQS bills every started 64 KB of a request's payload as one request."""
    return max(1, math.ceil(payload_bytes / SQS_CHUNK))


# -- what a request cost -----------------------------------------------------------------------------


@dataclass
class Usage:
    """What a set of AWS API calls consumed, in the units AWS bills."""

    requests: int = 0
    attempts: int = 0  # HTTP attempts, retries included (each is billed)
    errors: int = 0  # calls answered with an error (a failed condition, a cancelled transaction)
    write_units: float = 0.0
    read_units: float = 0.0
    transactional_write_units: float = 0.0  # the part of write_units written inside transactions
    failed_write_units: float = 0.0  # the part of write_units spent by calls that failed (a condition, a cancel)
    stream_read_units: int = 0
    sqs_requests_fifo: int = 0  # 64 KB chunks on FIFO queues
    sqs_requests_standard: int = 0  # 64 KB chunks on standard queues
    messages: int = 0  # SQS messages sent, received or deleted; stream records read
    message_chunks: int = 0  # 64 KB chunks of those messages, each counted on its own (Pipes billing)
    empty: int = 0  # receives and GetRecords that returned nothing

    def add(self, other: Usage) -> None:
        for name in (f.name for f in fields(self)):
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


ItemSizer = Callable[[str, Mapping[str, Any]], int | None]
KeyAttributes = Callable[[str], Sequence[str]]
WriteClassifier = Callable[[str, Mapping[str, Any]], str]  # (table, key) -> what the item is


def moto_item_sizer(region: str = REGION) -> tuple[ItemSizer, KeyAttributes]:
    """Read item sizes and key schemas straight from moto's in-process DynamoDB backend."""
    from moto.core.models import DEFAULT_ACCOUNT_ID
    from moto.dynamodb.models import dynamodb_backends

    def backend() -> Any:
        return dynamodb_backends[DEFAULT_ACCOUNT_ID][region]

    def size(table: str, key: Mapping[str, Any]) -> int | None:
        try:
            item = backend().get_item(table, dict(key))
        except Exception:  # a table that does not exist (yet): the call itself will fail
            return None
        return None if item is None else item_size(item.to_json()["Attributes"])

    def key_attributes(table: str) -> Sequence[str]:
        found = backend().get_table(table)
        return [name for name in (found.hash_key_attr, found.range_key_attr) if name]

    return size, key_attributes


@dataclass
class _Target:
    table: str
    key: dict[str, Any]
    transactional: bool
    before: int | None = None


@dataclass
class AwsMeter:
    """Usage per ``(actor, service, operation)``, recorded by botocore event hooks.

    ``sizer`` reads an item's current size (moto's backend by default) so that DynamoDB writes are
    charged by the larger of the old and the new image, as AWS charges them.
    """

    sizer: ItemSizer | None = None
    key_attributes: KeyAttributes | None = None
    classifier: WriteClassifier | None = None
    usage: dict[tuple[str, str, str], Usage] = field(default_factory=lambda: defaultdict(Usage))
    # Write units per (actor, item class, transactional), when a classifier is given.
    write_units_by_class: dict[tuple[str, str, bool], float] = field(default_factory=lambda: defaultdict(float))
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @classmethod
    def on_moto(cls, region: str = REGION) -> AwsMeter:
        sizer, key_attributes = moto_item_sizer(region)
        return cls(sizer=sizer, key_attributes=key_attributes)

    def attach(self, events: Any) -> None:
        """Register on an event emitter: ``client.meta.events`` or ``boto3.DEFAULT_SESSION.events``
        (clients copy their session's emitter when they are created, so attach before creating them)."""
        events.register("before-parameter-build", self._before_call, unique_id=f"benchmark-meter-before-{id(self)}")
        events.register("after-call", self._after_call, unique_id=f"benchmark-meter-after-{id(self)}")

    @contextmanager
    def everywhere(self) -> Iterator[AwsMeter]:
        """Meter every botocore session created inside the block, and so every client made from one.

        moto replaces boto3's default session while it mocks, and libraries make sessions of their own,
        so the hooks go where botocore takes the handlers of each new session from, as moto's own do.
        """
        from botocore import handlers

        mine = [("before-parameter-build", self._before_call), ("after-call", self._after_call)]
        handlers.BUILTIN_HANDLERS.extend(mine)
        try:
            yield self
        finally:
            for spec in mine:
                handlers.BUILTIN_HANDLERS.remove(spec)

    def reset(self) -> None:
        with self._lock:
            self.usage.clear()
            self.write_units_by_class.clear()

    def total(self, predicate: Callable[[str, str, str], bool] = lambda *_: True) -> Usage:
        """The sum over the ``(actor, service, operation)`` keys the predicate accepts."""
        result = Usage()
        with self._lock:
            for (actor, service, operation), usage in self.usage.items():
                if predicate(actor, service, operation):
                    result.add(usage)
        return result

    def rows(self) -> list[dict[str, Any]]:
        with self._lock:
            return [
                {"actor": actor, "service": service, "operation": operation, **usage.as_dict()}
                for (actor, service, operation), usage in sorted(self.usage.items())
            ]

    # -- hooks ----------------------------------------------------------------------------------------

    def _before_call(self, model: Any, params: Mapping[str, Any], context: dict[str, Any], **_: Any) -> None:
        service = model.service_model.service_name
        context["benchmark_actor"] = current_actor()
        context["benchmark_params"] = params
        if service == "dynamodb" and self.sizer is not None:
            targets = self._write_targets(model.name, params)
            for target in targets:
                target.before = self.sizer(target.table, target.key)
            context["benchmark_targets"] = targets

    def _after_call(self, http_response: Any, parsed: Mapping[str, Any], model: Any, context: Any, **_: Any) -> None:
        service = model.service_model.service_name
        operation = model.name
        params: Mapping[str, Any] = context.get("benchmark_params", {}) if isinstance(context, dict) else {}
        usage = Usage(requests=1)
        usage.attempts = 1 + int(parsed.get("ResponseMetadata", {}).get("RetryAttempts", 0))
        usage.errors = int(getattr(http_response, "status_code", 200) >= 300)
        actor = context.get("benchmark_actor", current_actor()) if isinstance(context, dict) else current_actor()
        if service == "dynamodb":
            self._dynamodb_units(usage, actor, parsed, operation, context)
        elif service == "dynamodbstreams":
            if operation == "GetRecords":
                records = parsed.get("Records", [])
                usage.stream_read_units = 1
                usage.messages = len(records)
                usage.empty = int(not records)
        elif service == "sqs":
            self._sqs_units(usage, operation, params, parsed, context)
        with self._lock:
            self.usage[(actor, service, operation)].add(usage)

    # -- DynamoDB -------------------------------------------------------------------------------------

    def _write_targets(self, operation: str, params: Mapping[str, Any]) -> list[_Target]:
        if operation in ("PutItem", "UpdateItem", "DeleteItem"):
            table = params["TableName"]
            return [_Target(table, self._key(table, params), transactional=False)]
        if operation == "TransactWriteItems":
            targets = []
            for entry in params["TransactItems"]:
                (_action, body), *_ = entry.items()
                targets.append(_Target(body["TableName"], self._key(body["TableName"], body), transactional=True))
            return targets
        if operation == "BatchWriteItem":
            return [
                _Target(table, self._key(table, request.get("PutRequest") or request["DeleteRequest"]), False)
                for table, requests in params["RequestItems"].items()
                for request in requests
            ]
        return []

    def _key(self, table: str, body: Mapping[str, Any]) -> dict[str, Any]:
        if "Key" in body:
            return dict(body["Key"])
        names = self.key_attributes(table) if self.key_attributes is not None else ("pk", "sk")
        return {name: body["Item"][name] for name in names if name in body["Item"]}

    def _dynamodb_units(
        self, usage: Usage, actor: str, parsed: Mapping[str, Any], operation: str, context: Any
    ) -> None:
        targets: list[_Target] = context.get("benchmark_targets", []) if isinstance(context, dict) else []
        for target in targets:
            after = self.sizer(target.table, target.key) if self.sizer is not None else None
            units = write_units(max(target.before or 0, after or 0)) * (2 if target.transactional else 1)
            usage.write_units += units
            if usage.errors:
                usage.failed_write_units += units
            if target.transactional:
                usage.transactional_write_units += units
            if self.classifier is not None:
                kind = "failed call (retried)" if usage.errors else self.classifier(target.table, target.key)
                with self._lock:
                    self.write_units_by_class[(actor, kind, target.transactional)] += units
        params: Mapping[str, Any] = context.get("benchmark_params", {}) if isinstance(context, dict) else {}
        consistent = bool(params.get("ConsistentRead"))
        if operation == "GetItem":
            usage.read_units += read_units(item_size(parsed.get("Item", {})), consistent=consistent)
        elif operation in ("Query", "Scan"):
            total = sum(item_size(item) for item in parsed.get("Items", []))
            usage.read_units += read_units(total, consistent=consistent)
        elif operation == "BatchGetItem":
            for items in parsed.get("Responses", {}).values():
                usage.read_units += sum(read_units(item_size(item), consistent=consistent) for item in items)
        elif operation == "TransactGetItems":
            for response in parsed.get("Responses", []):
                usage.read_units += 2 * read_units(item_size(response.get("Item", {})), consistent=True)

    # -- SQS ------------------------------------------------------------------------------------------

    def _sqs_units(
        self, usage: Usage, operation: str, params: Mapping[str, Any], parsed: Mapping[str, Any], context: Any
    ) -> None:
        fifo = str(params.get("QueueUrl", "")).endswith(".fifo")
        chunks = 1
        if operation == "SendMessage":
            size = len(str(params.get("MessageBody", "")).encode("utf-8"))
            chunks = sqs_chunks(size)
            usage.messages = 1
            usage.message_chunks = chunks
        elif operation == "SendMessageBatch":
            sizes = [len(str(entry.get("MessageBody", "")).encode("utf-8")) for entry in params.get("Entries", [])]
            chunks = sqs_chunks(sum(sizes))
            usage.messages = len(sizes)
            usage.message_chunks = sum(sqs_chunks(size) for size in sizes)
        elif operation == "ReceiveMessage":
            messages = parsed.get("Messages", [])
            chunks = sqs_chunks(sum(len(str(m.get("Body", "")).encode("utf-8")) for m in messages))
            usage.messages = len(messages)
            usage.empty = int(not messages)
        elif operation in ("DeleteMessage", "ChangeMessageVisibility"):
            usage.messages = 1
        elif operation in ("DeleteMessageBatch", "ChangeMessageVisibilityBatch"):
            usage.messages = len(params.get("Entries", []))
        if fifo:
            usage.sqs_requests_fifo = chunks
        else:
            usage.sqs_requests_standard = chunks


# -- the CPU moto spends playing AWS -----------------------------------------------------------------


@dataclass
class MotoTime:
    cpu_seconds: float = 0.0  # CPU time of the calling thread inside moto's dispatch
    wall_seconds: float = 0.0
    requests: int = 0


class MotoMeter:
    """Times moto's in-process dispatch per thread: ``with MotoMeter() as moto: ...; moto.total``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._total = MotoTime()
        self._by_operation: dict[str, MotoTime] = defaultdict(MotoTime)
        self._original: Any = None

    def __enter__(self) -> MotoMeter:
        from moto.core.botocore_stubber import BotocoreStubber

        original = BotocoreStubber.process_request
        self._original = original
        meter = self

        def process_request(stub: Any, request: Any) -> Any:
            cpu, wall = time.thread_time(), time.perf_counter()
            try:
                return original(stub, request)
            finally:
                meter._record(request, time.thread_time() - cpu, time.perf_counter() - wall)

        BotocoreStubber.process_request = process_request  # type: ignore[method-assign,assignment]
        return self

    def __exit__(self, *_exc: object) -> None:
        from moto.core.botocore_stubber import BotocoreStubber

        BotocoreStubber.process_request = self._original  # type: ignore[method-assign]

    def _record(self, request: Any, cpu: float, wall: float) -> None:
        target = request.headers.get("X-Amz-Target", b"")
        operation = (target.decode() if isinstance(target, bytes) else str(target)).rsplit(".", 1)[-1] or "other"
        with self._lock:
            for bucket in (self._total, self._by_operation[operation]):
                bucket.cpu_seconds += cpu
                bucket.wall_seconds += wall
                bucket.requests += 1

    @property
    def total(self) -> MotoTime:
        with self._lock:
            return MotoTime(self._total.cpu_seconds, self._total.wall_seconds, self._total.requests)

    def by_operation(self) -> dict[str, MotoTime]:
        with self._lock:
            return {name: MotoTime(t.cpu_seconds, t.wall_seconds, t.requests) for name, t in self._by_operation.items()}

    def reset(self) -> None:
        """Restart ``total``; ``by_operation`` keeps counting from the start of the ``with`` block."""
        with self._lock:
            self._total = MotoTime()


# -- replaying recorded answers, to time the client alone ----------------------------------------------


@dataclass
class RecordedResponse:
    status: int
    headers: dict[str, str]
    body: bytes


class ResponseRecorder:
    """Keeps every HTTP response a client receives, in order (an ``after-call`` hook)."""

    def __init__(self) -> None:
        self.responses: list[RecordedResponse] = []
        self.recording = False

    def attach(self, events: Any) -> None:
        events.register("after-call", self._after_call, unique_id=f"benchmark-recorder-{id(self)}")

    def start(self) -> None:
        self.responses = []
        self.recording = True

    def stop(self) -> list[RecordedResponse]:
        self.recording = False
        return self.responses

    def _after_call(self, http_response: Any, **_: Any) -> None:
        if self.recording:
            self.responses.append(
                RecordedResponse(
                    int(http_response.status_code), dict(http_response.headers), bytes(http_response.content)
                )
            )


class ResponseReplayer:
    """Answers a client's requests with recorded responses, in order, before moto sees them: the client
    then spends only its own CPU (building, signing and parsing requests), as it would against AWS."""

    def __init__(self) -> None:
        self._queue: list[RecordedResponse] = []
        self._next = 0

    def attach(self, events: Any) -> None:
        """Take over a client's ``before-send``: botocore calls every handler of that event (the first
        answer wins), so moto's stub is unregistered from this client's emitter, or it would still run."""
        from moto.core.models import botocore_stubber

        events.unregister("before-send", handler=botocore_stubber)
        events.register_first("before-send", self._before_send, unique_id=f"benchmark-replayer-{id(self)}")

    def load(self, responses: Sequence[RecordedResponse]) -> None:
        self._queue = list(responses)
        self._next = 0

    @property
    def exhausted(self) -> bool:
        return self._next >= len(self._queue)

    def _before_send(self, request: Any, **_: Any) -> Any:
        from botocore.awsrequest import AWSResponse
        from moto.core.botocore_stubber import MockRawResponse

        if self._next >= len(self._queue):
            raise RuntimeError("the replayed run made more requests than the recorded one")
        recorded = self._queue[self._next]
        self._next += 1
        return AWSResponse(request.url, recorded.status, recorded.headers, MockRawResponse(recorded.body))
