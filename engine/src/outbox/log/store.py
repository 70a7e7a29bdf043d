"""EventStore.emit(): the only writer of event rows."""

from __future__ import annotations

import logging
import random
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from outbox import clock as engine_clock
from outbox import entropy, keys
from outbox.exceptions import (
    ChainHeadContentionError,
    EmitOutcomeUnknownError,
    EventStoreUnavailableError,
    InvalidEventError,
)
from outbox.log.chain import ChainHead, read_events, read_head
from outbox.log.envelope import Envelope
from outbox.log.lanes import run_inline, run_local
from outbox.log.limits import WriteTarget, check_transaction, describe_write
from outbox.log.sealing import checked_events, given_event_id, seal_all, validated_draft
from outbox.log.transaction import TRANSIENT_ERRORS, Outcome, SealWrites, refusal, transaction_items, unknown_outcome
from outbox.observing import AROUND, observed
from outbox.subscriptions import Lane, Subscription
from outbox.tracing import TraceContext, current_trace_context

if TYPE_CHECKING:
    from outbox.catalog import Catalog
    from outbox.log.verification import ChainReport

logger = logging.getLogger(__name__)

# A token is honoured 10 minutes after its first request (a later re-send may apply twice): emit stops at 9.
TOKEN_RESEND_WINDOW = timedelta(minutes=9)
# Own actions: the head, the event row, and on a tenant's first emit its index row, whose place is always reserved.
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
    # None: a new ULID. Given: the caller's own, the same on every run of one effect (``outbox.workflows.emits``).
    event_id: str | None = None


def default_client() -> Any:
    return boto3.client("dynamodb", config=Config(retries={"mode": "standard", "max_attempts": 3}))


