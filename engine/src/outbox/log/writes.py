"""Build ``extra_writes`` from plain Python values (floats allowed), in the shape TransactWriteItems takes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from boto3.dynamodb.types import TypeSerializer

from outbox.log.canonical import to_dynamodb_numbers

_serializer = TypeSerializer()


def typed(values: Mapping[str, Any]) -> dict[str, Any]:
    """Plain values to typed DynamoDB JSON: ``{"n": 1.5}`` -> ``{"n": {"N": "1.5"}}``."""
    return {name: _serializer.serialize(to_dynamodb_numbers(value)) for name, value in values.items()}


def _expression_parts(
    condition: str | None, names: Mapping[str, str] | None, values: Mapping[str, Any] | None
) -> dict[str, Any]:
    parts: dict[str, Any] = {}
    if condition:
        parts["ConditionExpression"] = condition
    if names:
        parts["ExpressionAttributeNames"] = dict(names)
    if values:
        parts["ExpressionAttributeValues"] = typed(values)
    return parts


def put(
    table_name: str,
    item: Mapping[str, Any],
    *,
    condition: str | None = None,
    names: Mapping[str, str] | None = None,
    values: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A Put action; pass ``condition="attribute_not_exists(pk)"`` to create only."""
    return {"Put": {"TableName": table_name, "Item": typed(item), **_expression_parts(condition, names, values)}}


def update(
    table_name: str,
    key: Mapping[str, Any],
    update_expression: str,
    *,
    condition: str | None = None,
    names: Mapping[str, str] | None = None,
    values: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "Update": {
            "TableName": table_name,
            "Key": typed(key),
            "UpdateExpression": update_expression,
            **_expression_parts(condition, names, values),
        }
    }


def delete(
    table_name: str,
    key: Mapping[str, Any],
    *,
    condition: str | None = None,
    names: Mapping[str, str] | None = None,
    values: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    return {"Delete": {"TableName": table_name, "Key": typed(key), **_expression_parts(condition, names, values)}}


def condition_check(
    table_name: str,
    key: Mapping[str, Any],
    condition: str,
    *,
    names: Mapping[str, str] | None = None,
    values: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "ConditionCheck": {
            "TableName": table_name,
            "Key": typed(key),
            **_expression_parts(condition, names, values),
        }
    }
