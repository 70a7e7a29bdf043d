"""No personal data in logs or dead letters by default: what a handler's failure says is its type and where it
was raised, a validation error's field locations and error types, or a TerminalError's own message; never
the text of another exception, which may repeat the input (a pydantic error prints the buyer's e-mail)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

import pytest
from pydantic import BaseModel, Field

from outbox.redaction import ErrorDetail, describe_failure
from outbox.subscriptions import Delivery
from tests.functional.inbox_harness import Harness, HarnessFactory, one_subscription

EMAIL = "jane.doe@example.com"
ADDRESS = "12 Privet Drive"


class Shipment(BaseModel):
    buyer_email: str = Field(max_length=5)  # fails on any real address, and pydantic repeats it
    shipping_address: int  # fails on the text


def validate_shipment(delivery: Delivery) -> None:
    Shipment.model_validate(delivery.envelope.payload)


def fail_with_the_address(_delivery: Delivery) -> None:
    raise ValueError(f"no carrier serves {ADDRESS} for {EMAIL}")


@pytest.fixture
def logged(caplog: pytest.LogCaptureFixture) -> Callable[[], str]:
    """What the engine logged (the SDK's own debug log of requests carries the payload by design)."""
    caplog.set_level(logging.DEBUG, logger="outbox")
    return lambda: "\n".join(r.getMessage() for r in caplog.records if r.name.startswith("outbox"))


def recorded_text(h: Harness, subscription: str, event: Any) -> str:
    claim = h.inbox.read_claim(event.id, subscription)
    assert claim is not None
    letters = " ".join(letter["error"]["S"] for letter in h.dead_letters())
    return f"{claim.last_error or ''} {letters}"


def test_a_validation_error_names_fields_and_kinds_never_the_input(
    make_harness: HarnessFactory, logged: Callable[[], str]
) -> None:
    h = make_harness(one_subscription)
    h.recorder.behaviours["shipping.book"] = validate_shipment
    event = h.emit(buyer_email=EMAIL, shipping_address=ADDRESS)

    h.esm.drain()  # every attempt (the virtual clock passes the visibility timeouts), then the dead letter

    text = recorded_text(h, "shipping.book", event) + logged()
    assert h.dead_letters(), "the pair is dead: its dead letter is the record"
    assert EMAIL not in text
    assert ADDRESS not in text
    assert "buyer_email: string_too_long" in text
    assert "shipping_address: int_parsing" in text


def test_another_exception_s_text_is_withheld_its_type_and_place_kept(
    make_harness: HarnessFactory, logged: Callable[[], str]
) -> None:
    h = make_harness(one_subscription)
    h.recorder.behaviours["shipping.book"] = fail_with_the_address
    event = h.emit(buyer_email=EMAIL)

    h.esm.drain()

    text = recorded_text(h, "shipping.book", event) + logged()
    assert h.claim_status("shipping.book", event) == "DEAD", "retried on every attempt, then dead"
    assert EMAIL not in text
    assert ADDRESS not in text
    assert "ValueError at test_no_personal_data.py" in text
    assert "in fail_with_the_address" in text


def test_full_detail_keeps_the_text_for_stacks_without_real_people(make_harness: HarnessFactory) -> None:
    h = make_harness(one_subscription)
    h.consumer.error_detail = ErrorDetail.FULL
    h.recorder.behaviours["shipping.book"] = fail_with_the_address
    event = h.emit(buyer_email=EMAIL)

    h.esm.drain()

    assert EMAIL in recorded_text(h, "shipping.book", event)


def test_a_terminal_error_keeps_the_message_its_author_wrote_for_the_operator() -> None:
    from outbox import TerminalError

    assert describe_failure(TerminalError("tag registry said no")) == "TerminalError: tag registry said no"


def test_a_client_error_keeps_its_code_and_operation_not_its_message() -> None:
    from botocore.exceptions import ClientError

    error = ClientError({"Error": {"Code": "ValidationException", "Message": f"bad value {EMAIL}"}}, "PutItem")
    described = describe_failure(error)
    assert described.startswith("ClientError (ValidationException, PutItem) at")
    assert EMAIL not in described


def test_a_long_validation_error_lists_ten_fields_and_says_there_are_more() -> None:
    class Wide(BaseModel):
        model_config = {"extra": "forbid"}

    try:
        Wide.model_validate({f"field{n}": EMAIL for n in range(12)})
    except Exception as exc:  # the error under test
        described = describe_failure(exc)
    assert described.startswith("ValidationError: 12 invalid: field0: extra_forbidden")
    assert described.endswith("; ...")
    assert EMAIL not in described


def test_a_key_that_came_from_the_input_is_not_shown_as_a_location() -> None:
    class Tags(BaseModel):
        model_config = {"extra": "forbid"}
        owners: dict[str, int]

    try:
        Tags.model_validate({"owners": {EMAIL: "many"}, EMAIL: 1})
    except Exception as exc:  # the error under test
        described = describe_failure(exc)
    assert EMAIL not in described
    assert "owners.<key>: int_parsing" in described
    assert "<key>: extra_forbidden" in described


def parse_the_carrier_answer(_delivery: Delivery) -> None:
    json.loads("<html>502</html>")  # raises inside the standard library


def test_a_failure_is_placed_where_it_left_the_application_not_deep_in_a_library() -> None:
    try:
        parse_the_carrier_answer(None)  # type: ignore[arg-type]
    except ValueError as exc:
        described = describe_failure(exc)
    assert described.startswith("JSONDecodeError at test_no_personal_data.py:")
    assert "in parse_the_carrier_answer" in described


def test_a_poison_pill_s_error_and_log_line_name_the_field_never_its_input(
    make_harness: HarnessFactory, logged: Callable[[], str]
) -> None:
    # An event row whose time is not a time, and repeats what a person typed: pydantic's message would say
    # input_value='not-a-time jane.doe@example.com'
    h = make_harness(one_subscription)
    item = h.store.emit("order.created", {"n": 1}, tenant="acme", actor="test").to_item()
    item["occurred_at"] = {"S": f"not-a-time {EMAIL}"}
    h.send(json.dumps(item), "acme", "poison-with-an-email")

    h.esm.drain()

    [pill] = h.poison_pills()
    assert pill["error"]["S"] == "event row is not a valid envelope: 1 invalid: occurred_at: datetime_from_date_parsing"
    assert EMAIL not in pill["error"]["S"]
    assert EMAIL not in logged()
    assert EMAIL in pill["body"]["S"], "the body itself is kept, as received, for diagnosis"
