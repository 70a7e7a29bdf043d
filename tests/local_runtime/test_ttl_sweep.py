"""DynamoDB TTL on the runtime's virtual clock (rule 11): expired items stay readable until a sweep deletes them.

AWS deletes an item whose TTL attribute (a Number, epoch seconds) has passed at some later time of its own
choosing; ``LocalRuntime.sweep_expired_items`` is that sweep, run when a test asks for it. These tests boot
the runtime from the synthesized template, where the inbox table keeps its rows until ``expires_at``.
"""

from __future__ import annotations

import dataclasses
import socket
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from outbox.local.aws_fixes.ttl import TTL_USER_IDENTITY, sweep_expired_items
from outbox.local.runtime import LocalRuntime
from outbox.local.template import load_stack
from tests.conftest import Synthesized

DAY = timedelta(days=1)


@pytest.fixture
def runtime(synthesized: Synthesized) -> Iterator[LocalRuntime]:
    with LocalRuntime.from_assembly(synthesized.outdir, function_log_level="CRITICAL") as runtime:
        yield runtime


def epoch(moment: datetime) -> str:
    return str(int(moment.timestamp()))


def key(pk: str) -> dict[str, Any]:
    return {"pk": {"S": pk}, "sk": {"S": "CLAIM"}}


def put(runtime: LocalRuntime, table: str, pk: str, **attributes: dict[str, Any]) -> None:
    runtime.client("dynamodb").put_item(TableName=table, Item={**key(pk), **attributes})


def exists(runtime: LocalRuntime, table: str, pk: str) -> bool:
    return "Item" in runtime.client("dynamodb").get_item(TableName=table, Key=key(pk), ConsistentRead=True)


def expiring_in(runtime: LocalRuntime, delta: timedelta) -> dict[str, Any]:
    return {"expires_at": {"N": epoch(runtime.clock() + delta)}}


@pytest.mark.parametrize("retention_days", [8, 15, 30])
def test_an_expired_item_is_read_until_the_sweep_deletes_it(runtime: LocalRuntime, retention_days: int) -> None:
    # Given a completed inbox claim kept for the retention period
    inbox = runtime.output("InboxTableName")
    put(runtime, inbox, "claim", status={"S": "COMPLETED"}, **expiring_in(runtime, retention_days * DAY))

    # When the virtual clock jumps past its expiry
    runtime.clock.advance(retention_days * DAY + timedelta(seconds=1))

    # Then reads still see it, as on AWS before the background sweep runs
    assert exists(runtime, inbox, "claim")
    scanned = runtime.client("dynamodb").scan(TableName=inbox)["Items"]
    assert [item["pk"]["S"] for item in scanned] == ["claim"]

    # When the sweep runs
    deleted = runtime.sweep_expired_items()

    # Then the claim is gone, and the sweep says so for the inbox table
    assert deleted == {inbox: 1}
    assert not exists(runtime, inbox, "claim")


def test_the_virtual_clock_decides_what_has_expired(runtime: LocalRuntime) -> None:
    # Given claims expiring in 8, 15 and 30 days, and one expiring exactly at the first sweep
    inbox = runtime.output("InboxTableName")
    for days in (8, 15, 30):
        put(runtime, inbox, f"in-{days}-days", **expiring_in(runtime, days * DAY))
    put(runtime, inbox, "at-day-10", **expiring_in(runtime, 10 * DAY))

    # When the clock reaches day 10 and the sweep runs
    runtime.clock.advance(10 * DAY)
    assert runtime.sweep_expired_items() == {inbox: 2}

    # Then what expired by now (day 8, and day 10 itself: at or before now) is gone, the future stays
    assert not exists(runtime, inbox, "in-8-days")
    assert not exists(runtime, inbox, "at-day-10")
    assert exists(runtime, inbox, "in-15-days")
    assert exists(runtime, inbox, "in-30-days")

    # When the sweep runs again with no time passing, then nothing more is deleted
    assert runtime.sweep_expired_items() == {inbox: 0}

    # When the clock reaches day 30, then the rest expires and the sweep deletes it
    runtime.clock.advance(20 * DAY)
    assert runtime.sweep_expired_items() == {inbox: 2}
    assert runtime.client("dynamodb").scan(TableName=inbox)["Items"] == []


def test_an_item_without_a_numeric_ttl_attribute_never_expires(runtime: LocalRuntime) -> None:
    # Given inbox rows whose expires_at is missing, a string, or a number set, each "in the past"
    inbox = runtime.output("InboxTableName")
    past = epoch(runtime.clock() - DAY)
    put(runtime, inbox, "no-attribute", status={"S": "PENDING"})
    put(runtime, inbox, "a-string", expires_at={"S": past})
    put(runtime, inbox, "a-number-set", expires_at={"NS": [past]})
    put(runtime, inbox, "a-number", expires_at={"N": past})

    # When a month passes and the sweep runs
    runtime.clock.advance(30 * DAY)
    deleted = runtime.sweep_expired_items()

    # Then only the Number is read as an expiry; AWS ignores the others
    assert deleted == {inbox: 1}
    assert not exists(runtime, inbox, "a-number")
    for pk in ("no-attribute", "a-string", "a-number-set"):
        assert exists(runtime, inbox, pk)


