"""The relay pipe (events stream -> durable FIFO queue), read from the synthesized template.

What it shares with the record-change pipe (source settings, DLQ, logs, role) is in test_stream_pipes.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from outbox_cdk import relay_pipe
from stacks.settings import ExampleSettings
from tests.example_app import TRIAL_CONTEXT, TRIAL_OPERATOR, settings_from
from tests.infrastructure.template_queries import only_resource

TWENTY_FOUR_HOURS = 24 * 60 * 60


@pytest.fixture(scope="module")
def pipe(stack_template: dict[str, Any]) -> dict[str, Any]:
    _, resource = only_resource(stack_template, "AWS::Pipes::Pipe", "RelayPipe")
    return resource["Properties"]  # type: ignore[no-any-return]


def test_only_event_rows_pass_the_filter_which_names_only_what_is_certain(pipe: dict[str, Any]) -> None:
    filters = pipe["SourceParameters"]["FilterCriteria"]["Filters"]
    assert len(filters) == 1
    pattern = json.loads(filters[0]["Pattern"])
    assert pattern == {
        "dynamodb": {"NewImage": {"kind": {"S": ["EVENT"]}}, "OldImage": {"kind": {"S": [{"exists": False}]}}}
    }
    assert "eventName" not in pattern, "whether Pipes filters on eventName is uncertain: the lane must not hang on it"


@pytest.mark.parametrize(
    ("record", "relayed"),
    [
        ({"eventName": "INSERT", "dynamodb": {"NewImage": {"kind": {"S": "EVENT"}}}}, True),
        ({"eventName": "INSERT", "dynamodb": {"NewImage": {"kind": {"S": "HEAD"}}}}, False),
        ({"eventName": "MODIFY", "dynamodb": {"NewImage": {"kind": {"S": "HEAD"}}}}, False),
        ({"eventName": "INSERT", "dynamodb": {"NewImage": {"kind": {"S": "TENANT"}}}}, False),
        ({"eventName": "REMOVE", "dynamodb": {"OldImage": {"kind": {"S": "EVENT"}}}}, False),
        (
            {
                "eventName": "MODIFY",
                "dynamodb": {"NewImage": {"kind": {"S": "EVENT"}}, "OldImage": {"kind": {"S": "EVENT"}}},
            },
            False,
        ),
    ],
    ids=["event-insert", "head-insert", "head-update", "tenant-row", "event-removed", "event-rewritten"],
)
def test_the_filter_relays_event_rows_and_nothing_else(record: dict[str, Any], relayed: bool) -> None:
    from outbox.local.pipe_filter import compile_filter_criteria

    assert compile_filter_criteria([json.dumps(relay_pipe.FILTER_PATTERN)]).matches(record) is relayed


def test_the_filter_uses_only_exact_matches_and_exists_which_pipes_supports(pipe: dict[str, Any]) -> None:
    # Pipes rejects anything-but with prefix/suffix/ignore-case/wildcard and wildcard; exact string matches
    # and exists are supported, so the pattern's leaves must be plain strings or an exists test.
    def leaves(node: Any) -> list[Any]:
        if isinstance(node, dict):
            return [leaf for value in node.values() for leaf in leaves(value)]
        if isinstance(node, list):
            return list(node)
        return [node]

    pattern = json.loads(pipe["SourceParameters"]["FilterCriteria"]["Filters"][0]["Pattern"])
    assert all(isinstance(leaf, str) or leaf in ({"exists": False}, {"exists": True}) for leaf in leaves(pattern))


def test_the_target_gets_the_raw_image_grouped_by_tenant_and_deduplicated_by_event_id(
    pipe: dict[str, Any],
) -> None:
    assert pipe["TargetParameters"] == {
        "InputTemplate": "<$.dynamodb.NewImage>",
        "SqsQueueParameters": {
            "MessageGroupId": "$.dynamodb.NewImage.tenant.S",
            "MessageDeduplicationId": "$.dynamodb.NewImage.event_id.S",
        },
    }


def test_the_relay_constants_match_the_engines_event_rows() -> None:
    # The engine writes kind = KIND_EVENT; if it ever renames the marker the filter would drop every event.
    from outbox import keys

    assert keys.KIND_EVENT == relay_pipe.EVENT_KIND
    assert keys.KIND_HEAD != relay_pipe.EVENT_KIND


# --- context switches: read by ExampleSettings, applied by RelayPipe (throwaway stacks, no main-app synth) ---


def test_settings_default_to_error_logs_without_execution_data_and_no_email() -> None:
    assert settings_from({}) == ExampleSettings(
        commerce_services="fake",
        operator_arns=(TRIAL_OPERATOR,),
        alarm_email=None,
        no_alarm_subscriber=TRIAL_CONTEXT["noAlarmSubscriber"],
        pipe_log_level="ERROR",
        pipe_log_execution_data=False,
    )


def test_settings_read_the_context_keys() -> None:
    settings = settings_from({"pipeLogLevel": "TRACE", "pipeLogExecutionData": "true", "alarmEmail": "ops@example.com"})
    assert settings == ExampleSettings(
        commerce_services="fake",
        operator_arns=(TRIAL_OPERATOR,),
        alarm_email="ops@example.com",
        pipe_log_level="TRACE",
        pipe_log_execution_data=True,
    )


@pytest.mark.parametrize(
    "context",
    [{"pipeLogLevel": "DEBUG"}, {"pipeLogExecutionData": "yes"}, {"alarmEmail": "not-an-address"}],
)
def test_settings_reject_a_wrong_value_instead_of_falling_back(context: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="context"):
        settings_from(context)
