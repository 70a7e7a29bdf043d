"""The catalog: every event type the code can emit, every row entity, every subscription and its lane.

It is built from the application's modules and checked both ways by the contract (``Catalog.problems``):
a subscription on the wrong lane, or with a glob that matches nothing, binds without error and never
runs; the contract makes that impossible to ship.
"""

from __future__ import annotations

import ast
import importlib
import inspect
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from pydantic import BaseModel, ValidationError

from outbox.exceptions import InvalidEventError
from outbox.log.schemas import Upcaster, check_versions, upcast_payload
from outbox.redaction import validation_summary
from outbox.subscriptions import Lane, Subscription, SubscriptionRegistry, handler_place

DISPATCHERS = {
    Lane.INLINE: "emit() (before the transaction, fail-closed)",
    Lane.LOCAL: "emit() (after the commit, best effort)",
    Lane.DURABLE: "durable consumer (SQS FIFO + inbox)",
    Lane.BEST_EFFORT: "record-change consumer (row changes only)",
    Lane.WORKFLOW: "a Lambda durable execution per pair, started by the durable consumer",
}


# The template's Metadata key under which OutboxPipeline records the catalog problems an app accepted (a list of
# {"problem": <part of its text>, "reason": ...}); the testing fixture lets the same ones through.
ACCEPTED_PROBLEMS_METADATA = "outbox:acceptedCatalogProblems"


@dataclass(frozen=True)
class EventTypeSpec:
    """A domain event type: its name, the module that owns it and the schema of its payload.

    ``payload`` is the model of the current ``version``; each older version still in the log has an
    ``Upcaster`` (its model as it was, and a pure function to the next version). emit() stores current
    payloads only; the durable consumer brings an older one up to date before a handler sees it.

    ``emitted_by`` names a producer outside the catalog's modules (another function, another service's code):
    the contract then does not ask for an ``emit()`` of the type in the modules' own source.
    """

    name: str
    payload: type[BaseModel]
    description: str = ""
    version: int = 1
    upcasters: tuple[Upcaster, ...] = ()
    emitted_by: str | None = None

    def __post_init__(self) -> None:
        try:
            ordered = check_versions(self.name, self.version, self.upcasters)
        except ValueError as exc:
            raise InvalidEventError(str(exc)) from None
        object.__setattr__(self, "upcasters", ordered)

    def models(self) -> dict[int, type[BaseModel]]:
        """Each version's payload model, oldest first."""
        return {**{u.from_version: u.model for u in self.upcasters}, self.version: self.payload}

    def current_payload(self, stored_version: int, payload: Any) -> Any:
        """A stored payload as the current version: itself when it is current, else upcast and checked
        against the current model (a handler never sees a payload its model would refuse)."""
        if stored_version == self.version:
            return payload
        upcast = upcast_payload(self.name, stored_version, self.version, self.upcasters, payload)
        self.payload.model_validate(upcast)
        return upcast


@dataclass(frozen=True)
class EntitySpec:
    """A kind of data-table row (its partition-key prefix); its changes feed the BEST_EFFORT lane."""

    name: str
    description: str = ""

    @property
    def row_change_types(self) -> tuple[str, ...]:
        # The record-change lane's module is imported here, not with the catalog: the durable consumer loads a
        # catalog at its cold start, and reads no row change (``make bench``, section 3).
        from outbox.best_effort.changes import OPERATIONS, row_change_type

        return tuple(row_change_type(self.name, operation) for operation in OPERATIONS)


@dataclass(frozen=True)
class Module:
    """What one application module declares. ``code`` names the Python modules whose ``emit()`` and
    ``FollowUp`` calls are its producers (found by reading the source, so they cannot drift)."""

    name: str
    code: tuple[str, ...]
    event_types: tuple[EventTypeSpec, ...] = ()
    entities: tuple[EntitySpec, ...] = ()
    subscriptions: tuple[Subscription, ...] = ()


@dataclass(frozen=True)
class Producer:
    event_type: str | None  # None when the type is not a literal: the contract cannot check it
    where: str  # "module:function (file:line)"
    follow_up: bool = False  # a FollowUp(...), not an emit(...)

    @property
    def function(self) -> str:
        """``module:function``, as a subscription's handler is named."""
        return self.where.split(" (")[0]


