"""The control-plane watch (``OutboxPipeline(watch_control_plane=True)``): a notice on the alarm topic for each
call that could lift a guard of the pipeline or silence its alarms.

The policies of ``docs/security.md`` are enforced by AWS, and whoever may change a policy may lift it: a
``PutResourcePolicy`` on the events table, a ``SetQueueAttributes`` on a lane's queue, a ``StopPipe`` on the
tamper pipe, a ``DisableAlarmActions`` or a ``DisableKey`` on the alarm topic's key (which silences every
notification at once). CloudTrail records each of those calls as a management event, and delivers it to
EventBridge's default bus of the call's region (``detail-type`` ``AWS API Call via CloudTrail``), where one
rule per service matches exactly ``WATCHED_CALLS`` on this pipeline's resources (docs/aws-behaviour.md R12.1 to
R12.3 and R12.7):

- DynamoDB: the events table, named by ``tableName`` (its name or ARN) or ``resourceArn`` (the table's or its
  stream's ARN). ``UpdateTable`` covers the stream switched off and the deletion protection lifted.
- SQS: every queue and dead-letter queue of the pipeline, named by ``queueUrl``; matched on its end
  (``/<account>/<name>``), since SQS takes the same queue under more than one host name.
- Pipes: the relay, tamper and record-change pipes, by ``name``.
- CloudWatch: every alarm of the stack (CloudFormation names them ``<stack>-...``), by ``alarmNames`` or
  ``alarmName``: ``PutMetricAlarm`` is how an alarm is rewritten without its actions.
- KMS: the alarm topic's key (the pipeline's own ``AlarmTopic``), by ``keyId`` (its id or ARN: these calls
  take no alias).
- SNS: the alarm topic by ``topicArn``, and its subscriptions by ``subscriptionArn`` (``<topic ARN>:<id>``).
- CloudTrail: any trail of the region (the watch needs one and cannot tell which), every call that stops it
  logging or changes what it logs.
- EventBridge: the watch's own rules, by ``name`` or ``rule``. One ``DisableRule`` would silence a rule, so each
  rule is named by another: the rules rule names every other rule of the watch, and a second rule names the rules
  rule alone (R12.7). Silencing the watch takes two calls, and the first is reported.
- Lambda: every function whose role may emit (each function ``grant_emit`` admits, the durable consumer's among
  them) or move anchors (the anchoring function), by ``functionName`` in each form Lambda takes (name, ARN,
  partial ARN, each with or without a qualifier); and any function created with, or given, one of those roles or
  a role ``grant_emit`` admits (``role``): new code or configuration there can append events for any tenant, or
  anchor a rewrite (R12.8). CloudTrail names Lambda's calls with their API version appended
  (``UpdateFunctionCode20150331v2``), so these rules match each call's name as a prefix.

Each notice is one line on the alarm topic: the call, the principal (``userIdentity``, with ``invokedBy`` when
a service such as CloudFormation made it), where from, when, its error code if it failed, and the request
(which names the resource). Nothing is filtered out: a deploy that changes a watched setting is reported too,
since an attacker can deploy through CloudFormation as well as anyone. What EventBridge cannot publish (the
topic refuses it, its key is disabled) ends in ``self.dead_letters``, alarmed: at once for a refusal, after up to
a day of retries for what it counts as transient (R12.5).

It needs a CloudTrail trail that logs this region's management events (R12.1): without one, nothing reaches
the rules and nothing is reported. AWS management events on the default bus cost nothing (R12.4); the notices
are SNS messages.

One file: the watched calls, the rules that match them, the rules that watch those rules and the topic policy that
admits every rule are one list read together (a rule added in one place must be named in the others); what
Lambda's patterns match is apart, in ``lambda_watch``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Final, cast

import jsii
from aws_cdk import Acknowledgment, Annotations, Aws, Names, Stack, Validations
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_events as eventbridge
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from constructs import Construct, IValidation

from outbox_cdk.alarmed_dlq import AlarmedDeadLetterQueue
from outbox_cdk.encryption import EVENTBRIDGE_PRINCIPAL
from outbox_cdk.lambda_watch import (
    LONGEST_FUNCTION_NAME,
    LONGEST_PLACE,
    PATTERN_LIMIT,
    GrowingRules,
    functions_match,
    longest,
    longest_role_arn,
    roles_match,
)
from outbox_cdk.operator_endpoint import OperatedPipeline
from outbox_cdk.rule_names import RULE_NAME_LIMIT, rule_arn, rule_name

# What every CloudTrail management event on EventBridge carries as its detail-type (R12.1).
CLOUDTRAIL_DETAIL_TYPE: Final = "AWS API Call via CloudTrail"

# Each service's CloudTrail eventSource, and the calls the watch reports on the pipeline's resources. A call
# is here if it can lift a policy of docs/security.md, stop or remove a part of the pipeline, or silence an
# alarm; the tests compare this list with the one docs/security.md gives ("Detected"), so a call added or removed
# here must be said there too.
DYNAMODB: Final = "dynamodb.amazonaws.com"
SQS: Final = "sqs.amazonaws.com"
PIPES: Final = "pipes.amazonaws.com"
CLOUDWATCH: Final = "monitoring.amazonaws.com"
KMS: Final = "kms.amazonaws.com"
SNS: Final = "sns.amazonaws.com"
CLOUDTRAIL: Final = "cloudtrail.amazonaws.com"
EVENTS: Final = "events.amazonaws.com"
LAMBDA: Final = "lambda.amazonaws.com"
WATCHED_CALLS: Final[Mapping[str, tuple[str, ...]]] = {
    # The resource policy's Deny lifted; the stream (the relay's and the tamper pipe's source) or the deletion
    # protection switched off; a TTL that would delete event rows; the table itself.
    DYNAMODB: ("DeleteResourcePolicy", "DeleteTable", "PutResourcePolicy", "UpdateTable", "UpdateTimeToLive"),
    # A queue policy rewritten (the send deny), a DLQ's retention or redrive changed, dead work purged.
    SQS: ("AddPermission", "DeleteQueue", "PurgeQueue", "RemovePermission", "SetQueueAttributes"),
    # A pipe stopped, pointed elsewhere, given another role or filter, or removed.
    PIPES: ("DeletePipe", "StopPipe", "UpdatePipe"),
    # An alarm silenced, rewritten (its actions, threshold or metric) or removed.
    CLOUDWATCH: ("DeleteAlarms", "DisableAlarmActions", "PutMetricAlarm"),
    # The alarm topic's key made unusable, or its policy rewritten: every notification stops.
    KMS: ("DisableKey", "PutKeyPolicy", "ScheduleKeyDeletion"),
    # The alarm topic's policy or key changed, the topic removed, its subscriptions removed or filtered.
    SNS: (
        "AddPermission",
        "DeleteTopic",
        "RemovePermission",
        "SetSubscriptionAttributes",
        "SetTopicAttributes",
        "Unsubscribe",
    ),
    # The trail the watch relies on stopped, deleted, or made to log no management events in this region.
    CLOUDTRAIL: ("DeleteTrail", "PutAdvancedEventSelectors", "PutEventSelectors", "StopLogging", "UpdateTrail"),
    # A rule of the watch disabled, deleted, rewritten (its pattern, its state) or given other targets.
    EVENTS: ("DeleteRule", "DisableRule", "PutRule", "PutTargets", "RemoveTargets"),
    # An emitting or anchoring function given other code, configuration (its role, layers, environment), a version
    # or alias to run, or another resource policy (who may invoke it), or deleted; matched as prefixes (R12.8), so
    # CreateFunction covers CreateFunctionUrlConfig and DeleteFunction the deletes of its concurrency, URL and
    # invoke configuration too.
    LAMBDA: (
        "AddPermission",
        "CreateAlias",
        "CreateFunction",
        "DeleteAlias",
        "DeleteFunction",
        "PublishVersion",
        "RemovePermission",
        "UpdateAlias",
        "UpdateFunctionCode",
        "UpdateFunctionConfiguration",
    ),
}
# The Lambda calls that give a function a role (``requestParameters.role``): any function made to run as an emitting
# or anchoring role acts as it.
ROLE_CALLS: Final = ("CreateFunction", "UpdateFunctionConfiguration")
# The services whose CloudTrail event names carry a version suffix: their calls are matched as prefixes (R12.8).
VERSIONED_NAMES: Final = frozenset({LAMBDA})
# Each rule's construct id, by service.
RULE_IDS: Final[Mapping[str, str]] = {
    DYNAMODB: "EventsTableRule",
    SQS: "QueuesRule",
    PIPES: "PipesRule",
    CLOUDWATCH: "AlarmsRule",
    KMS: "AlarmKeyRule",
    SNS: "AlarmTopicRule",
    CLOUDTRAIL: "TrailRule",
    EVENTS: "RulesRule",
    LAMBDA: "FunctionsRule",
}
# The rules that report a function given an emitting or anchoring role: as many as the roles need.
ROLES_RULE_ID: Final = "FunctionRolesRule"
# The rule that watches the rules rule: EventBridge calls on it alone.
RULES_WATCH_ID: Final = "RulesRuleWatch"
# EventBridge's limits on a target: the longest it keeps retrying and the most attempts (R12.5), for an error it
# counts as transient (a refusal, such as a missing permission, goes to the DLQ at once). A notice the topic
# cannot take now may still arrive within the day.
RETRY_SECONDS: Final = 24 * 3600
RETRY_ATTEMPTS: Final = 185

# The notice: variables of the input transformer and the CloudTrail fields they read (R12.6).
NOTICE_FIELDS: Final[Mapping[str, str]] = {
    "call": "$.detail.eventName",
    "service": "$.detail.eventSource",
    "region": "$.detail.awsRegion",
    "identity": "$.detail.userIdentity.type",
    "principal": "$.detail.userIdentity.arn",
    "invokedBy": "$.detail.userIdentity.invokedBy",
    "source": "$.detail.sourceIPAddress",
    "time": "$.detail.eventTime",
    "error": "$.detail.errorCode",
    "request": "$.detail.requestParameters",
}


class ControlPlaneWatch(Construct):
    """``self.rules`` (one EventBridge rule per service of ``WATCHED_CALLS``), ``self.rules_watch`` (the rule
    that watches the EventBridge service's rule) and ``self.dead_letters``.

    Parameters
    ----------
    operated
        The pipeline's events table, queues and pipes: the resources watched.
    alarm_topic
        Where the notices go. The pipeline's own ``AlarmTopic`` gets the statements EventBridge needs in its
        topic and key policies; a topic of yours cannot be changed here (the synth warns): its policy must
        admit ``events.amazonaws.com`` (``sns:Publish``) and, if it is encrypted, its key too.
    encryption_key
        The pipeline's ``encryption_key``, for the dead-letter queue (``OutboxPipeline`` admits EventBridge
        to it for the watch's rules and the anchoring schedule's: ``encryption.admit_eventbridge_dead_letters``).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        operated: OperatedPipeline,
        alarm_topic: sns.ITopic,
        encryption_key: kms.IKey | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        self.alarm_topic = alarm_topic
        self.dead_letters = AlarmedDeadLetterQueue(
            self,
            "DeadLetters",
            alarm_topic=alarm_topic,
            fifo=False,
            description="control-plane notices EventBridge could not publish to the alarm topic (each message is the "
            "CloudTrail event, its error in the ERROR_CODE and ERROR_MESSAGE attributes: see the runbook's "
            "Control-plane change)",
            encryption_key=encryption_key,
        )
        dead_letter_resource = self.dead_letters.queue.node.default_child
        assert dead_letter_resource is not None
        Validations.of(dead_letter_resource).acknowledge(
            Acknowledgment(
                id="AwsSolutions::AwsSolutions-SQS3",
                reason="This is the watch's rules' dead-letter queue (each rule target's DeadLetterConfig, which the "
                "rule does not recognise, unlike a queue redrive policy); it is alarmed at > 0.",
            )
        )
        queues = [*operated.queues().values(), self.dead_letters.queue]
        matches: dict[str, dict[str, Any]] = {
            DYNAMODB: _table_match(operated.events.table.table_name, operated.events.table.table_arn),
            SQS: {"requestParameters": {"queueUrl": [{"suffix": f"/{Aws.ACCOUNT_ID}/{q.queue_name}"} for q in queues]}},
            PIPES: {"requestParameters": {"name": [pipe.pipe_name for pipe in operated.pipes().values()]}},
            CLOUDWATCH: _alarm_match(f"{Aws.STACK_NAME}-"),
            SNS: _topic_match(alarm_topic.topic_arn),
        }
        key = alarm_topic.master_key
        if key is not None:
            matches[KMS] = {"requestParameters": {"keyId": [key.key_id, key.key_arn]}}
        matches[CLOUDTRAIL] = {}
        self.rules: dict[str, eventbridge.CfnRule] = {
            service: self._rule(RULE_IDS[service], service, match) for service, match in matches.items()
        }
        # The rules rule is named here, not by CloudFormation: the rule that watches it must name it, and a Ref
        # each way would be a dependency cycle. It names the others by Ref, so it is created last.
        rules_rule_name = self._rule_name(RULE_IDS[EVENTS])
        self.rules_watch = self._rule(RULES_WATCH_ID, EVENTS, _rules_match([rules_rule_name]))
        # The Lambda rules: made as the functions and roles to watch are named (grant_emit may come after the
        # pipeline), each taking as many as fit EventBridge's limit.
        self.lambda_rules: list[eventbridge.CfnRule] = []
        self._functions = GrowingRules(
            RULE_IDS[LAMBDA],
            make_rule=self._lambda_rule,
            pattern=lambda names: watched_pattern(LAMBDA, functions_match(names)),
            measure=lambda names: watched_pattern(LAMBDA, functions_match(names, LONGEST_PLACE)),
        )
        self._roles = GrowingRules(
            ROLES_RULE_ID,
            make_rule=self._lambda_rule,
            pattern=lambda arns: watched_pattern(LAMBDA, roles_match(arns), ROLE_CALLS),
        )
        self.rules[EVENTS] = self._rule(RULE_IDS[EVENTS], EVENTS, self._rules_rule_pattern(), name=rules_rule_name)
        self._topic_statement = self._admit_eventbridge(key)
        self.node.add_validation(_RulesRuleFits(self))
        # Every role that may emit or anchor, and its function: the emitters as grant_emit admits them, now and
        # later, and the anchoring function.
        operated.events.on_emitter(self._watch_emitter)
        self.watch_function(operated.auditor.anchoring)

    def watch_function(self, function: lambda_.IFunction) -> None:
        """Report the Lambda calls of ``WATCHED_CALLS`` on ``function``, and any function created with, or given,
        its role: a function whose role may emit or move anchors (every function ``grant_emit`` admits is watched
        already; call it for one whose role you admitted by ARN)."""
        self._functions.add(function.function_name, longest(function.function_name, LONGEST_FUNCTION_NAME))
        if function.role is not None:
            self.watch_role(function.role)

    def watch_role(self, role: iam.IRole) -> None:
        """Report any ``CreateFunction`` or ``UpdateFunctionConfiguration`` that gives a function ``role``."""
        self._roles.add(role.role_arn, longest(role.role_arn, longest_role_arn(role)))

    def _watch_emitter(self, grantee: iam.IGrantable) -> None:
        if isinstance(grantee, lambda_.FunctionBase):
            self.watch_function(grantee)
            return
        principal = grantee.grant_principal
        if hasattr(principal, "role_arn"):  # a role (an IAM user's keys no Lambda call hands to a function)
            self.watch_role(cast(iam.IRole, principal))

    def _lambda_rule(self, construct_id: str, values: Sequence[str]) -> eventbridge.CfnRule:
        """A Lambda rule (its pattern is set by ``GrowingRules``), made after the rules rule: the rules rule names
        it, and the topic admits it."""
        rule = self._rule(construct_id, LAMBDA, {})
        self.lambda_rules.append(rule)
        self.rules[EVENTS].event_pattern = self._rules_rule_pattern()
        self._topic_statement.add_condition("ArnEquals", {"aws:SourceArn": self.rule_arns})
        self._key_statement.add_condition("ArnEquals", {"aws:SourceArn": self.named_rule_arns()})
        return rule

    def watched_rules(self) -> list[eventbridge.CfnRule]:
        """Every rule the rules rule names: all but itself."""
        return [
            *(rule for service, rule in self.rules.items() if service != EVENTS),
            *self.lambda_rules,
            self.rules_watch,
        ]

    def _rules_rule_pattern(self) -> dict[str, Any]:
        return watched_pattern(EVENTS, _rules_match([rule.ref for rule in self.watched_rules()]))

    def quiet_for(self, alarms: Sequence[cloudwatch.IAlarm]) -> None:
        """Create the alarms rule after ``alarms``, so that a new stack's first deploy does not report the
        creation of each of its alarms (their calls precede the rule; whether CloudTrail can still deliver one
        after the rule exists is not documented)."""
        for alarm in alarms:
            self.rules[CLOUDWATCH].node.add_dependency(alarm)

    @property
    def rule_arns(self) -> list[str]:
        return [rule.attr_arn for rule in self._every_rule()]

    def named_rule_arns(self) -> list[str]:
        """Each rule's ARN written from its name, referencing no rule: what a key's policy can hold."""
        return [rule_arn(self, str(rule.name)) for rule in self._every_rule()]

    def _every_rule(self) -> list[eventbridge.CfnRule]:
        return [*self.rules.values(), *self.lambda_rules, self.rules_watch]

    def _rule_name(self, construct_id: str) -> str:
        return rule_name(self, construct_id)

    def _rule(
        self,
        construct_id: str,
        service: str,
        match: Mapping[str, Any],
        *,
        name: str | None = None,
        calls: Sequence[str] | None = None,
    ) -> eventbridge.CfnRule:
        short = service.split(".", 1)[0]
        rule = eventbridge.CfnRule(
            self,
            construct_id,
            # Named here, so that the alarm key's policy can name each rule's ARN (a Ref would be a cycle).
            name=name or self._rule_name(construct_id),
            description=f"Outbox control-plane watch: {short} calls that could lift a guard of this pipeline or "
            "silence its alarms, to the alarm topic (needs a CloudTrail trail)",
            state="ENABLED",
            event_pattern=watched_pattern(service, match, calls),
            targets=[
                eventbridge.CfnRule.TargetProperty(
                    id="AlarmTopic",
                    arn=self.alarm_topic.topic_arn,
                    input_transformer=eventbridge.CfnRule.InputTransformerProperty(
                        input_paths_map=dict(NOTICE_FIELDS), input_template=notice_template()
                    ),
                    dead_letter_config=eventbridge.CfnRule.DeadLetterConfigProperty(
                        arn=self.dead_letters.queue.queue_arn
                    ),
                    retry_policy=eventbridge.CfnRule.RetryPolicyProperty(
                        maximum_event_age_in_seconds=RETRY_SECONDS, maximum_retry_attempts=RETRY_ATTEMPTS
                    ),
                )
            ],
        )
        # What CDK's own targets write for a rule's DLQ (aws_events_targets): EventBridge sends an event it could
        # not deliver as itself, on behalf of this rule only.
        self.dead_letters.queue.add_to_resource_policy(
            iam.PolicyStatement(
                sid=f"AllowEventRule{Names.node_unique_id(rule.node)}",
                principals=[iam.ServicePrincipal(EVENTBRIDGE_PRINCIPAL)],
                actions=["sqs:SendMessage"],
                resources=[self.dead_letters.queue.queue_arn],
                conditions={"ArnEquals": {"aws:SourceArn": rule.attr_arn}},
            )
        )
        return rule

    def _admit_eventbridge(self, key: kms.IKey | None) -> iam.PolicyStatement:
        """EventBridge publishes as itself: the topic policy admits it for these rules only, and so does the topic's
        key, by the ARNs the rules' names give (a rule's ``Arn`` in the key policy would be a cycle: the key, the
        topic, the rule), both on behalf of this account only, as ``AlarmTopic`` admits CloudWatch."""
        stack = Stack.of(self)
        principal = iam.ServicePrincipal(EVENTBRIDGE_PRINCIPAL)
        topic_statement = iam.PolicyStatement(
            sid="AllowTheControlPlaneWatchToPublish",
            principals=[principal],
            actions=["sns:Publish"],
            resources=[self.alarm_topic.topic_arn],
            conditions={
                "StringEquals": {"aws:SourceAccount": stack.account},
                "ArnEquals": {"aws:SourceArn": self.rule_arns},
            },
        )
        topic_added = self.alarm_topic.add_to_resource_policy(topic_statement).statement_added
        # Each rule by the ARN its name gives (a Ref to the rule would be a cycle: the key, the topic, the rule).
        self._key_statement = iam.PolicyStatement(
            sid="AllowTheControlPlaneWatchToPublishEncrypted",
            principals=[principal],
            actions=["kms:Decrypt", "kms:GenerateDataKey"],
            resources=["*"],  # in a key policy, "*" means this key
            conditions={
                "StringEquals": {"aws:SourceAccount": stack.account},
                "ArnEquals": {"aws:SourceArn": self.named_rule_arns()},
            },
        )
        key_added = key is not None and bool(
            key.add_to_resource_policy(self._key_statement, allow_no_op=True).statement_added
        )
        if not topic_added:
            self._warn(
                f"the alarm topic {self.alarm_topic.topic_arn} is imported: its policy cannot be changed here and "
                "must let events.amazonaws.com publish (sns:Publish, for this account's rules), and if it is "
                "encrypted its key must let it use the key (kms:Decrypt, kms:GenerateDataKey); a key this app "
                "cannot see is not watched either"
            )
        elif key is not None and not key_added:
            self._warn(
                f"the alarm topic's key {key.key_arn} is imported: its policy cannot be changed here and must let "
                "events.amazonaws.com use the key (kms:Decrypt, kms:GenerateDataKey, for this account's rules)"
            )
        return topic_statement

    def _warn(self, problem: str) -> None:
        Annotations.of(self).add_warning_v2(
            "outbox:controlPlaneWatchTopic",
            f"{problem}: otherwise every control-plane notice ends in the watch's dead-letter queue (see "
            "OutboxPipeline's watch_control_plane).",
        )


