"""EventStore.emit(): the only writer of event rows."""

from __future__ import annotations

import copy
import logging
import random
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError
from ulid import ULID

from outbox import clock as engine_clock
from outbox import keys
from outbox.canonical import GENESIS_HASH, MAX_SAFE_INTEGER, canonical_json, chain_hash, json_problem
from outbox.chain import ChainHead, ChainReport, read_events, read_head, verify_chain
from outbox.envelope import Envelope, format_timestamp
from outbox.exceptions import (
    CallerWriteConditionFailedError,
    ChainHeadContentionError,
    ChainIntegrityError,
    ContractViolationError,
    EmitOutcomeUnknownError,
    EventStoreUnavailableError,
    InlineWriteConditionFailedError,
    InvalidEventError,
    InvalidWriteError,
)
from outbox.messages import MAX_RELAY_BODY_BYTES, relay_body_size
from outbox.subscriptions import Delivery, HandlerResult, Lane, Subscription
from outbox.transaction import WriteTarget, check_transaction, describe_write, item_size

if TYPE_CHECKING:
    from outbox.catalog import Catalog

logger = logging.getLogger(__name__)

# A transaction's actions: the head, the event rows, then the caller's and the INLINE writes.
HEAD_INDEX, FIRST_EVENT_INDEX = 0, 1
TRANSIENT_REASONS = frozenset({"TransactionConflict", "ThrottlingError", "ProvisionedThroughputExceeded"})
THROTTLING_ERRORS = frozenset({"ThrottlingException", "ProvisionedThroughputExceededException", "RequestLimitExceeded"})
# Answers that do not say whether a transaction applied (as do any 5xx and botocore's own errors, such as a
# timeout): AWS's advice is to re-send it with the same ClientRequestToken until the answer is definite.
UNKNOWN_OUTCOME_ERRORS = frozenset({"InternalServerError", "TransactionInProgressException"})
TRANSIENT_ERRORS = THROTTLING_ERRORS | UNKNOWN_OUTCOME_ERRORS  # for reads, which are safe to repeat
# DynamoDB honours a token for 10 minutes after its first request completes; a re-send after that could
# apply the transaction a second time, so emit stops re-sending a minute earlier.
TOKEN_RESEND_WINDOW = timedelta(minutes=9)
# The largest sequence number the hash can carry (an I-JSON integer), so that checks made before the
# head is read are an upper bound for whatever seq the event finally gets.
_WIDEST_SEQ = MAX_SAFE_INTEGER
# The transaction's own actions are the head and the event row, plus the tenant index row on a tenant's
# first emit: its place is reserved in every limit check.
_RESERVED_ITEMS = keys.OWN_TRANSACTION_ITEMS - 2


@dataclass(frozen=True)
class NewEvent:
    """One event of an ``EventStore.emit_many``: ``emit``'s arguments that differ from event to event."""

    event_type: str
    payload: Mapping[str, Any]
    correlation_id: str | None = None
    causation_id: str | None = None
    # None: the type's current version in the catalog (1 without a catalog); another is refused.
    schema_version: int | None = None


def default_client() -> Any:
    return boto3.client("dynamodb", config=Config(retries={"mode": "standard", "max_attempts": 3}))


