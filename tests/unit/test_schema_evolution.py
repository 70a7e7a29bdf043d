"""Schema versions: upcasters bring old payloads to the current version, emit() stores only the current one,
and a recorded version's schema may change only in ways the events stored with it survive."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

import pytest
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from modules import build_catalog
from modules.services import Services
from outbox import EventStore, InvalidEventError
from outbox.catalog import Catalog, EventTypeSpec, Module
from outbox.exceptions import ContractViolationError, TerminalError
from outbox.log.schemas import SchemaVersionUnknownError, Upcaster, compatibility_problems, schema_changes
from tests.unit.test_emit_validation import NoAwsClient

CATALOG_FILE = Path(__file__).resolve().parents[2] / "catalog.json"


class Line(BaseModel):
    sku: str
    quantity: int


class V1(BaseModel):
    model_config = ConfigDict(extra="forbid")
    order_id: str = Field(max_length=64)
    total: int = Field(ge=0)
    lines: list[Line] = []
    note: str | None = None
    kind: Literal["a", "b"] = "a"


def changes_to(**fields: Any) -> list[str]:
    """The incompatible changes from V1 to a model like V1 with ``fields`` replaced (None drops one)."""
    annotations = {name: V1.model_fields[name].annotation for name in V1.model_fields}
    defaults = {name: V1.model_fields[name] for name in V1.model_fields}
    namespace: dict[str, Any] = {"model_config": ConfigDict(extra="forbid"), "__annotations__": {}}
    for name in annotations:
        if name in fields and fields[name] is None:
            continue
        if name in fields:
            annotation, default = fields[name]
        else:
            annotation, default = annotations[name], defaults[name]
        namespace["__annotations__"][name] = annotation
        namespace[name] = default
    for name, value in fields.items():
        if name not in annotations and value is not None:
            namespace["__annotations__"][name] = value[0]
            namespace[name] = value[1]
    changed = type("V1", (BaseModel,), namespace)
    return schema_changes(V1.model_json_schema(), changed.model_json_schema())


# -- what the compatibility check allows and refuses ----------------------------------------------


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"channel": (str, ...)}, "payload.channel: a new required field"),
        ({"note": None}, "payload.note: the field was removed"),
        ({"note": (str, ...)}, "payload.note: no longer accepts null"),
        ({"order_id": (str, Field(max_length=32))}, "payload.order_id: maxLength narrowed from 64 to 32"),
        ({"total": (int, Field(ge=1))}, "payload.total: minimum narrowed from 0 to 1"),
        ({"total": (str, ...)}, "payload.total: type integer became string"),
        ({"kind": (Literal["a"], "a")}, "payload.kind: the allowed values no longer include 'b'"),
        ({"order_id": (str, Field(max_length=64, pattern="^o-"))}, "payload.order_id: pattern changed"),
        ({"lines": (list[int], [])}, "payload.lines[]: type object became integer"),
    ],
)
def test_a_change_old_events_or_old_readers_cannot_survive_is_named(fields: dict[str, Any], expected: str) -> None:
    found = changes_to(**fields)
    assert any(change.startswith(expected) for change in found), found


@pytest.mark.parametrize(
    "fields",
    [
        {"channel": (str | None, None)},  # a new optional field
        {"order_id": (str, Field(max_length=128))},  # a wider bound
        {"total": (float, 0)},  # every integer is a number
        {"kind": (Literal["a", "b", "c"], "a")},  # one more allowed value
        {"total": (int | str, 0)},  # a union that keeps the old type
        {"order_id": (str, Field(max_length=64, description="the shop's id", title="Order"))},  # words only
    ],
)
def test_a_change_every_stored_event_survives_is_allowed(fields: dict[str, Any]) -> None:
    assert changes_to(**fields) == []


def test_a_nested_models_new_required_field_is_found_through_its_reference() -> None:
    class Line2(BaseModel):
        sku: str
        quantity: int
        warehouse: str

    class WithLines(BaseModel):
        lines: list[Line]

    class WithLines2(BaseModel):
        lines: list[Line2]

    assert schema_changes(WithLines.model_json_schema(), WithLines2.model_json_schema()) == [
        "payload.lines[].warehouse: a new required field (events stored before it lack it)"
    ]


def test_a_recursive_model_is_compared_without_looping() -> None:
    class Node(BaseModel):
        name: str
        children: list[Node] = []

    assert schema_changes(Node.model_json_schema(), Node.model_json_schema()) == []


# -- the recorded catalog against today's ----------------------------------------------------------


def catalog_of(spec: EventTypeSpec) -> Catalog:
    return Catalog([Module(name="shop", code=(), event_types=(spec,))])


class V2(V1):
    channel: str


def v1_to_v2(payload: dict[str, Any]) -> dict[str, Any]:
    return {**payload, "channel": "web"}


def test_changing_a_recorded_version_incompatibly_says_to_bump_it_with_an_upcaster() -> None:
    recorded = catalog_of(EventTypeSpec("shop.ordered", V1)).document()
    changed = catalog_of(EventTypeSpec("shop.ordered", V2)).document()
    (problem,) = compatibility_problems(recorded, changed)
    assert problem.startswith("shop.ordered version 1: payload.channel: a new required field")
    assert "declare version 2 instead" in problem
    assert "Upcaster(1, <the version 1 model>" in problem


def test_a_new_version_with_its_upcaster_and_the_old_model_kept_is_compatible() -> None:
    recorded = catalog_of(EventTypeSpec("shop.ordered", V1)).document()
    bumped = catalog_of(EventTypeSpec("shop.ordered", V2, version=2, upcasters=(Upcaster(1, V1, v1_to_v2),)))
    assert compatibility_problems(recorded, bumped.document()) == []
    assert [entry["version"] for entry in bumped.document()["event_types"][0]["schemas"]] == [1, 2]


def test_an_upcasters_model_that_drifts_from_its_record_is_refused() -> None:
    bumped = EventTypeSpec("shop.ordered", V2, version=2, upcasters=(Upcaster(1, V1, v1_to_v2),))
    recorded = catalog_of(bumped).document()
    drifted = EventTypeSpec("shop.ordered", V2, version=2, upcasters=(Upcaster(1, V2, v1_to_v2),))
    (problem,) = compatibility_problems(recorded, catalog_of(drifted).document())
    assert problem.startswith("shop.ordered version 1: payload.channel: a new required field")
    assert "restore that model" in problem


def test_a_version_never_goes_back_and_a_recorded_one_is_never_dropped() -> None:
    bumped = EventTypeSpec("shop.ordered", V2, version=2, upcasters=(Upcaster(1, V1, v1_to_v2),))
    recorded = catalog_of(bumped).document()
    problems = compatibility_problems(recorded, catalog_of(EventTypeSpec("shop.ordered", V2)).document())
    assert any("a version never goes back" in p for p in problems), problems
    assert any("version 2 is recorded in catalog.json but the code no longer declares it" in p for p in problems)


def test_a_catalog_recorded_before_versions_holds_its_schema_as_version_one() -> None:
    legacy = catalog_of(EventTypeSpec("shop.ordered", V1)).document()
    entry = legacy["event_types"][0]
    entry["payload_schema"] = entry.pop("schemas")[0]["schema"]
    del entry["version"]
    assert compatibility_problems(legacy, catalog_of(EventTypeSpec("shop.ordered", V1)).document()) == []
    assert compatibility_problems(legacy, catalog_of(EventTypeSpec("shop.ordered", V2)).document()) != []


def test_the_applications_models_are_compatible_with_every_version_catalog_json_records() -> None:
    recorded = json.loads(CATALOG_FILE.read_text())
    current = build_catalog(data_table="data", services=Services.fakes()).document()
    problems = compatibility_problems(recorded, current)
    assert problems == [], "\n".join(problems)


# -- declaring versions ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("version", "upcasters", "message"),
    [
        (2, (), "no upcaster from version 1"),
        (3, (Upcaster(1, V1, v1_to_v2),), "no upcaster from version 2"),
        (1, (Upcaster(1, V1, v1_to_v2),), "upcasters from 1 do not fit"),
        (0, (), "version must be 1 or more"),
    ],
)
def test_a_version_without_exactly_one_upcaster_per_older_version_is_refused(
    version: int, upcasters: tuple[Upcaster, ...], message: str
) -> None:
    with pytest.raises(InvalidEventError, match=message):
        EventTypeSpec("shop.ordered", V2, version=version, upcasters=upcasters)


def test_upcasting_brings_a_stored_payload_to_the_current_version_and_checks_it() -> None:
    class V3(V2):
        currency: str

    spec = EventTypeSpec(
        "shop.ordered",
        V3,
        version=3,
        upcasters=(Upcaster(2, V2, lambda p: {**p, "currency": "EUR"}), Upcaster(1, V1, v1_to_v2)),
    )
    stored = {"order_id": "o-1", "total": 5}
    assert spec.current_payload(1, stored) == {"order_id": "o-1", "total": 5, "channel": "web", "currency": "EUR"}
    assert spec.current_payload(2, {**stored, "channel": "phone"})["channel"] == "phone"
    assert spec.current_payload(3, stored) is stored  # current: delivered as stored
    assert stored == {"order_id": "o-1", "total": 5}, "upcasting never changes the stored payload"


def test_a_version_newer_than_the_code_knows_is_terminal_and_says_to_deploy_the_consumer() -> None:
    spec = EventTypeSpec("shop.ordered", V2, version=2, upcasters=(Upcaster(1, V1, v1_to_v2),))
    with pytest.raises(SchemaVersionUnknownError, match="knows versions up to 2: deploy the consumer") as raised:
        spec.current_payload(3, {"order_id": "o-1"})
    assert isinstance(raised.value, TerminalError)


def test_an_upcaster_that_returns_no_dict_or_a_payload_the_current_model_refuses_fails() -> None:
    not_a_dict = EventTypeSpec("t.x", V2, version=2, upcasters=(Upcaster(1, V1, lambda p: [p]),))  # type: ignore[arg-type, return-value]
    with pytest.raises(ContractViolationError, match="returned list, not a dict"):
        not_a_dict.current_payload(1, {"order_id": "o-1", "total": 1})
    forgetful = EventTypeSpec("t.x", V2, version=2, upcasters=(Upcaster(1, V1, lambda p: p),))
    with pytest.raises(ValidationError, match="channel"):
        forgetful.current_payload(1, {"order_id": "o-1", "total": 1})


# -- emit stores the current version only ---------------------------------------------------------


def test_emit_stores_the_current_version_and_refuses_any_other() -> None:
    spec = EventTypeSpec("shop.ordered", V2, version=2, upcasters=(Upcaster(1, V1, v1_to_v2),))
    store = EventStore("events", client=NoAwsClient(), catalog=catalog_of(spec))
    payload = {"order_id": "o-1", "total": 5, "channel": "web"}
    with pytest.raises(InvalidEventError, match="at schema version 2, so emit\\(\\) stores version 2 payloads only"):
        store.emit("shop.ordered", payload, tenant="acme", actor="t", schema_version=1)
    with pytest.raises(InvalidEventError, match="not version 3"):
        store.emit("shop.ordered", payload, tenant="acme", actor="t", schema_version=3)
    assert catalog_of(spec).validate_payload("shop.ordered", payload) == 2
    assert catalog_of(spec).validate_payload("shop.ordered", payload, 2) == 2