def test_tables_without_ttl_are_untouched(runtime: LocalRuntime) -> None:
    # Given rows with a past expires_at Number in the events and data tables, which have no TTL
    plain = [runtime.output("EventsTableName"), runtime.output("DataTableName")]
    for table in plain:
        put(runtime, table, "old-row", expires_at={"N": epoch(runtime.clock() - DAY)})

    # When a month passes and the sweep runs
    runtime.clock.advance(30 * DAY)
    deleted = runtime.sweep_expired_items()

    # Then only the inbox (the one table with TTL) was swept, and the other rows are still there
    assert deleted == {runtime.output("InboxTableName"): 0}
    for table in plain:
        assert exists(runtime, table, "old-row")


def test_a_table_whose_ttl_is_disabled_is_not_swept(runtime: LocalRuntime) -> None:
    # Given an expired inbox row, and TTL turned off on the inbox table after the stack was created
    inbox = runtime.output("InboxTableName")
    put(runtime, inbox, "claim", **expiring_in(runtime, DAY))
    runtime.client("dynamodb").update_time_to_live(
        TableName=inbox, TimeToLiveSpecification={"Enabled": False, "AttributeName": "expires_at"}
    )

    # When the clock passes the expiry and the sweep runs
    runtime.clock.advance(2 * DAY)

    # Then nothing is swept: TTL is the table's live setting, not only the template's
    assert runtime.sweep_expired_items() == {}
    assert exists(runtime, inbox, "claim")


def test_a_ttl_deletion_is_a_remove_record_by_the_dynamodb_service(synthesized: Synthesized) -> None:
    # Given the stack with a stream on the inbox table (the template has none, so it is added here)
    stack = load_stack(synthesized.outdir, "OutboxEngine")
    inbox_id = stack.output_reference("InboxTableName").logical_id
    streamed = dataclasses.replace(stack.tables[inbox_id], stream_view_type="NEW_AND_OLD_IMAGES")
    stack = dataclasses.replace(stack, tables={**stack.tables, inbox_id: streamed})
    with LocalRuntime(stack, function_log_level="CRITICAL") as runtime:
        inbox = runtime.output("InboxTableName")
        put(runtime, inbox, "expired", **expiring_in(runtime, DAY))
        put(runtime, inbox, "deleted-by-hand", **expiring_in(runtime, 30 * DAY))

        # When an application deletes one row, and the sweep deletes the other after its expiry
        runtime.client("dynamodb").delete_item(TableName=inbox, Key=key("deleted-by-hand"))
        runtime.clock.advance(2 * DAY)
        assert runtime.sweep_expired_items() == {inbox: 1}

        # Then both are REMOVE records with the old image; only the TTL deletion names the service
        records = read_stream(runtime, runtime.resources.stream_arns[inbox_id])
        removes = {r["dynamodb"]["Keys"]["pk"]["S"]: r for r in records if r["eventName"] == "REMOVE"}
        assert set(removes) == {"expired", "deleted-by-hand"}
        assert removes["expired"]["userIdentity"] == TTL_USER_IDENTITY
        assert removes["expired"]["dynamodb"]["OldImage"]["pk"] == {"S": "expired"}
        assert "userIdentity" not in removes["deleted-by-hand"]
        assert all("userIdentity" not in r for r in records if r["eventName"] != "REMOVE")


def test_the_sweep_works_on_a_runtime_served_on_a_port(synthesized: Synthesized) -> None:
    # Given a runtime in server mode (a moto server in this process) with an expired inbox row
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with LocalRuntime.from_assembly(synthesized.outdir, port=port, function_log_level="CRITICAL") as runtime:
        inbox = runtime.output("InboxTableName")
        put(runtime, inbox, "claim", **expiring_in(runtime, DAY))
        runtime.clock.advance(DAY)

        # When the sweep runs, then the row is gone for every client of the server
        assert runtime.sweep_expired_items() == {inbox: 1}
        assert not exists(runtime, inbox, "claim")
        # moto's backends are the process's: leave none of this stack to the next server of the session
        urllib.request.urlopen(urllib.request.Request(f"{runtime.endpoint_url}/moto-api/reset", method="POST")).close()


def test_the_sweep_refuses_a_name_that_is_not_a_table_arn() -> None:
    # Given a table name where an ARN is expected, when swept, then the mistake is reported, not guessed
    with pytest.raises(ValueError, match="not a DynamoDB table ARN"):
        sweep_expired_items(["InboxTable"], datetime.now(UTC))


def read_stream(runtime: LocalRuntime, stream_arn: str) -> list[dict[str, Any]]:
    streams = runtime.client("dynamodbstreams")
    records: list[dict[str, Any]] = []
    for shard in streams.describe_stream(StreamArn=stream_arn)["StreamDescription"]["Shards"]:
        iterator = streams.get_shard_iterator(
            StreamArn=stream_arn, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        while iterator:
            response = streams.get_records(ShardIterator=iterator)
            records += response["Records"]
            iterator = response.get("NextShardIterator") if response["Records"] else None
    return records
