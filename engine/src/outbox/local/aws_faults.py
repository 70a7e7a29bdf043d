"""The faults of the AWS side, for the local runtime: DynamoDB throttling a call, losing the answer to a write
it applied, or leaving keys of a BatchGetItem unprocessed; another writer of a tenant committing inside an
emit; SQS redelivering what is in flight. Each is a context manager, as in ``outbox.local.faults`` (which
exports them all): a ``FaultCount`` decides each opportunity, and counts what fired."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from typing import Any, cast
from unittest import mock

from outbox.local import deadline
from outbox.local.esm import SqsEventSourceMapping, change_visibility_if_in_flight
from outbox.local.fault_count import FaultCount
from outbox.observing import Happening, Moment, observing

logger = logging.getLogger(__name__)

# The DynamoDB operations ``throttle_dynamodb_calls`` may answer with a throttle by default: every one
# the engine, the handlers and the operator tools use.
DYNAMODB_OPERATIONS: tuple[str, ...] = (
    "GetItem",
    "BatchGetItem",
    "PutItem",
    "UpdateItem",
    "DeleteItem",
    "Query",
    "Scan",
    "TransactWriteItems",
    "BatchWriteItem",
)


@contextmanager
def rival_emit_before_commit(
    rival: Callable[[str], object], times: int = 1, *, count: FaultCount | None = None
) -> Iterator[FaultCount]:
    """Another writer commits an event for the same tenant after this emit read the chain head and before
    its transaction (``rival(tenant)`` does that emit), so the head condition fails and emit() must
    retry on the new head. The rival's own failures are logged, never raised into this emit."""
    count = count or FaultCount(times)
    rivalling = False

    def transact(happening: Happening) -> None:
        nonlocal rivalling
        if happening.moment is not Moment.BEFORE_EMIT_COMMIT:
            return
        tenant = happening.detail.arguments["envelopes"][0].tenant
        if not rivalling and count.take(tenant):
            rivalling = True
            try:
                rival(tenant)
            except Exception:  # another process's failure; ours goes on
                logger.exception("the rival emit for tenant %s failed", tenant)
            finally:
                rivalling = False

    with observing(transact):
        yield count


@contextmanager
def throttle_dynamodb(operation: str, times: int) -> Iterator[FaultCount]:
    """moto answers the next ``times`` calls of ``operation`` (e.g. "TransactWriteItems") with
    ProvisionedThroughputExceededException, as DynamoDB does under a hot partition."""
    with throttle_dynamodb_calls(FaultCount(times), operations=(operation,)) as count:
        yield count


@contextmanager
def leave_keys_unprocessed(count: FaultCount) -> Iterator[FaultCount]:
    """DynamoDB answers a BatchGetItem with some of its keys unprocessed, as it may whenever it chooses (the
    request's throughput, or a response past 16 MB): each item DynamoDB would have returned may instead come
    back as its key under ``UnprocessedKeys``; ``count.take("BatchGetItem <table>")`` decides, item by item."""
    from moto.dynamodb.responses import DynamoHandler

    original = DynamoHandler.batch_get_item

    def partly(handler: Any) -> Any:
        result = original(handler)
        answer = cast(dict[str, Any], result.result)
        for table, items in answer["Responses"].items():
            kept = []
            for item in items:
                if count.take(f"BatchGetItem {table}"):
                    unprocessed = answer["UnprocessedKeys"].setdefault(table, {"Keys": []})
                    unprocessed["Keys"].append({name: item[name] for name in ("pk", "sk") if name in item})
                else:
                    kept.append(item)
            answer["Responses"][table] = kept
        return result

    with mock.patch.object(DynamoHandler, "batch_get_item", partly):
        yield count


