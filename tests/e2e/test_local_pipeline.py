"""``outbox.testing.LocalPipeline`` on the example app: its view of the inbox (typed claims and dead letters), and
the failures it reports where they start: at set-up for a catalog or a consumer that cannot work, at ``drain``
for an invocation that failed as a whole."""

from __future__ import annotations

from typing import Any

import pytest

from modules.services import FAKE, SERVICES_VARIABLE
from outbox.testing.pipeline import InvocationFailedError, LocalPipeline, PipelineSetupError
from stacks.app_factory import STACK_NAME
from tests.conftest import Synthesized
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


def test_a_catalog_that_cannot_be_built_fails_the_set_up_with_its_cause(synthesized: Synthesized) -> None:
    broken = {SERVICES_VARIABLE: "not a url"}
    with pytest.raises(PipelineSetupError, match=r"catalog modules:build_catalog could not be built: \w+Error"):
        LocalPipeline.boot(synthesized.outdir, STACK_NAME, environment=broken).__enter__()


def test_a_consumer_that_cannot_start_fails_the_set_up_with_its_cause(synthesized: Synthesized) -> None:
    broken = {SERVICES_VARIABLE: FAKE, "MAX_ATTEMPTS": "zero"}
    with pytest.raises(
        PipelineSetupError, match=r"(?s)durable consumer .* cannot start: OutboxValidationError.*MAX_ATTEMPTS"
    ):
        LocalPipeline.boot(synthesized.outdir, STACK_NAME, environment=broken).__enter__()


PAYMENT = {
    "order_id": "o-1",
    "payment_id": "p-1",
    "amount_cents": 100,
    "currency": "EUR",
    "buyer_email": "a@example.com",
    "pet_tag_id": "t-1",
    "shipping_address": "1 Main St",
}


def test_drain_raises_with_the_first_error_of_an_invocation_that_failed_as_a_whole(synthesized: Synthesized) -> None:
    def broken(_event: dict[str, Any], _context: Any) -> Any:
        raise KeyError("Item")  # what a consumer missing its permissions once showed, 200 times over

    with LocalPipeline.boot(synthesized.outdir, STACK_NAME, environment={SERVICES_VARIABLE: FAKE}) as pipeline:
        pipeline.runtime.function("DurableConsumerFunctionName").override = broken
        pipeline.emit("payment.completed", PAYMENT, tenant=unique("tenant"))
        with pytest.raises(
            InvocationFailedError, match=r"invocation\(s\) failed as a whole; the first raised KeyError"
        ):
            pipeline.drain()


def test_drain_takes_an_injected_crash_in_its_stride(synthesized: Synthesized) -> None:
    with LocalPipeline.boot(synthesized.outdir, STACK_NAME, environment={SERVICES_VARIABLE: FAKE}) as pipeline:
        with pipeline.crash_before_completion("shipping.book_shipment") as crashes:
            event = pipeline.emit("payment.completed", PAYMENT, tenant=unique("tenant"))
            pipeline.drain()

        assert crashes.fired == 1
        claim = pipeline.claim(event, "shipping.book_shipment")
        assert claim is not None
        assert claim.status == "COMPLETED"
