"""Every cdk-nag acknowledgement is deliberate: on the one resource it concerns, with a reason.

cdk-nag writes what it suppressed into the validation report; this test pins that list, so a new
acknowledgement (or a wider one) shows up in review as a change here.
"""

from __future__ import annotations

import json

from tests.conftest import Synthesized

# Each acknowledgement, per resource path prefix of the construct that makes it.
PIPE_ACKNOWLEDGEMENTS = {
    # A pipe's DLQ is a DLQ through the pipe's DeadLetterConfig, which SQS3 does not recognise.
    ("AwsSolutions-SQS3", "DeadLetters/Queue/Resource"),
    # Dead-letter queues have no DLQ of their own; they are alarmed instead.
    ("Serverless-SQSRedrivePolicy", "DeadLetters/Queue/Resource"),
    # dynamodb:ListStreams has no resource-level permissions.
    ("AwsSolutions-IAM5[Resource::*]", "Role/DefaultPolicy/Resource"),
}
QUEUE_ACKNOWLEDGEMENTS = {
    ("Serverless-SQSRedrivePolicy", "DeadLetters/Queue/Resource"),
}
CONSUMER_ACKNOWLEDGEMENTS = {
    # X-Ray's PutTraceSegments and PutTelemetryRecords (active tracing) have no resource-level permissions.
    ("AwsSolutions-IAM5[Resource::*]", "Lambda/Role/DefaultPolicy/Resource"),
    # The function's runtime is the engine layer's: its wheels are built for exactly python3.13.
    ("AwsSolutions-L1", "Lambda/Function/Resource"),
    ("Serverless-LambdaLatestVersion", "Lambda/Function/Resource"),
    # Invoked synchronously by its SQS mapping: failures go through the queue's redrive to its alarmed DLQ,
    # and Lambda accepts no on-failure destination on an SQS mapping.
    ("Serverless-LambdaDLQ", "Lambda/Function/Resource"),
    ("Serverless-LambdaEventSourceMappingDestination", "QueueMapping/Resource"),
}
OPERATOR_ENDPOINT_ACKNOWLEDGEMENTS = {
    ("AwsSolutions-IAM5[Resource::*]", "Lambda/Role/DefaultPolicy/Resource"),
    ("AwsSolutions-L1", "Lambda/Function/Resource"),
    ("Serverless-LambdaLatestVersion", "Lambda/Function/Resource"),
    # Invoked synchronously through its function URL: the caller gets every failure, and it is alarmed.
    ("Serverless-LambdaDLQ", "Lambda/Function/Resource"),
    # cloudwatch:GetMetricData has no resource-level permissions; it is the one statement of this policy.
    ("AwsSolutions-IAM5[Resource::*]", "MetricRead/Resource"),
}
# The status widget: what the operator endpoint acknowledges but the metric read, which it does not have.
STATUS_WIDGET_ACKNOWLEDGEMENTS = OPERATOR_ENDPOINT_ACKNOWLEDGEMENTS - {
    ("AwsSolutions-IAM5[Resource::*]", "MetricRead/Resource")
}
# The anchoring function: an EngineFunction invoked by its schedule (with a DLQ, so LambdaDLQ passes).
ANCHORING_ACKNOWLEDGEMENTS = {
    ("AwsSolutions-IAM5[Resource::*]", "Role/DefaultPolicy/Resource"),
    ("AwsSolutions-L1", "Function/Resource"),
    ("Serverless-LambdaLatestVersion", "Function/Resource"),
}
# The example's WORKFLOW subscription's durable function (outbox_cdk.workflow_function): an EngineFunction whose
# failures are its executions' ends (no DLQ), whose executions' ARNs Lambda makes at each start (a wildcard after the
# function's ARN, in its own policy and the settle pass's), and its settle pass (a scheduled one, as
# the anchoring: ANCHORING_ACKNOWLEDGEMENTS, with its DLQ's).
EXECUTIONS = "AwsSolutions-IAM5[Resource::<OutboxWorkflowsWorkflow0LambdaFunction7BCBC1EF.Arn>:*]"
WORKFLOW_ACKNOWLEDGEMENTS = {
    ("AwsSolutions-IAM5[Resource::*]", "Workflow0/Lambda/Role/DefaultPolicy/Resource"),
    ("AwsSolutions-L1", "Workflow0/Lambda/Function/Resource"),
    ("Serverless-LambdaLatestVersion", "Workflow0/Lambda/Function/Resource"),
    ("Serverless-LambdaDLQ", "Workflow0/Lambda/Function/Resource"),
    (EXECUTIONS, "Workflow0/Executions/Resource"),
    *{(rule, f"Settler/Lambda/{path}") for rule, path in ANCHORING_ACKNOWLEDGEMENTS},
    ("Serverless-SQSRedrivePolicy", "Settler/DeadLetters/Queue/Resource"),
    (EXECUTIONS, "Settler/Lambda/Role/DefaultPolicy/Resource"),
}
# The runbook role reads the queues' age with cloudwatch:GetMetricData too, alone in its policy.
RUNBOOK_ACKNOWLEDGEMENTS = {
    ("AwsSolutions-IAM5[Resource::*]", "MetricRead/Resource"),
}
# The example's producer (stacks/outbox_stack.py): an EngineFunction, invoked synchronously.
PRODUCER_ACKNOWLEDGEMENTS = {
    ("AwsSolutions-IAM5[Resource::*]", "Role/DefaultPolicy/Resource"),
    ("AwsSolutions-L1", "Function/Resource"),
    ("Serverless-LambdaLatestVersion", "Function/Resource"),
    ("Serverless-LambdaDLQ", "Function/Resource"),
}
# The control-plane watch's DLQ: a DLQ through its rules' targets' DeadLetterConfig, which SQS3 does not recognise.
CONTROL_PLANE_ACKNOWLEDGEMENTS = {
    ("AwsSolutions-SQS3", "DeadLetters/Queue/Resource"),
    ("Serverless-SQSRedrivePolicy", "DeadLetters/Queue/Resource"),
}
# CDK's AwsCustomResource function that sets each lane DLQ's redrive allow policy during a deploy (redrive_allow):
# CloudFormation waits for its answer, so a failure fails the deploy (no DLQ), and one call per DLQ has nothing to
# trace. Its role is the stack's own (no AWSLambdaBasicExecutionRole) and its memory is said, so no IAM4 or memory.
REDRIVE_ALLOW_WRITER_ACKNOWLEDGEMENTS = {
    ("Serverless-LambdaDLQ", "OutboxEngine/AWS679f53fac002430cb0da5b7982bd2287/Resource"),
    ("Serverless-LambdaTracing", "OutboxEngine/AWS679f53fac002430cb0da5b7982bd2287/Resource"),
}
EXPECTED = (
    REDRIVE_ALLOW_WRITER_ACKNOWLEDGEMENTS
    | {(rule, f"OutboxEngine/PlaceOrder/{path}") for rule, path in PRODUCER_ACKNOWLEDGEMENTS}
    | {
        (rule, f"OutboxEngine/Outbox/{construct}/{path}")
        for construct, acknowledgements in (
            ("Relay", PIPE_ACKNOWLEDGEMENTS),
            ("RecordChangePipe", PIPE_ACKNOWLEDGEMENTS),
            ("Durable", QUEUE_ACKNOWLEDGEMENTS),
            ("RecordChanges", QUEUE_ACKNOWLEDGEMENTS),
            ("DurableConsumer", CONSUMER_ACKNOWLEDGEMENTS),
            ("RecordChangeConsumer", CONSUMER_ACKNOWLEDGEMENTS),
            ("Runbook", RUNBOOK_ACKNOWLEDGEMENTS),
            ("OperatorEndpoint", OPERATOR_ENDPOINT_ACKNOWLEDGEMENTS),
            ("StatusWidget", STATUS_WIDGET_ACKNOWLEDGEMENTS),
            ("Auditor/Pipe", PIPE_ACKNOWLEDGEMENTS),
            ("Auditor/Findings", QUEUE_ACKNOWLEDGEMENTS),
            ("Auditor/Recorder", CONSUMER_ACKNOWLEDGEMENTS),
            ("Auditor/Anchoring", ANCHORING_ACKNOWLEDGEMENTS),
            ("Auditor/AnchoringDeadLetters", {("Serverless-SQSRedrivePolicy", "Queue/Resource")}),
            ("ControlPlane", CONTROL_PLANE_ACKNOWLEDGEMENTS),
            ("Workflows", WORKFLOW_ACKNOWLEDGEMENTS),
        )
        for rule, path in acknowledgements
    }
    # Not the durable consumer's policy: it starts and finds executions by the function's and the alias's ARNs; only
    # the settle pass reads them by theirs (the wildcard).
)


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
