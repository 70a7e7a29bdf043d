"""DynamoDB and DynamoDB Streams as AWS runs them, where moto 5.2.5 does not (rules 1 to 5).

Rule 1, atomic TransactWriteItems (M1, M7-M10; R8.1, R8.3). moto applies a transaction item by item,
with no lock, after deep-copying every table it touches (O(table size) per transaction), and does not
enforce the 4 MB aggregate limit. Here every condition is evaluated first, a failure cancels the whole
transaction before anything is written, and only then are the writes applied; if a write fails while
applying (an item-level validation error), the items touched so far are restored from a copy of those
items alone. Every DynamoDB and DynamoDB Streams request holds one process-wide lock, so concurrent
threads (in-process ``mock_aws`` or a ``ThreadedMotoServer``) see each request as atomic.

Rule 2, ClientRequestToken idempotency (M6; R8.2). A successful transaction's token is remembered for
ten minutes of virtual time: a replay with the same parameters succeeds without writing, a replay with
other parameters raises IdempotentParameterMismatchException.

Rules 3 to 5, stream records (M3, M4, M5; R7.2, R7.3, R7.4). The records of one request are held back
until it completes, then folded per item (first old image, last new image): a write that changes
nothing emits no record, an UpdateItem that creates its item emits one INSERT (moto emits two), and a
cancelled transaction emits nothing. ApproximateCreationDateTime is the virtual time, rounded down to
the second.
"""

from __future__ import annotations

import copy
import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from weakref import WeakKeyDictionary

from moto.core.responses import ActionResult
from moto.dynamodb.comparisons import get_filter_expression
from moto.dynamodb.exceptions import (
    ERROR_TYPE_PREFIX,
    DynamodbException,
    IncorrectDataType,
    IncorrectOperandType,
    ItemSizeTooLarge,
    ItemSizeToUpdateTooLarge,
    MockValidationException,
    MultipleTransactionsException,
    TooManyTransactionsException,
    TransactionCanceledException,
    TransactWriteSingleOpException,
)
from moto.dynamodb.models import DynamoDBBackend
from moto.dynamodb.models.dynamo_type import DynamoType, Item
from moto.dynamodb.models.table import StreamRecord, StreamShard, Table
from moto.dynamodb.models.utilities import bytesize
from moto.dynamodb.responses import DynamoHandler
from moto.dynamodbstreams.responses import DynamoDBStreamsHandler

from outbox.local.aws_fixes._patching import Clock, Patch

# One lock for every DynamoDB request of the process: DynamoDB applies each request atomically (R8.1).
DYNAMODB_LOCK = threading.RLock()

MAX_TRANSACTION_BYTES = 4 * 1024 * 1024  # R8.1: "The aggregate size of the items … cannot exceed 4 MB"
TOKEN_LIFETIME = timedelta(minutes=10)  # R8.2
_ACTIONS = ("ConditionCheck", "Put", "Delete", "Update")
# R8.3: errors caused by the transaction's own changes cancel it with a ValidationError reason.
_ITEM_LEVEL_ERRORS = (ItemSizeTooLarge, ItemSizeToUpdateTooLarge, IncorrectOperandType, IncorrectDataType)
_NO_REASON: tuple[None, None, None] = (None, None, None)

_ItemKey = tuple[int, DynamoType, DynamoType | None]
_Reason = tuple[str, str, dict[str, Any] | None] | tuple[None, None, None]  # (Code, Message, Item)
_StreamAdd = Callable[[StreamShard, Item | None, Item | None], None]


class IdempotentParameterMismatch(DynamodbException):
    """R8.2: the same ClientRequestToken with different parameters within ten minutes."""

    error_type = ERROR_TYPE_PREFIX + "IdempotentParameterMismatchException"

    def __init__(self) -> None:
        super().__init__(
            IdempotentParameterMismatch.error_type,
            "The ClientRequestToken was already used by a TransactWriteItems request with different parameters",
        )


@dataclass
class _Change:
    """One item's change within a request: the image before the request and the image after it."""

    shard: StreamShard
    old: Item | None
    new: Item | None


