"""The event source mapping hands the function the SQS event Lambda builds, not the SQS API's answer.

Lambda's record for an SQS message (https://docs.aws.amazon.com/lambda/latest/dg/with-sqs.html, "Example
standard queue message event") spells message attributes with lower-case keys (``stringValue``,
``binaryValue`` in base64, ``dataType``) and empty ``stringListValues``/``binaryListValues``, where
ReceiveMessage answers ``StringValue``/``BinaryValue``/``DataType``.
"""

from __future__ import annotations

import base64
from datetime import timedelta
from typing import Any

from outbox.local.clock import VirtualClock
from outbox.local.esm import SqsEventSourceMapping


def test_message_attributes_arrive_in_lambdas_shape(queue: tuple[Any, str, VirtualClock]) -> None:
    sqs, url, clock = queue
    sqs.send_message(
        QueueUrl=url,
        MessageBody="a",
        MessageAttributes={
            "text": {"DataType": "String", "StringValue": "x,y"},
            "bytes": {"DataType": "Binary", "BinaryValue": b"\x00\xff"},
        },
    )
    seen: list[dict[str, Any]] = []

    def handler(event: dict[str, Any], _context: Any) -> None:
        seen.extend(event["Records"])

    SqsEventSourceMapping(
        sqs=sqs,
        queue_url=url,
        queue_arn="arn:aws:sqs:us-east-1:123456789012:q",
        handler=handler,
        function_name="f",
        function_timeout=timedelta(seconds=10),
        visibility_timeout=timedelta(seconds=60),
        clock=clock,
    ).poll()

    [record] = seen
    assert record["messageAttributes"] == {
        "text": {"stringValue": "x,y", "stringListValues": [], "binaryListValues": [], "dataType": "String"},
        "bytes": {
            "binaryValue": base64.b64encode(b"\x00\xff").decode(),
            "stringListValues": [],
            "binaryListValues": [],
            "dataType": "Binary",
        },
    }
