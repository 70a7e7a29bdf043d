"""Payload schema versions: the upcasters that bring a stored event to its type's current version, and the
compatibility check that keeps a version's schema from changing under the events already stored with it.

The log is forever: a replay, a redrive or a reconcile delivers a year-old event to today's handler. Each
event type declares its current version and, for every older version still in the log, an ``Upcaster``
(a pure function from version n to n + 1) beside that version's payload model as it was. Handlers always
receive the current version (``Catalog.delivered_payload``); the envelope keeps the version it was stored
as, and its hash covers the stored payload.

``catalog.json`` records each version's JSON Schema, and ``compatibility_problems`` compares today's models
with that record, as a schema registry's backward check would: today's model of a version must accept every
event stored with it (no new required field, no field made required, no narrowed type or constraint, no
closed object), and must not drop a field (a reader deployed before the change still expects it). Adding an
optional field, or widening a type, is allowed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from outbox.exceptions import ContractViolationError, TerminalError

Upcast = Callable[[dict[str, Any]], dict[str, Any]]

# Keywords this check does not look at (title, description, examples, default) say things for people, not
# for validation: a change to them never breaks a reader.
# Keywords whose number may only grow (an upper bound) or only shrink (a lower bound) without refusing
# a value that was valid before.
UPPER_BOUNDS = ("maxLength", "maximum", "exclusiveMaximum", "maxItems", "maxProperties")
LOWER_BOUNDS = ("minLength", "minimum", "exclusiveMinimum", "minItems", "minProperties")
# Keywords that cannot be compared for widening: any change to them counts as narrowing.
OPAQUE = ("pattern", "format", "multipleOf", "uniqueItems")


class SchemaVersionUnknownError(TerminalError):
    """An event stored with a version newer than this code declares: the consumer is older than the
    producer. Terminal: no retry of this code can read it; deploy the consumer, then replay the dead letter
    (a redrive moves DLQ messages, and this one is acknowledged, not in the DLQ)."""


@dataclass(frozen=True)
class Upcaster:
    """How a payload of ``from_version`` becomes one of ``from_version + 1``.

    ``model`` is version ``from_version``'s payload model as it was (its JSON Schema stays recorded in
    catalog.json, and the compatibility check holds it to that record); ``upcast`` is a pure function of the
    payload: it is applied at every delivery of an old event, so it must not call anything or depend on time.
    """

    from_version: int
    model: type[BaseModel]
    upcast: Upcast


def check_versions(event_type: str, version: int, upcasters: Sequence[Upcaster]) -> tuple[Upcaster, ...]:
    """The upcasters in order, one per older version, or an error saying which are missing or extra."""
    if version < 1:
        raise ValueError(f"event type {event_type!r}: version must be 1 or more, not {version}")
    ordered = tuple(sorted(upcasters, key=lambda u: u.from_version))
    declared = [u.from_version for u in ordered]
    wanted = list(range(1, version))
    if declared != wanted:
        missing = sorted(set(wanted) - set(declared))
        extra = sorted(v for v in declared if v not in wanted or declared.count(v) > 1)
        hint = "; ".join(
            part
            for part in (
                f"no upcaster from version {', '.join(map(str, missing))}" if missing else "",
                f"upcasters from {', '.join(map(str, extra))} do not fit" if extra else "",
            )
            if part
        )
        raise ValueError(
            f"event type {event_type!r} is at version {version}, so it needs exactly one Upcaster from each "
            f"older version (1..{version - 1}): {hint}"
        )
    return ordered


def upcast_payload(
    event_type: str, stored_version: int, current_version: int, upcasters: Sequence[Upcaster], payload: Any
) -> dict[str, Any]:
    """The stored payload brought from ``stored_version`` to ``current_version`` by each upcaster in turn."""
    if stored_version > current_version:
        raise SchemaVersionUnknownError(
            f"the event is {event_type} version {stored_version}, and this consumer knows versions up to "
            f"{current_version}: deploy the consumer that declares version {stored_version}, then replay its "
            "dead letters (outbox replay)"
        )
    if stored_version < 1:
        raise SchemaVersionUnknownError(f"the event is {event_type} version {stored_version}: versions start at 1")
    data = payload
    for upcaster in upcasters[stored_version - 1 : current_version - 1]:
        data = upcaster.upcast(data)
        if not isinstance(data, dict):
            raise ContractViolationError(
                f"the upcaster of {event_type} from version {upcaster.from_version} returned "
                f"{type(data).__name__}, not a dict (the payload of version {upcaster.from_version + 1})"
            )
    return dict(data)


# -- compatibility --------------------------------------------------------------------------------------


def compatibility_problems(recorded: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """What today's catalog document (``Catalog.document()``) changes incompatibly against the recorded one
    (catalog.json as committed), one sentence per change, each saying what to do."""
    today = {entry["type"]: entry for entry in current.get("event_types", [])}
    problems: list[str] = []
    for entry in recorded.get("event_types", []):
        name = entry["type"]
        if name not in today:
            continue  # a type no longer declared: the contract reports its producers and subscriptions
        recorded_versions = _versions(entry)
        current_versions = _versions(today[name])
        if not recorded_versions or not current_versions:
            continue
        newest = max(recorded_versions)
        if max(current_versions) < newest:
            problems.append(
                f"{name}: catalog.json records version {newest}, the code declares only up to "
                f"{max(current_versions)}; events of version {newest} may be in the log, so a version never goes back"
            )
        for version, schema in sorted(recorded_versions.items()):
            if version not in current_versions:
                problems.append(
                    f"{name}: version {version} is recorded in catalog.json but the code no longer declares it; "
                    "events of it stay in the log forever: keep its model and its Upcaster"
                )
                continue
            for change in schema_changes(schema, current_versions[version]):
                problems.append(f"{name} version {version}: {change}. {_advice(name, version, newest)}")
    return problems


def _versions(entry: Mapping[str, Any]) -> dict[int, Mapping[str, Any]]:
    """Each recorded version's schema; a catalog.json written before versions holds one, version 1's."""
    if "schemas" not in entry:
        return {1: entry["payload_schema"]} if "payload_schema" in entry else {}
    return {int(item["version"]): item["schema"] for item in entry["schemas"]}


def _advice(name: str, version: int, newest: int) -> str:
    if version < newest:
        return (
            f"Events of version {version} are in the log as catalog.json recorded it: restore that model "
            "(the Upcaster's model must keep the schema it had)"
        )
    return (
        f"Events of version {version} may already be in the log: keep that model as it was and declare "
        f"version {version + 1} instead, EventTypeSpec({name!r}, <new model>, version={version + 1}, "
        f"upcasters=(..., Upcaster({version}, <the version {version} model>, <function from {version} to "
        f"{version + 1}>))), then run `make catalog`"
    )


def schema_changes(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """Each change from JSON Schema ``old`` to ``new`` that a value valid under ``old`` might not survive,
    or that drops a field, as ``"<path>: <what changed>"``; empty when every change is compatible."""
    comparison = _Comparison(old, new)
    comparison.compare(old, new, "payload")
    return comparison.changes


class _Comparison:
    """One walk over two schemas side by side: the changes found, and the definitions being compared."""

    def __init__(
        self, old_root: Mapping[str, Any], new_root: Mapping[str, Any], seen: set[tuple[Any, Any]] | None = None
    ) -> None:
        self.old_root, self.new_root = old_root, new_root
        self.changes: list[str] = []
        self.seen: set[tuple[Any, Any]] = set() if seen is None else set(seen)

    def compare(self, old: Mapping[str, Any], new: Mapping[str, Any], path: str) -> None:
        references = (old.get("$ref"), new.get("$ref"))
        if references != (None, None):
            if references in self.seen:
                return  # a recursive model: this pair of definitions is being compared further up
            self.seen.add(references)
        old, new = _resolve(self.old_root, old), _resolve(self.new_root, new)
        if _alternatives(old) or _alternatives(new):
            self._alternatives(old, new, path)
            return
        old_type, new_type = _types(old), _types(new)
        if old_type and new_type and not old_type <= _widened(new_type):
            self.changes.append(f"{path}: type {_show(old_type)} became {_show(new_type)}")
            return
        if not old_type and new_type:
            self.changes.append(f"{path}: any value was accepted, now only {_show(new_type)}")
            return
        _compare_constraints(old, new, path, self.changes)
        if "properties" in old or "properties" in new or "object" in old_type:
            self._objects(old, new, path)
        if "items" in old and "items" in new:
            self.compare(old["items"], new["items"], f"{path}[]")
        elif "items" in new:
            self.changes.append(f"{path}: its items gained a schema")

    def _objects(self, old: Mapping[str, Any], new: Mapping[str, Any], path: str) -> None:
        old_fields, new_fields = old.get("properties", {}), new.get("properties", {})
        old_required, new_required = set(old.get("required", [])), set(new.get("required", []))
        for name in sorted(set(old_fields) - set(new_fields)):
            self.changes.append(
                f"{path}.{name}: the field was removed (a reader deployed before the change expects it)"
            )
        for name in sorted(set(new_fields) - set(old_fields)):
            if name in new_required:
                self.changes.append(f"{path}.{name}: a new required field (events stored before it lack it)")
        for name in sorted((new_required - old_required) & set(old_fields)):
            self.changes.append(f"{path}.{name}: an optional field became required")
        if old.get("additionalProperties", True) is not False and new.get("additionalProperties", True) is False:
            self.changes.append(f"{path}: no longer accepts fields it does not name (additionalProperties: false)")
        for name in sorted(set(old_fields) & set(new_fields)):
            self.compare(old_fields[name], new_fields[name], f"{path}.{name}")

    def _alternatives(self, old: Mapping[str, Any], new: Mapping[str, Any], path: str) -> None:
        """Every alternative the old schema allowed must still be allowed by one of the new schema's."""
        new_options = _alternatives(new) or [new]
        for option in _alternatives(old) or [old]:
            if not any(self._compatible(option, candidate) for candidate in new_options):
                described = _show(_types(_resolve(self.old_root, option))) or "one of its alternatives"
                self.changes.append(f"{path}: no longer accepts {described} as it did")

    def _compatible(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
        trial = _Comparison(self.old_root, self.new_root, self.seen)
        trial.compare(old, new, "")
        return not trial.changes


def _resolve(root: Mapping[str, Any], schema: Mapping[str, Any]) -> Mapping[str, Any]:
    """A local ``$ref`` (pydantic writes ``#/$defs/Name``) replaced by what it names, repeatedly."""
    seen: set[str] = set()
    while "$ref" in schema:
        reference = str(schema["$ref"])
        if reference in seen or not reference.startswith("#/"):
            break
        seen.add(reference)
        target: Any = root
        for part in reference[2:].split("/"):
            target = target.get(part, {}) if isinstance(target, Mapping) else {}
        schema = {**target, **{k: v for k, v in schema.items() if k != "$ref"}}
    return schema


def _compare_constraints(old: Mapping[str, Any], new: Mapping[str, Any], path: str, changes: list[str]) -> None:
    for keyword in UPPER_BOUNDS:
        if keyword in new and (keyword not in old or new[keyword] < old[keyword]):
            changes.append(f"{path}: {keyword} narrowed from {old.get(keyword, 'none')} to {new[keyword]}")
    for keyword in LOWER_BOUNDS:
        if keyword in new and (keyword not in old or new[keyword] > old[keyword]):
            changes.append(f"{path}: {keyword} narrowed from {old.get(keyword, 'none')} to {new[keyword]}")
    for keyword in OPAQUE:
        if keyword in new and new.get(keyword) != old.get(keyword):
            changes.append(f"{path}: {keyword} changed from {old.get(keyword, 'none')!r} to {new[keyword]!r}")
    old_values, new_values = _allowed_values(old), _allowed_values(new)
    if new_values is not None:
        dropped = [value for value in old_values or [] if value not in new_values]
        if old_values is None or dropped:
            lost = ", ".join(map(repr, dropped)) if dropped else "any value"
            changes.append(f"{path}: the allowed values no longer include {lost}")


def _allowed_values(schema: Mapping[str, Any]) -> list[Any] | None:
    """An ``enum``'s values, a ``const`` as the one value, or None when any value of the type goes."""
    if "enum" in schema:
        return list(schema["enum"])
    if "const" in schema:
        return [schema["const"]]
    return None


def _alternatives(schema: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return list(schema.get("anyOf") or schema.get("oneOf") or [])


def _types(schema: Mapping[str, Any]) -> set[str]:
    declared = schema.get("type")
    if declared is None:
        return {"object"} if "properties" in schema else set()
    return {declared} if isinstance(declared, str) else set(declared)


def _widened(types: Iterable[str]) -> set[str]:
    """A number accepts every integer."""
    found = set(types)
    return found | {"integer"} if "number" in found else found


def _show(types: Iterable[str]) -> str:
    return " or ".join(sorted(types))
