"""One trace from the request to every effect, across the hop DynamoDB Streams and Pipes carry no context over.

``emit()`` records the caller's trace context with each event (``TraceContext``, W3C ``traceparent`` and
``tracestate``): from OpenTelemetry's current span when its API is installed and a span is recording, else from
Lambda's ``_X_AMZN_TRACE_ID`` (X-Ray's header, parsed by the X-Ray SDK and written as W3C's). It is part of the
envelope and of its hash; an event stored before it existed has none and verifies as before.

The consumers read it back and, with OpenTelemetry installed (``chained-outbox[otel]``, the API only: the SDK
and the exporter are yours or the ADOT layer's), open one span per (event, subscription) attempt, a child of the
invocation and *linked* to the producer's context (``pair_span``). Without OpenTelemetry nothing of it is
imported and a span is a shared object whose methods do nothing.

A trace context is the caller's word, not a fact: a client can send any ``X-Amzn-Trace-Id`` through an API, so
it is validated and bounded (``TraceContext.from_carrier``: a malformed one is dropped, never an emit refused),
used for links and log lines only, and never decides anything.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, nullcontext
from contextvars import ContextVar
from typing import Any, Final, Protocol

from pydantic import BaseModel, ConfigDict, Field

try:  # the optional extra: chained-outbox[otel]
    from opentelemetry import propagate as otel_propagate
    from opentelemetry import trace as otel_trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
except ImportError:  # pragma: no cover - exercised by the test that hides the package
    otel_trace = None  # type: ignore[assignment]
    otel_propagate = None  # type: ignore[assignment]
    TraceContextTextMapPropagator = None  # type: ignore[assignment,misc]

logger = logging.getLogger(__name__)

TRACEPARENT: Final = "traceparent"
TRACESTATE: Final = "tracestate"
# W3C Trace Context, level 1: version 00, a 32-hex trace id and a 16-hex parent id, neither all zeros, and flags.
_TRACEPARENT = re.compile(r"00-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}")
TRACEPARENT_MAX_LENGTH: Final = 55  # version 00's length
# W3C keeps at most 32 list members; 512 characters is where it lets a vendor truncate.
TRACESTATE_MAX_LENGTH: Final = 512
TRACESTATE_MAX_MEMBERS: Final = 32
_TRACESTATE_MEMBER = re.compile(
    r"[a-z0-9][a-z0-9_\-*/@]{0,255}=[\x21-\x2b\x2d-\x3c\x3e-\x7e](?:[\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,254}[\x21-\x2b\x2d-\x3c\x3e-\x7e])?"
)
# Lambda's X-Ray header, in the environment of every invocation with active tracing.
XRAY_ENVIRONMENT_VARIABLE: Final = "_X_AMZN_TRACE_ID"
TRACER_NAME: Final = "outbox"


class TraceContext(BaseModel):
    """A W3C trace context as an event records it: bounded always, and W3C's format checked when it is
    recorded (``from_carrier``). A row written some other way may hold a context that is bounded but not well
    formed: it still parses, still verifies and still runs; it only links nothing (``valid``)."""

    # A newer engine's field is kept, as the envelope keeps its own (``outbox.log.envelope.Envelope``).
    model_config = ConfigDict(frozen=True, extra="allow")

    traceparent: str = Field(min_length=1, max_length=TRACEPARENT_MAX_LENGTH)
    tracestate: str | None = Field(default=None, min_length=1, max_length=TRACESTATE_MAX_LENGTH)

    @classmethod
    def from_carrier(cls, carrier: Mapping[str, Any]) -> TraceContext | None:
        """The context in ``carrier`` (``traceparent``, ``tracestate``), or None when it has no valid one. A
        malformed ``tracestate`` is dropped alone; nothing here raises: a bad context never fails an emit."""
        traceparent, tracestate = carrier.get(TRACEPARENT), carrier.get(TRACESTATE)
        if not isinstance(traceparent, str) or not _TRACEPARENT.fullmatch(traceparent):
            return None
        return cls(traceparent=traceparent, tracestate=tracestate if _valid_tracestate(tracestate) else None)

    @property
    def valid(self) -> bool:
        """W3C's format: what a link or an outgoing header needs."""
        return bool(_TRACEPARENT.fullmatch(self.traceparent)) and (
            self.tracestate is None or _valid_tracestate(self.tracestate)
        )

    def headers(self) -> dict[str, str]:
        """As HTTP headers, for a call that carries the trace on (none for a context that is not valid)."""
        if not self.valid:
            return {}
        return {TRACEPARENT: self.traceparent, **({TRACESTATE: self.tracestate} if self.tracestate else {})}

    @property
    def trace_id(self) -> str:
        """The 32 hex digits of the trace (of a valid context)."""
        return self.traceparent[3:35]


