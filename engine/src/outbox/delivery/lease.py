"""The lease path: claim the pair, run its handler, commit it (or release it, or dead-letter it).

Every pair can take it: a first delivery, a redelivery after a crash (the expired lease is taken over), a
replay (the REPLAYING row is claimed). The commit is fenced by the claim's owner: a worker whose lease was taken
over commits nothing. It is the run's own sequence (``Run.under_lease``), the one every other way of running a
pair falls back to when it meets a history it does not handle.
"""

from __future__ import annotations

from outbox.delivery.path import DeliveryOutcome
from outbox.delivery.run import Run


class LeasePath:
    """Claim, run, commit: the outcome of one (event, subscription)."""

    def deliver(self, run: Run) -> DeliveryOutcome:
        return run.under_lease()