@contextmanager
def throttle_dynamodb_calls(count: FaultCount, operations: Sequence[str] = DYNAMODB_OPERATIONS) -> Iterator[FaultCount]:
    """Any call of ``operations`` may be throttled: ``count.take(operation)`` decides, call by call."""
    from moto.dynamodb.exceptions import ERROR_TYPE_PREFIX, DynamodbException
    from moto.dynamodb.responses import DynamoHandler

    def throttling(operation: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def throttled(handler: Any, *args: Any, **kwargs: Any) -> Any:
            if count.take(operation):
                raise DynamodbException(
                    ERROR_TYPE_PREFIX + "ProvisionedThroughputExceededException", "injected: rate of requests exceeds"
                )
            return original(handler, *args, **kwargs)

        return throttled

    with ExitStack() as stack:
        for operation in operations:
            method = re.sub(r"(?<!^)(?=[A-Z])", "_", operation).lower()
            replacement = throttling(operation, getattr(DynamoHandler, method))
            stack.enter_context(mock.patch.object(DynamoHandler, method, replacement))
        yield count


@contextmanager
def lose_answers_after_commit(
    count: FaultCount,
    operations: Sequence[str] = ("TransactWriteItems", "UpdateItem", "PutItem", "DeleteItem"),
    after: Callable[[str, dict[str, Any]], None] | None = None,
    resent: Callable[[str], bool] = lambda _subject: False,
) -> Iterator[FaultCount]:
    """A write DynamoDB applied whose answer is lost: the caller sees HTTP 500 (InternalServerError), as
    after a server fault past the commit, and cannot tell whether it was applied (R8.2b).
    ``count.take(subject)`` decides per call; the subject is the operation and the first key it writes
    (e.g. "TransactWriteItems TENANT#t0#HEAD"). ``after(subject, request)`` runs between the commit and the
    error, so another writer can act before the caller retries. When ``resent(subject)``, the caller's SDK
    retries the 500 at once, as botocore does: the same request runs again, and its answer (a failed
    condition, for a write whose first send applied) is what the caller sees."""
    from moto.dynamodb.exceptions import ERROR_TYPE_PREFIX, DynamodbException
    from moto.dynamodb.responses import DynamoHandler

    class InternalServerError(DynamodbException):
        code = 500

    def losing(operation: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def lost(handler: Any, *args: Any, **kwargs: Any) -> Any:
            response = original(handler, *args, **kwargs)
            body = handler.body
            request = body if isinstance(body, dict) else json.loads(body or "{}")
            subject = f"{operation} {_first_key(request)}"
            if count.take(subject):
                if after is not None:
                    after(subject, request)
                if resent(subject):
                    return original(handler, *args, **kwargs)
                raise InternalServerError(ERROR_TYPE_PREFIX + "InternalServerError", "injected: the answer was lost")
            return response

        return lost

    with ExitStack() as stack:
        for operation in operations:
            method = re.sub(r"(?<!^)(?=[A-Z])", "_", operation).lower()
            stack.enter_context(
                mock.patch.object(DynamoHandler, method, losing(operation, getattr(DynamoHandler, method)))
            )
        yield count


def _first_key(request: dict[str, Any]) -> str:
    """The partition key a write request touches first: names the write in a subject."""
    body = request
    if request.get("TransactItems"):
        body = next(iter(request["TransactItems"][0].values()))
    key = body.get("Key") or body.get("Item") or {}
    value = key.get("pk", {})
    return str(value.get("S", "?")) if isinstance(value, dict) else "?"


def redeliver(mapping: SqsEventSourceMapping) -> int:
    """Every in-flight message becomes visible now, as if its visibility timeout had passed early (a
    visibility timeout shorter than the handler): SQS delivers it again while it may still be running.

    SQS's doing, not a function's: the deadline of an invocation under way (this may run inside one, a second
    worker's) stops none of it; a message stops being tracked only once it is visible again."""
    made_visible = 0
    with deadline.outside():
        while mapping.in_flight:
            entry = mapping.in_flight[0]
            made_visible += change_visibility_if_in_flight(mapping.sqs, mapping.queue_url, entry.receipt_handle)
            mapping.in_flight.pop(0)
    return made_visible
