"""Invariant 21's clause on attempts given back: none for a start that applied.

The local durable service loses a start's answer only once the start applied (a 500 ``ServiceException``), so the
look-up by its name that follows finds the execution and the attempt goes on. The clause reads each release of a
claim row from the inbox's stream (``simulation.reach``) and its last_error: the engine's own record of why it gave
the attempt back. If that record changed its form, the clause would go blind; the first test pins it.
"""

from __future__ import annotations

from types import SimpleNamespace

from botocore.exceptions import ClientError

from outbox.redaction import ErrorDetail, describe_failure
from simulation.catalog import SHIP
from simulation.invariants.workflows import LOST_START_ANSWER, WORKFLOWS, check_given_back


def _lost_answer() -> ClientError:
    response = {"Error": {"Code": "ServiceException", "Message": "the answer was lost"}}
    return ClientError(response, "Invoke")  # type: ignore[arg-type]


def test_the_engine_records_a_lost_start_answer_in_the_form_the_clause_reads() -> None:
    for detail in ErrorDetail:
        recorded = describe_failure(_lost_answer(), detail)
        assert all(word in recorded for word in LOST_START_ANSWER), recorded


def _world(workflow: bool = True) -> SimpleNamespace:
    return SimpleNamespace(schedule=SimpleNamespace(workflow=workflow), trace=SimpleNamespace(key=lambda key: key))


def test_an_attempt_given_back_for_a_lost_answer_is_a_violation() -> None:
    released = ((f"e1:{SHIP}", describe_failure(_lost_answer())),)
    (violation,) = check_given_back(_world(), released)  # type: ignore[arg-type]
    assert violation.invariant == WORKFLOWS
    assert f"e1:{SHIP}" in violation.message


def test_attempts_given_back_for_starts_that_never_applied_are_not() -> None:
    throttled = ClientError({"Error": {"Code": "TooManyRequestsException", "Message": "slow down"}}, "Invoke")
    released = (
        (f"e1:{SHIP}", describe_failure(throttled)),
        ("e2:sim.ledger", describe_failure(_lost_answer())),  # not the workflow's pair: its own rules
    )
    assert check_given_back(_world(), released) == []  # type: ignore[arg-type]
    assert check_given_back(_world(workflow=False), ((f"e1:{SHIP}", describe_failure(_lost_answer())),)) == []  # type: ignore[arg-type]
