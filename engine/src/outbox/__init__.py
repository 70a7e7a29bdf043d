"""The outbox engine: emit() into per-tenant hash chains on DynamoDB, verify them, and deliver each
(event, subscription) effect once through the lease-claim inbox.

The durable consumer lives in ``outbox.delivery.consumer`` (it imports Powertools' batch utility, which code that
only emits does not need to pay for at cold start).

The names below are imported on first use (PEP 562): ``from outbox import EventStore`` loads the store and
what it needs, not the whole engine, and importing ``outbox.handlers.<name>`` runs the handler's own imports
in its own order (its batch utility before pydantic, say) instead of this package's.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from outbox.exceptions import (
        CallerWriteConditionFailedError,
        ChainHeadContentionError,
        ChainIntegrityError,
        CompletionTooLargeError,
        EmitOutcomeUnknownError,
        EnvelopeParseError,
        EventStoreUnavailableError,
        InvalidEventError,
        InvalidWriteError,
        LeaseLostError,
        OutboxError,
        OutboxValidationError,
        TerminalError,
    )
    from outbox.inbox import Claim, ClaimOutcome, DeadReason, Inbox
    from outbox.log import writes
    from outbox.log.canonical import GENESIS_HASH, canonical_json, chain_hash
    from outbox.log.chain import ChainHead
    from outbox.log.envelope import Envelope
    from outbox.log.schemas import SchemaVersionUnknownError, Upcaster
    from outbox.log.store import EventStore, NewEvent
    from outbox.log.verification import ChainBreak, ChainReport, verify_chain
    from outbox.subscriptions import (
        Delivery,
        Effects,
        FollowUp,
        HandlerResult,
        Lane,
        Subscription,
        SubscriptionRegistry,
    )

# Each public name and the module that defines it.
_LAZY: dict[str, str] = {
    "writes": "outbox.log.writes",
    "GENESIS_HASH": "outbox.log.canonical",
    "canonical_json": "outbox.log.canonical",
    "chain_hash": "outbox.log.canonical",
    "ChainBreak": "outbox.log.verification",
    "ChainHead": "outbox.log.chain",
    "ChainReport": "outbox.log.verification",
    "verify_chain": "outbox.log.verification",
    "Envelope": "outbox.log.envelope",
    "CallerWriteConditionFailedError": "outbox.exceptions",
    "ChainHeadContentionError": "outbox.exceptions",
    "ChainIntegrityError": "outbox.exceptions",
    "CompletionTooLargeError": "outbox.exceptions",
    "EmitOutcomeUnknownError": "outbox.exceptions",
    "EnvelopeParseError": "outbox.exceptions",
    "EventStoreUnavailableError": "outbox.exceptions",
    "InvalidEventError": "outbox.exceptions",
    "InvalidWriteError": "outbox.exceptions",
    "LeaseLostError": "outbox.exceptions",
    "OutboxError": "outbox.exceptions",
    "OutboxValidationError": "outbox.exceptions",
    "TerminalError": "outbox.exceptions",
    "Claim": "outbox.inbox",
    "ClaimOutcome": "outbox.inbox",
    "DeadReason": "outbox.inbox",
    "Inbox": "outbox.inbox",
    "SchemaVersionUnknownError": "outbox.log.schemas",
    "Upcaster": "outbox.log.schemas",
    "EventStore": "outbox.log.store",
    "NewEvent": "outbox.log.store",
    "Delivery": "outbox.subscriptions",
    "Effects": "outbox.subscriptions",
    "FollowUp": "outbox.subscriptions",
    "HandlerResult": "outbox.subscriptions",
    "Lane": "outbox.subscriptions",
    "Subscription": "outbox.subscriptions",
    "SubscriptionRegistry": "outbox.subscriptions",
}


def lazy_attributes(package: str, names: Mapping[str, str], namespace: dict[str, Any]) -> Callable[[str], Any]:
    """A package's ``__getattr__`` (PEP 562): each of ``names`` imported from its module on first use, then kept
    in the package's ``namespace`` (the next access is a plain attribute). A name that is its module's own last
    part is the module itself (``outbox.log.writes``, which is ``outbox.log.writes``)."""

    def attribute(name: str) -> Any:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        loaded = importlib.import_module(module)
        value = loaded if module.rpartition(".")[2] == name else getattr(loaded, name)
        namespace[name] = value
        return value

    return attribute


__getattr__ = lazy_attributes("outbox", _LAZY, globals())


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


# Modules that moved, by the names they had: each still imports, as the module it is now, with a warning.
_MOVED: dict[str, str] = {
    "outbox.auditor": "outbox.audit.auditor",
    "outbox.findings": "outbox.audit.findings",
    "outbox.liveness": "outbox.audit.liveness",
    # 0.7.0: the log (what emit() writes, and its proof), a pair's order, the durable consumer, the best-effort lane
    "outbox.canonical": "outbox.log.canonical",
    "outbox.chain": "outbox.log.chain",
    "outbox.emit_transaction": "outbox.log.transaction",
    "outbox.envelope": "outbox.log.envelope",
    "outbox.lanes": "outbox.log.lanes",
    "outbox.schemas": "outbox.log.schemas",
    "outbox.sealing": "outbox.log.sealing",
    "outbox.store": "outbox.log.store",
    "outbox.transaction": "outbox.log.limits",
    "outbox.verification": "outbox.log.verification",
    "outbox.writes": "outbox.log.writes",
    "outbox.ordering": "outbox.pairs.order",
    "outbox.wake_ups": "outbox.pairs.wake_ups",
    "outbox.consumer": "outbox.delivery.consumer",
    "outbox.record_changes": "outbox.best_effort.changes",
    "outbox.record_consumer": "outbox.best_effort.consumer",
}


class _MovedModules:
    """The import system's finder and loader of a moved module's old name (here, not in a module of its own:
    importing the package loads no engine module). The old name is bound to the module itself, whose own spec
    is left alone (so ``importlib.reload`` and ``__spec__`` still name where it lives)."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname not in _MOVED:
            return None
        from importlib.machinery import ModuleSpec

        return ModuleSpec(fullname, self)  # type: ignore[arg-type]  # a Loader by its methods: no importlib.abc

    def create_module(self, spec: Any) -> None:
        """A blank module the import system fills with the old name's attributes; ``exec_module`` replaces it."""

    def exec_module(self, module: Any) -> None:
        """Binds the old name to the module it is now: the import system hands out what ``sys.modules`` holds
        under the old name once this returns, so the blank module never escapes."""
        import warnings

        moved = _MOVED[module.__name__]
        message = f"{module.__name__} is {moved} now (the old name goes in 0.9.0)"
        warnings.warn(message, DeprecationWarning, stacklevel=2)
        sys.modules[module.__name__] = importlib.import_module(moved)


sys.meta_path.append(_MovedModules())


__all__ = [
    "GENESIS_HASH",
    "CallerWriteConditionFailedError",
    "ChainBreak",
    "ChainHead",
    "ChainHeadContentionError",
    "ChainIntegrityError",
    "ChainReport",
    "Claim",
    "ClaimOutcome",
    "CompletionTooLargeError",
    "DeadReason",
    "Delivery",
    "Effects",
    "EmitOutcomeUnknownError",
    "Envelope",
    "EnvelopeParseError",
    "EventStore",
    "EventStoreUnavailableError",
    "FollowUp",
    "HandlerResult",
    "Inbox",
    "InvalidEventError",
    "InvalidWriteError",
    "Lane",
    "LeaseLostError",
    "NewEvent",
    "OutboxError",
    "OutboxValidationError",
    "SchemaVersionUnknownError",
    "Subscription",
    "SubscriptionRegistry",
    "TerminalError",
    "Upcaster",
    "canonical_json",
    "chain_hash",
    "verify_chain",
    "writes",
]
