"""The run's writers: each an ``EventStore`` of its own, as a separate process has, whose ids are remembered so
that a failed emit's ids are known."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

from outbox import Envelope, EventStore
from outbox.catalog import Catalog
from outbox.log.chain import ChainHead
from outbox.log.sealing import seal_all
from outbox.tracing import TraceContext
from simulation.world import World

Sealing = Callable[[Sequence[dict[str, Any]], ChainHead], list[Envelope]]  # an EventStore's ``sealing``

IDS_KEPT = 8  # an emitter's recent ids: more than an import's events


class RequestContexts:
    """The trace context each emit of a writer records, as its requests would carry them: most a valid W3C
    context, some none (no tracing upstream), some bounded but malformed (another writer's, a client's header),
    which must change nothing the invariants look at. In a schedule that upgrades the engine, the application ran
    without tracing until the upgrade (``untraced``): its events then carry none, the events whose claim rows the
    previous release digested otherwise (``simulation.upgrade_actor``)."""

    def __init__(self, rng: random.Random, untraced: Callable[[], bool] = lambda: False) -> None:
        self._rng = rng
        self._untraced = untraced

    def __call__(self) -> TraceContext | None:
        draw = self._rng.random()  # drawn in any case: the stream stays the same
        if draw < 0.125 or self._untraced():
            return None
        if draw < 0.25:
            return TraceContext(traceparent=f"00-{self._rng.getrandbits(64):x}", tracestate="not a, w3c list")
        trace, parent = self._rng.getrandbits(128) or 1, self._rng.getrandbits(64) or 1
        return TraceContext.from_carrier({"traceparent": f"00-{trace:032x}-{parent:016x}-01", "tracestate": "sim=1"})


class RecordingIds:
    """An emitter's id source that remembers the ids it gave, so a failed emit's ids are known."""

    def __init__(self, world: World) -> None:
        self._world = world
        self.given = 0
        self.recent: list[str] = []  # the ids of the last emit (emit_many draws several)

    @property
    def last(self) -> str:
        return self.recent[-1] if self.recent else ""

    def __call__(self) -> str:
        event_id = self._world.ids()
        self.given += 1
        self.recent = [*self.recent[-(IDS_KEPT - 1) :], event_id]
        return event_id


class Emitter:
    """One writer process of one tenant, with an EventStore of its own."""

    def __init__(
        self, name: str, world: World, events_table: str, client: Any, catalog: Catalog, sealing: Sealing = seal_all
    ) -> None:
        self.name = name
        self.ids = RecordingIds(world)
        self.store = EventStore(
            events_table,
            client=client,
            catalog=catalog,
            new_event_id=self.ids,
            rng=random.Random(f"{world.seed}:{name}"),
            trace_context=RequestContexts(random.Random(f"{world.seed}:{name}:trace"), world.before_an_upgrade),
            sealing=sealing,
        )
