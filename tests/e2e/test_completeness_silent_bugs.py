"""The ways the last review found to lose work silently, brought about on the local runtime through its real seams
(a handler's terminal failure, the operator's own commands, a queue purge, a deploy of the anchoring function), each
as the engine left it before its fix: the completeness pass counts it, and ``MissingPairsAlarm`` as synthesized
fires within two passes past the bound, where nothing else said a word (no dead letter open, no DLQ message).

The third, an ordered subscription narrowed so that its order waits for an event it no longer has, needs an ordered
subscription of two event types, which the example has not (its journal takes ``order.created`` only):
tests/functional/test_completeness_pass.py brings it about on moto."""

from __future__ import annotations

from typing import Any

import pytest

from outbox import TerminalError
from outbox.inbox import DEAD, DEFERRED, REPLAYING
from outbox.local import faults
from tests.conftest import Synthesized
from tests.e2e.backends import LocalBackend, claim_statuses
from tests.e2e.test_completeness import (
    AlarmStates,
    deploy_anchoring,
    missing_after_two_passes,
    missing_pairs_alarm,
    purge,
)
from tests.e2e.test_ordered_subscriptions import JOURNAL, placed
from tests.e2e.test_pipeline import order_and_pay, unique
from tests.e2e.test_runbook import operations, outbox
from tests.e2e.test_tamper_evidence import run_anchoring

MARK = "pet_tag.mark_ordered"


@pytest.fixture
def alarm(synthesized: Synthesized) -> AlarmStates:
    return missing_pairs_alarm(synthesized)


@pytest.fixture
def tenant(local: LocalBackend) -> str:
    """A new tenant, after a pass that has seen the catalog."""
    run_anchoring(local)
    local.runtime.clock.advance(1)
    return unique("tenant")


def test_a_replay_whose_message_ran_nothing_raises_the_alarm(
    local: LocalBackend, tenant: str, alarm: AlarmStates
) -> None:
    # Given a dead pair, replayed by the operator (its letter dealt with), whose message nothing ever ran
    with faults.fail_handler(MARK, times=1, error=lambda: TerminalError("tag registry said no")):
        payment = order_and_pay(local, tenant)
        local.settle()
    assert claim_statuses(local, payment)[MARK] == DEAD
    replayed = outbox(local, "replay", "--tenant", tenant, "--yes", "--json")
    assert replayed.exit_code == 0, replayed.output
    purge(local)
    local.settle()
    assert claim_statuses(local, payment)[MARK] == REPLAYING
    assert operations(local).dead_letters(tenant) == []  # nothing open: silent

    # Then the pass reports it in both passes, and the alarm fires
    counts = missing_after_two_passes(local)
    assert counts == [1, 1]
    assert alarm(counts) == ["ALARM", "ALARM"]
    [pair] = [pair for pair in operations(local).status().missing if pair.tenant == tenant]
    assert (pair.event_id, pair.subscription, pair.state) == (payment, MARK, REPLAYING)
    assert pair.repair.startswith(f"outbox reconcile --tenant {tenant} --subscription {MARK}")
    assert_repaired_by_its_command(local, tenant, pair.repair, payment, MARK)


def test_deferred_events_a_deploy_took_out_of_the_order_raise_the_alarm(
    local: LocalBackend, tenant: str, alarm: AlarmStates
) -> None:
    # Given the journal dead on one line for good, and the next waiting behind it
    with faults.fail_handler(JOURNAL, times=1, error=lambda: TerminalError("journal refused the line")):
        dead = placed(local, tenant)
        local.settle()
    waiting = placed(local, tenant)
    local.settle()
    assert (claim_statuses(local, dead.id)[JOURNAL], claim_statuses(local, waiting.id)[JOURNAL]) == (DEAD, DEFERRED)

    # When a deploy takes the journal out of the order: nothing will wake the waiting line. (It reaches the
    # anchoring function, whose catalog is data; the consumer's is the app's code, which stays as it was, so the
    # repair it names is left to a whole deploy.)
    def unordered(durable: list[list[Any]]) -> None:
        for row in durable:
            if row[0] == JOURNAL:
                row[2] = 0

    deploy_anchoring(local, unordered)

    # Then the waiting line is reported (the dead one has its letter: an outcome), and the alarm fires
    counts = missing_after_two_passes(local)
    assert counts == [1, 1]
    assert alarm(counts) == ["ALARM", "ALARM"]
    [pair] = [pair for pair in operations(local).status().missing if pair.tenant == tenant]
    assert (pair.event_id, pair.subscription, pair.state) == (waiting.id, JOURNAL, DEFERRED)
    assert "no longer part of its subscription's order" in pair.why


def assert_repaired_by_its_command(local: LocalBackend, tenant: str, repair: str, event_id: str, name: str) -> None:
    """The command the pass named runs the pair, and the next pass finds nothing missing."""
    done = outbox(local, *repair.split()[1:], "--yes", "--json")
    assert done.exit_code == 0, done.output
    local.settle()
    assert claim_statuses(local, event_id)[name] == "COMPLETED"
    assert run_anchoring(local)["completeness"]["missing_pairs"] == 0
