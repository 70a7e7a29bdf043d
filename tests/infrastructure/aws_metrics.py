"""The metrics AWS publishes in the namespaces the pipeline's alarms and dashboard read, and the dimension
sets it publishes each one with: one table, from the documentation pages docs/aws-behaviour.md cites.

A metric in CloudWatch is its namespace, its name and its exact set of dimensions: a query with a dimension
set the service never publishes finds nothing, and the widget or alarm stays empty or silent for ever
(DynamoDB's ThrottledRequests, for one, is published per table and operation, never per table alone: R9.3).
Adding a metric to an alarm or the dashboard means adding it here, from the page, first.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final

DimensionSet = frozenset[str]


def _each(names: Iterable[str], *dimension_sets: Iterable[str]) -> dict[str, frozenset[DimensionSet]]:
    return {name: frozenset(frozenset(dimensions) for dimensions in dimension_sets) for name in names}


# R9.1: every SQS metric is per queue, and only per queue.
SQS: Final = _each(
    (
        "ApproximateAgeOfOldestMessage",
        "ApproximateNumberOfGroupsWithInflightMessages",
        "ApproximateNumberOfMessagesDelayed",
        "ApproximateNumberOfMessagesNotVisible",
        "ApproximateNumberOfMessagesVisible",
        "NumberOfDeduplicatedSentMessages",
        "NumberOfEmptyReceives",
        "NumberOfMessagesDeleted",
        "NumberOfMessagesReceived",
        "NumberOfMessagesSent",
        "SentMessageSize",
    ),
    {"QueueName"},
)

# R9.2: a function's metrics, for the function, a version or alias of it, or every function of the account.
_LAMBDA_SETS: Final = (
    {"FunctionName"},
    {"FunctionName", "Resource"},
    {"FunctionName", "Resource", "ExecutedVersion"},
    (),
)
LAMBDA: Final = _each(
    (
        "Invocations",
        "Errors",
        "DeadLetterErrors",
        "DestinationDeliveryFailures",
        "Throttles",
        "ProvisionedConcurrencyInvocations",
        "ProvisionedConcurrencySpilloverInvocations",
        "RecursiveInvocationsDropped",
        "Duration",
        "PostRuntimeExtensionsDuration",
        "IteratorAge",
        "ConcurrentExecutions",
        "ProvisionedConcurrentExecutions",
    ),
    *_LAMBDA_SETS,
) | _each(("UnreservedConcurrentExecutions", "ClaimedAccountConcurrency"), ())

# R9.3: table metrics, per table (and per index where an index has its own); request metrics per table
# and operation.
DYNAMODB: Final = (
    _each(
        ("ConditionalCheckFailedRequests", "TimeToLiveDeletedItemCount", "TransactionConflict"),
        {"TableName"},
    )
    | _each(
        (
            "ConsumedReadCapacityUnits",
            "ConsumedWriteCapacityUnits",
            "ProvisionedReadCapacityUnits",
            "ProvisionedWriteCapacityUnits",
            "ReadThrottleEvents",
            "WriteThrottleEvents",
        ),
        {"TableName"},
        {"TableName", "GlobalSecondaryIndexName"},
    )
    | _each(
        ("ThrottledRequests", "SystemErrors", "SuccessfulRequestLatency", "ReturnedItemCount"),
        {"TableName", "Operation"},
    )
    | _each(("ReturnedBytes", "ReturnedRecordsCount"), {"TableName", "Operation", "StreamLabel"})
    | _each(("UserErrors", "AccountMaxReads", "AccountMaxWrites"), ())
)

# R9.4: per pipe, except the account's concurrency; throttles and invocations are also summed per account.
PIPES: Final = (
    _each(
        (
            "Duration",
            "EventCount",
            "EventSize",
            "ExecutionTimeout",
            "ExecutionFailed",
            "ExecutionPartiallyFailed",
            "EnrichmentStageDuration",
            "EnrichmentStageFailed",
            "TargetStageDuration",
            "TargetStageFailed",
            "TargetStagePartiallyFailed",
            "TargetStageSkipped",
        ),
        {"PipeName"},
    )
    | _each(("ExecutionThrottled", "Invocations"), {"PipeName"}, {"AwsAccountId"})
    | _each(("Concurrency",), {"AwsAccountId"})
)

AWS_METRICS: Final[Mapping[str, Mapping[str, frozenset[DimensionSet]]]] = {
    "AWS/SQS": SQS,
    "AWS/Lambda": LAMBDA,
    "AWS/DynamoDB": DYNAMODB,
    "AWS/EventBridge/Pipes": PIPES,
}
