"""``Operations``: every operator action as a method, over one ``OperatorContext``. The CLI, the operator
endpoint, the local runtime and the tests hold one of these.

Each action is a function of the module that holds its rules (``status``, ``replay``, ``redrive``,
``reconcile``, ``groups``) that takes the context first: set on this class, it is a method of the operations."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from outbox.inbox import ClaimRecord, DeadLetter, PoisonPill
from outbox.ops import audit as auditing
from outbox.ops import groups as grouping
from outbox.ops import order_status, ordering
from outbox.ops import reconcile as reconciling
from outbox.ops import redrive as redriving
from outbox.ops import replay as replaying
from outbox.ops import status as reading
from outbox.ops.context import OperatorContext


class Operations(OperatorContext):
    """Every operator action, over injected clients (AWS, or the local runtime)."""

    # -- reading ------------------------------------------------------------------------------------

    status = reading.read_status
    queue_depths = reading.queue_depths
    pipe_states = reading.pipe_states
    verify = reading.verify
    findings = auditing.findings
    blocked = order_status.blocked
    skip = ordering.skip
    failure_groups = grouping.failure_groups

    def dead_letters(self, tenant: str, **selection: Any) -> list[DeadLetter]:
        """The tenant's dead letters, selected as ``InboxReader.dead_letters`` selects them (subscription,
        event_id, since, until, include_resolved): one signature, kept there."""
        return self.inbox.dead_letters(tenant, **selection)

    def poison_pills(self, day: datetime | None = None) -> list[PoisonPill]:
        """The poison pills of ``day`` (default: today), as recorded."""
        return self.inbox.poison_pills(day or self.now())

    def claims(self, event_id: str) -> dict[str, ClaimRecord]:
        """The claims of one event, by subscription name."""
        return self.inbox.claims_of(event_id)

    # -- repairing ----------------------------------------------------------------------------------

    plan_replay = replaying.plan_replay
    replay = replaying.replay
    replay_group = grouping.replay_group
    skip_group = grouping.skip_group
    redrive = redriving.redrive
    redrive_route = redriving.redrive_route
    reconcile_horizon = reconciling.reconcile_horizon
    reconcile = reconciling.reconcile
    anchor = auditing.anchor
    reset_anchor = auditing.reset_anchor