def _valid_tracestate(value: Any) -> bool:
    if not isinstance(value, str) or not 0 < len(value) <= TRACESTATE_MAX_LENGTH:
        return False
    members = [member.strip() for member in value.split(",")]
    return len(members) <= TRACESTATE_MAX_MEMBERS and all(_TRACESTATE_MEMBER.fullmatch(m) for m in members)


def current_trace_context() -> TraceContext | None:
    """The calling code's trace context: OpenTelemetry's current span when one is recording, else the
    invocation's X-Ray header, else None."""
    return TraceContext.from_carrier(_otel_carrier()) or _from_xray(os.environ.get(XRAY_ENVIRONMENT_VARIABLE))


def _in_a_span() -> bool:
    """OpenTelemetry is here and a span is current (a recording one, or one extracted from a caller)."""
    return otel_trace is not None and otel_trace.get_current_span().get_span_context().is_valid


def _otel_carrier() -> dict[str, str]:
    if not _in_a_span():
        return {}
    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier)
    return carrier


def _from_xray(header: str | None) -> TraceContext | None:
    """X-Ray's ``Root=1-<8 hex time>-<24 hex>;Parent=<16 hex>;Sampled=<0|1>`` as W3C's traceparent: the same
    128-bit trace id (time and random part joined), the parent, sampled as the flags (what OpenTelemetry's
    X-Ray propagator does). Split here rather than with the X-Ray SDK's ``TraceHeader``: importing it imports
    ``aws_xray_sdk.core``, about 250 ms of every producer's cold start, for a split on ``;`` and ``=``; what it
    yields is validated as any context is (``from_carrier``)."""
    if not header or len(header) > TRACESTATE_MAX_LENGTH:
        return None
    fields = dict(part.strip().partition("=")[::2] for part in header.split(";"))
    root, parent = fields.get("Root", ""), fields.get("Parent", "")
    parts = root.split("-")
    if len(parts) != 3 or parts[0] != "1":
        return None
    flags = "01" if fields.get("Sampled") == "1" else "00"
    return TraceContext.from_carrier({TRACEPARENT: f"00-{parts[1]}{parts[2]}-{parent}-{flags}"})


# -- the consumers' spans ---------------------------------------------------------------------------


class PairSpan:
    """What a consumer says of one (event, subscription) attempt while it runs: set on its span, if any."""

    def set(self, name: str, value: str | int) -> None:
        """One attribute (``outbox.<name>``)."""

    def outcome(self, outcome: str) -> None:
        """How the attempt ended (completed, retry, dead, deferred, skipped, conflict); the first word stands."""


_NO_SPAN: Final = PairSpan()


class _OtelPairSpan(PairSpan):
    def __init__(self, span: Any) -> None:
        self._span = span
        self._concluded = False

    def set(self, name: str, value: str | int) -> None:
        self._span.set_attribute(f"outbox.{name}", value)

    def outcome(self, outcome: str) -> None:
        # A conflict is said where it is found, before the path answers DEAD: the first word is the truer one.
        if not self._concluded:
            self._concluded = True
            self._span.set_attribute("outbox.outcome", outcome)


# The attempt in progress in this context: what code below the consumer's loop adds to (its attempt number).
_CURRENT: ContextVar[tuple[PairSpan, Any]] = ContextVar("outbox_pair", default=(_NO_SPAN, None))


# None: OpenTelemetry's global tracer provider (the ADOT layer's, or the one your code sets).
_provider: Any | None = None


def use_tracer_provider(provider: Any | None) -> None:
    """Make the engine's spans with ``provider`` instead of the global one (None: the global one again): for a
    test that records spans without setting the process-wide provider, which OpenTelemetry allows only once."""
    global _provider
    _provider = provider


@contextmanager
def without_open_telemetry() -> Iterator[None]:
    """The engine as if OpenTelemetry were not installed, for the duration: what ``make bench`` measures the extra
    against, in one process."""
    global otel_trace
    saved, otel_trace = otel_trace, None  # type: ignore[assignment]
    try:
        yield
    finally:
        otel_trace = saved


def tracing_enabled() -> bool:
    """Whether spans are made: OpenTelemetry's API is installed."""
    return otel_trace is not None