@dataclass
class Catalog:
    modules: Sequence[Module]
    _types: dict[str, tuple[Module, EventTypeSpec]] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._types = {}
        for module in self.modules:
            for spec in module.event_types:
                if spec.name in self._types:
                    raise InvalidEventError(
                        f"event type {spec.name!r} is declared by both {self._types[spec.name][0].name} and "
                        f"{module.name}; a type has one owner"
                    )
                self._types[spec.name] = (module, spec)

    # -- what the code declares ---------------------------------------------------------------------

    @cached_property
    def registry(self) -> SubscriptionRegistry:
        return SubscriptionRegistry.of(s for module in self.modules for s in module.subscriptions)

    @property
    def domain_types(self) -> set[str]:
        return set(self._types)

    @property
    def row_change_types(self) -> set[str]:
        return {t for module in self.modules for entity in module.entities for t in entity.row_change_types}

    def spec(self, event_type: str) -> EventTypeSpec | None:
        declared = self._types.get(event_type)
        return declared[1] if declared is not None else None

    def validate_payload(self, event_type: str, payload: Mapping[str, Any], schema_version: int | None = None) -> int:
        """emit() refuses an undeclared type, a version other than the type's current one, or a payload its
        schema rejects, before any AWS call; the version to store (the current one) otherwise."""
        spec = self.spec(event_type)
        if spec is None:
            raise InvalidEventError(
                f"event type {event_type!r} is not declared by any module{_closest(event_type, self._types)}; "
                "declare it in the owning module's event_types (docs/concepts.md, Adding an event type)"
            )
        if schema_version is not None and schema_version != spec.version:
            raise InvalidEventError(
                f"{event_type} is at schema version {spec.version}, so emit() stores version {spec.version} "
                f"payloads only, not version {schema_version}: build the payload with {spec.payload.__name__} "
                "and leave schema_version out (older versions reach handlers through their upcasters)"
            )
        try:
            spec.payload.model_validate(dict(payload))
        except ValidationError as exc:
            raise InvalidEventError(
                f"payload of {event_type!r} does not match its schema: {validation_summary(exc)}"
            ) from exc
        return spec.version

    def delivered_payload(self, event_type: str, stored_version: int, payload: Any) -> Any:
        """The payload a handler receives: the stored one brought to the type's current version. A type the
        catalog does not declare is delivered as stored."""
        spec = self.spec(event_type)
        return payload if spec is None else spec.current_payload(stored_version, payload)

    # -- the contract -------------------------------------------------------------------------------

    def producers(self) -> list[Producer]:
        """Every emit() and every FollowUp() that can commit: a FollowUp in a handler of another lane than
        DURABLE is never emitted (see ``dropped_follow_ups``), so it produces nothing."""
        return self._read_producers()[0]

    def dropped_follow_ups(self) -> list[tuple[Producer, Subscription]]:
        """FollowUp() calls inside handlers of lanes that cannot commit a follow-up."""
        return self._read_producers()[1]

    def _read_producers(self) -> tuple[list[Producer], list[tuple[Producer, Subscription]]]:
        """The modules' sources, parsed once: the producers, and the follow-ups their lane drops."""
        non_durable = self._non_durable_handlers()
        producers: list[Producer] = []
        dropped: list[tuple[Producer, Subscription]] = []
        for producer in (p for module in self.modules for name in module.code for p in find_producers(name)):
            subscription = non_durable.get(producer.function) if producer.follow_up else None
            if subscription is None:
                producers.append(producer)
            else:
                dropped.append((producer, subscription))
        return producers, dropped

    def _non_durable_handlers(self) -> dict[str, Subscription]:
        """``module:function`` of each handler on INLINE, LOCAL or BEST_EFFORT, with its subscription."""
        found: dict[str, Subscription] = {}
        for subscription in self.registry.subscriptions:
            name = getattr(subscription.handler, "__name__", None)
            module = getattr(subscription.handler, "__module__", None)
            if subscription.lane is not Lane.DURABLE and name and module:
                found[f"{module}:{name}"] = subscription
        return found

    def problems(self) -> list[str]:
        """Everything that would make a subscription unreachable or an event undeliverable."""
        from outbox.best_effort.changes import ROW_CHANGE_PREFIX

        found: list[str] = []
        producers, dropped = self._read_producers()
        by_type: dict[str, list[str]] = defaultdict(list)
        for producer in producers:
            if producer.event_type is None:
                found.append(
                    f"{producer.where} emits a type that is not a string literal; the contract cannot check it"
                )
            else:
                by_type[producer.event_type].append(producer.where)
        for event_type, places in sorted(by_type.items()):
            if event_type not in self._types:
                found.append(f"{event_type!r} is emitted at {places[0]} but declared by no module")
        for event_type in sorted(self._types):
            if event_type.startswith(f"{ROW_CHANGE_PREFIX}."):
                found.append(f"{event_type!r}: the prefix '{ROW_CHANGE_PREFIX}.' is reserved for row changes")
            if event_type not in by_type and self._types[event_type][1].emitted_by is None:
                found.append(
                    f"{event_type!r} is declared by {self._types[event_type][0].name} but nothing emits it (an "
                    "emit() outside the modules' code: name it with EventTypeSpec(..., emitted_by=...))"
                )
        for producer, subscription in dropped:
            found.append(
                f"{producer.where} returns FollowUp({producer.event_type!r}) from the {subscription.lane.value} "
                f"handler of {subscription.name!r}, which never emits it: only DURABLE handlers commit follow-ups"
            )
        found.extend(self._subscription_problems())
        found.extend(self._workflow_problems())
        return found

    def _workflow_problems(self) -> list[str]:
        """A WORKFLOW subscription's handler must import and be a durable handler (checked at synth, where the
        app's code and the durable execution SDK are importable)."""
        from outbox.workflows import WorkflowHandler, durable_handler_problem

        found = []
        for subscription in self.registry.subscriptions:
            if isinstance(subscription.handler, WorkflowHandler):
                problem = durable_handler_problem(subscription.handler)
                if problem is not None:
                    found.append(f"subscription {subscription.name!r} (WORKFLOW): {problem}")
        return found

    def _subscription_problems(self) -> list[str]:
        found = [s.cannot_bind for s in self.registry.subscriptions if s.cannot_bind is not None]
        for subscription in self.registry.subscriptions:
            domain = [t for t in sorted(self.domain_types) if subscription.matches(t)]
            rows = [t for t in sorted(self.row_change_types) if subscription.matches(t)]
            where = (
                f"subscription {subscription.name!r} ({subscription.lane.value}, glob {subscription.pattern!r}"
                f"{_declared_at(subscription)})"
            )
            if subscription.lane is Lane.BEST_EFFORT and domain:
                found.append(
                    f"{where} matches domain events {domain[:3]} but BEST_EFFORT only carries row changes: it "
                    "would never run; put it on DURABLE"
                )
            elif subscription.lane is not Lane.BEST_EFFORT and rows:
                found.append(
                    f"{where} matches row changes {rows[:3]} but only the BEST_EFFORT lane carries them: it "
                    "would never run; put it on BEST_EFFORT"
                )
            elif not domain and not rows:
                found.append(
                    f"{where} matches no event type the code can emit; check the spelling against the catalog"
                    f"{_closest(subscription.pattern, self.domain_types | self.row_change_types)}"
                )
        return found

    # -- the generated document ---------------------------------------------------------------------

    def document(self) -> dict[str, Any]:
        """The catalog as data (committed as catalog.json, checked current in CI)."""
        producers: dict[str, list[str]] = defaultdict(list)
        for producer in self.producers():
            if producer.event_type is not None:
                producers[producer.event_type].append(producer.where.split(" (")[0])
        return {
            "event_types": [
                {
                    "type": name,
                    "owner": module.name,
                    "description": spec.description,
                    # A producer outside the modules (EventTypeSpec(..., emitted_by=...)) in its own words.
                    "producers": sorted(set(producers.get(name, [])))
                    + ([f"{spec.emitted_by} (emitted_by)"] if spec.emitted_by else []),
                    "version": spec.version,
                    "schemas": [
                        {"version": version, "schema": model.model_json_schema()}
                        for version, model in sorted(spec.models().items())
                    ],
                }
                for name, (module, spec) in sorted(self._types.items())
            ],
            "entities": [
                {"entity": entity.name, "owner": module.name, "row_change_types": list(entity.row_change_types)}
                for module in self.modules
                for entity in module.entities
            ],
            "subscriptions": [
                {
                    "name": s.name,
                    "glob": s.pattern,
                    "lane": s.lane.value,
                    "effects": s.effects.value,
                    "ordered": s.ordered,
                    "dispatcher": DISPATCHERS[s.lane],
                    "matches": sorted(t for t in self.domain_types | self.row_change_types if s.matches(t)),
                }
                for s in sorted(self.registry.subscriptions, key=lambda s: s.name)
            ],
        }


