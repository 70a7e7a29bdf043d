"""The fault points added for the simulator, each once on the example application (local runtime only)."""

from __future__ import annotations

from outbox.local import faults
from outbox.observing import Happening, Moment, observing
from tests.e2e.backends import LocalBackend, claim_statuses
from tests.e2e.test_pipeline import order_and_pay, unique


def test_a_worker_killed_before_its_claim_runs_the_handler_once_on_redelivery(local: LocalBackend) -> None:
    with faults.crash_before_claim(subscription="notify.buyer") as crash:
        payment_event = order_and_pay(local, unique("tenant"))
        local.settle()

    assert crash.fired == 1
    assert local.service("notifier").calls[f"{payment_event}:notify.buyer"] == 1
    assert set(claim_statuses(local, payment_event).values()) == {"COMPLETED"}


def test_a_worker_killed_after_its_completion_does_not_run_the_handler_again(local: LocalBackend) -> None:
    tenant = unique("tenant")
    with faults.crash_after_completion(subscription="shipping.book_shipment") as crash:
        payment_event = order_and_pay(local, tenant)
        local.settle()

    assert crash.fired == 1
    assert local.service("carrier").calls[f"{payment_event}:shipping.book_shipment"] == 1, "the claim said: done"
    assert [e.type for e in local.store().events(tenant)].count("shipment.booked") == 1


def test_a_rival_emit_between_head_read_and_commit_costs_one_retry(local: LocalBackend) -> None:
    tenant = unique("tenant")
    rival = local.store()

    def rival_emits(rival_tenant: str) -> None:
        local.profile().change_address(rival, tenant=rival_tenant, actor="rival", profile_id="p1", address="1 Rival Rd")

    with faults.rival_emit_before_commit(rival_emits) as rivalry:
        local.profile().change_address(local.store(), tenant=tenant, actor="me", profile_id="p2", address="2 Main St")

    assert rivalry.fired == 1
    assert [e.actor for e in local.store().events(tenant)] == ["rival", "me"]
    assert local.store().verify_chain(tenant).intact


def test_a_second_worker_after_the_visibility_timeout_fences_the_first(local: LocalBackend) -> None:
    order_and_pay(local, unique("tenant"))
    local.runtime.pipe("RelayPipeName").drain()
    durable = local.runtime.mapping("DurableConsumerFunctionName")
    completions: list[str] = []

    def counting(happening: Happening) -> None:
        if happening.moment is Moment.COMPLETED:  # only a completion that committed
            completions.append(happening.key)

    with (
        observing(counting),
        faults.visibility_timeout_during_handler(durable, subscription="notify.buyer") as late,
    ):
        local.settle()

    assert late.fired == 1
    buyer = [key for key in completions if key.endswith(":notify.buyer")]
    assert len(buyer) == 1, "the first worker's completion was refused: the second one owns the claim"


def test_throttling_any_dynamodb_call_loses_nothing(local: LocalBackend) -> None:
    class EveryThird(faults.FaultCount):
        def take(self, subject: str = "") -> bool:
            self.remaining += 1
            if self.remaining % 3 or self.fired >= 8:
                return False
            self.fired += 1
            return True

    with faults.throttle_dynamodb_calls(EveryThird(0), operations=("UpdateItem", "TransactWriteItems")) as throttled:
        payment_event = order_and_pay(local, unique("tenant"))
        local.settle()

    assert throttled.fired > 0
    assert set(claim_statuses(local, payment_event).values()) == {"COMPLETED"}


def test_a_fault_point_of_the_test_s_own_kills_the_worker_as_the_handler_starts(local: LocalBackend) -> None:
    """An observer that raises is a fault point: here, the worker dies once as notify.buyer's handler starts (its
    claim committed, nothing of its effect done), and the redelivery's take-over runs it once."""
    seen: list[Moment] = []

    def dies_once(happening: Happening) -> None:
        if happening.subscription != "notify.buyer":
            return
        seen.append(happening.moment)
        if happening.moment is Moment.HANDLER_STARTS and seen.count(Moment.HANDLER_STARTS) == 1:
            raise faults.WorkerCrash(f"killed as {happening.key} started")

    with observing(dies_once):
        payment_event = order_and_pay(local, unique("tenant"))
        local.settle()

    assert local.service("notifier").calls[f"{payment_event}:notify.buyer"] == 1
    assert set(claim_statuses(local, payment_event).values()) == {"COMPLETED"}
    assert seen.count(Moment.CLAIMED) == 2, "the crashed attempt's claim, then the take-over's"
    assert seen.count(Moment.RUN_RAISED) == 1
    assert seen[-1] is Moment.DELIVERED


def test_an_observer_sees_each_pair_complete_once_on_either_path(local: LocalBackend) -> None:
    """docs/testing.md's first observer: a completion under a lease, or a direct commit whose marker committed."""
    completed: list[str] = []

    def note(happening: Happening) -> None:
        committed_directly = happening.moment is Moment.DIRECT_COMMIT_DONE and happening.detail.result is None
        if happening.moment is Moment.COMPLETED or committed_directly:
            completed.append(happening.key)

    with observing(note), faults.crash_after_completion() as crash:
        payment_event = order_and_pay(local, unique("tenant"))
        local.settle()

    statuses = claim_statuses(local, payment_event)
    assert crash.fired == 1
    assert sorted(completed.count(f"{payment_event}:{name}") for name in statuses) == [1] * len(statuses)
