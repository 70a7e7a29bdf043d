"""The flat options of earlier releases (``alarm_email=``, ``record_changes_from=``, ``consumer_timeout=``, ...) still
work for this release: each is read into the group that replaces it, and the template is the one the group makes;
each says it is deprecated and what to write instead, as a ``DeprecationWarning`` and as a warning ``cdk synth``
prints. A flat option beside its group, or a name no release had, is refused."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
from aws_cdk import App, Duration, Stack
from aws_cdk import aws_sns as sns
from aws_cdk.assertions import Annotations, Match, Template

from outbox_cdk import (
    Alarms,
    ConsumerOptions,
    OperatorAccess,
    OperatorTrust,
    PipeLogs,
    RecordChanges,
    WorkflowOptions,
)
from outbox_cdk.options import FLAT_OPTIONS, replacement
from tests.infrastructure.test_pipeline import NOBODY, example_pipeline, orders_table

TRUST = OperatorTrust(require_mfa=True)
# Every flat option but the alarms' (one answer each), with a value other than its default ...
FLAT: dict[str, Any] = {
    "no_alarm_subscriber": "paged by our on-call tool",
    "operator_trust": TRUST,
    "operator_endpoint_concurrency": 3,
    "consumer_max_concurrency": 7,
    "consumer_timeout": Duration.seconds(90),
    "record_change_entities": ["ORDER"],
    "record_change_max_concurrency": 9,
    "record_change_timeout": Duration.seconds(40),
    "pipe_log_level": "INFO",
    "pipe_log_execution_data": True,
    "workflow_execution_timeout": Duration.days(3),
    "workflow_retention_days": 12,
}
# ... and the groups that say the same.
GROUPED: dict[str, Any] = {
    "alarms": Alarms.nobody("paged by our on-call tool"),
    "operator_access": OperatorAccess(trust=TRUST, endpoint_concurrency=3),
    "durable_consumer": ConsumerOptions(max_concurrency=7, timeout=Duration.seconds(90)),
    "pipe_logs": PipeLogs(level="INFO", execution_data=True),
    "workflows": WorkflowOptions(execution_timeout=Duration.days(3), retention_days=12),
}


def pipeline(options: dict[str, Any], lane: dict[str, Any] | None = None) -> Stack:
    """A pipeline with ``options``; its record changes from a table ``Orders`` of the stack, given as ``lane``
    says (``record_changes_from`` or ``record_changes`` with the table filled in)."""
    stack = Stack(App(context={"aws:cdk:bundling-stacks": []}), "Mine")
    orders, topic = orders_table(stack), sns.Topic(stack, "Theirs")
    placed = {"TOPIC": topic, "ALARMS TO THE TOPIC": Alarms.topic(topic)}  # the stack's topic, by name
    given = {name: placed.get(value, value) if isinstance(value, str) else value for name, value in options.items()}
    for name, value in (lane or {}).items():
        given[name] = orders if value is None else RecordChanges(orders, **value)
    example_pipeline(stack, **{"alarms": None, **given})
    return stack


def synthesized(options: dict[str, Any], lane: dict[str, Any] | None = None) -> tuple[dict[str, Any], list[str]]:
    """The template, and the deprecation warnings the construct raised."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        stack = pipeline(options, lane)
    deprecated = [w for w in caught if issubclass(w.category, DeprecationWarning)]
    caller = example_pipeline.__code__.co_filename  # the line that passed the flat option, not the engine's
    assert {w.filename for w in deprecated} <= {caller}, "each warning names the caller's line"
    notices = [str(w.message) for w in deprecated]
    annotated = Annotations.from_stack(stack).find_warning("*", Match.string_like_regexp("is deprecated"))
    assert len(annotated) == len(notices), "each notice is also a warning cdk synth prints"
    return Template.from_stack(stack).to_json(), notices


def test_every_flat_option_makes_the_template_its_group_makes_and_says_what_to_write() -> None:
    flat, notices = synthesized(FLAT, lane={"record_changes_from": None})
    consumer = ConsumerOptions(max_concurrency=9, timeout=Duration.seconds(40))
    grouped, none = synthesized(GROUPED, lane={"record_changes": {"entities": ["ORDER"], "consumer": consumer}})
    assert flat == grouped
    assert none == []
    assert len(notices) == len(FLAT) + 1 == len(FLAT_OPTIONS) - 2
    for name in [*FLAT, "record_changes_from"]:
        [notice] = [n for n in notices if n.startswith(f"OutboxPipeline({name}=...) is deprecated")]
        assert replacement(name) in notice, "it names what to write instead"


@pytest.mark.parametrize(
    ("flat", "grouped"),
    [
        ({"alarm_email": "ops@example.com"}, Alarms.email("ops@example.com")),
        ({"alarm_topic": "TOPIC"}, "ALARMS TO THE TOPIC"),
    ],
)
def test_the_other_alarm_answers_read_as_their_groups(flat: dict[str, Any], grouped: Any) -> None:
    template, [notice] = synthesized(flat)
    assert "alarms=Alarms." in notice
    assert template == synthesized({"alarms": grouped})[0]


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        (
            {"alarms": Alarms.email("ops@example.com"), "alarm_email": "ops@example.com"},
            ValueError,
            "give alarms= or alarm_email, not both",
        ),
        (
            {**NOBODY, "durable_consumer": ConsumerOptions(timeout=Duration.seconds(90)), "consumer_timeout": 90},
            ValueError,
            "give durable_consumer= or consumer_timeout, not both",
        ),
        ({**NOBODY, "consumer_timeouts": Duration.seconds(90)}, TypeError, "unexpected keyword arguments: consumer_t"),
        ({**NOBODY, "record_change_entities": ["ORDER"]}, ValueError, "give record_changes_from too"),
    ],
)
def test_a_flat_option_beside_its_group_or_unknown_is_refused(
    options: dict[str, Any], error: type[Exception], message: str
) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        with pytest.raises(error, match=message):
            pipeline({name: value for name, value in options.items() if name != "operators"})
