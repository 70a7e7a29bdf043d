"""``crash_after_external_effect``: the remote side applies the effect and the worker dies before the answer reaches
it, through the stand-in service's own hook (``FakeService.after_call``), with whatever the handler sends."""

from __future__ import annotations

import pytest

from outbox.local.faults import WorkerCrash, crash_after_external_effect
from outbox.testing.services import FakeService


def test_the_effect_is_applied_the_answer_lost_and_the_next_call_answers_the_first_result() -> None:
    payments = FakeService("payments")
    headers = {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
    with crash_after_external_effect(payments) as crashes:
        with pytest.raises(WorkerCrash, match="payments applied evt:charge"):
            payments.call("charge", "evt:charge", {"amount": 5}, headers=headers)
        again = payments.call("charge", "evt:charge", {"amount": 5}, headers=headers)
    assert crashes.fired == 1
    assert again == {"operation": "charge", "reference": "payments-1", "amount": 5}
    assert (len(payments.effects), payments.calls["evt:charge"]) == (1, 2), "one effect for two calls"
    assert payments.trace_headers["evt:charge"] == [headers, headers], "the headers reach the service"


def test_a_hook_already_set_still_runs_and_is_set_back_after_the_block() -> None:
    payments, seen = FakeService("payments"), []
    payments.after_call = seen.append
    with crash_after_external_effect(payments, times=0):
        payments.call("charge", "evt:1", {})
    assert payments.after_call == seen.append
    payments.call("charge", "evt:2", {})
    assert seen == ["evt:1", "evt:2"]
