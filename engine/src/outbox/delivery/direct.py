"""The direct path of a DynamoDB-only subscription: run with no claim, commit the writes with a marker.

Taken only where no history can exist yet (``Pair.runs_directly``: a first receive, not a repair, young enough that
a missing row proves the pair never completed): the handler runs with no claim, then its writes commit with a
completion marker that requires the pair to have no row (``Run.commit_directly``), one request on the happy path.
A crash before the commit leaves nothing (the handler's only effects are the writes it returned), so the
redelivery runs it again, under a lease. Any history it meets (a failed attempt, a replay, a lease) sends the run
under a lease (``Run.under_lease``).

The ordered gate (``outbox.delivery.ordered``) commits an ordered subscription's next event the same way, with
the watermark's move in the same transaction.
"""

from __future__ import annotations

from outbox.delivery.observers import Told
from outbox.delivery.path import DeliveryOutcome, is_terminal_completion
from outbox.delivery.run import Run
from outbox.inbox import COMPLETED, DEAD
from outbox.inbox.rows import same_content
from outbox.observing import AROUND, observed


class DirectPath:
    """One request per effect on the happy path; under a lease for everything else."""

    def deliver(self, run: Run) -> DeliveryOutcome:
        if run.pair.runs_directly:
            outcome = self._run_unclaimed(run)
            if outcome is not None:
                return outcome
            if run.lacks_time():
                return DeliveryOutcome.RETRY  # the run took the time a second one needs: not started
        return run.under_lease()

    @observed(AROUND["run_directly"])
    def _run_unclaimed(self, run: Run) -> DeliveryOutcome | None:
        """Run and commit; None when the pair has history (a run under a lease decides). A failure is claimed
        after the fact, so attempts are counted and dead letters earned as under a lease."""
        envelope, subscription, digest = run.envelope, run.subscription, run.pair.digest
        try:
            handler_result = run.run_handler(run.pair.key, 1)
        except Exception as exc:  # a handler may raise anything: classify it, never lose it
            return run.fail_unclaimed(exc, terminal=None)
        try:
            existing = run.commit_directly(handler_result)
        except Exception as exc:  # every completion failure is classified, as under a lease
            return run.fail_unclaimed(exc, terminal=is_terminal_completion(exc))
        if existing is None:
            run.tell(Told.COMPLETED)
            return DeliveryOutcome.COMPLETED
        if not same_content(existing, envelope, digest):  # an older engine's row holds an older digest
            return run.conflict(existing, 1)
        if existing.get("status", {}).get("S") in (COMPLETED, DEAD):
            run.tell(Told.DUPLICATE, subscription=subscription.name)
            return DeliveryOutcome.SKIPPED
        return None
