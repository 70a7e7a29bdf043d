"""``outbox.testing.LocalPipeline``'s view of the inbox, on the example app: typed claims and dead letters."""

from __future__ import annotations

from outbox.testing.pipeline import LocalPipeline
from tests.e2e.backends import LocalBackend
from tests.e2e.test_pipeline import unique
from tests.e2e.test_runbook import paid_with_a_dead_pet_tag


def test_a_local_pipeline_reads_the_claims_and_dead_letters_of_its_inbox(local: LocalBackend) -> None:
    # Given a payment whose pet-tag mark died on a terminal error while its siblings completed
    tenant = unique("tenant")
    payment = paid_with_a_dead_pet_tag(local, tenant)
    pipeline = LocalPipeline(local.runtime)

    # Then each claim reads back typed, a pair that never ran reads None
    shipped = pipeline.claim(payment, "shipping.book_shipment")
    assert shipped is not None
    assert (shipped.event_id, shipped.tenant, shipped.status, shipped.attempts) == (payment, tenant, "COMPLETED", 1)
    dead = pipeline.claim(payment, "pet_tag.mark_ordered")
    assert dead is not None
    assert (dead.status, dead.dead_reason) == ("DEAD", "terminal")
    assert pipeline.claim(payment, "no.such.subscription") is None

    # And the tenant's one open dead letter is the dead pair's
    [letter] = pipeline.dead_letters(tenant)
    assert (letter.event_id, letter.subscription, letter.reason) == (payment, "pet_tag.mark_ordered", "terminal")
    assert letter.error_type == "TerminalError"
    assert pipeline.dead_letters(unique("tenant")) == []
