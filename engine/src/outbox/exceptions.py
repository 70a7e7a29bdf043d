"""Every error the engine raises. Callers catch these, never botocore's."""

from __future__ import annotations

from typing import Any


class OutboxError(Exception):
    """Base class of every error raised by the engine."""


class OutboxValidationError(OutboxError, ValueError):
    """Bad input, caught before any call to AWS; nothing was written."""


class OperationRefusedError(OutboxValidationError):
    """An operation refused before changing anything: unknown tenant, malformed id, empty selection."""


class NothingToDoError(OperationRefusedError):
    """The selection is well formed and names nothing that needs the operation (a replay of a tenant with no
    open dead work): nothing was changed, and nothing had to be. The command line exits 0."""


class InvalidEventError(OutboxValidationError):
    """The envelope would be invalid: tenant, type, ids, or a payload that is not canonical JSON."""

    @classmethod
    def without_catalog(cls, event_type: str) -> InvalidEventError:
        """An emit of an ``EventStore`` that has no catalog and was not made ``unchecked``."""
        return cls(
            f"this EventStore has no catalog, so emit() cannot tell whether {event_type!r} is declared (a type no "
            "module declares commits, and nothing ever runs it): pass "
            "catalog=outbox.settings.load_catalog('package.module:function'), or unchecked=True to append types "
            "unchecked"
        )


class InvalidWriteError(OutboxValidationError):
    """The caller's ``extra_writes`` cannot go into the transaction (shape, count, duplicates, size)."""


class CallerWriteConditionFailedError(OutboxError):
    """A condition on one of the caller's own writes failed; the transaction committed nothing.

    ``index`` is the position of that write in ``extra_writes``.
    """

    def __init__(self, index: int, table_name: str, key: dict[str, Any], message: str) -> None:
        self.index = index
        self.table_name = table_name
        self.key = key
        super().__init__(
            f"extra_writes[{index}] on table {table_name!r} key {key!r} failed its condition: {message}. "
            "Nothing was committed: no entity change, no event, no chain head change."
        )


class InlineWriteConditionFailedError(OutboxError):
    """A condition on a write that an INLINE subscription returned failed; the transaction committed nothing.

    Not a ``CallerWriteConditionFailedError``: none of the caller's ``extra_writes`` failed. Whether a retry
    can succeed is the subscription's business (a uniqueness check fails again; an optimistic lock may not).
    """

    def __init__(self, subscription: str, table_name: str, key: dict[str, Any], message: str) -> None:
        self.subscription = subscription
        self.table_name = table_name
        self.key = key
        super().__init__(
            f"a write of INLINE subscription {subscription!r} on table {table_name!r} key {key!r} failed its "
            f"{message}. Nothing was committed: no entity change, no event, no chain head change."
        )


class ContractViolationError(OutboxError):
    """A handler broke its lane's contract: it returned something its lane cannot carry out (anything but a
    ``HandlerResult`` or ``None`` on DURABLE; a follow-up, or anything but writes or ``None``, on INLINE).
    On DURABLE it is terminal, with a dead letter that says what the handler did wrong; on INLINE it fails
    the emit, and nothing commits."""


class ChainHeadContentionError(OutboxError):
    """The tenant's chain head kept moving under us; the retries ran out and nothing was committed."""

    def __init__(self, tenant: str, attempts: int) -> None:
        self.tenant = tenant
        self.attempts = attempts
        super().__init__(
            f"emit for tenant {tenant!r} lost the race for the chain head {attempts} times; nothing was "
            "committed. Retry the request, or spread the tenant's writes (docs/concepts.md, Using emit())."
        )


class ChainIntegrityError(OutboxError):
    """The chain head and the log disagree (an event row exists at the head's next sequence number)."""


class EventStoreUnavailableError(OutboxError):
    """DynamoDB kept throttling or conflicting, or failed in a way that is not the caller's fault.

    ``committed`` is ``None`` when the outcome is unknown (the request may have reached DynamoDB).
    """

    def __init__(self, message: str, committed: bool | None = False) -> None:
        self.committed = committed
        super().__init__(message)


class EmitOutcomeUnknownError(EventStoreUnavailableError):
    """emit() could not learn whether its transaction committed (``committed`` is None): check by event id."""

    def __init__(self, event_id: str, tenant: str, reason: str) -> None:
        self.event_id = event_id
        self.tenant = tenant
        super().__init__(
            f"event {event_id} for tenant {tenant!r} may have committed: {reason}. Check before emitting it "
            f"again: it committed if it is in the tenant's log (EventStore.events({tenant!r})) or is the "
            "head's last_event_id (EventStore.head); if it did, its extra_writes committed with it.",
            committed=None,
        )


class EnvelopeParseError(OutboxError):
    """A stored or delivered item could not be turned back into an envelope."""


class TerminalError(OutboxError):
    """Raised by a handler for a failure that no retry can fix: the claim goes DEAD at once."""


class LeaseLostError(OutboxError):
    """This worker's claim was taken over (its lease expired); the new owner's row was left untouched."""

    def __init__(self, event_id: str, subscription: str, action: str) -> None:
        self.event_id = event_id
        self.subscription = subscription
        super().__init__(
            f"cannot {action} {event_id}:{subscription}: the claim is no longer ours (lease taken over or "
            "already finished); nothing was written"
        )


class CompletionTooLargeError(OutboxValidationError):
    """A handler returned more writes than fit in one transaction with its completion mark."""


class WatermarkMovedError(OutboxError):
    """An ordered subscription's watermark changed between a worker's read and its write (another event was
    applied, deferred or skipped meanwhile): read it again (``outbox.pairs.order``)."""