def _declared_at(subscription: Subscription) -> str:
    """Where the subscription's handler is defined (``, handler at shop/catalog.py:19``), if Python can tell."""
    place = handler_place(subscription.handler)
    return f", handler at {place}" if place else ""


def _closest(pattern: str, candidates: Iterable[str]) -> str:
    import difflib

    close = difflib.get_close_matches(pattern, list(candidates), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def find_producers(module_name: str) -> list[Producer]:
    """Every ``*.emit("type", ...)`` and ``FollowUp("type", ...)`` call in a module's source."""
    module = importlib.import_module(module_name)
    source = inspect.getsource(module)
    filename = inspect.getsourcefile(module) or module_name
    found = []
    for function, call in _calls(ast.parse(source)):
        callee = call.func
        name = callee.attr if isinstance(callee, ast.Attribute) else callee.id if isinstance(callee, ast.Name) else ""
        if name not in ("emit", "FollowUp"):
            continue
        first = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "event_type"), None)
        literal = first.value if isinstance(first, ast.Constant) and isinstance(first.value, str) else None
        where = f"{module_name}:{function} ({filename.rsplit('/', 1)[-1]}:{call.lineno})"
        found.append(Producer(literal, where, follow_up=name == "FollowUp"))
    return found


def _calls(tree: ast.AST) -> Iterable[tuple[str, ast.Call]]:
    """Each call with the innermost function around it (ast.walk is breadth-first, so inner wins)."""
    owner: dict[int, tuple[str, ast.Call]] = {
        id(node): ("<module>", node) for node in ast.walk(tree) if isinstance(node, ast.Call)
    }
    for function in ast.walk(tree):
        if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            for node in ast.walk(function):
                if isinstance(node, ast.Call):
                    owner[id(node)] = (function.name, node)
    return sorted(owner.values(), key=lambda pair: (pair[1].lineno, pair[1].col_offset))