@contextmanager
def pair_span(
    name: str, attributes: Mapping[str, str | int], linked: TraceContext | None, *, kind: str = "CONSUMER"
) -> Iterator[PairSpan]:
    """A span for one attempt, the current span's child, linked to ``linked`` (the event's producer); without
    OpenTelemetry, the shared no-op. ``attributes`` are set as ``outbox.<key>``."""
    if otel_trace is None:
        yield _NO_SPAN
        return
    links = []
    if linked is not None and linked.valid:
        producer = otel_trace.get_current_span(otel_propagate_extract(linked)).get_span_context()
        if producer.is_valid:
            links.append(otel_trace.Link(producer))
    tracer = otel_trace.get_tracer(TRACER_NAME, tracer_provider=_provider)
    span_kind = getattr(otel_trace.SpanKind, kind)
    with tracer.start_as_current_span(
        name,
        kind=span_kind,
        links=links,
        attributes={f"outbox.{key}": value for key, value in attributes.items()},
        record_exception=True,
        set_status_on_exception=True,
    ) as span:
        yield _OtelPairSpan(span)


def otel_propagate_extract(context: TraceContext) -> Any:
    """An OpenTelemetry context holding ``context`` as its remote span (W3C's propagator, whatever the global one)."""
    assert TraceContextTextMapPropagator is not None
    return TraceContextTextMapPropagator().extract(context.headers())


def outgoing_headers(fallback: TraceContext | None) -> dict[str, str]:
    """Headers that carry the trace on to a call this code makes: the current span's (with OpenTelemetry, the
    global propagator's, X-Ray's too under ADOT), else ``fallback``'s (the event's own context)."""
    if otel_propagate is not None and _in_a_span():
        carrier: dict[str, str] = {}
        otel_propagate.inject(carrier)
        if carrier:
            return carrier
    return fallback.headers() if fallback is not None else {}


class TracedEvent(Protocol):
    """What a pair's span and log keys read of its event (an ``outbox.Envelope``)."""

    @property
    def id(self) -> str: ...
    @property
    def type(self) -> str: ...
    @property
    def tenant(self) -> str: ...
    @property
    def seq(self) -> int: ...
    @property
    def correlation_id(self) -> str: ...
    @property
    def trace_context(self) -> TraceContext | None: ...


@contextmanager
def observed_pair(
    envelope: TracedEvent, subscription: str, *, lane: str, receive_count: int, log: Any | None = None
) -> Iterator[PairSpan]:
    """One (event, subscription) attempt, observed: its span (``pair_span``, linked to the event's context)
    and, with ``log`` (a Powertools ``Logger``), the keys every line logged meanwhile carries, removed after."""
    keys: dict[str, str | int] = {
        "tenant": envelope.tenant,
        "event_id": envelope.id,
        "correlation_id": envelope.correlation_id,
        "subscription": subscription,
        "receive_count": receive_count,
    }
    attributes: dict[str, str | int] = {
        "tenant": envelope.tenant,
        "event.id": envelope.id,
        "event.type": envelope.type,
        "event.seq": envelope.seq,
        "correlation_id": envelope.correlation_id,
        "subscription": subscription,
        "lane": lane,
        "receive_count": receive_count,
    }
    with observed(f"process {subscription}", attributes, envelope.trace_context, keys=keys, log=log) as span:
        yield span


@contextmanager
def observed(
    name: str,
    attributes: Mapping[str, str | int],
    linked: TraceContext | None,
    *,
    keys: Mapping[str, str | int],
    log: Any | None,
) -> Iterator[PairSpan]:
    """A span (``pair_span``) and the log keys of one unit of work, which code below it reaches through
    ``current_pair`` and ``attempt_of_pair``."""
    logged = log.append_context_keys(**keys) if log is not None else nullcontext()
    with logged, pair_span(name, attributes, linked) as span:
        token = _CURRENT.set((span, log))
        try:
            yield span
        finally:
            _CURRENT.reset(token)


def current_pair() -> PairSpan:
    """The attempt this code runs in (the no-op outside one)."""
    return _CURRENT.get()[0]


@contextmanager
def attempt_of_pair(attempt: int) -> Iterator[None]:
    """While a handler runs: its attempt number on the pair's span and on every line logged."""
    span, log = _CURRENT.get()
    span.set("attempt", attempt)
    with log.append_context_keys(attempt=attempt) if log is not None else nullcontext():
        yield


def trace_context_of_image(image: Any) -> TraceContext | None:
    """The trace context an event row (typed DynamoDB JSON, as the stream and the relay carry it) records."""
    if not isinstance(image, Mapping):
        return None
    recorded = image.get("trace_context")
    members = recorded.get("M") if isinstance(recorded, Mapping) else None
    if not isinstance(members, Mapping):
        return None
    carrier = {name: value.get("S") for name, value in members.items() if isinstance(value, Mapping)}
    return TraceContext.from_carrier(carrier)


@contextmanager
def repair_span(repair: str, attributes: Mapping[str, str | int], linked: TraceContext | None) -> Iterator[PairSpan]:
    """An operator's repair sending one message (replay, reconcile, redrive): a producer span, linked to the
    original event's context."""
    with pair_span(f"{repair} send", {"repair": repair, **attributes}, linked, kind="PRODUCER") as span:
        yield span