class _StreamUnit(threading.local):
    """The stream changes of the request the current thread is running, keyed by item, in order."""

    def __init__(self) -> None:
        self.depth = 0
        self.pending: dict[_ItemKey, _Change] = {}


@dataclass
class _TokenLedger:
    """ClientRequestTokens of successful transactions, oldest first, with their parameters and expiry."""

    entries: OrderedDict[str, tuple[str, datetime]] = field(default_factory=OrderedDict)

    def forget_expired(self, now: datetime) -> None:
        while self.entries:
            token, (_, expires_at) = next(iter(self.entries.items()))
            if expires_at > now:
                return
            del self.entries[token]


@dataclass(frozen=True)
class _Action:
    kind: str
    spec: dict[str, Any]
    table: Table
    key: dict[str, Any]
    hash_key: DynamoType
    range_key: DynamoType | None

    @property
    def identity(self) -> tuple[str, DynamoType, DynamoType | None]:
        return (self.table.table_arn, self.hash_key, self.range_key)

    def current(self) -> Item | None:
        return self.table.get_item(self.hash_key, self.range_key)


@dataclass
class _StreamRecords:
    """How many stream records the fixed DynamoDB published, over every table: while it stays the same, a shard
    read to its end has nothing new (the local pipes read only then, where AWS's poll; see pipe._read_shard)."""

    published: int = 0


STREAM_RECORDS = _StreamRecords()


