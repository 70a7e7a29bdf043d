"""The catalog contract: every failure the seed describes makes it fail, with a message that says what to fix."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from modules import build_catalog
from modules.services import Services
from outbox import EventStore, InvalidEventError, Lane, OutboxValidationError, Subscription
from outbox.catalog import Catalog, EntitySpec, EventTypeSpec, Module
from stacks.settings import WATCHED_ENTITIES
from tests.unit.test_emit_validation import NoAwsClient

CATALOG_FILE = Path(__file__).resolve().parents[2] / "catalog.json"


class Widget(BaseModel):
    id: str


def noop(_: Any) -> None:
    return None


def widgets(*subscriptions: Subscription, event_types: tuple[str, ...] = ("widget.made", "widget.shipped")) -> Catalog:
    return Catalog(
        [
            Module(
                name="widgets",
                code=("tests.unit.catalog_fixtures.widgets",),
                event_types=tuple(EventTypeSpec(name, Widget) for name in event_types),
                entities=(EntitySpec("CONTACTADDRESS"),),
                subscriptions=subscriptions,
            )
        ]
    )


def test_the_application_catalog_keeps_the_contract() -> None:
    assert build_catalog(data_table="data", services=Services.fakes()).problems() == []


def test_the_committed_catalog_is_current() -> None:
    catalog = build_catalog(data_table="data", services=Services.fakes())
    current = json.dumps(catalog.document(), indent=2, sort_keys=True) + "\n"
    assert CATALOG_FILE.read_text() == current, "catalog.json is stale: run `make catalog` and commit it"


def test_the_example_pipe_carries_exactly_the_row_changes_its_catalog_watches() -> None:
    # The example's record-change pipe drops every other entity's row changes at the source: an entity a
    # BEST_EFFORT subscription watches that it left out would never reach its handler.
    document = build_catalog(data_table="data", services=Services.fakes()).document()
    watched = {
        entity["entity"]
        for entity in document["entities"]
        for subscription in document["subscriptions"]
        if subscription["lane"] == Lane.BEST_EFFORT.value
        and set(subscription["matches"]) & set(entity["row_change_types"])
    }
    assert set(WATCHED_ENTITIES) == watched


def test_a_well_formed_module_has_no_problems() -> None:
    catalog = widgets(
        Subscription("widgets.count", "widget.*", Lane.DURABLE, noop),
        Subscription("widgets.address", "record.CONTACTADDRESS.*", Lane.BEST_EFFORT, noop),
    )
    assert catalog.problems() == []


def test_an_emitted_type_that_no_module_declares_is_reported() -> None:
    [problem] = widgets(event_types=("widget.shipped",)).problems()
    assert "'widget.made' is emitted at tests.unit.catalog_fixtures.widgets:make_widget" in problem
    assert "declared by no module" in problem


def test_a_declared_type_without_a_producer_is_reported() -> None:
    [problem] = widgets(event_types=("widget.made", "widget.shipped", "widget.lost")).problems()
    assert problem.startswith("'widget.lost' is declared by widgets but nothing emits it")
    assert "emitted_by=" in problem, "it says how to name a producer outside the modules"


def test_a_type_emitted_outside_the_modules_needs_no_producer_in_them() -> None:
    catalog = widgets()
    outside = EventTypeSpec("widget.lost", Widget, emitted_by="the warehouse service (services/warehouse)")
    catalog = Catalog([*catalog.modules, Module(name="warehouse", code=(), event_types=(outside,))])

    assert catalog.problems() == []


def test_a_subscription_problem_names_where_its_handler_is() -> None:
    [problem] = widgets(Subscription("widgets.count", "widget.made", Lane.BEST_EFFORT, noop)).problems()
    assert f"handler at {__file__}:" in problem


def test_a_glob_that_matches_nothing_is_reported_with_the_likely_intent() -> None:
    [problem] = widgets(Subscription("mail.follow", "record.CONTACTADDR.*", Lane.BEST_EFFORT, noop)).problems()
    assert "matches no event type the code can emit" in problem
    assert "record.CONTACTADDRESS" in problem, "it names what was probably meant"


def test_a_row_change_handler_on_local_is_reported() -> None:
    [problem] = widgets(Subscription("mail.follow", "record.CONTACTADDRESS.*", Lane.LOCAL, noop)).problems()
    assert "only the BEST_EFFORT lane carries them" in problem
    assert "put it on BEST_EFFORT" in problem


def test_a_domain_handler_on_best_effort_is_reported() -> None:
    [problem] = widgets(Subscription("widgets.count", "widget.made", Lane.BEST_EFFORT, noop)).problems()
    assert "BEST_EFFORT only carries row changes" in problem
    assert "put it on DURABLE" in problem


def test_two_subscriptions_with_one_name_are_refused() -> None:
    catalog = widgets(
        Subscription("widgets.count", "widget.made", Lane.DURABLE, noop),
        Subscription("widgets.count", "widget.shipped", Lane.DURABLE, noop),
    )
    with pytest.raises(OutboxValidationError, match=r"two subscriptions are named 'widgets\.count'"):
        _ = catalog.registry


def test_a_computed_event_type_cannot_be_checked_and_is_reported() -> None:
    catalog = Catalog([Module("dynamic", ("tests.unit.catalog_fixtures.dynamic",))])
    [problem] = catalog.problems()
    assert "not a string literal" in problem


def test_a_type_owned_by_two_modules_is_refused() -> None:
    with pytest.raises(InvalidEventError, match="declared by both"):
        Catalog([Module("a", (), (EventTypeSpec("x.y", Widget),)), Module("b", (), (EventTypeSpec("x.y", Widget),))])


def test_emit_refuses_an_undeclared_type_and_a_payload_its_schema_rejects() -> None:
    store = EventStore("events", client=NoAwsClient(), catalog=widgets())
    with pytest.raises(InvalidEventError, match=r"'widget\.unknown' is not declared"):
        store.emit("widget.unknown", {"id": "1"}, tenant="acme", actor="t")
    with pytest.raises(InvalidEventError, match="does not match its schema"):
        store.emit("widget.made", {"name": "no id"}, tenant="acme", actor="t")
    # The refusal names the field and what is wrong with it, never the value (which may be a person's data)
    with pytest.raises(InvalidEventError) as refused:
        store.emit("widget.made", {"id": ["jane.doe@example.com"]}, tenant="acme", actor="t")
    assert "id: string_type" in str(refused.value)
    assert "jane.doe@example.com" not in str(refused.value)


@pytest.mark.parametrize("name", ["Upper.case", "has space", "x" * 101, "trailing.", ""])
def test_subscription_names_that_cannot_key_the_inbox_are_refused(name: str) -> None:
    catalog = widgets(Subscription(name, "widget.made", Lane.DURABLE, noop))
    with pytest.raises(OutboxValidationError):
        _ = catalog.registry


def _lanes_catalog(*subscriptions: Subscription) -> Catalog:
    return Catalog(
        [
            Module(
                name="widgets",
                code=("tests.unit.catalog_fixtures.lanes",),
                event_types=(EventTypeSpec("widget.made", Widget), EventTypeSpec("widget.shipped", Widget)),
                subscriptions=subscriptions,
            )
        ]
    )


@pytest.mark.parametrize("lane", [Lane.LOCAL, Lane.INLINE])
def test_a_follow_up_in_a_handler_of_a_lane_that_drops_it_is_reported_and_produces_nothing(lane: Lane) -> None:
    from tests.unit.catalog_fixtures import lanes

    catalog = _lanes_catalog(Subscription("widgets.ship", "widget.made", lane, lanes.ship_locally))

    problems = catalog.problems()

    [dropped] = [p for p in problems if "ship_locally" in p]
    assert f"{lane.value} handler" in dropped
    assert "only DURABLE handlers" in dropped
    producers = {p.where.split(" (")[0] for p in catalog.producers() if p.event_type == "widget.shipped"}
    assert "tests.unit.catalog_fixtures.lanes:ship_locally" not in producers
    assert "tests.unit.catalog_fixtures.lanes:ship_durably" in producers


def test_a_type_produced_only_by_a_local_handler_s_follow_up_is_reported_as_never_emitted() -> None:
    catalog = Catalog(
        [
            Module(
                name="widgets",
                code=("tests.unit.catalog_fixtures.widgets",),
                event_types=(EventTypeSpec("widget.made", Widget), EventTypeSpec("widget.shipped", Widget)),
                subscriptions=(Subscription("widgets.ship", "widget.made", Lane.LOCAL, _ship_widget()),),
            )
        ]
    )

    problems = catalog.problems()

    assert any("'widget.shipped' is declared by widgets but nothing emits it" in p for p in problems), problems


def test_a_follow_up_in_a_durable_handler_or_a_helper_counts() -> None:
    from tests.unit.catalog_fixtures import lanes

    catalog = _lanes_catalog(
        Subscription("widgets.ship", "widget.made", Lane.DURABLE, lanes.ship_durably),
        Subscription("widgets.note", "widget.made", Lane.LOCAL, noop),
    )

    assert catalog.problems() == []


def _ship_widget() -> Any:
    from tests.unit.catalog_fixtures import widgets as fixture

    return fixture.ship_widget


def test_make_catalog_refuses_to_rewrite_a_version_the_code_changed_incompatibly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from tools import catalog as catalog_tool

    # Given a recorded catalog whose order.created version 2 had a field today's model no longer has
    recorded = json.loads(CATALOG_FILE.read_text())
    (entry,) = [e for e in recorded["event_types"] if e["type"] == "order.created"]
    (v2,) = [s["schema"] for s in entry["schemas"] if s["version"] == 2]
    v2["properties"]["gift_note"] = {"type": "string"}
    written = tmp_path / "catalog.json"
    written.write_text(json.dumps(recorded))
    monkeypatch.setattr(catalog_tool, "CATALOG_FILE", written)
    # When make catalog runs, then it refuses, says what changed and what to do, and keeps the record
    assert catalog_tool.main() == 1
    error = capsys.readouterr().err
    assert "order.created version 2: payload.gift_note: the field was removed" in error
    assert "declare version 3 instead" in error
    assert json.loads(written.read_text()) == recorded


def lambda_style(event: Any, context: Any) -> None:
    return None


def no_argument() -> None:
    return None


def keyword_only(*, delivery: Any) -> None:
    return None


def with_defaults(delivery: Any, context: Any = None, *rest: Any, **named: Any) -> None:
    return None


class CallableHandler:
    def __call__(self, delivery: Any) -> None:
        return None


UNBINDABLE = (lambda_style, no_argument, keyword_only)
BINDABLE = (noop, with_defaults, CallableHandler(), lambda delivery: None, print)


# A WORKFLOW subscription's handler is a durable function, called by Lambda as (event, context): its own check
# (a durable handler, at synth) is tests/unit/test_workflow_lane.py's.
ONE_ARGUMENT_LANES = [lane for lane in Lane if lane is not Lane.WORKFLOW]


@pytest.mark.parametrize("lane", ONE_ARGUMENT_LANES)
@pytest.mark.parametrize("handler", UNBINDABLE, ids=lambda h: h.__name__)
def test_a_handler_that_cannot_take_the_lanes_one_argument_is_a_problem_naming_it_where_it_is(
    handler: Any, lane: Lane
) -> None:
    pattern = "record.CONTACTADDRESS.*" if lane is Lane.BEST_EFFORT else "widget.*"
    subscription = Subscription("widgets.count", pattern, lane, handler)
    [problem] = widgets(subscription).problems()

    assert problem == subscription.cannot_bind
    assert f"{__name__}:{handler.__name__}(" in problem, "the user's handler, by module and name"
    line = handler.__code__.co_firstlineno
    assert f" at {__file__}:{line} " in problem, "where it is defined"
    argument = "record_change: RecordChange" if lane is Lane.BEST_EFFORT else "delivery: Delivery"
    assert f"def {handler.__name__}({argument})" in problem, "what to write instead"


@pytest.mark.parametrize("handler", BINDABLE, ids=lambda h: getattr(h, "__name__", type(h).__name__))
def test_a_handler_that_takes_one_argument_is_no_problem(handler: Any) -> None:
    subscription = Subscription("widgets.count", "widget.*", Lane.DURABLE, handler)
    assert subscription.cannot_bind is None
    assert widgets(subscription).problems() == []


def test_a_handler_that_cannot_bind_is_refused_at_its_call_not_run() -> None:
    from outbox.exceptions import ContractViolationError

    subscription = Subscription("widgets.count", "widget.*", Lane.DURABLE, lambda_style)
    with pytest.raises(ContractViolationError, match="lambda_style"):
        subscription.run(object())
