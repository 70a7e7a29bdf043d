"""The record-change pipe (data stream -> record-change queue): what it forwards and what it sends.

Its source settings, DLQ, logs and role are tested with the relay's in test_stream_pipes. Here: a filter on
the watched entities only (none on the operation) and no input template, checked as properties of the
template and, through the local runtime's filter and template evaluation (which reads the same template), on
a record of each event name.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from aws_cdk.assertions import Template

from outbox.best_effort.changes import entity_filter
from outbox.local.pipe_filter import compile_filter_criteria
from outbox.local.pipe_template import UnresolvedPathError, render_input_template
from stacks.settings import WATCHED_ENTITIES
from tests.infrastructure.template_queries import only_resource
from tests.infrastructure.test_pipeline import record_change_pipeline

KEYS = {"pk": {"S": "CONTACTADDRESS#c-1"}, "sk": {"S": "ADDRESS"}}
OLD = {**KEYS, "status": {"S": "PLACED"}}
NEW = {**KEYS, "status": {"S": "PAID"}}
# One stream record of each kind, as the pipe hands it on (docs/aws-behaviour.md R7.3): INSERT has no OldImage,
# REMOVE no NewImage.
RECORDS = {
    "INSERT": {"Keys": KEYS, "NewImage": NEW},
    "MODIFY": {"Keys": KEYS, "NewImage": NEW, "OldImage": OLD},
    "REMOVE": {"Keys": KEYS, "OldImage": OLD},
}


def _record(event_name: str, pk: str | None = None) -> dict[str, Any]:
    keyed = {"pk": {"S": pk}, "sk": {"S": "ROW"}} if pk else KEYS
    images = {name: {**image, **keyed} for name, image in RECORDS[event_name].items()}
    return {
        "eventID": f"id-{event_name}",
        "eventName": event_name,
        "eventVersion": "1.1",
        "eventSource": "aws:dynamodb",
        "awsRegion": "us-east-1",
        "dynamodb": {
            **images,
            "ApproximateCreationDateTime": 1767225600,
            "SequenceNumber": "100000000000000000001",
            "SizeBytes": 64,
            "StreamViewType": "NEW_AND_OLD_IMAGES",
        },
        "eventSourceARN": "arn:aws:dynamodb:us-east-1:123456789012:table/Data/stream/2026-01-01T00:00:00.000",
    }


@pytest.fixture(scope="module")
def pipe(stack_template: dict[str, Any]) -> dict[str, Any]:
    _, resource = only_resource(stack_template, "AWS::Pipes::Pipe", "RecordChangePipe")
    return resource["Properties"]  # type: ignore[no-any-return]


def _patterns(pipe: dict[str, Any]) -> list[str]:
    return [f["Pattern"] for f in pipe["SourceParameters"].get("FilterCriteria", {}).get("Filters", [])]


def test_the_pipe_filters_on_the_watched_entities_keys_and_on_nothing_else(pipe: dict[str, Any]) -> None:
    # Not on eventName: INSERT/MODIFY/REMOVE would name every value there is (R7.3) and depend on eventName
    # being filterable in Pipes, which one AWS page denies (R3.4). The keys are in every record (R3.5).
    assert [json.loads(p) for p in _patterns(pipe)] == [entity_filter(WATCHED_ENTITIES)]


@pytest.mark.parametrize(
    ("pk", "passes"),
    [
        ("CONTACTADDRESS#c-1", True),
        ("CONTACTADDRESS", True),
        ("ORDER#o-1", False),
        ("CONTACTADDRESSES#c-1", False),
        ("contactaddress#c-1", False),
        ("JOURNAL#t-1", False),
    ],
)
def test_only_a_watched_entitys_row_changes_pass(pipe: dict[str, Any], pk: str, passes: bool) -> None:
    matcher = compile_filter_criteria(_patterns(pipe))
    assert [matcher.matches(_record(name, pk)) for name in RECORDS] == [passes] * 3


def test_without_entities_the_pipe_carries_every_row_change() -> None:
    template = Template.from_stack(record_change_pipeline().stack).to_json()
    _, resource = only_resource(template, "AWS::Pipes::Pipe", "OutboxRecordChangePipe")
    assert "FilterCriteria" not in resource["Properties"]["SourceParameters"]


@pytest.mark.parametrize(
    ("entities", "message"),
    [
        ([], "must list entity names"),
        ("CONTACTADDRESS", "must list entity names"),
        (["ORDER#1"], "are not entity names"),
        (["", "ORDER"], "are not entity names"),
        ([f"ENTITY_{n:03d}" for n in range(150)], "Pipes takes at most 4096"),
    ],
)
def test_entities_that_are_not_entity_names_are_refused(entities: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        record_change_pipeline(entities=entities)


def test_the_pipe_sends_each_record_as_it_is_with_no_input_template(pipe: dict[str, Any]) -> None:
    # Any template naming NewImage or OldImage would not resolve on INSERT or REMOVE and the pipe would
    # stop delivering; a standard queue takes no group or deduplication id either.
    assert "TargetParameters" not in pipe


@pytest.mark.parametrize("event_name", ["INSERT", "MODIFY", "REMOVE"])
def test_a_record_of_each_event_name_is_forwarded_whole(pipe: dict[str, Any], event_name: str) -> None:
    # Given a stream record of this kind and the pipe's filter and template, as the local runtime reads them
    record = _record(event_name)
    patterns = _patterns(pipe)
    template = pipe.get("TargetParameters", {}).get("InputTemplate")
    # When the pipe evaluates it
    passes = compile_filter_criteria(patterns).matches(record)
    body = json.loads(render_input_template(template, record))
    # Then it passes, and the message body is the whole record: event name, keys and whichever images exist
    assert passes
    assert body == record


@pytest.mark.parametrize(
    ("template", "event_name"), [("<$.dynamodb.OldImage>", "INSERT"), ('{"new": <$.dynamodb.NewImage>}', "REMOVE")]
)
def test_a_template_naming_an_image_would_break_on_the_records_without_it(template: str, event_name: str) -> None:
    # Guards the decision: this is the failure that having no template avoids.
    with pytest.raises(UnresolvedPathError):
        render_input_template(template, _record(event_name))
