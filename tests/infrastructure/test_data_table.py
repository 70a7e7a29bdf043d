"""The data table (the modules' entities and projections), read from the synthesized template.

Its keys and protection, shared with every table, are in test_tables.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.infrastructure.conftest import resources_of_type
from tests.infrastructure.template_queries import listed, only_resource


@pytest.fixture(scope="module")
def data(stack_template: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    return only_resource(stack_template, "AWS::DynamoDB::Table", "DataTable")


def test_its_stream_carries_both_images_for_the_record_change_lane(data: tuple[str, dict[str, Any]]) -> None:
    # INSERT carries only the new image, REMOVE only the old one; a subscriber may need either side.
    properties = data[1]["Properties"]
    assert properties["StreamSpecification"] == {"StreamViewType": "NEW_AND_OLD_IMAGES"}
    # Entities do not expire: no TTL, so every REMOVE on the stream is a module's own delete.
    assert "TimeToLiveSpecification" not in properties


def test_only_the_consumers_and_the_producer_may_touch_its_items_and_only_the_record_change_pipe_its_stream(
    stack_template: dict[str, Any], data: tuple[str, dict[str, Any]]
) -> None:
    # Given every role's grants on the data table
    data_id = data[0]
    item_roles, stream_roles = set(), set()
    for policy in resources_of_type(stack_template, "AWS::IAM::Policy").values():
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            resources = listed(statement["Resource"])
            roles = {role["Ref"] for role in policy["Properties"]["Roles"]}
            if {"Fn::GetAtt": [data_id, "Arn"]} in resources:
                item_roles |= roles
            if {"Fn::GetAtt": [data_id, "StreamArn"]} in resources:
                stream_roles |= roles
    # Then the items belong to the consumers and the example's producer, and the stream to its pipe
    assert sorted(role.split("Lambda")[0].split("Role")[0] for role in item_roles) == [
        "OutboxDurableConsumer",
        "OutboxRecordChangeConsumer",
        "PlaceOrder",
    ]
    assert [role.split("Role")[0] for role in stream_roles] == ["OutboxRecordChangePipe"]


def test_the_stack_outputs_the_data_table(stack_template: dict[str, Any], data: tuple[str, dict[str, Any]]) -> None:
    assert stack_template["Outputs"]["DataTableName"]["Value"] == {"Ref": data[0]}