class EventStore:
    """Appends events to per-tenant hash chains, atomically with the caller's own writes.

    Parameters
    ----------
    table_name, client:
        The events table, and a boto3 DynamoDB client (injected; one is made if omitted).
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
        The application's catalog: with it, emit() refuses undeclared types ("did you mean") and payloads
        their schema rejects, and dispatches the INLINE and LOCAL lanes. Without it, emit() refuses every type.
    unchecked:
        The opt-out, without a catalog: emit() appends any type unchecked, and runs no lane.
    trace_context:
        Where each emit finds the calling code's trace context, recorded with its events
        (``outbox.tracing.current_trace_context``: OpenTelemetry's current span, else Lambda's X-Ray header).
    sealing:
        How drafts are sealed after the head (``outbox.log.sealing.seal_all``): a test gives another engine version's.

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
        # None: a new ULID from the engine's sources (outbox.entropy), drawn at each emit.
        new_event_id: Callable[[], str] | None = None,
        catalog: Catalog | None = None,
        unchecked: bool = False,
        trace_context: Callable[[], TraceContext | None] = current_trace_context,
        sealing: Callable[[Sequence[dict[str, Any]], ChainHead], list[Envelope]] = seal_all,
    ) -> None:
        if catalog is not None and unchecked:
            raise InvalidEventError("EventStore: pass catalog= (checked) or unchecked=True (no catalog), not both")
        self.unchecked = unchecked
        self.table_name = table_name
        self._trace_context, self._seal_all = trace_context, sealing
        self.catalog = catalog
        self.client = client if client is not None else default_client()
        self.table_keys = dict(table_keys or {})
        self.max_head_retries, self.max_transient_retries = max_head_retries, max_transient_retries
        self._backoff = (backoff_base_seconds, backoff_cap_seconds)
        self._sleep = sleep
        self._rng = rng or entropy.current().backoff_rng()
        self._clock = clock
        self._new_event_id = new_event_id or (lambda: entropy.current().event_id())
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
        event_id: str | None = None,
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
        one emit() accepts (older versions reach handlers through their upcasters, ``outbox.log.schemas``), and
        ``event_id`` may be given, a ULID's text, instead of a new one (``NewEvent.event_id``).
        """
        event = NewEvent(event_type, payload, correlation_id, causation_id, schema_version, event_id)
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
        trace_context = self._trace_context()  # one request: every event of the emit records the same
        for event in events:
            version = 1 if event.schema_version is None else event.schema_version
            if self.catalog is not None:
                version = self.catalog.validate_payload(event.event_type, event.payload, event.schema_version)
            elif not self.unchecked:
                raise InvalidEventError.without_catalog(event.event_type)
            event_id = self._new_event_id() if event.event_id is None else given_event_id(event.event_id)
            drafts.append(
                validated_draft(
                    event_id,
                    event.event_type,
                    event.payload,
                    tenant,
                    actor,
                    event.correlation_id or event_id,
                    event.causation_id,
                    version,
                    self._clock(),
                    trace_context,
                )
            )
        caller_writes = list(extra_writes)
        own = checked_events(drafts, self.table_name)
        check_transaction([*own, *self._describe(caller_writes)], reserved=_RESERVED_ITEMS, own=len(own) + 1)
        inline = [self._subscribers(draft["type"], Lane.INLINE) for draft in drafts]
        given = any(event.event_id is not None for event in events)
        envelopes = self._commit(drafts, own, caller_writes, self._cached_head(tenant), inline, given)
        for envelope in envelopes:
            run_local(envelope, self._subscribers(envelope.type, Lane.LOCAL))
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
    ) -> SealWrites:
        """The caller's writes and the INLINE handlers' writes for exactly this seal, checked against the limits.

        Run again for every new seal: an INLINE write is a function of the event as it commits (its seq and
        hash, and whatever the handler read), so writes computed for a seal that lost the head race are stale.
        """
        writes = SealWrites(list(caller_writes), len(caller_writes))
        if any(inline):
            for envelope, subscriptions in zip(envelopes, inline, strict=True):
                writes.append_inline(run_inline(envelope, subscriptions))
            check_transaction([*own, *self._describe(writes.items)], reserved=_RESERVED_ITEMS, own=len(own) + 1)
        return writes

    def head(self, tenant: str) -> ChainHead:
        """The tenant's chain head, read with a consistent read."""
        return read_head(self.client, self.table_name, tenant)

    def verify_chain(self, tenant: str) -> ChainReport:
        from outbox.log.verification import verify_chain  # the verifier's classes only where something verifies

        return verify_chain(self.client, self.table_name, tenant)

    def events(self, tenant: str, from_seq: int = 1) -> Any:
        """The tenant's envelopes in sequence order (a lazy iterator)."""
        return read_events(self.client, self.table_name, tenant, from_seq)

    # -- the transaction ----------------------------------------------------------------------------

    def _commit(
        self,
        drafts: Sequence[dict[str, Any]],
        own: list[WriteTarget],
        caller_writes: list[Mapping[str, Any]],
        head: ChainHead,
        inline: Sequence[Sequence[Subscription]] = (),
        given_ids: bool = False,
    ) -> list[Envelope]:
        tenant = drafts[0]["tenant"]
        # A caller's own id comes again in another request, refused under its token for 10 minutes: a part drawn.
        base = f"{drafts[-1]['id']}-{entropy.current().repair_token()[:5]}" if given_ids else drafts[-1]["id"]
        envelopes = self._seal_all(drafts, head)
        writes = self._sealed_writes(own, envelopes, caller_writes, inline)
        attempted = {envelopes[-1].seq: envelopes}  # by the seq the head moves to
        head_retries = transient_retries = token_serial = 0
        first_sent = self._clock()  # when the current token was first sent (or a backoff earlier)
        in_doubt = False  # whether a send of the current token may have committed
        while True:
            last = envelopes[-1]
            try:
                outcome = self._transact(envelopes, head, writes, token=f"{base}-{token_serial}")
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

    @observed(AROUND["commit_emit"])
    def _transact(self, envelopes: Sequence[Envelope], head: ChainHead, writes: SealWrites, token: str) -> Outcome:
        """Send one attempt; None on commit, else why to retry (``outbox.log.transaction``). An observed call
        (``outbox.observing``): the local runtime's rival-emit fault commits another writer's event before it."""
        items = transaction_items(self.table_name, envelopes, head, writes)
        try:
            self.client.transact_write_items(TransactItems=items, ClientRequestToken=token)
            return None
        except ClientError as exc:
            return refusal(exc, envelopes, writes, self.table_keys, token)
        except BotoCoreError as exc:
            return unknown_outcome(envelopes[-1], exc)

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
