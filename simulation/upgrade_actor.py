"""The engine upgraded under a run's feet: the rows the previous release wrote are read by today's engine.

The previous release (0.6.0) digested an event without a trace context with ``"trace_context": null`` in it, so
each claim row it wrote for such an event holds another digest than today's engine computes for the same content.
An upgrade mid-schedule leaves every row written so far as that release would have left it; pairs pending, dead,
deferred or done then meet today's consumer, replay, skip and reconcile, which must take them for the same content.
The digest is computed here from its definition, not by the engine, so that an engine that forgot the older
digest cannot also forget it here."""

from __future__ import annotations

import hashlib
from typing import Any

from outbox import Envelope
from outbox.log.canonical import canonical_json
from simulation.driver_state import DriverState

CLAIM_PREFIX = "CLAIM#"


def digest_of_0_6_0(envelope: Envelope) -> str | None:
    """The digest 0.6.0 wrote on a claim row of ``envelope``: None where it equals today's (a trace context)."""
    if envelope.trace_context is not None:
        return None
    # 0.6.0's definition: the canonical JSON of every field as pydantic dumps it, the absent context as null.
    return hashlib.sha256(canonical_json(envelope.model_dump(mode="json"))).hexdigest()


class Upgrades(DriverState):
    def upgrade(self) -> None:
        """The consumers ran 0.6.0 until now: every claim row so far holds the digest that release wrote."""
        events = {r.envelope.id: r.envelope for r in self.world.emits if r.envelope is not None}
        table = self.runtime.output("InboxTableName")
        rewritten = 0
        with self.chaos.paused():
            for row in self._claim_rows(table):
                envelope = events.get(row["pk"]["S"].removeprefix(CLAIM_PREFIX))
                older = digest_of_0_6_0(envelope) if envelope is not None and "digest" in row else None
                if older is None:
                    continue
                self.operations.dynamodb.put_item(TableName=table, Item={**row, "digest": {"S": older}})
                rewritten += 1
        self.world.upgraded = True
        self.trace.add("upgrade", f"the consumers ran 0.6.0 until now: {rewritten} claim row(s) hold its digest")

    def _claim_rows(self, table: str) -> list[dict[str, Any]]:
        paginator = self.operations.dynamodb.get_paginator("scan")
        return [
            item
            for page in paginator.paginate(TableName=table, ConsistentRead=True)
            for item in page["Items"]
            if item["pk"]["S"].startswith(CLAIM_PREFIX)
        ]
