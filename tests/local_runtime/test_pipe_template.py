"""Input templates and dynamic parameters, rendered per docs/aws-behaviour.md R1 and R2 and the project decisions."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from outbox.local.pipe_template import (
    InvalidDynamicValueError,
    PipeVariables,
    UnresolvedPathError,
    UnsupportedPathError,
    render_input_template,
    resolve_dynamic_parameter,
    resolve_path,
)
from outbox_cdk.relay_pipe import INPUT_TEMPLATE, MESSAGE_DEDUPLICATION_ID_PATH, MESSAGE_GROUP_ID_PATH

NEW_IMAGE = {
    "pk": {"S": "TENANT#acme#EVENT"},
    "sk": {"S": "00000000000000000001"},
    "kind": {"S": "EVENT"},
    "tenant": {"S": "acme"},
    "event_id": {"S": "01JABCDEFGHJKMNPQRSTVWXYZ0"},
    "seq": {"N": "1"},
    "payload": {"M": {"note": {"S": 'say "hi"'}}},
}
EVENT: dict[str, Any] = {
    "eventID": "e1",
    "eventName": "INSERT",
    "eventSourceARN": "arn:aws:dynamodb:us-east-1:123456789012:table/events/stream/x",
    "dynamodb": {"NewImage": NEW_IMAGE, "Keys": {"pk": NEW_IMAGE["pk"], "sk": NEW_IMAGE["sk"]}},
    "records": [{"a-b_c": "first"}, {"a-b_c": "second"}],
}
VARIABLES = PipeVariables(
    pipe_name="relay",
    pipe_arn="arn:aws:pipes:us-east-1:123456789012:pipe/relay",
    source_arn="arn:aws:dynamodb:us-east-1:123456789012:table/events/stream/x",
    target_arn="arn:aws:sqs:us-east-1:123456789012:durable.fifo",
    ingestion_time=datetime(2026, 1, 1, 12, 30, 5, 123456, tzinfo=UTC),
)


# -- paths (R1.2) ---------------------------------------------------------------------------------------


def test_a_path_walks_objects_array_indices_dashes_and_underscores() -> None:
    assert resolve_path("$.dynamodb.NewImage.tenant.S", EVENT) == "acme"
    assert resolve_path("$.records[1].a-b_c", EVENT) == "second"
    assert resolve_path("$", EVENT) is EVENT


@pytest.mark.parametrize("path", ["$.dynamodb.NewImage.missing.S", "$.records[2]", "$.eventID.S"])
def test_a_path_that_names_nothing_raises(path: str) -> None:
    with pytest.raises(UnresolvedPathError, match="does not resolve"):
        resolve_path(path, EVENT)


def test_a_path_outside_the_supported_syntax_raises() -> None:
    with pytest.raises(UnsupportedPathError, match=r"R1\.2"):
        resolve_path("$.records[*].a-b_c", EVENT)


# -- templates (R1.1, R1.3, R1.4 and the project decision) ------------------------------------------------


def test_without_a_template_the_event_goes_as_json() -> None:
    assert json.loads(render_input_template(None, EVENT)) == EVENT
    assert json.loads(render_input_template("", EVENT)) == EVENT


def test_the_relay_template_renders_the_new_image_as_its_json() -> None:
    assert INPUT_TEMPLATE == "<$.dynamodb.NewImage>"
    assert json.loads(render_input_template(INPUT_TEMPLATE, EVENT)) == NEW_IMAGE


def test_a_single_placeholder_to_a_string_renders_the_string() -> None:
    assert render_input_template("<$.dynamodb.NewImage.tenant.S>", EVENT) == "acme"


def test_an_object_template_inserts_objects_raw_and_strings_as_json_strings() -> None:
    template = (
        '{"image": <$.dynamodb.NewImage>, "tenant": "<$.dynamodb.NewImage.tenant.S>",'
        ' "unquoted": <$.dynamodb.NewImage.tenant.S>, "keys": {"sk": <$.dynamodb.Keys.sk>}}'
    )
    rendered = json.loads(render_input_template(template, EVENT))
    assert rendered == {
        "image": NEW_IMAGE,
        "tenant": "acme",
        "unquoted": "acme",  # an unquoted string still becomes a JSON string (R1.3, community)
        "keys": {"sk": {"S": "00000000000000000001"}},
    }


def test_a_quoted_placeholder_inside_a_longer_string_is_escaped_into_it() -> None:
    template = '{"line": "tenant <$.dynamodb.NewImage.tenant.S> said <$.dynamodb.NewImage.payload.M.note.S>"}'
    assert json.loads(render_input_template(template, EVENT)) == {"line": 'tenant acme said say "hi"'}


def test_a_quoted_placeholder_to_an_object_becomes_its_json_text_as_a_string() -> None:
    rendered = json.loads(render_input_template('{"image": "<$.dynamodb.NewImage>"}', EVENT))
    assert json.loads(rendered["image"]) == NEW_IMAGE


def test_free_text_inserts_strings_as_they_are() -> None:
    assert render_input_template("Hello, <$.dynamodb.NewImage.tenant.S>!", EVENT) == "Hello, acme!"


def test_reserved_variables() -> None:
    template = (
        '{"pipe": "<aws.pipes.pipe-name>", "arn": "<aws.pipes.pipe-arn>", "source": "<aws.pipes.source-arn>",'
        ' "target": "<aws.pipes.target-arn>", "at": <aws.pipes.event.ingestion-time>,'
        ' "event": <aws.pipes.event.json>, "text": "<aws.pipes.event>"}'
    )
    rendered = json.loads(render_input_template(template, EVENT, VARIABLES))
    assert rendered["pipe"] == "relay"
    assert rendered["arn"] == VARIABLES.pipe_arn
    assert rendered["source"] == VARIABLES.source_arn
    assert rendered["target"] == VARIABLES.target_arn
    assert rendered["at"] == "2026-01-01T12:30:05.123Z"
    assert rendered["event"] == EVENT
    assert json.loads(rendered["text"]) == EVENT


def test_an_unknown_reserved_variable_raises() -> None:
    with pytest.raises(UnresolvedPathError, match=r"aws\.pipes\.event-id"):
        render_input_template('{"id": "<aws.pipes.event-id>"}', EVENT, VARIABLES)


@pytest.mark.parametrize(
    "template",
    ["<$.dynamodb.NewImag>", '{"image": <$.dynamodb.NewImage.missing>}', '{"t": "<$.dynamodb.NewImage.tenant.s>"}'],
)
def test_a_placeholder_that_does_not_resolve_raises(template: str) -> None:
    with pytest.raises(UnresolvedPathError, match="does not resolve"):
        render_input_template(template, EVENT)


# -- dynamic target parameters (R2.2) -----------------------------------------------------------------


def test_the_relay_group_and_dedup_paths_resolve_against_the_record() -> None:
    assert resolve_dynamic_parameter(MESSAGE_GROUP_ID_PATH, EVENT) == "acme"
    assert resolve_dynamic_parameter(MESSAGE_DEDUPLICATION_ID_PATH, EVENT) == "01JABCDEFGHJKMNPQRSTVWXYZ0"


def test_a_value_that_is_not_a_whole_path_is_a_literal() -> None:
    assert resolve_dynamic_parameter("static-group", EVENT) == "static-group"
    assert resolve_dynamic_parameter("t-$.dynamodb.NewImage.tenant.S", EVENT) == "t-$.dynamodb.NewImage.tenant.S"


def test_an_unresolved_dynamic_path_raises() -> None:
    with pytest.raises(UnresolvedPathError, match="no field 'tenant_id'"):
        resolve_dynamic_parameter("$.dynamodb.NewImage.tenant_id.S", EVENT)


def test_a_dynamic_path_to_an_object_raises() -> None:
    with pytest.raises(InvalidDynamicValueError, match="not a string"):
        resolve_dynamic_parameter("$.dynamodb.NewImage.tenant", EVENT)


def test_the_input_templates_error_keeps_its_old_name_for_a_while() -> None:
    """Renamed so that it is not mistaken for the stack template loader's ``TemplateError``."""
    from outbox.local import pipe_template

    with pytest.warns(DeprecationWarning, match="is InputTemplateError now"):
        assert pipe_template.TemplateError is pipe_template.InputTemplateError
    assert issubclass(UnresolvedPathError, pipe_template.InputTemplateError)
