"""The WORKFLOW lane's names and catalog rules (outbox.workflows): an execution name within Lambda's limits for
every pair and attempt, never one name for two of them; a workflow handler only on its lane, and only a durable one."""

from __future__ import annotations

import string

import pytest
from hypothesis import given
from hypothesis import strategies as st

from outbox.exceptions import ContractViolationError, OutboxValidationError
from outbox.subscriptions import (
    SUBSCRIPTION_NAME_MAX_LENGTH,
    SUBSCRIPTION_NAME_PATTERN,
    Lane,
    Subscription,
    SubscriptionRegistry,
)
from outbox.workflows import (
    EXECUTION_NAME_PATTERN,
    WorkflowHandler,
    durable_handler_problem,
    execution_name,
    is_durable_handler,
    workflow,
)

ULID_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
event_ids = st.text(ULID_ALPHABET, min_size=26, max_size=26)
_part = st.from_regex(r"[a-z][a-z0-9_]{0,30}", fullmatch=True)
subscriptions = (
    st.lists(_part, min_size=1, max_size=6).map(".".join).filter(lambda name: len(name) <= SUBSCRIPTION_NAME_MAX_LENGTH)
)
attempts = st.integers(min_value=1, max_value=99_999)
pairs = st.tuples(event_ids, subscriptions, attempts)


@given(pair=pairs)
def test_every_name_fits_lambdas_limits(pair: tuple[str, str, int]) -> None:
    event_id, subscription, attempt = pair
    assert SUBSCRIPTION_NAME_PATTERN.fullmatch(subscription)
    name = execution_name(event_id, subscription, attempt)
    assert EXECUTION_NAME_PATTERN.fullmatch(name), name
    assert name.startswith(f"{event_id}-{attempt}-"), "the name is read by people: it starts with the event and attempt"


@given(first=pairs, second=pairs)
def test_two_pairs_or_attempts_never_share_a_name(first: tuple[str, str, int], second: tuple[str, str, int]) -> None:
    if first != second:
        assert execution_name(*first) != execution_name(*second)


@given(event_id=event_ids, subscription=subscriptions, attempt=attempts)
def test_a_name_differs_in_its_subscription_even_where_only_its_tail_does(
    event_id: str, subscription: str, attempt: int
) -> None:
    """Two long names alike but for their last letters (the readable prefix is cut short there) stay apart."""
    longer = f"{subscription}.{'x' * 40}"
    other = f"{subscription}.{'x' * 39}y"
    assert execution_name(event_id, longer, attempt) != execution_name(event_id, other, attempt)


@pytest.mark.parametrize("event_id", ["", "01J", "01JABCDEFGHJKMNPQRSTVWXYZ0a", "01JABCDEFGHJKMNPQRSTVWXY-0"])
def test_an_event_id_that_is_not_a_ulid_is_refused(event_id: str) -> None:
    with pytest.raises(OutboxValidationError, match="not a ULID"):
        execution_name(event_id, "shipping.ship")


@pytest.mark.parametrize("attempt", [0, -1, True])
def test_attempts_count_from_one(attempt: int) -> None:
    with pytest.raises(OutboxValidationError, match="counts from 1"):
        execution_name("01JABCDEFGHJKMNPQRSTVWXYZ0", "shipping.ship", attempt)


# -- the catalog --------------------------------------------------------------------------------------------------


def _plain(_delivery: object) -> None:
    return None


def test_a_workflow_handler_is_a_path_and_is_never_called_in_the_consumer() -> None:
    handler = workflow("shop.shipping:handler")
    assert handler.lambda_handler == "shop.shipping.handler"
    with pytest.raises(ContractViolationError, match="its own durable function"):
        handler(object())
    for bad in ("shop.shipping", "shop/shipping:handler", ":handler", "shop.shipping:", "shop.shipping:a.b"):
        with pytest.raises(OutboxValidationError, match=r"package\.module:function"):
            WorkflowHandler(bad)


def test_the_workflow_lane_takes_workflow_handlers_only_and_they_take_no_other_lane() -> None:
    with pytest.raises(OutboxValidationError, match="not a callable of the consumer"):
        SubscriptionRegistry.of([Subscription("shipping.ship", "order.paid", Lane.WORKFLOW, _plain)])
    for lane in (Lane.DURABLE, Lane.LOCAL, Lane.INLINE):
        with pytest.raises(OutboxValidationError, match=r"put it on Lane\.WORKFLOW"):
            SubscriptionRegistry.of([Subscription("shipping.ship", "order.paid", lane, workflow("a.b:c"))])
    with pytest.raises(OutboxValidationError, match="needs the DURABLE lane"):
        Subscription("shipping.ship", "order.paid", Lane.WORKFLOW, workflow("a.b:c"), ordered=True)
    registry = SubscriptionRegistry.of([Subscription("shipping.ship", "order.paid", Lane.WORKFLOW, workflow("a.b:c"))])
    assert registry.matching("order.paid", Lane.WORKFLOW)


def test_a_durable_handler_is_told_from_a_plain_function() -> None:
    from aws_durable_execution_sdk_python import durable_execution

    def plain(event: object, context: object) -> None:
        return None

    assert is_durable_handler(durable_execution(plain))
    assert not is_durable_handler(plain)
    assert not is_durable_handler(durable_execution)  # the decorator itself is not a handler
    problem = durable_handler_problem(workflow("tests.unit.test_workflow_lane:_plain"))
    assert problem is not None
    assert "@durable_execution" in problem
    missing = durable_handler_problem(workflow("tests.unit.no_such_module:handler"))
    assert missing is not None
    assert "cannot import" in missing
    assert durable_handler_problem(workflow("tests.unit.test_workflow_lane:durable_example")) is None


def _durable_example() -> object:
    from aws_durable_execution_sdk_python import durable_execution

    @durable_execution
    def handler(event: object, context: object) -> None:
        return None

    return handler


durable_example = _durable_example()


def test_execution_names_use_only_lambdas_characters() -> None:
    allowed = set(string.ascii_letters + string.digits + "-_")
    assert set(execution_name("01JABCDEFGHJKMNPQRSTVWXYZ0", "a." * 49 + "b", 12345)) <= allowed
