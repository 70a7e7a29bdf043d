"""The key formats of the events and inbox tables, spelled out: rows written by one version of the engine
are read by the next, so a format may never change by accident."""

from __future__ import annotations

from datetime import UTC, datetime

from outbox import keys


def test_the_events_table_keys() -> None:
    assert keys.event_key("acme", 42) == {"pk": {"S": "TENANT#acme#EVENT"}, "sk": {"S": "00000000000000000042"}}
    assert keys.head_key("acme") == {"pk": {"S": "TENANT#acme#HEAD"}, "sk": {"S": "HEAD"}}
    assert keys.tenant_index_partition("acme") in keys.tenant_index_partitions()
    assert keys.tenant_index_partitions()[:2] == ["TENANTS#00", "TENANTS#01"]
    assert len(keys.tenant_index_partitions()) == keys.TENANT_INDEX_SHARDS


def test_a_claim_row_is_keyed_by_its_event_and_named_by_its_subscription() -> None:
    assert keys.claim_partition("01J0") == "CLAIM#01J0"
    assert keys.claim_key("01J0", "billing.invoice") == {"pk": {"S": "CLAIM#01J0"}, "sk": {"S": "billing.invoice"}}


def test_dead_letters_live_in_their_tenants_partition_one_per_pair() -> None:
    assert keys.dead_letter_partition("acme") == "TENANT#acme#DEAD"
    assert keys.dead_letter_sort_key("01J0", "billing.invoice") == "01J0#billing.invoice"
    assert keys.dead_letter_key("acme", "01J0", "billing.invoice") == {
        "pk": {"S": "TENANT#acme#DEAD"},
        "sk": {"S": "01J0#billing.invoice"},
    }


def test_a_conflict_is_a_dead_letter_of_its_pair_per_content_received() -> None:
    conflict = keys.conflict_sort_key("01J0", "billing.invoice", "ab12")

    assert conflict == "01J0#billing.invoice#CONFLICT#ab12"
    assert conflict.startswith(keys.dead_letter_sort_key("01J0", "billing.invoice") + "#")
    assert conflict != keys.conflict_sort_key("01J0", "billing.invoice", "cd34")


def test_poison_pills_are_kept_per_day_in_order_of_arrival() -> None:
    late_evening = datetime(2026, 3, 9, 23, 59, 59, tzinfo=UTC)

    assert keys.poison_partition(late_evening) == "POISON#2026-03-09"
    assert keys.poison_sort_key("2026-03-09T23:59:59.000Z", "m-1") == "2026-03-09T23:59:59.000Z#m-1"


def test_the_idempotency_key_handlers_pass_to_external_apis() -> None:
    assert keys.idempotency_key("01J0", "billing.invoice") == "01J0:billing.invoice"
