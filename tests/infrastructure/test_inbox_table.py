"""The inbox table (claims, dead letters, poison pills), read from the synthesized template.

Its keys and protection, shared with every table, are in test_tables.
"""

from __future__ import annotations

from typing import Any

import pytest
from aws_cdk import App, Stack

from outbox_cdk.inbox_table import DEFAULT_RETENTION_DAYS, TTL_ATTRIBUTE, InboxTable
from tests.example_app import settings_from
from tests.infrastructure.template_queries import only_resource


@pytest.fixture(scope="module")
def inbox(stack_template: dict[str, Any]) -> dict[str, Any]:
    _, resource = only_resource(stack_template, "AWS::DynamoDB::Table", "InboxTable")
    return resource


def test_completed_claims_expire_through_the_ttl_attribute_the_engine_sets(inbox: dict[str, Any]) -> None:
    assert inbox["Properties"]["TimeToLiveSpecification"] == {"AttributeName": "expires_at", "Enabled": True}
    assert TTL_ATTRIBUTE == "expires_at"


def test_the_key_layout_is_the_engines() -> None:
    # Given the engine's own key builders
    from outbox import keys

    # Then claims, dead letters and poison pills all live under the table's string pk/sk
    assert keys.claim_key("evt-1", "billing.invoice") == {"pk": {"S": "CLAIM#evt-1"}, "sk": {"S": "billing.invoice"}}
    assert keys.dead_letter_partition("acme") == "TENANT#acme#DEAD"


# --- retention: context -> ExampleSettings -> InboxTable (throwaway apps, no main-app synth) ---------


def test_retention_defaults_to_the_longest_a_message_can_travel() -> None:
    # 12 h of pipe record age + 14 days in the queue + 14 days in the DLQ + a day of margin
    assert settings_from({}).inbox_retention_days == DEFAULT_RETENTION_DAYS == 30


@pytest.mark.parametrize(("value", "expected"), [("31", 31), (30, 30), ("365", 365)])
def test_retention_is_read_from_the_context(value: Any, expected: int) -> None:
    assert settings_from({"inboxRetentionDays": value}).inbox_retention_days == expected


@pytest.mark.parametrize("value", [0, 7, 29, 366, "-1", "7.5", 7.5, "seven", True, ""])
def test_a_wrong_retention_fails_the_synth_instead_of_falling_back(value: Any) -> None:
    with pytest.raises(ValueError, match="inboxRetentionDays"):
        settings_from({"inboxRetentionDays": value})


def test_the_construct_exposes_its_retention_and_rejects_one_out_of_range() -> None:
    stack = Stack(App(), "InboxProbe")
    assert InboxTable(stack, "Inbox", retention_days=30).retention_days == 30
    with pytest.raises(ValueError, match="retention"):
        InboxTable(stack, "TooLong", retention_days=400)
    with pytest.raises(ValueError, match="DLQ retention"):
        InboxTable(stack, "TooShort", retention_days=14)
