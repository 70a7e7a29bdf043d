"""An engine function EventBridge runs on a schedule: the hourly anchoring pass (``audit``) and the WORKFLOW lane's
settle pass every minute (``workflow_settler``) are both built here.

What each gets: the function (``EngineFunction``: its role and log group), an alarmed dead-letter queue for the
passes that failed every retry (Lambda's own, for an invocation the function failed, and the rule target's, for one
EventBridge could not deliver: both end in the same queue), the rule with its retries, and an alarm on the
function's errors. A pass that fails is repeated by the next one, so neither reserves concurrency.

Not a construct of its own: each part is made in the caller's scope under the caller's ids, so the resources of a
stack built before this module existed keep their logical ids (and a queue is never replaced).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_events as eventbridge
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from constructs import Construct

from outbox_cdk import checkov
from outbox_cdk.alarmed_dlq import AlarmedDeadLetterQueue
from outbox_cdk.alarms import alarm_above
from outbox_cdk.grants import QUEUE_SEND_ACTIONS, grant_messages
from outbox_cdk.lambda_defaults import UNRESERVED_POOL, ApplicationCode, EngineFunction


@dataclass(frozen=True)
class PassIds:
    """The construct ids of a pass's parts, in its scope."""

    function: str
    dead_letters: str
    schedule: str
    errors_alarm: str


@dataclass(frozen=True)
class PassWords:
    """What the pass's resources say of it (each part's description)."""

    function: str
    dead_letters: str
    schedule: str
    errors_alarm: str
    why_no_reserved_concurrency: str


@dataclass(frozen=True)
class ScheduledPass:
    function: lambda_.Function
    role: iam.IRole
    dead_letters: AlarmedDeadLetterQueue
    schedule: eventbridge.Rule
    errors_alarm: cloudwatch.Alarm


def scheduled_pass(
    scope: Construct,
    ids: PassIds,
    words: PassWords,
    *,
    handler: str,
    service_name: str,
    timeout: Duration,
    application: ApplicationCode,
    environment: dict[str, str],
    rate: Duration,
    max_event_age: Duration,
    errors_period: Duration,
    alarm_topic: sns.ITopic,
    encryption_key: kms.IKey | None = None,
    grant: Callable[[lambda_.Function], None] = lambda _function: None,
    rule_name: str | None = None,
) -> ScheduledPass:
    """The pass's parts in ``scope``: ``grant`` is given the function before anything else is granted to it (its
    role's policy lists the caller's grants first)."""
    engine_function = EngineFunction(
        scope,
        ids.function,
        handler=handler,
        service_name=service_name,
        description=words.function,
        timeout=timeout,
        application=application,
        environment=environment,
        encryption_key=encryption_key,
    )
    function = engine_function.function
    grant(function)
    dead_letters = AlarmedDeadLetterQueue(
        scope,
        ids.dead_letters,
        alarm_topic=alarm_topic,
        fifo=False,
        description=words.dead_letters,
        encryption_key=encryption_key,
    )
    function_resource = function.node.default_child
    assert isinstance(function_resource, lambda_.CfnFunction)
    function_resource.dead_letter_config = lambda_.CfnFunction.DeadLetterConfigProperty(
        target_arn=dead_letters.queue.queue_arn
    )
    # Lambda sends a failed asynchronous invocation to it with the function's role (R10.8): the one role its policy
    # lets send. The schedule's EventBridge sends as itself, by CDK's Allow for that rule, a statement of the queue's
    # policy that names the rule (aws:SourceArn), so no cycle; with an encryption key, OutboxPipeline admits it to
    # the key (encryption.admit_eventbridge_dead_letters).
    grant_messages(dead_letters.queue, function, QUEUE_SEND_ACTIONS)
    assert function.role is not None
    dead_letters.admit_sender(function.role)
    checkov.skip(function_resource, "CKV_AWS_115", f"{words.why_no_reserved_concurrency} {UNRESERVED_POOL}")
    schedule = eventbridge.Rule(
        scope,
        ids.schedule,
        rule_name=rule_name,
        description=words.schedule,
        schedule=eventbridge.Schedule.rate(rate),
        targets=[
            targets.LambdaFunction(
                function, retry_attempts=2, max_event_age=max_event_age, dead_letter_queue=dead_letters.queue
            )
        ],
    )
    errors_alarm = alarm_above(
        scope,
        ids.errors_alarm,
        function.metric_errors(period=errors_period, statistic=cloudwatch.Stats.SUM),
        threshold=0,
        description=words.errors_alarm,
        alarm_topic=alarm_topic,
    )
    return ScheduledPass(function, engine_function.role, dead_letters, schedule, errors_alarm)
