"""The report is the figures, the targets and the explanations rendered: nothing is assumed (no timings here).

The fixture ``fixtures/figures/`` is what ``python -m benchmarks --quick`` wrote: real figures at smoke size.
"""

from __future__ import annotations

import inspect
import itertools
import json
import shutil
import typing
from collections.abc import Iterator
from copy import deepcopy
from dataclasses import is_dataclass
from pathlib import Path
from typing import Any

import jinja2
import pytest
from jinja2 import meta, nodes
from pydantic import BaseModel

from benchmarks import report, results, targets
from benchmarks.results import Figures, MissingFigureError, Results
from benchmarks.targets import Target

FIGURES = Path(__file__).resolve().parent / "fixtures" / "figures"


@pytest.fixture
def figures_dir(tmp_path: Path) -> Path:
    """A copy of the fixture that a test may change."""
    return Path(shutil.copytree(FIGURES, tmp_path / "figures"))


def _raw(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((FIGURES / f"{name}.json").read_text())
    return loaded


def _write(directory: Path, name: str, raw: dict[str, Any]) -> None:
    (directory / f"{name}.json").write_text(json.dumps(raw))


def _render(
    figures: Results,
    chosen: tuple[Target, ...] | None = None,
    explanations: dict[str, str] | None = None,
) -> str:
    return report.render(
        figures,
        report.load_prices(),
        targets.load_targets() if chosen is None else chosen,
        report.load_explanations() if explanations is None else explanations,
    )


def _verdict_cell(text: str, target: Target) -> str:
    (row,) = [line for line in text.splitlines() if line.startswith(f"| {target.title} |")]
    return row.rstrip(" |").rsplit("| ", 1)[1]


def _unmet(target: Target) -> Target:
    """The same measure with a threshold no figure can meet."""
    impossible = {"<=": -1e12, ">=": 1e12, "==": -1e12}[target.comparison]
    return target.model_copy(update={"threshold": impossible})


# -- a complete figures set ----------------------------------------------------------------------------


def test_a_complete_figures_set_renders_every_target_with_a_verdict() -> None:
    # Given the figures of a whole run
    figures = results.load(FIGURES)
    # When the report is rendered
    text = _render(figures)
    # Then every target of targets.toml has its row, with its measured figure and a verdict
    for target in targets.load_targets():
        assert _verdict_cell(text, target) in ("met", "not met"), target.id


def test_the_cold_start_target_is_judged_on_import_and_first_batch_cpu_against_idempotency() -> None:
    figures = results.load(FIGURES)
    (target,) = [t for t in targets.load_targets() if t.id == "cold-start-vs-idempotency"]
    (verdict,) = targets.judge(figures, [target])
    assert verdict.value == pytest.approx(figures.cold_start.first_batch.cpu_ratio.median)
    first = figures.cold_start.first_batch
    # Both consumers completed every delivery of their batches: a cold start that failed would not count.
    assert first.completed == {"durable_consumer": first.rounds * first.batch_size} | {
        "idempotent_app_handler": first.rounds * first.batch_size
    }


# -- a missing figure ----------------------------------------------------------------------------------


def _declared_paths(model: type[BaseModel], raw: Any, prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """The JSON path of every figure the model declares (of a list's first element, a mapping's first entry)."""
    hints = typing.get_type_hints(model)
    for name, field in model.model_fields.items():
        key = field.alias or name
        path = (*prefix, key)
        yield path
        nested = _element(hints[name], raw[key])
        if nested is not None:
            inner, value, step = nested
            yield from _declared_paths(inner, value, (*path, *step))


def _element(annotation: Any, value: Any) -> tuple[type[BaseModel], Any, tuple[str, ...]] | None:
    """The model a field holds (itself, a tuple's elements or a mapping's values), its first value, the path."""
    if _is_model(annotation):
        return annotation, value, ()
    arguments = [a for a in typing.get_args(annotation) if a is not Ellipsis]
    if not arguments or not _is_model(arguments[-1]):
        return None
    if isinstance(value, dict):
        first = next(iter(value))
        return arguments[-1], value[first], (first,)
    return arguments[-1], value[0], ("0",)


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _without(raw: dict[str, Any], path: tuple[str, ...]) -> dict[str, Any]:
    changed = deepcopy(raw)
    found: Any = changed
    for part in path[:-1]:
        found = found[int(part)] if isinstance(found, list) else found[part]
    del found[path[-1]]
    return changed


@pytest.mark.parametrize("name", list(results.FILES))
def test_removing_any_figure_the_model_declares_is_an_error_naming_the_benchmark_and_the_figure(
    figures_dir: Path, name: str
) -> None:
    model, module = results.FILES[name]
    raw = _raw(name)
    paths = list(_declared_paths(model, raw))
    assert paths, name
    for path in paths:
        # Given the run's figures with one figure of this benchmark left out
        _write(figures_dir, name, _without(raw, path))
        # When they are loaded / Then the error names the benchmark and the figure
        with pytest.raises(MissingFigureError) as raised:
            results.load(figures_dir)
        assert f"benchmark {name} ({module}" in str(raised.value)
        assert f"missing figure {'.'.join(path)}" in str(raised.value), path
    _write(figures_dir, name, raw)
    results.load(figures_dir)


@pytest.mark.parametrize(
    ("name", "change", "named"),
    [
        ("cost", lambda raw: raw["runs"].pop(), "burst"),
        (
            "cost",
            lambda raw: [
                raw["runs"][0]["write_units_by_item_per_event"].pop(k)
                for k in list(raw["runs"][0]["write_units_by_item_per_event"])
                if "inbox claim row" in k
            ],
            "'inbox claim row' written by durable_consumer",
        ),
        ("cost", lambda raw: raw["runs"][0]["functions"].clear(), "λ:OutboxDurableConsumerLambdaFunction"),
        ("cold_start", lambda raw: raw["handlers"].pop(), "minimal_batch_handler"),
        ("consumer", lambda raw: raw["catalog_scale"]["replayed_cpu_ms_per_message"].pop("1000"), "1000"),
        ("emit", lambda raw: raw["tenant_scale"]["cpu_ms_per_emit"].pop("1"), "1"),
    ],
)
def test_a_missing_entry_the_report_relies_on_is_an_error_naming_it(
    figures_dir: Path, name: str, change: Any, named: str
) -> None:
    raw = _raw(name)
    change(raw)
    _write(figures_dir, name, raw)
    if name == "cold_start":
        # The minimal handler is not compared: its absence is not an error, unlike a compared one's.
        results.load(figures_dir)
        raw["handlers"] = [h for h in raw["handlers"] if h["key"] != "idempotent_app_handler"]
        _write(figures_dir, name, raw)
        named = "idempotent_app_handler"
    with pytest.raises(MissingFigureError, match=f"benchmark {name} ") as raised:
        results.load(figures_dir)
    assert named in str(raised.value)


def test_a_missing_benchmark_file_is_an_error_naming_it(figures_dir: Path) -> None:
    (figures_dir / "emit.json").unlink()
    with pytest.raises(MissingFigureError, match=r"benchmark emit \(benchmarks\.emit_contention"):
        results.load(figures_dir)


def test_a_target_whose_measure_the_model_lacks_is_an_error() -> None:
    (target,) = targets.load_targets()[:1]
    for measure, error in (
        ("consumer.shapes.7-subs-no-writes.replayed_cpu_ratio", MissingFigureError),
        ("consumer.no_such_figure", targets.TargetsError),
        ("consumer.model_dump", targets.TargetsError),
    ):
        with pytest.raises(error, match=target.id):
            targets.judge(results.load(FIGURES), [target.model_copy(update={"measure": measure})])


# -- the hot tenant ----------------------------------------------------------------------------------------


def _table(text: str, header: str) -> dict[tuple[int, int], list[str]]:
    """The rows of the table whose header starts with ``header``: (first cell, second cell) -> the cells."""
    lines = text[text.index(header) :].splitlines()[2:]
    rows = {}
    for line in itertools.takewhile(lambda line: line.startswith("|"), lines):
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        rows[(int(cells[0]), int(cells[1]))] = cells
    return rows


def test_the_hot_tenant_table_shows_1_4_and_16_writers_for_emit_and_emit_many() -> None:
    figures = results.load(FIGURES)
    rows = _table(_render(figures), "| writers | k | events/s |")
    assert set(rows) == {(writers, k) for writers in (1, 4, 16) for k in (1, 5, 25)}
    spread, ratio = report.FILTERS["spread"], report.FILTERS["ratio"]
    for measured in figures.emit.hot_tenant.one_tenant:
        cells = rows[(measured.writers, measured.k)]
        assert cells[2:5] == [
            spread(measured.events_per_second, 0),
            ratio(measured.ratio_to_one_writer),
            ratio(measured.ratio_to_one_writer_k1),
        ]
        assert cells[5] == spread(measured.retries_per_call)
        assert cells[7] == f"{measured.gave_up} of {measured.calls} calls"
        if measured.writers == 1:
            assert measured.ratio_to_one_writer.median == pytest.approx(1.0)


def test_the_split_table_shows_the_same_writers_on_the_tenants_shards() -> None:
    figures = results.load(FIGURES)
    hot = figures.emit.hot_tenant
    rows = _table(_render(figures), "| writers | shards | events/s |")
    assert set(rows) == {(4, hot.shards), (16, hot.shards)}


@pytest.mark.parametrize(("writers", "k", "tenants"), [(16, 1, 1), (16, 5, 1), (16, 25, 1), (16, 1, 8), (4, 1, 1)])
def test_a_hot_tenant_round_missing_is_an_error_naming_it(
    figures_dir: Path, writers: int, k: int, tenants: int
) -> None:
    # Given the emit figures without one round of the hot tenant (16 writers above all: the issue asks for them)
    raw = _raw("emit")
    rounds = raw["hot_tenant"]["rounds"]
    raw["hot_tenant"]["rounds"] = [r for r in rounds if (r["writers"], r["k"], r["tenants"]) != (writers, k, tenants)]
    assert len(raw["hot_tenant"]["rounds"]) == len(rounds) - 1
    _write(figures_dir, "emit", raw)
    # When they are loaded / Then the error names the benchmark and the round
    with pytest.raises(MissingFigureError, match=r"benchmark emit \(benchmarks\.emit_contention") as raised:
        results.load(figures_dir)
    assert (f"({writers}, {k})" if tenants == 1 else f"on {tenants} shards has no {writers}") in str(raised.value)


def test_the_ceiling_on_paper_is_the_least_of_the_head_row_the_event_partition_and_the_serial_chain() -> None:
    figures = results.load(FIGURES)
    derived = report.derive(figures, report.load_prices())
    # 1,000 write units a second, 2 per call on the head and per event row of up to 1 KB, one call per 10-25 ms
    assert {k: (c.head_row, c.event_partition, c.low, c.high) for k, c in derived.paper_ceiling.items()} == {
        "1": (500, 500, 40, 100),
        "5": (2500, 500, 200, 500),
        "25": (12500, 500, 500, 500),
    }
    text = " ".join(_render(figures).split())
    assert "Split a tenant that needs more than 40 events per second with `emit`" in text
    assert "or more than 200 with `emit_many` of 5" in text
    assert "any tenant above 500 events per second of up to 1 KB" in text


# -- verdicts ------------------------------------------------------------------------------------------


def _set(raw: dict[str, Any], path: tuple[str | int, ...], value: float) -> None:
    found: Any = raw
    for part in path[:-1]:
        found = found[part]
    found[path[-1]] = value


@pytest.mark.parametrize(
    ("target_id", "name", "path", "met", "not_met"),
    [
        ("catalog-scaling", "consumer", ("catalog_scale", "replayed_cpu_ratio", "median"), 1.14, 1.16),
        (
            "inbox-requests-per-pair",
            "consumer",
            # the first claim is a Put, the completion an Update: 1 + 1 is the threshold
            ("scenarios", 0, "ours", "requests_by_operation_per_delivery", "UpdateItem"),
            1.0,
            1.01,
        ),
        ("tenant-scaling", "emit", ("tenant_scale", "cpu_ratio", "median"), 1.15, 1.1501),
    ],
)
def test_a_verdict_flips_when_its_figure_crosses_the_threshold(
    figures_dir: Path, target_id: str, name: str, path: tuple[str | int, ...], met: float, not_met: float
) -> None:
    (target,) = [t for t in targets.load_targets() if t.id == target_id]
    raw = _raw(name)
    verdicts = []
    for value in (met, not_met):
        # Given the figure on one side of the threshold, then on the other
        _set(raw, path, value)
        _write(figures_dir, name, raw)
        # Then the rendered verdict follows it
        verdicts.append(_verdict_cell(_render(results.load(figures_dir)), target))
    assert verdicts == ["met", "not met"]


def test_each_comparison_judges_as_written() -> None:
    figures = results.load(FIGURES)
    (target,) = [t for t in targets.load_targets() if t.id == "inbox-requests-per-pair"]
    measured = figures.consumer.max_inbox_requests_per_delivery
    outcomes = {
        comparison: targets.judge(figures, [target.model_copy(update={"comparison": comparison})])[0].met
        for comparison in ("<=", ">=", "==")
    }
    assert outcomes == {"<=": measured <= 2, ">=": measured >= 2, "==": measured == 2}


def test_cost_targets_are_judged_on_what_the_report_derives_and_need_it() -> None:
    figures = results.load(FIGURES)
    derived = report.derive(figures, report.load_prices())
    chosen = [t for t in targets.load_targets() if t.measure.startswith("derived.")]
    assert {t.id for t in chosen} == {"cost-example-trickle", "overhead-vs-hand-made"}
    verdicts = {v.target.id: v.value for v in targets.judge(figures, chosen, derived)}
    assert verdicts["cost-example-trickle"] == pytest.approx(derived.money["trickle"].total)
    assert verdicts["overhead-vs-hand-made"] == pytest.approx(derived.write_units.overhead_ratio)
    with pytest.raises(targets.TargetsError, match="needs the report's derived figures"):
        targets.judge(figures, chosen)


def test_the_outbox_overhead_is_the_total_less_the_application_s_own_writes_in_both_columns() -> None:
    w = report.derive(results.load(FIGURES), report.load_prices()).write_units
    # The application's writes: the caller's (in the emit's transaction in both) and the handlers' at the
    # plain price (the engine's transactional doubling of them is its overhead).
    assert w.application == pytest.approx(w.caller_writes.engine + w.handler_writes.engine / 2)
    assert w.engine_overhead == pytest.approx(w.engine_total - w.application)
    assert w.hand_made_overhead == pytest.approx(w.hand_made_total - w.application)
    assert w.engine_overhead_per_pair * w.pairs_per_event == pytest.approx(w.engine_overhead)
    assert w.overhead_ratio == pytest.approx(w.engine_overhead / w.hand_made_overhead)


def test_the_comparison_s_lines_add_up_to_the_measured_write_units() -> None:
    w = report.derive(results.load(FIGURES), report.load_prices()).write_units
    assert sum(line.engine for line in w.lines) == pytest.approx(w.engine_total)


def test_the_workflow_lane_s_line_is_the_settle_pass_s_writes_and_the_lane_s_own_items(figures_dir: Path) -> None:
    # The settle pass writes claim rows too: they are the lane's, not the durable consumer's claims line
    cost = json.loads((figures_dir / "cost.json").read_text())
    lane = {
        "\u03bb:OutboxSettlerLambdaFunction | inbox claim row": 0.5,
        "\u03bb:OutboxDurableConsumerLambdaFunction | workflow running row": 0.25,
        "\u03bb:OutboxDurableConsumerLambdaFunction | workflow emit row": 0.125,
    }
    for run in cost["runs"]:
        run["write_units_by_item_per_event"].update(lane)
        run["per_event"]["write_units"] += sum(lane.values())
    (figures_dir / "cost.json").write_text(json.dumps(cost))
    before = report.derive(results.load(FIGURES), report.load_prices()).write_units
    after = report.derive(results.load(figures_dir), report.load_prices()).write_units

    assert after.workflow_lane.engine == pytest.approx(before.workflow_lane.engine + 0.875)
    assert after.workflow_lane.hand_made == 0.0
    assert after.claims == before.claims
    assert sum(line.engine for line in after.lines) == pytest.approx(after.engine_total)


def test_an_item_kind_without_a_line_in_the_comparison_is_an_error_naming_the_kinds(figures_dir: Path) -> None:
    # A kind the comparison does not know (here: the ordered watermark's rows under an older name) would leave
    # its units out of every line while the total still counts them.
    cost = json.loads((figures_dir / "cost.json").read_text())
    for run in cost["runs"]:
        run["write_units_by_item_per_event"]["\u03bb:OutboxDurableConsumerLambdaFunction | inbox, other"] = 0.5
        run["per_event"]["write_units"] += 0.5
    (figures_dir / "cost.json").write_text(json.dumps(cost))
    with pytest.raises(report.UnaccountedWritesError, match="inbox, other"):
        report.derive(results.load(figures_dir), report.load_prices())


# -- the templates and the model --------------------------------------------------------------------------


def _sources() -> dict[str, str]:
    env = report.environment()
    templates = {name: env.loader.get_source(env, name)[0] for name in env.list_templates()}  # type: ignore[union-attr]
    explanations = {f"explanations: {k}": v for k, v in report.load_explanations().items()}
    return {**templates, **explanations}


def _supplied_names() -> set[str]:
    """Every field and property of the model's classes and of the report's derived values."""
    classes: list[type] = [c for c in vars(results).values() if inspect.isclass(c) and issubclass(c, Figures)]
    classes += [c for c in vars(report).values() if inspect.isclass(c) and is_dataclass(c)]
    classes += [targets.Verdict, Target]
    names = set()
    for cls in classes:
        names |= set(getattr(cls, "model_fields", {})) | set(getattr(cls, "__dataclass_fields__", {}))
        names |= {name for name, member in inspect.getmembers(cls) if isinstance(member, property)}
    return names


def test_the_templates_use_no_figure_the_model_does_not_supply() -> None:
    figures = results.load(FIGURES)
    context = report.context(figures, report.load_prices(), targets.load_targets())
    env = report.environment()
    supplied = _supplied_names()
    for name, source in _sources().items():
        tree = env.parse(source)
        # Then every top-level name is one the report supplies
        assert meta.find_undeclared_variables(tree) <= set(context) | set(env.globals), name
        # And every attribute read is a figure or a derived value of the model (or loop.last, dict.items)
        read = {node.attr for node in tree.find_all(nodes.Getattr)}
        assert read - supplied <= {"last", "items"}, name


def test_every_explanation_renders_with_all_targets_met_and_with_none_met() -> None:
    # Rendering is strict: a name the model lacks anywhere, in a branch or an explanation, raises
    figures = results.load(FIGURES)
    unmet = tuple(_unmet(target) for target in targets.load_targets())
    text = _render(figures, unmet)
    assert "met" not in [_verdict_cell(text, target) for target in unmet]
    for section in {target.explanation for target in unmet if target.explanation}:
        first_line = report.load_explanations()[section].splitlines()[0]
        assert first_line.split("{{")[0] in text, section


def test_a_figure_the_model_does_not_supply_is_an_error_when_rendered() -> None:
    env = report.environment()
    context = report.context(results.load(FIGURES), report.load_prices(), targets.load_targets())
    with pytest.raises(jinja2.UndefinedError, match="no_such_figure"):
        env.from_string("{{ consumer.no_such_figure }}").render(context)


# -- explanations ----------------------------------------------------------------------------------------


def test_explanations_missing_a_section_the_template_uses_is_an_error() -> None:
    explanations = report.load_explanations()
    del explanations["Consumer overhead"]
    with pytest.raises(report.ExplanationsError, match="'Consumer overhead'"):
        _render(results.load(FIGURES), explanations=explanations)


def test_explanations_missing_a_section_a_target_names_is_an_error() -> None:
    explanations = report.load_explanations()
    del explanations["Why the cold start is slower"]
    # Even while every target is met, so that the section would not be shown
    met = tuple(t.model_copy(update={"comparison": "<=", "threshold": 1e12}) for t in targets.load_targets())
    with pytest.raises(report.ExplanationsError, match="'Why the cold start is slower'"):
        _render(results.load(FIGURES), met, explanations)


def test_a_section_nothing_uses_is_an_error() -> None:
    explanations = {**report.load_explanations(), "A stale paragraph": "No longer true."}
    with pytest.raises(report.ExplanationsError, match="'A stale paragraph'"):
        _render(results.load(FIGURES), explanations=explanations)


def test_a_heading_used_twice_in_the_explanations_is_an_error(tmp_path: Path) -> None:
    document = tmp_path / "explanations.md"
    document.write_text("notes\n\n## Same\n\none\n\n## Same\n\ntwo\n")
    with pytest.raises(report.ExplanationsError, match="'Same'"):
        report.load_explanations(document)


def test_sections_are_read_by_heading_without_the_editors_notes(tmp_path: Path) -> None:
    document = tmp_path / "explanations.md"
    document.write_text("# Title\n\nnotes for editors\n\n## First\n\nOne.\n\n## Second\n\nTwo\nlines.\n")
    assert report.load_explanations(document) == {"First": "One.", "Second": "Two\nlines."}
