"""Every DynamoDB table of the app: keyed by string pk/sk, on demand, and protected (table_defaults)."""

from __future__ import annotations

from typing import Any

from tests.infrastructure.conftest import resources_of_type


def test_every_table_is_keyed_by_string_pk_and_sk_and_billed_on_demand(stack_template: dict[str, Any]) -> None:
    tables = resources_of_type(stack_template, "AWS::DynamoDB::Table")
    assert sorted(logical_id.split("Table")[0] for logical_id in tables) == [
        "Data",
        "OutboxAudit",
        "OutboxEvents",
        "OutboxInbox",
    ]
    for logical_id, table in tables.items():
        properties = table["Properties"]
        assert properties["KeySchema"] == [
            {"AttributeName": "pk", "KeyType": "HASH"},
            {"AttributeName": "sk", "KeyType": "RANGE"},
        ], logical_id
        assert properties["AttributeDefinitions"] == [
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
        ], logical_id
        assert properties["BillingMode"] == "PAY_PER_REQUEST", logical_id
        assert "TableName" not in properties, "CloudFormation generates the name"


def test_every_table_survives_mistakes_recovery_and_stack_deletion(stack_template: dict[str, Any]) -> None:
    for logical_id, table in resources_of_type(stack_template, "AWS::DynamoDB::Table").items():
        properties = table["Properties"]
        assert properties["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}, logical_id
        assert properties["SSESpecification"] == {"SSEEnabled": True}, logical_id
        assert properties["DeletionProtectionEnabled"] is True, logical_id
        assert (table["DeletionPolicy"], table["UpdateReplacePolicy"]) == ("Retain", "Retain"), logical_id