def watched_pattern(service: str, match: Mapping[str, Any], calls: Sequence[str] | None = None) -> dict[str, Any]:
    """The event pattern of ``service``'s rule: its watched calls (or ``calls``), on the resources ``match`` names.
    A service whose CloudTrail names carry a version (R12.8) has each call matched as a prefix."""
    names = list(WATCHED_CALLS[service] if calls is None else calls)
    event_names: list[Any] = [{"prefix": name} for name in names] if service in VERSIONED_NAMES else names
    return {
        "detail-type": [CLOUDTRAIL_DETAIL_TYPE],
        "detail": {"eventSource": [service], "eventName": event_names, **match},
    }


def notice_template() -> str:
    """The input template: one line of text (a JSON string), the transformer's variables in angle brackets."""
    line = (
        f"Outbox control-plane change in stack {Aws.STACK_NAME}: <call> (<service>, <region>) by <identity> "
        "<principal> [invoked by: <invokedBy>] from <source> at <time> [error: <error>]. Request: <request>. "
        "A deploy of the stack reports what it changes too; anything else, see the runbook (Control-plane change)."
    )
    return json.dumps(line)


def _table_match(name: str, arn: str) -> dict[str, Any]:
    # UpdateTable, DeleteTable and UpdateTimeToLive take the name or the ARN; the resource-policy calls the
    # table's or its stream's ARN. The documentation's UpdateTable record shows the table only in its response
    # (R12.2): that is matched too.
    return {
        "$or": [
            {"requestParameters": {"tableName": [name, arn]}},
            {"requestParameters": {"resourceArn": [arn, {"prefix": f"{arn}/"}]}},
            {"responseElements": {"tableDescription": {"tableName": [name]}}},
        ]
    }


