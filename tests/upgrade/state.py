"""A local runtime's whole state as JSON, and back: every item of every DynamoDB table of the stack, and every
message of every queue (dead-letter queues included, in flight or not), with its group and deduplication ids.

Both releases' processes use this module: it imports nothing of the engine, only boto3 and moto (the runtime is
duck-typed: ``client(service)``, ``resources.table_names``, ``resources.queue_urls``, ``clock()``).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

# How a value DynamoDB stores as bytes (B, BS) is written in the JSON file.
BYTES_MARK = "__bytes__"
IMPORTED_SUFFIX = ":imported"  # FIFO deduplication ids of re-sent messages (their originals' window is gone)


def _scan(client: Any, table: str) -> Iterator[dict[str, Any]]:
    options: dict[str, Any] = {"TableName": table, "ConsistentRead": True}
    while True:
        page = client.scan(**options)
        yield from page.get("Items", [])
        if "LastEvaluatedKey" not in page:
            return
        options["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def _messages(queue_url: str) -> list[dict[str, Any]]:
    """Every message the queue holds, visible or in flight (moto's own record of it: a receive would change it)."""
    from moto.sqs.models import sqs_backends

    account, name = queue_url.rsplit("/", 2)[-2:]
    for backend in sqs_backends[account].values():
        queue = backend.queues.get(name)
        if queue is not None:
            return [
                {
                    "body": message.body,
                    "group_id": message.group_id,
                    "deduplication_id": message.deduplication_id,
                    "attributes": {
                        attribute: {k: v for k, v in value.items() if k in ("DataType", "StringValue", "BinaryValue")}
                        for attribute, value in message.message_attributes.items()
                    },
                    "receive_count": message.approximate_receive_count,
                }
                for message in queue._messages
            ]
    raise LookupError(f"no queue {name} in moto")


def export_state(runtime: Any) -> dict[str, Any]:
    dynamodb = runtime.client("dynamodb")
    return {
        "clock": runtime.clock().isoformat(),
        "tables": {
            logical_id: list(_scan(dynamodb, name))
            for logical_id, name in sorted(runtime.resources.table_names.items())
        },
        "queues": {logical_id: _messages(url) for logical_id, url in sorted(runtime.resources.queue_urls.items())},
    }


def write_state(state: Mapping[str, Any], path: Path) -> None:
    def bytes_as_text(value: Any) -> Any:
        if isinstance(value, bytes | bytearray):
            return {BYTES_MARK: base64.b64encode(value).decode("ascii")}
        raise TypeError(f"cannot write {type(value).__name__}")

    path.write_text(json.dumps(state, default=bytes_as_text, indent=1, sort_keys=True))


def read_state(path: Path) -> dict[str, Any]:
    def text_as_bytes(value: dict[str, Any]) -> Any:
        return base64.b64decode(value[BYTES_MARK]) if set(value) == {BYTES_MARK} else value

    state: dict[str, Any] = json.loads(path.read_text(), object_hook=text_as_bytes)
    return state


def import_items(runtime: Any, table_logical_id: str, items: list[dict[str, Any]]) -> None:
    """Put each item, in the order given (on a table with a stream, each is a record the pipes read)."""
    dynamodb, table = runtime.client("dynamodb"), runtime.resources.table_names[table_logical_id]
    for item in items:
        dynamodb.put_item(TableName=table, Item=item)


def import_messages(runtime: Any, queue_logical_id: str, messages: list[dict[str, Any]]) -> None:
    """Send each message again to the same queue of this runtime, its group kept; a FIFO queue's deduplication id
    gets a suffix, so that SQS does not take the relay's re-send of the same event for it (the originals were
    sent long before the upgrade's re-send, outside SQS's five-minute window)."""
    sqs, url = runtime.client("sqs"), runtime.resources.queue_urls[queue_logical_id]
    for message in messages:
        options: dict[str, Any] = {"QueueUrl": url, "MessageBody": message["body"]}
        if message["attributes"]:
            options["MessageAttributes"] = message["attributes"]
        if message["group_id"] is not None:
            options["MessageGroupId"] = message["group_id"]
        if message["deduplication_id"] is not None:
            options["MessageDeduplicationId"] = message["deduplication_id"][:110] + IMPORTED_SUFFIX
        sqs.send_message(**options)
