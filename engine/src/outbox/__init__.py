"""The outbox engine: emit() into per-tenant hash chains on DynamoDB, verify them, and deliver each
(event, subscription) effect once through the lease-claim inbox.

The durable consumer lives in ``outbox.consumer`` (it imports Powertools' batch utility, which code that
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
    from outbox import writes
    from outbox.canonical import GENESIS_HASH, canonical_json, chain_hash
    from outbox.chain import ChainHead
    from outbox.envelope import Envelope
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
    from outbox.schemas import SchemaVersionUnknownError, Upcaster
    from outbox.store import EventStore, NewEvent
    from outbox.subscriptions import (
        Delivery,
        Effects,
        FollowUp,
        HandlerResult,
        Lane,
        Subscription,
        SubscriptionRegistry,
    )
    from outbox.verification import ChainBreak, ChainReport, verify_chain

# Each public name and the module that defines it.
_LAZY: dict[str, str] = {
    "writes": "outbox.writes",
    "GENESIS_HASH": "outbox.canonical",
    "canonical_json": "outbox.canonical",
    "chain_hash": "outbox.canonical",
    "ChainBreak": "outbox.verification",
    "ChainHead": "outbox.chain",
    "ChainReport": "outbox.verification",
    "verify_chain": "outbox.verification",
    "Envelope": "outbox.envelope",
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
    "SchemaVersionUnknownError": "outbox.schemas",
    "Upcaster": "outbox.schemas",
    "EventStore": "outbox.store",
    "NewEvent": "outbox.store",
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
    part is the module itself (``outbox.writes``)."""

    def attribute(name: str) -> Any:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        loaded = importlib.import_module(module)
        value = loaded if module == f"{package}.{name}" else getattr(loaded, name)
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
}


class _MovedModules:
    """The import system's finder and loader of a moved module's old name (here, not in a module of its own:
    importing the package loads no engine module)."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname not in _MOVED:
            return None
        from importlib.machinery import ModuleSpec

        return ModuleSpec(fullname, self)  # type: ignore[arg-type]  # a Loader by its methods: no importlib.abc

    def create_module(self, spec: Any) -> Any:
        import warnings

        moved = _MOVED[spec.name]
        warnings.warn(f"{spec.name} is {moved} now (the old name goes in 0.9.0)", DeprecationWarning, stacklevel=2)
        return importlib.import_module(moved)

    def exec_module(self, module: Any) -> None:
        """The module ran when it was imported by its new name."""


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
