"""``outbox.tracing``: what a trace context is allowed to be, where emit finds it, what a consumer's span says,
and that an event stored before trace context existed keeps its hash."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from outbox import tracing
from outbox.log.canonical import GENESIS_HASH, chain_hash
from outbox.log.envelope import Envelope
from outbox.tracing import TraceContext, current_trace_context, observed_pair

ROOT = Path(__file__).resolve().parents[2]
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.mark.parametrize(
    "traceparent",
    [
        "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",  # a version this reader does not know
        "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",  # upper case
        "00-00000000000000000000000000000000-b7ad6b7169203331-01",  # all-zero trace id
        "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",  # all-zero parent id
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331",
        TRACEPARENT + "-extra",
        "00-" + "a" * 100_000,
        "",
    ],
)
def test_a_malformed_traceparent_is_no_context(traceparent: str) -> None:
    assert TraceContext.from_carrier({"traceparent": traceparent}) is None


@pytest.mark.parametrize("carrier", [{}, {"traceparent": 7}, {"traceparent": None}, {"tracestate": "a=b"}])
def test_a_carrier_without_a_traceparent_string_is_no_context(carrier: dict[str, object]) -> None:
    assert TraceContext.from_carrier(carrier) is None


@pytest.mark.parametrize(
    ("tracestate", "kept"),
    [
        ("rojo=00f067aa0ba902b7,congo=t61rcWkgMzE", True),
        ("tenant@vendor=value", True),
        ("a=" + "b" * 600, False),  # over 512 characters
        (",".join(f"k{n}=v" for n in range(33)), False),  # over 32 members
        ("Upper=case", False),
        ("key=value=with=equals", False),
        ("key=", False),
        (7, False),
    ],
)
def test_a_malformed_tracestate_is_dropped_alone(tracestate: object, kept: bool) -> None:
    context = TraceContext.from_carrier({"traceparent": TRACEPARENT, "tracestate": tracestate})
    assert context is not None
    assert context.tracestate == (tracestate if kept else None)
    assert context.valid


def test_an_x_ray_header_becomes_the_same_trace_in_w3c_form(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("_X_AMZN_TRACE_ID", "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=0")
    context = current_trace_context()
    assert context == TraceContext(traceparent="00-5759e988bd862e3fe1be46a994272793-53995c3f42cd8ad8-00")
    monkeypatch.delenv("_X_AMZN_TRACE_ID")
    assert current_trace_context() is None


def test_an_open_telemetry_span_is_preferred_to_the_x_ray_header(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("_X_AMZN_TRACE_ID", "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1")
    with TracerProvider().get_tracer("test").start_as_current_span("request") as span:
        context = current_trace_context()
    assert context is not None
    ids = span.get_span_context()
    assert context.traceparent.split("-")[:3] == ["00", f"{ids.trace_id:032x}", f"{ids.span_id:016x}"]


def envelope(**fields: object) -> Envelope:
    base = {
        "id": "01ARZ3NDEKTSV4RRFFQ69G5FAV",
        "type": "order.created",
        "tenant": "acme",
        "seq": 1,
        "correlation_id": "01ARZ3NDEKTSV4RRFFQ69G5FAV",
        "actor": "user:1",
        "occurred_at": datetime(2026, 12, 1, tzinfo=UTC),
        "schema_version": 1,
        "payload": {"order_id": "o-1"},
        "prev_hash": GENESIS_HASH,
        "hash": GENESIS_HASH,
    }
    return Envelope.model_validate({**base, **fields})


def test_an_event_without_trace_context_hashes_as_every_event_did_before_it_existed() -> None:
    old = envelope()
    body = old.hashed_body()
    assert "trace_context" not in body
    before = {
        key: value for key, value in json.loads(old.model_dump_json()).items() if key not in ("hash", "prev_hash")
    }
    before.pop("trace_context")
    assert old.computed_hash() == chain_hash(GENESIS_HASH, before)
    assert "trace_context" not in old.to_item()
    assert Envelope.from_item(old.to_item()).computed_hash() == old.computed_hash()


def test_trace_context_is_hashed_and_round_trips_through_the_row() -> None:
    with_context = envelope(trace_context={"traceparent": TRACEPARENT})
    assert with_context.hashed_body()["trace_context"] == {"traceparent": TRACEPARENT}  # no null tracestate
    assert with_context.computed_hash() != envelope().computed_hash()
    other = envelope(trace_context={"traceparent": TRACEPARENT, "tracestate": "a=b"})
    assert other.computed_hash() != with_context.computed_hash()
    for event in (with_context, other):
        assert Envelope.from_item(event.to_item()) == event


def test_a_pair_span_links_the_event_and_says_how_the_attempt_ended() -> None:
    exporter, provider = InMemorySpanExporter(), TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.use_tracer_provider(provider)
    try:
        event = envelope(trace_context={"traceparent": TRACEPARENT})
        with observed_pair(event, "shipping.book", lane="DURABLE", receive_count=2) as span:
            tracing.current_pair().set("attempt", 2)
            span.outcome("conflict")
            span.outcome("dead")  # the first word stands
        with observed_pair(envelope(trace_context={"traceparent": "x" * 55}), "s", lane="DURABLE", receive_count=1):
            pass
    finally:
        tracing.use_tracer_provider(None)
    linked, unlinked = exporter.get_finished_spans()
    assert linked.name == "process shipping.book"
    assert [f"{link.context.trace_id:032x}" for link in linked.links] == ["0af7651916cd43dd8448eb211c80319c"]
    assert linked.attributes is not None
    assert (linked.attributes["outbox.outcome"], linked.attributes["outbox.attempt"]) == ("conflict", 2)
    assert linked.attributes["outbox.event.seq"] == 1
    assert list(unlinked.links) == [], "a context that is not W3C links nothing"


def test_every_line_logged_during_a_pair_carries_its_keys_and_none_after() -> None:
    import io
    import logging

    from aws_lambda_powertools import Logger
    from aws_lambda_powertools.logging.utils import copy_config_to_registered_loggers

    written = io.StringIO()
    logger = Logger(service="test-tracing", logger_handler=logging.StreamHandler(written))
    engine = logging.getLogger("outbox.delivery.run")
    package = logging.getLogger("outbox")
    kept = list(package.handlers), package.level, package.propagate
    copy_config_to_registered_loggers(source_logger=logger, include={"outbox"})  # what the handlers modules do
    event = envelope()
    try:
        with observed_pair(event, "shipping.book", lane="DURABLE", receive_count=3, log=logger):
            with tracing.attempt_of_pair(2):
                engine.warning("inside the handler")
            engine.warning("after the handler")
        engine.warning("after the pair")
    finally:
        package.handlers[:], package.level, package.propagate = kept
    inside, after_handler, after_pair = (json.loads(line) for line in written.getvalue().splitlines()[-3:])
    expected = {"tenant": "acme", "event_id": event.id, "correlation_id": event.correlation_id}
    assert {**inside, **expected, "subscription": "shipping.book", "attempt": 2, "receive_count": 3} == inside
    assert "attempt" not in after_handler
    assert after_handler["subscription"] == "shipping.book"
    assert not {"tenant", "event_id", "subscription", "attempt"} & set(after_pair)


def test_without_open_telemetry_nothing_of_it_is_imported_and_emit_still_records_x_ray() -> None:
    probe = """
import sys
sys.modules["opentelemetry"] = None  # as if the extra were not installed
from outbox import tracing
from outbox.tracing import current_trace_context, pair_span
import os
os.environ["_X_AMZN_TRACE_ID"] = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"
assert not tracing.tracing_enabled()
with pair_span("process s", {}, current_trace_context()) as span:
    span.set("attempt", 1)
    span.outcome("completed")
loaded = sorted(name for name, module in sys.modules.items() if name.startswith("opentelemetry") and module)
print(current_trace_context().traceparent, loaded)
"""
    env_path = f"{ROOT / 'engine' / 'src'}"
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env={"PYTHONPATH": env_path}, check=True
    )
    assert result.stdout.strip() == "00-5759e988bd862e3fe1be46a994272793-53995c3f42cd8ad8-01 []"