class DynamoDBFixes:
    """Rules 1 to 5. The originals are captured when this is built, before anything is patched."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._unit = _StreamUnit()
        self._ledgers: WeakKeyDictionary[DynamoDBBackend, _TokenLedger] = WeakKeyDictionary()
        self._stream_add: _StreamAdd = StreamShard.add
        self._update_item = DynamoDBBackend.update_item

    def kept(self) -> dict[str, Any]:
        """The ClientRequestTokens these fixes keep beside moto's backends (``SqsFixes.kept``)."""
        with DYNAMODB_LOCK:
            return {"ledgers": dict(self._ledgers)}

    def restore(self, kept: dict[str, Any]) -> None:
        with DYNAMODB_LOCK:
            self._ledgers = WeakKeyDictionary(kept["ledgers"])

    @contextmanager
    def operation(self) -> Iterator[None]:
        """Hold the DynamoDB lock and the request's stream records; publish them, folded, at the end."""
        with DYNAMODB_LOCK:
            unit = self._unit
            unit.depth += 1
            try:
                yield
            finally:
                unit.depth -= 1
                if unit.depth == 0:
                    changes, unit.pending = unit.pending, {}
                    for change in changes.values():
                        self._publish(change)

    def patches(self) -> list[Patch]:
        fixes = self

        def serialized(original: Callable[..., Any]) -> Callable[..., Any]:
            def call(self: Any, *args: Any, **kwargs: Any) -> Any:
                with fixes.operation():
                    return original(self, *args, **kwargs)

            call.__name__ = original.__name__
            call.__doc__ = original.__doc__
            return call

        def add(self: StreamShard, old: Item | None, new: Item | None) -> None:
            fixes._hold(self, old, new)

        def record_init(
            self: StreamRecord,
            table: Table,
            stream_type: str,
            event_name: str,
            old: Item | None,
            new: Item | None,
            seq: int,
        ) -> None:
            original_record_init(self, table, stream_type, event_name, old, new, seq)
            self.record["dynamodb"]["ApproximateCreationDateTime"] = fixes._clock.now().replace(microsecond=0)

        def transact_write_items(self: DynamoDBBackend, transact_items: list[dict[str, Any]]) -> None:
            with fixes.operation():
                fixes._transact_write_items(self, transact_items)

        def transact_write_items_request(self: DynamoHandler) -> ActionResult:
            return fixes._idempotent_transaction(self, original_transact_request)

        original_record_init = StreamRecord.__init__
        original_transact_request = DynamoHandler.transact_write_items
        return [
            Patch(DynamoHandler, "call_action", serialized(DynamoHandler.call_action), "M1: one lock per request"),
            Patch(
                DynamoDBStreamsHandler,
                "call_action",
                serialized(DynamoDBStreamsHandler.call_action),
                "M1: stream reads see whole requests",
            ),
            Patch(DynamoDBBackend, "put_item", serialized(DynamoDBBackend.put_item), "M1: direct model calls"),
            Patch(DynamoDBBackend, "update_item", serialized(DynamoDBBackend.update_item), "M1, M4"),
            Patch(DynamoDBBackend, "delete_item", serialized(DynamoDBBackend.delete_item), "M1: direct model calls"),
            Patch(DynamoDBBackend, "transact_write_items", transact_write_items, "M1, M7-M10: atomic and fast"),
            Patch(DynamoHandler, "transact_write_items", transact_write_items_request, "M6: ClientRequestToken"),
            Patch(StreamShard, "add", add, "M3, M4, R7.4: records folded per request"),
            Patch(StreamRecord, "__init__", record_init, "M5: ApproximateCreationDateTime"),
        ]

    # Rules 3 and 4: stream records, held until the request ends, then folded per item.

    def _hold(self, shard: StreamShard, old: Item | None, new: Item | None) -> None:
        if self._unit.depth == 0:  # a write outside any request (a direct table call): publish at once
            self._publish(_Change(shard, old, new))
            return
        image = old if old is not None else new
        if image is None:
            return
        key = (id(shard), image.hash_key, image.range_key)
        change = self._unit.pending.get(key)
        if change is None:
            self._unit.pending[key] = _Change(shard, old, new)
        else:
            change.new = new

    def _publish(self, change: _Change) -> None:
        if change.old is None and change.new is None:
            return
        if change.old is not None and change.new is not None and change.old.to_json() == change.new.to_json():
            return  # R7.2: a write that changes nothing writes no stream record
        self._stream_add(change.shard, change.old, change.new)
        STREAM_RECORDS.published += 1

    def _discard(self, table: Table, hash_key: DynamoType, range_key: DynamoType | None) -> None:
        if table.stream_shard is not None:
            self._unit.pending.pop((id(table.stream_shard), hash_key, range_key), None)

    # Rule 1: atomic TransactWriteItems.

    def _transact_write_items(self, backend: DynamoDBBackend, transact_items: list[dict[str, Any]]) -> None:
        if len(transact_items) > 100:
            raise TooManyTransactionsException()
        actions = [self._parse(backend, entry) for entry in transact_items]
        seen: set[tuple[str, DynamoType, DynamoType | None]] = set()
        for action in actions:
            if action.identity in seen:
                raise MultipleTransactionsException()
            seen.add(action.identity)
        if sum(_action_size(action) for action in actions) > MAX_TRANSACTION_BYTES:
            raise MockValidationException("Transaction request cannot be larger than 4 MB")
        reasons = [_condition_reason(action) for action in actions]
        if any(reason[0] is not None for reason in reasons):
            raise TransactionCanceledException(reasons)
        self._apply(backend, actions)

    def _parse(self, backend: DynamoDBBackend, entry: dict[str, Any]) -> _Action:
        if len(entry) != 1:
            raise TransactWriteSingleOpException()
        kind, spec = next(iter(entry.items()))
        if kind not in _ACTIONS:
            raise MockValidationException(f"Unsupported transaction operation: {kind}")
        table = backend.get_table(spec["TableName"])
        if kind == "Put":
            names = [table.hash_key_attr] + ([table.range_key_attr] if table.range_key_attr else [])
            missing = [name for name in names if name not in spec["Item"]]
            if missing:
                raise MockValidationException(
                    f"One or more parameter values were invalid: Missing the key {missing[0]} in the item"
                )
            key = {name: spec["Item"][name] for name in names}
        else:
            key = spec["Key"]
        hash_key, range_key = backend.get_keys_value(table, key)
        return _Action(kind, spec, table, key, hash_key, range_key)

    def _apply(self, backend: DynamoDBBackend, actions: list[_Action]) -> None:
        """Apply the writes; on a failure, put back the items touched so far and drop their stream records."""
        touched: list[tuple[_Action, Item | None]] = []
        for index, action in enumerate(actions):
            try:
                self._apply_one(backend, action, touched)
            except Exception as error:
                for done, before in reversed(touched):
                    _restore(done.table, done.hash_key, done.range_key, before)
                    self._discard(done.table, done.hash_key, done.range_key)
                if isinstance(error, MockValidationException) and not isinstance(error, _ITEM_LEVEL_ERRORS):
                    raise  # a request-level validation error, as moto reports it
                code = "ValidationError" if isinstance(error, _ITEM_LEVEL_ERRORS) else type(error).__name__
                message = error.message if isinstance(error, DynamodbException) else str(error)
                reasons: list[_Reason] = [_NO_REASON] * len(actions)
                reasons[index] = (code, message, None)
                raise TransactionCanceledException(reasons) from error

    def _apply_one(self, backend: DynamoDBBackend, action: _Action, touched: list[tuple[_Action, Item | None]]) -> None:
        if action.kind == "ConditionCheck":
            return
        before = action.current()
        # An update changes its item in place; a put or a delete replaces it, so a reference is enough.
        touched.append((action, copy.deepcopy(before) if action.kind == "Update" else before))
        if action.kind == "Put":
            action.table.put_item(action.spec["Item"])
        elif action.kind == "Delete":
            action.table.delete_item(action.hash_key, action.range_key)
        else:
            self._update_item(
                backend,
                action.spec["TableName"],
                action.key,
                update_expression=action.spec["UpdateExpression"],
                expression_attribute_names=action.spec.get("ExpressionAttributeNames") or {},
                expression_attribute_values=action.spec.get("ExpressionAttributeValues") or {},
            )

    # Rule 2: ClientRequestToken idempotency.

    def _idempotent_transaction(
        self, handler: DynamoHandler, original: Callable[[DynamoHandler], ActionResult]
    ) -> ActionResult:
        body: dict[str, Any] = handler.body
        token = body.get("ClientRequestToken")
        if not token:
            return original(handler)
        with self.operation():
            ledger = self._ledgers.setdefault(handler.dynamodb_backend, _TokenLedger())
            ledger.forget_expired(self._clock.now())
            parameters = json.dumps(
                {name: value for name, value in body.items() if name != "ClientRequestToken"},
                sort_keys=True,
                default=repr,
            )
            remembered = ledger.entries.get(token)
            if remembered is not None:
                if remembered[0] != parameters:
                    raise IdempotentParameterMismatch()
                return ActionResult({"ConsumedCapacity": [], "ItemCollectionMetrics": {}})
            result = original(handler)
            ledger.entries[token] = (parameters, self._clock.now() + TOKEN_LIFETIME)
            return result


