"""A replay never hands dead work to a subscription the deployed catalog no longer has.

The consumer runs only the subscriptions of its catalog: a repair message naming a removed one is acknowledged
and runs nothing. A replay that cleared such a pair's claim (REPLAYING) and resolved its dead letter would report
it repaired while nothing will ever move it.
"""

from __future__ import annotations

import pytest

from outbox import Envelope, TerminalError
from outbox.exceptions import OperationRefusedError
from outbox.inbox import DEAD
from outbox.ops.context import OperatorContext
from outbox.ops.replay import plan_replay, replay
from outbox.subscriptions import Delivery, Subscription
from tests.functional.inbox_harness import Harness, HarnessFactory, Recorder, operator_context

KEPT = "ledger.post"
REMOVED = "tally.count"  # the deploy after the failure removed it


def _refuse(_delivery: Delivery) -> None:
    raise TerminalError("the account is closed")


def dead_in_both(make_harness: HarnessFactory) -> tuple[Harness, Envelope]:
    def subscriptions(recorder: Recorder) -> list[Subscription]:
        recorder.behaviours[KEPT] = _refuse
        recorder.behaviours[REMOVED] = _refuse
        return [recorder.subscription(KEPT, "account.*"), recorder.subscription(REMOVED, "account.*")]

    h = make_harness(subscriptions)
    envelope = h.store.emit("account.opened", {"amount": 1}, tenant="acme", actor="test")
    h.publish(envelope)
    h.esm.drain()
    assert (h.claim_status(KEPT, envelope), h.claim_status(REMOVED, envelope)) == (DEAD, DEAD)
    return h, envelope


def operator_after_the_removal(h: Harness) -> OperatorContext:
    """The operator's tools with the catalog as deployed now: the removed subscription is not in it."""
    return operator_context(h, [s for s in h.consumer.registry.subscriptions if s.name == KEPT])


def open_dead_letters(h: Harness) -> list[str]:
    return [row["sk"]["S"].rsplit("#", 1)[-1] for row in h.dead_letters() if "resolved" not in row]


def test_a_tenant_replay_reruns_the_deployed_subscription_and_leaves_the_removed_ones_dead(
    make_harness: HarnessFactory,
) -> None:
    h, envelope = dead_in_both(make_harness)
    h.recorder.behaviours[KEPT] = lambda _d: None  # the fix
    context = operator_after_the_removal(h)

    plan = plan_replay(context, tenant="acme")
    replay(context, plan)
    h.esm.drain()

    assert [item.subscription for item in plan] == [KEPT]
    assert h.claim_status(KEPT, envelope) == "COMPLETED"
    # The removed subscription's pair is still what it was: dead, with its dead letter open.
    assert h.claim_status(REMOVED, envelope) == DEAD
    assert open_dead_letters(h) == [REMOVED]


def test_a_replay_of_only_a_removed_subscriptions_dead_work_is_refused_with_what_to_do(
    make_harness: HarnessFactory,
) -> None:
    h, envelope = dead_in_both(make_harness)
    h.recorder.behaviours[KEPT] = lambda _d: None
    context = operator_after_the_removal(h)
    replay(context, plan_replay(context, event_ids=[envelope.id]))  # the deployed one first
    h.esm.drain()

    with pytest.raises(OperationRefusedError, match=r"unknown subscription 'tally\.count'.*deploy it again"):
        plan_replay(context, event_ids=[envelope.id], subscription=REMOVED)
    with pytest.raises(
        OperationRefusedError,
        match=r"no longer runs \(\w+:tally\.count: tally\.count is not in the deployed catalog\)",
    ):
        plan_replay(context, tenant="acme")
    assert h.claim_status(REMOVED, envelope) == DEAD
    assert open_dead_letters(h) == [REMOVED]
