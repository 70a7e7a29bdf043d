"""Every cdk-nag acknowledgement is deliberate: on the one resource it concerns, with a reason.

cdk-nag writes what it suppressed into the validation report; this test pins that list, so a new
acknowledgement (or a wider one) shows up in review as a change here.
"""

from __future__ import annotations

import json

from tests.conftest import Synthesized

EXPECTED = {
    # The relay pipe's DLQ is a DLQ through the pipe's DeadLetterConfig, which SQS3 does not recognise.
    ("AwsSolutions-SQS3", "OutboxEngine/Relay/DeadLetters/Queue/Resource"),
    # dynamodb:ListStreams has no resource-level permissions.
    ("AwsSolutions-IAM5[Resource::*]", "OutboxEngine/Relay/Role/DefaultPolicy/Resource"),
    # Dead-letter queues have no DLQ of their own; they are alarmed instead.
    ("Serverless-SQSRedrivePolicy", "OutboxEngine/Durable/DeadLetters/Queue/Resource"),
    ("Serverless-SQSRedrivePolicy", "OutboxEngine/Relay/DeadLetters/Queue/Resource"),
    # X-Ray's PutTraceSegments and PutTelemetryRecords (active tracing) have no resource-level permissions.
    ("AwsSolutions-IAM5[Resource::*]", "OutboxEngine/DurableConsumer/Lambda/Role/DefaultPolicy/Resource"),
    # The function's runtime is the engine layer's: its wheels are built for exactly python3.13.
    ("AwsSolutions-L1", "OutboxEngine/DurableConsumer/Lambda/Function/Resource"),
    ("Serverless-LambdaLatestVersion", "OutboxEngine/DurableConsumer/Lambda/Function/Resource"),
    # Invoked synchronously by its SQS mapping: failures go through the queue's redrive to its alarmed DLQ,
    # and Lambda accepts no on-failure destination on an SQS mapping.
    ("Serverless-LambdaDLQ", "OutboxEngine/DurableConsumer/Lambda/Function/Resource"),
    ("Serverless-LambdaEventSourceMappingDestination", "OutboxEngine/DurableConsumer/QueueMapping/Resource"),
}


def test_acknowledgements_are_exactly_the_reviewed_ones_each_on_its_own_resource(
    synthesized: Synthesized,
) -> None:
    report = json.loads((synthesized.outdir / "validation-report.json").read_text())
    found = set()
    for plugin in report["pluginReports"]:
        assert plugin["violations"] == []
        for suppressed in plugin.get("suppressedViolations", []):
            assert len(suppressed["reason"]) >= 40, f"{suppressed['ruleName']}: give a real reason"
            for construct in suppressed["violatingConstructs"]:
                # Acknowledged on the violating resource itself, not on a stack or a parent construct.
                assert suppressed["acknowledgedAt"] == construct["constructPath"]
                found.add((suppressed["ruleName"], construct["constructPath"]))
    assert found == EXPECTED
