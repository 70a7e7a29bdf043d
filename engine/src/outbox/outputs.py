"""The stack outputs of an outbox pipeline, named once.

The construct (``outbox_cdk.OutboxPipeline``) declares exactly these outputs; the CLI, the local runtime's
tools and ``outbox.testing`` find the pipeline's resources through them (``Topology.from_outputs``). A
rename here changes both sides at once; an output the construct does not declare fails a test.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path

from outbox.exceptions import OutboxValidationError

# Where a served local runtime (``outbox local serve``) writes its endpoint, its stack's outputs and its catalog,
# relative to the folder it runs in; ``outbox --local`` reads it from there.
LOCAL_TOPOLOGY = Path(".local") / "topology.json"


class StackOutput(StrEnum):
    """Output ids (CloudFormation ``OutputKey``), each with the Topology field it fills, if any."""

    EVENTS_TABLE = "EventsTableName"
    INBOX_TABLE = "InboxTableName"
    INBOX_RETENTION_DAYS = "InboxRetentionDays"
    DURABLE_QUEUE = "DurableQueueUrl"
    DURABLE_DEAD_LETTER_QUEUE = "DurableDeadLetterQueueUrl"
    RELAY_PIPE = "RelayPipeName"
    RELAY_DEAD_LETTER_QUEUE = "RelayDeadLetterQueueUrl"
    DURABLE_CONSUMER_FUNCTION = "DurableConsumerFunctionName"
    RECORD_CHANGE_QUEUE = "RecordChangeQueueUrl"
    RECORD_CHANGE_DEAD_LETTER_QUEUE = "RecordChangeDeadLetterQueueUrl"
    RECORD_CHANGE_PIPE = "RecordChangePipeName"
    RECORD_CHANGE_PIPE_DEAD_LETTER_QUEUE = "RecordChangePipeDeadLetterQueueUrl"
    RECORD_CHANGE_CONSUMER_FUNCTION = "RecordChangeConsumerFunctionName"
    AUDIT_TABLE = "AuditTableName"
    TAMPER_PIPE = "TamperPipeName"
    TAMPER_QUEUE = "TamperQueueUrl"
    TAMPER_DEAD_LETTER_QUEUE = "TamperDeadLetterQueueUrl"
    TAMPER_PIPE_DEAD_LETTER_QUEUE = "TamperPipeDeadLetterQueueUrl"
    ANCHORING_FUNCTION = "AnchoringFunctionName"
    TAMPER_RECORDER_FUNCTION = "TamperRecorderFunctionName"
    ANCHORING_DEAD_LETTER_QUEUE = "AnchoringDeadLetterQueueUrl"
    # With WORKFLOW subscriptions: the settle pass's dead-letter queue (outbox_cdk.workflow_settler).
    WORKFLOW_SETTLE_DEAD_LETTER_QUEUE = "WorkflowSettleDeadLetterQueueUrl"
    ALARM_TOPIC = "AlarmTopicArn"
    OPERATOR_ROLE = "OperatorRoleArn"
    # The role the CLI's runbook runs as (outbox_cdk.runbook_role): what replay, redrive and reconcile call.
    RUNBOOK_ROLE = "RunbookRoleArn"
    OPERATOR_ENDPOINT = "OperatorEndpointUrl"
    # The application's own function environment as JSON (its table names...): the CLI builds the
    # application's catalog in the same environment as the pipeline's functions do.
    APPLICATION_ENVIRONMENT = "ApplicationEnvironment"


# Outputs that exist only with the record-change lane.
RECORD_CHANGE_OUTPUTS = frozenset(
    {
        StackOutput.RECORD_CHANGE_QUEUE,
        StackOutput.RECORD_CHANGE_DEAD_LETTER_QUEUE,
        StackOutput.RECORD_CHANGE_PIPE,
        StackOutput.RECORD_CHANGE_PIPE_DEAD_LETTER_QUEUE,
        StackOutput.RECORD_CHANGE_CONSUMER_FUNCTION,
    }
)


def application_environment(outputs: Mapping[str, str]) -> dict[str, str]:
    """The ``ApplicationEnvironment`` output as the variables it names ({} for a stack without it); an output
    that is not a JSON object of names is refused, not guessed at."""
    raw = outputs.get(StackOutput.APPLICATION_ENVIRONMENT)
    if raw is None:
        return {}
    try:
        parsed = json.loads(raw)
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict):
        raise OutboxValidationError(
            f"the stack's {StackOutput.APPLICATION_ENVIRONMENT} output is not a JSON object: {raw[:200]!r}"
        )
    return {str(name): str(value) for name, value in parsed.items()}