def _alarm_match(prefix: str) -> dict[str, Any]:
    # DisableAlarmActions and DeleteAlarms take a list (a list matches when one of its values does); PutMetricAlarm
    # one name.
    return {
        "$or": [
            {"requestParameters": {"alarmNames": [{"prefix": prefix}]}},
            {"requestParameters": {"alarmName": [{"prefix": prefix}]}},
        ]
    }


def _rules_match(names: Sequence[str]) -> dict[str, Any]:
    # DisableRule, DeleteRule and PutRule take the rule's name as ``name``; PutTargets and RemoveTargets as
    # ``rule`` (R12.7). A rule's name is unique on its bus: the watch's are on the default bus.
    return {
        "$or": [
            {"requestParameters": {"name": list(names)}},
            {"requestParameters": {"rule": list(names)}},
        ]
    }


def _topic_match(topic_arn: str) -> dict[str, Any]:
    return {
        "$or": [
            {"requestParameters": {"topicArn": [topic_arn]}},
            {"requestParameters": {"subscriptionArn": [{"prefix": f"{topic_arn}:"}]}},
        ]
    }


@jsii.implements(IValidation)
class _RulesRuleFits:
    """The rules rule names every other rule of the watch twice (R12.7): with many Lambda rules it could outgrow
    EventBridge's limit. Checked at synth with names of 64 characters."""

    def __init__(self, watch: ControlPlaneWatch) -> None:
        self._watch = watch

    def validate(self) -> list[str]:
        stand_ins = ["x" * RULE_NAME_LIMIT for _ in self._watch.watched_rules()]
        length = len(json.dumps(watched_pattern(EVENTS, _rules_match(stand_ins))))
        if length <= PATTERN_LIMIT:
            return []
        return [
            f"the control-plane watch has {len(stand_ins)} rules, and the rule that names them all would be {length} "
            f"characters, over EventBridge's {PATTERN_LIMIT}: let your producers share fewer functions or roles"
        ]
