"""What an operator does: status, chain verification, dead letters, replay, redrive and reconciliation.
One implementation for the ``outbox`` CLI, the operator endpoint and the tests.

The rules every repair follows, so that none can rerun work that completed, at any age:

- Dead work is an (event, subscription) pair with a DEAD claim and an open dead letter. ``replay`` reruns
  exactly the selected pairs: it clears each DEAD claim and re-sends the event from the events table with
  a message that names those subscriptions only (``outbox.messages``), never the event's other
  subscriptions, whose completions the inbox may have forgotten.
- The durable DLQ is a transport backstop (messages the consumer could not process at all). ``redrive``
  moves them back unchanged and clears nothing: each subscription then runs, or is skipped as COMPLETED,
  or stays dead with its open dead letter (shown by ``status``, repaired by ``replay``).
- ``reconcile`` re-sends only events the inbox can still vouch for (younger than its retention), naming
  only the subscriptions without a claim (or with a claim long left waiting).
- Every repair message is vouched for by a claim row written before it is sent (REPLAYING: by replay from
  DEAD, by reconcile where there was none), so however late it arrives, the consumer knows the pair has
  not completed since; a missing row proves that only for an event younger than the inbox's retention.
- Put back before removing the old copy: an interruption leaves a duplicate, which the inbox absorbs.

Modules: ``topology`` (where everything is), ``context`` (the clients, the clock and what the actions
share), ``status``, ``replay``, ``redrive``, ``reconcile`` (one action each, with its result type),
``groups`` (open dead letters grouped by failure, and the repairs of a whole group), ``ordering`` (ordered
subscriptions: what waits, and ``skip``), ``audit``, ``facade`` (``Operations``, every action as a
method), and ``status_view`` and ``status_html`` (status and the failure groups as one HTML page sized to a
box: the dashboard's status widget and ``outbox status --html``).
"""

from outbox.exceptions import OperationRefusedError
from outbox.inbox import ClaimRecord, DeadLetter, PoisonPill
from outbox.ops.context import OperatorContext
from outbox.ops.facade import Operations
from outbox.ops.groups import FailureGroup, GroupRepair
from outbox.ops.reconcile import ReconcileResult
from outbox.ops.redrive import RedriveResult
from outbox.ops.replay import ReplayItem, ReplayResult
from outbox.ops.status import QueueDepth, Status, TenantStatus
from outbox.ops.topology import Topology

__all__ = [
    "ClaimRecord",
    "DeadLetter",
    "FailureGroup",
    "GroupRepair",
    "OperationRefusedError",
    "Operations",
    "OperatorContext",
    "PoisonPill",
    "QueueDepth",
    "ReconcileResult",
    "RedriveResult",
    "ReplayItem",
    "ReplayResult",
    "Status",
    "TenantStatus",
    "Topology",
]