def _condition_reason(action: _Action) -> _Reason:
    condition = action.spec.get("ConditionExpression")
    if condition is None:
        return _NO_REASON
    current = action.current()
    evaluator = get_filter_expression(
        condition, action.spec.get("ExpressionAttributeNames"), action.spec.get("ExpressionAttributeValues")
    )
    if evaluator.expr(current):
        return _NO_REASON
    old = None
    if action.spec.get("ReturnValuesOnConditionCheckFailure") == "ALL_OLD" and current is not None:
        old = current.to_json()["Attributes"]
    return ("ConditionalCheckFailed", "The conditional request failed", old)


def _action_size(action: _Action) -> int:
    """A Put counts its item, the other actions their key (what the request carries of each item)."""
    attributes: dict[str, Any] = action.spec["Item"] if action.kind == "Put" else action.key
    return sum(bytesize(name) + DynamoType(value).size() for name, value in attributes.items())


def _restore(table: Table, hash_key: DynamoType, range_key: DynamoType | None, item: Item | None) -> None:
    items: dict[Any, Any] = table.items
    if range_key is None:
        if item is None:
            items.pop(hash_key, None)
        else:
            items[hash_key] = item
    elif item is None:
        items.get(hash_key, {}).pop(range_key, None)
    else:
        items.setdefault(hash_key, {})[range_key] = item