class EventStore:
    """Appends events to per-tenant hash chains, atomically with the caller's own writes.

    Parameters
    ----------
    table_name:
        The events table.
    client:
        A boto3 DynamoDB client (injected; one is made if omitted).
    table_keys:
        Key attribute names of the tables that ``extra_writes`` put items into, when they are not the
        project convention ``("pk", "sk")``; used to find two actions on one item before calling AWS.
    cache_heads:
        Remember each tenant's head between emits, saving a read per emit. Worth it when one process is
        a tenant's only writer; with several writers a stale head costs a cancelled transaction (more
        write units than the read it saves), so it is off by default.
    max_head_retries:
        How often a lost race for the tenant's chain head is retried before ``ChainHeadContentionError``.
    catalog:
        The application's catalog: with it, emit() refuses undeclared types and payloads their schema
        rejects, and dispatches the INLINE and LOCAL lanes. Without it, emit() only appends.

    Example
    -------
    >>> store = EventStore("events")                                       # doctest: +SKIP
    >>> store.emit("order.created", {"order_id": "o-1"}, tenant="acme", actor="user:42",
    ...            extra_writes=[writes.put("orders", order, condition="attribute_not_exists(pk)")])
    """

    def __init__(
        self,
        table_name: str,
        *,
        client: Any | None = None,
        table_keys: Mapping[str, Sequence[str]] | None = None,
        max_head_retries: int = 5,
        max_transient_retries: int = 8,
        backoff_base_seconds: float = 0.01,
        backoff_cap_seconds: float = 0.5,
        cache_heads: bool = False,
        head_cache_size: int = 1024,
        sleep: Callable[[float], None] = engine_clock.sleep,
        rng: random.Random | None = None,
        clock: Callable[[], datetime] = engine_clock.now_ms,
        new_event_id: Callable[[], str] = lambda: str(ULID()),
        catalog: Catalog | None = None,
    ) -> None:
        self.table_name = table_name
        self.catalog = catalog
        self.client = client if client is not None else default_client()
        self.table_keys = dict(table_keys or {})
        self.max_head_retries = max_head_retries
        self.max_transient_retries = max_transient_retries
        self._backoff = (backoff_base_seconds, backoff_cap_seconds)
        self._sleep = sleep
        self._rng = rng or random.Random()
        self._clock = clock
        self._new_event_id = new_event_id
        # Heads seen by this process: a stale entry costs one failed condition, which returns the
        # current head (ALL_OLD), so the cache saves a read per emit and can never corrupt the chain.
        self._heads: OrderedDict[str, ChainHead] = OrderedDict()
        self._heads_lock = threading.Lock()
        self._head_cache_size = head_cache_size if cache_heads else 0

    # -- public API ---------------------------------------------------------------------------------

    def emit(
        self,
        event_type: str,
        payload: Mapping[str, Any],
        *,
        tenant: str,
        actor: str,
        extra_writes: Sequence[Mapping[str, Any]] = (),
        correlation_id: str | None = None,
        causation_id: str | None = None,
        schema_version: int | None = None,
    ) -> Envelope:
        """Append one event and commit ``extra_writes`` with it in one TransactWriteItems.

        Returns the committed envelope (with its seq and hash). Raises an ``OutboxValidationError``
        before any AWS call for bad input, ``CallerWriteConditionFailedError`` when a condition on an
        extra write fails, ``ChainHeadContentionError`` when the head retries run out, and
        ``EventStoreUnavailableError`` for everything DynamoDB did wrong. Nothing is committed in any
        of these cases, except when ``EventStoreUnavailableError.committed`` is None.

        The event commits at most once. An answer that leaves the outcome unknown (a 5xx, a transaction
        still in progress, a timeout or dropped connection) is followed by the same request with the same
        ClientRequestToken until DynamoDB answers definitely; only a definite refusal lets emit re-seal the
        event on a newer head. If the answer stays unknown (the retries run out, or the token's 10-minute
        idempotency window nears its end), emit raises ``EmitOutcomeUnknownError``, an
        ``EventStoreUnavailableError`` with ``committed`` None, naming the event id to look for in the
        tenant's log or head.

        ``schema_version`` may be left out: the event is stored with its type's current version, the only
        one emit() accepts (older versions reach handlers through their upcasters, ``outbox.schemas``).
        """
        event = NewEvent(event_type, payload, correlation_id, causation_id, schema_version)
        return self.emit_many([event], tenant=tenant, actor=actor, extra_writes=extra_writes)[0]

    def emit_many(
        self,
        events: Sequence[NewEvent],
        *,
        tenant: str,
        actor: str,
        extra_writes: Sequence[Mapping[str, Any]] = (),
    ) -> list[Envelope]:
        """Append ``events`` to ``tenant``'s chain in order, under one head update, with ``extra_writes``, in
        one TransactWriteItems: all of them or none. Returns the committed envelopes, seq and hash chained.

        For a hot tenant: its head serializes every emit, so k events in one emit take one turn at the head
        instead of k. The transaction's limits bound k: 100 actions (the head, k event rows, the tenant's
        index row on its first emit, and every extra and INLINE write) and 4 MB. Everything else is
        ``emit``'s: the same validation before any AWS call, errors, retries and at-most-once commit; INLINE
        subscribers run for every event of every seal, LOCAL ones after the commit, in order.
        """
        if not events:
            raise InvalidEventError("emit_many needs at least one event")
        drafts = []
        for event in events:
            version = 1 if event.schema_version is None else event.schema_version
            if self.catalog is not None:
                version = self.catalog.validate_payload(event.event_type, event.payload, event.schema_version)
            event_id = self._new_event_id()
            drafts.append(
                self._validated_draft(
                    event_id,
                    event.event_type,
                    event.payload,
                    tenant,
                    actor,
                    event.correlation_id or event_id,
                    event.causation_id,
                    version,
                )
            )
        caller_writes = list(extra_writes)
        own = self._checked_events(drafts)
        check_transaction([*own, *self._describe(caller_writes)], reserved=_RESERVED_ITEMS, own=len(own) + 1)
        inline = [self._subscribers(draft["type"], Lane.INLINE) for draft in drafts]
        envelopes = self._commit(drafts, own, caller_writes, self._cached_head(tenant), inline)
        for envelope in envelopes:
            self._run_local(envelope, self._subscribers(envelope.type, Lane.LOCAL))
        return envelopes

    def _describe(self, writes: Sequence[Mapping[str, Any]]) -> list[WriteTarget]:
        return [describe_write(index, write, self.table_keys, self.table_name) for index, write in enumerate(writes)]

    # -- the lanes emit() dispatches ----------------------------------------------------------------

    def _subscribers(self, event_type: str, lane: Lane) -> tuple[Subscription, ...]:
        return () if self.catalog is None else self.catalog.registry.matching(event_type, lane)

    def _sealed_writes(
        self,
        own: list[WriteTarget],
        envelopes: Sequence[Envelope],
        caller_writes: list[Mapping[str, Any]],
        inline: Sequence[Sequence[Subscription]],
    ) -> _Writes:
        """The caller's writes and the INLINE handlers' writes for exactly this seal, checked against the limits.

        Run again for every new seal: an INLINE write is a function of the event as it commits (its seq and
        hash, and whatever the handler read), so writes computed for a seal that lost the head race are stale.
        """
        writes = _Writes(list(caller_writes), len(caller_writes))
        if any(inline):
            for envelope, subscriptions in zip(envelopes, inline, strict=True):
                writes.append_inline(self._run_inline(envelope, subscriptions))
            check_transaction([*own, *self._describe(writes.items)], reserved=_RESERVED_ITEMS, own=len(own) + 1)
        return writes

    def _run_inline(
        self, envelope: Envelope, subscriptions: Sequence[Subscription]
    ) -> list[tuple[str, Mapping[str, Any]]]:
        """INLINE handlers run before the transaction and their writes join it: if one raises, the
        caller's request fails and nothing is committed (fail-closed, and atomic with the event)."""
        writes: list[tuple[str, Mapping[str, Any]]] = []
        for subscription in subscriptions:
            result = subscription.handler(_delivery(envelope, subscription))
            if result is None:
                continue
            if not isinstance(result, HandlerResult) or result.follow_up is not None:
                raise ContractViolationError(
                    f"INLINE subscription {subscription.name!r} returned "
                    f"{'a follow-up event' if isinstance(result, HandlerResult) else f'a {type(result).__name__}'}; "
                    "an INLINE handler returns None or HandlerResult(writes=...). Only DURABLE handlers can "
                    "emit follow-ups (they commit with the completion); nothing was committed"
                )
            writes.extend((subscription.name, write) for write in result.writes)
        return writes

    def _run_local(self, envelope: Envelope, subscriptions: Sequence[Subscription]) -> None:
        """LOCAL handlers run after the commit, in this process; an error is logged, never raised: the event
        is committed, and the caller must learn that, whatever a handler did."""
        for subscription in subscriptions:
            log = {"event_id": envelope.id, "subscription": subscription.name}
            try:
                result = subscription.handler(_delivery(envelope, subscription))
            except (KeyboardInterrupt, SystemExit):
                raise  # the process is going away: the event committed, the rest of LOCAL is best effort
            except BaseException:  # best effort by contract: the caller must learn that its event committed
                logger.exception("LOCAL subscription %s failed for event %s", subscription.name, envelope.id, extra=log)
                continue
            if result is not None:
                logger.error(
                    "LOCAL subscription %s returned a %s for event %s, which is dropped: LOCAL handlers return "
                    "None (they run after the commit). Return writes from an INLINE handler to commit them with "
                    "the event, or a follow-up from a DURABLE one",
                    subscription.name,
                    type(result).__name__,
                    envelope.id,
                    extra=log,
                )

    def head(self, tenant: str) -> ChainHead:
        """The tenant's chain head, read with a consistent read."""
        return read_head(self.client, self.table_name, tenant)

    def verify_chain(self, tenant: str) -> ChainReport:
        return verify_chain(self.client, self.table_name, tenant)

    def events(self, tenant: str, from_seq: int = 1) -> Any:
        """The tenant's envelopes in sequence order (a lazy iterator)."""
        return read_events(self.client, self.table_name, tenant, from_seq)

    # -- validation ---------------------------------------------------------------------------------

    def _validated_draft(
        self,
        event_id: str,
        event_type: str,
        payload: Mapping[str, Any],
        tenant: str,
        actor: str,
        correlation_id: str,
        causation_id: str | None,
        schema_version: int,
    ) -> dict[str, Any]:
        if not isinstance(payload, Mapping):
            raise InvalidEventError(f"payload must be a JSON object (a mapping), not {type(payload).__name__}")
        payload = copy.deepcopy(dict(payload))  # the event's own: the caller may change its dict afterwards
        problem = json_problem(payload)
        if problem is None:
            try:
                canonical_json(payload)
            except ValueError as exc:
                problem = f"payload is not canonical JSON: {exc}"
        if problem:
            raise InvalidEventError(problem)
        draft = {
            "id": event_id,
            "type": event_type,
            "tenant": tenant,
            "correlation_id": correlation_id,
            "causation_id": causation_id,
            "actor": actor,
            "occurred_at": self._clock(),
            "schema_version": schema_version,
            "payload": payload,
        }
        # Validate every field now, with the widest seq, so that bad input never reaches AWS.
        self._seal(draft, ChainHead(tenant=tenant, last_seq=_WIDEST_SEQ - 1), validate=True)
        return draft

    def _checked_events(self, drafts: Sequence[dict[str, Any]]) -> list[WriteTarget]:
        """The head and event-row actions of the transaction, after checking each event against the item
        limit and the relay's; measured once per emit, at the widest seq (an upper bound for any seal)."""
        rows: list[WriteTarget] = []
        for draft in drafts:
            widest = self._seal(draft, ChainHead(tenant=draft["tenant"], last_seq=_WIDEST_SEQ - 1))
            event_item = widest.to_item()
            size = item_size(event_item)
            if size > 400 * 1024:
                raise InvalidEventError(f"the event row would be {size} bytes; DynamoDB items are at most 409600")
            body = relay_body_size(event_item)
            if body > MAX_RELAY_BODY_BYTES:
                raise InvalidEventError(
                    f"the relay would carry this event as a {body}-byte message (its row in DynamoDB JSON, with a "
                    f"type tag on every value), and the durable queue takes at most {MAX_RELAY_BODY_BYTES} "
                    "(MaximumMessageSize, less what a repair's attributes need): such an event could never reach "
                    "a DURABLE subscriber. Keep large content elsewhere (S3, the data table) and put its key in "
                    "the payload"
                )
            # Each event of a batch gets its own seq, so its key is its own too: draft order stands in for it.
            key = {"pk": event_item["pk"], "sk": {"S": f"{event_item['sk']['S']}#{len(rows)}"}}
            rows.append(WriteTarget(f"event row {len(rows) + 1}", "Put", self.table_name, key, size))
        head_key = keys.head_key(drafts[0]["tenant"])
        return [WriteTarget("the chain head", "Update", self.table_name, head_key, 300), *rows]

    def _seal_all(self, drafts: Sequence[dict[str, Any]], head: ChainHead) -> list[Envelope]:
        """The drafts sealed in order after ``head``: consecutive seqs, each linked to the one before."""
        envelopes = []
        for draft in drafts:
            envelope = self._seal(draft, head)
            envelopes.append(envelope)
            head = ChainHead(head.tenant, envelope.seq, envelope.hash, envelope.id)
        return envelopes

    @staticmethod
    def _seal(draft: dict[str, Any], head: ChainHead, validate: bool = False) -> Envelope:
        """The envelope that would follow ``head``: next seq, linked and hashed."""
        fields = {**draft, "seq": head.last_seq + 1, "prev_hash": head.last_hash, "hash": GENESIS_HASH}
        try:
            unsealed = Envelope.model_validate(fields)
        except ValueError as exc:
            if validate:
                raise InvalidEventError(f"invalid event: {exc}") from exc
            raise
        return unsealed.model_copy(update={"hash": chain_hash(head.last_hash, unsealed.hashed_body())})

    # -- the transaction ----------------------------------------------------------------------------

    def _commit(
        self,
        drafts: Sequence[dict[str, Any]],
        own: list[WriteTarget],
        caller_writes: list[Mapping[str, Any]],
        head: ChainHead,
        inline: Sequence[Sequence[Subscription]] = (),
    ) -> list[Envelope]:
        tenant = drafts[0]["tenant"]
        envelopes = self._seal_all(drafts, head)
        writes = self._sealed_writes(own, envelopes, caller_writes, inline)
        attempted = {envelopes[-1].seq: envelopes}  # by the seq the head moves to
        head_retries = transient_retries = token_serial = 0
        first_sent = self._clock()  # when the current token was first sent (or a backoff earlier)
        in_doubt = False  # whether a send of the current token may have committed
        while True:
            last = envelopes[-1]
            try:
                outcome = self._transact(envelopes, head, writes, token=f"{last.id}-{token_serial}")
            except EventStoreUnavailableError as exc:
                # An error answer to a re-send does not say what an earlier send did.
                if in_doubt and exc.committed is False:
                    raise EmitOutcomeUnknownError(last.id, tenant, f"the last retry failed with {exc}") from exc
                raise
            if outcome is None:
                self._remember(tenant, ChainHead(tenant, last.seq, last.hash, last.id))
                logger.debug("emitted %d event(s) up to seq %s for tenant %s", len(envelopes), last.seq, tenant)
                return envelopes
            kind, current = outcome
            if kind == "head" and current is not None and current.last_event_id == last.id:
                # An earlier attempt of this emit committed although its response was lost.
                self._remember(tenant, current)
                return attempted[current.last_seq]
            if kind == "head":
                # Definite even for a re-sent token: had an earlier send committed, DynamoDB would have
                # answered this one with success. So the events are re-sealed, with a new token.
                head_retries += 1
                if head_retries > self.max_head_retries:
                    self._forget(tenant)
                    raise ChainHeadContentionError(tenant, head_retries)
                head = current if current is not None else self._read_head(tenant)
                envelopes = attempted[head.last_seq + len(drafts)] = self._seal_all(drafts, head)
                writes = self._sealed_writes(own, envelopes, caller_writes, inline)
                token_serial, first_sent, in_doubt = token_serial + 1, self._clock(), False
            else:
                # Every retry repeats the send exactly, with its token: an answer that says this send did not run
                # (a throttle, a conflict) may come from the SDK's own re-send of an earlier send that did run
                # and whose answer was lost on the way; DynamoDB answers the token's re-send with success then.
                in_doubt = in_doubt or kind == "unknown"
                transient_retries += 1
                if transient_retries > self.max_transient_retries:
                    if in_doubt:
                        raise EmitOutcomeUnknownError(
                            last.id, tenant, f"DynamoDB's answer stayed ambiguous for {transient_retries} tries"
                        )
                    raise EventStoreUnavailableError(
                        f"DynamoDB kept throttling or conflicting emit for tenant {tenant!r}; nothing was committed"
                    )
            self._pause(head_retries + transient_retries)
            if self._clock() - first_sent >= TOKEN_RESEND_WINDOW:
                if in_doubt:
                    raise EmitOutcomeUnknownError(
                        last.id,
                        tenant,
                        f"DynamoDB's answer stayed ambiguous for {TOKEN_RESEND_WINDOW.total_seconds() / 60:.0f} "
                        "minutes, and a re-send after its token's 10-minute idempotency window could commit it twice",
                    )
                token_serial, first_sent = token_serial + 1, self._clock()  # throttled for as long: a fresh token

    def _transact(
        self, envelopes: Sequence[Envelope], head: ChainHead, writes: _Writes, token: str
    ) -> tuple[str, ChainHead | None] | None:
        """Run one attempt: None on commit, else why to retry.

        ``("head", current_head)`` lost the race for the head; ``("transient", None)`` was refused
        without effect (throttling, conflicts); ``("unknown", None)`` may or may not have committed.
        The head (index 0) moves to the last event; the event rows follow it, then the writes.
        """
        envelope = envelopes[-1]
        items = [self._head_write(envelope, head), *map(self._event_write, envelopes), *writes.items]
        if head.last_seq == 0:
            items.append(self._tenant_index_write(envelopes[0]))
        try:
            self.client.transact_write_items(TransactItems=items, ClientRequestToken=token)
            return None
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
            if code == "TransactionCanceledException":
                return self._cancelled(exc, envelopes, writes)
            if code in UNKNOWN_OUTCOME_ERRORS or status >= 500:
                return _unknown_outcome(envelope, exc)
            if code in THROTTLING_ERRORS:
                return "transient", None
            if code == "ValidationException":
                raise InvalidWriteError(f"DynamoDB rejected the transaction: {exc}") from exc
            if code == "IdempotentParameterMismatchException":
                raise EmitOutcomeUnknownError(
                    envelope.id,
                    envelope.tenant,
                    f"DynamoDB says token {token} was used with other parameters; that is a bug in emit(), "
                    "which must re-send a token's request unchanged",
                ) from exc
            raise EventStoreUnavailableError(f"emit failed: {exc}", committed=False) from exc
        except BotoCoreError as exc:
            return _unknown_outcome(envelope, exc)

    def _cancelled(
        self, exc: ClientError, envelopes: Sequence[Envelope], writes: _Writes
    ) -> tuple[str, ChainHead | None]:
        reasons = exc.response.get("CancellationReasons") or []
        codes = [reason.get("Code", "None") for reason in reasons]
        first_write = FIRST_EVENT_INDEX + len(envelopes)
        for index, code in enumerate(codes[first_write : first_write + len(writes.items)]):
            if code == "ConditionalCheckFailed":
                action, body = next(iter(writes.items[index].items()))
                key = body.get("Key") or {
                    name: body["Item"][name]
                    for name in self.table_keys.get(body["TableName"], ("pk", "sk"))
                    if name in body["Item"]
                }
                owner = writes.owner(index)
                if owner is not None:
                    raise InlineWriteConditionFailedError(owner, body["TableName"], key, f"{action} condition") from exc
                raise CallerWriteConditionFailedError(index, body["TableName"], key, f"{action} condition") from exc
        tenant = envelopes[0].tenant
        if codes and codes[HEAD_INDEX] == "ConditionalCheckFailed":
            current = reasons[HEAD_INDEX].get("Item")
            return "head", ChainHead.from_item(tenant, current) if current else None
        for envelope, code in zip(envelopes, codes[FIRST_EVENT_INDEX:first_write], strict=False):
            if code == "ConditionalCheckFailed":
                raise ChainIntegrityError(
                    f"tenant {tenant!r}: the head is at seq {envelopes[0].seq - 1} but an event row already "
                    f"exists at seq {envelope.seq}; run verify_chain"
                ) from exc
        if set(codes) - {"None"} <= TRANSIENT_REASONS:
            return "transient", None
        raise EventStoreUnavailableError(f"emit cancelled for reasons {codes}: {exc}", committed=False) from exc

    def _head_write(self, envelope: Envelope, head: ChainHead) -> dict[str, Any]:
        values = {
            ":seq": {"N": str(envelope.seq)},
            ":hash": {"S": envelope.hash},
            ":id": {"S": envelope.id},
            ":now": {"S": format_timestamp(envelope.occurred_at)},
        }
        key = keys.head_key(envelope.tenant)
        if head.last_seq == 0:
            item = {
                **key,
                "kind": {"S": keys.KIND_HEAD},
                "tenant": {"S": envelope.tenant},
                "last_seq": values[":seq"],
                "last_hash": values[":hash"],
                "last_event_id": values[":id"],
                "updated_at": values[":now"],
            }
            return {
                "Put": {
                    "TableName": self.table_name,
                    "Item": item,
                    "ConditionExpression": "attribute_not_exists(pk)",
                    "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                }
            }
        return {
            "Update": {
                "TableName": self.table_name,
                "Key": key,
                "UpdateExpression": ("SET last_seq = :seq, last_hash = :hash, last_event_id = :id, updated_at = :now"),
                "ConditionExpression": "last_seq = :prev AND last_hash = :prev_hash",
                "ExpressionAttributeValues": {
                    **values,
                    ":prev": {"N": str(head.last_seq)},
                    ":prev_hash": {"S": head.last_hash},
                },
                "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
            }
        }

    def _tenant_index_write(self, envelope: Envelope) -> dict[str, Any]:
        """Lists the tenant for the operator tools; written with the tenant's first event (unconditionally:
        the head's condition already makes it once). Last in the transaction, so that cancellation
        reasons keep the caller's writes at index 2+."""
        return {
            "Put": {
                "TableName": self.table_name,
                "Item": {
                    "pk": {"S": keys.tenant_index_partition(envelope.tenant)},
                    "sk": {"S": envelope.tenant},
                    "kind": {"S": keys.KIND_TENANT},
                    "tenant": {"S": envelope.tenant},
                    "first_event_at": {"S": format_timestamp(envelope.occurred_at)},
                },
            }
        }

    def _event_write(self, envelope: Envelope) -> dict[str, Any]:
        return {
            "Put": {
                "TableName": self.table_name,
                "Item": envelope.to_item(),
                "ConditionExpression": "attribute_not_exists(pk)",
            }
        }

    # -- head cache and backoff ---------------------------------------------------------------------

    def _cached_head(self, tenant: str) -> ChainHead:
        with self._heads_lock:
            cached = self._heads.get(tenant)
        return cached if cached is not None else self._read_head(tenant)

    def _read_head(self, tenant: str) -> ChainHead:
        """The head read of an emit, retried like the transaction; callers only ever see OutboxErrors."""
        for attempt in range(self.max_transient_retries + 1):
            try:
                return self.head(tenant)
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") not in TRANSIENT_ERRORS:
                    raise EventStoreUnavailableError(f"reading the chain head failed: {exc}") from exc
            except BotoCoreError as exc:
                logger.warning("reading the chain head of %s failed, retrying: %s", tenant, exc)
            self._pause(attempt + 1)
        raise EventStoreUnavailableError(
            f"DynamoDB kept throttling the chain-head read for tenant {tenant!r}; nothing was committed"
        )

    def _remember(self, tenant: str, head: ChainHead) -> None:
        if self._head_cache_size == 0:
            return
        with self._heads_lock:
            current = self._heads.get(tenant)
            if current is None or current.last_seq < head.last_seq:
                self._heads[tenant] = head
            self._heads.move_to_end(tenant)
            while len(self._heads) > self._head_cache_size:
                self._heads.popitem(last=False)

    def _forget(self, tenant: str) -> None:
        with self._heads_lock:
            self._heads.pop(tenant, None)

    def _pause(self, attempt: int) -> None:
        base, cap = self._backoff
        self._sleep(self._rng.uniform(0, min(cap, base * 2**attempt)))


@dataclass
class _Writes:
    """The writes of one seal after the head and the event row: the caller's first, then the INLINE ones."""

    items: list[Mapping[str, Any]]
    caller_count: int
    inline_owners: list[str] = field(default_factory=list)

    def append_inline(self, writes: list[tuple[str, Mapping[str, Any]]]) -> None:
        for owner, write in writes:
            self.inline_owners.append(owner)
            self.items.append(write)

    def owner(self, index: int) -> str | None:
        """The INLINE subscription that returned write ``index``, or None for one of the caller's."""
        return None if index < self.caller_count else self.inline_owners[index - self.caller_count]


def _unknown_outcome(envelope: Envelope, exc: Exception) -> tuple[str, None]:
    logger.warning("emit outcome unknown for event %s, re-sending with the same token: %s", envelope.id, exc)
    return "unknown", None


def _delivery(envelope: Envelope, subscription: Subscription) -> Delivery:
    # In-process lanes have no invocation deadline of their own. Each handler gets a payload of its own.
    return Delivery(
        envelope.handler_copy(), subscription.name, keys.idempotency_key(envelope.id, subscription.name), 1, lambda: 0
    )
