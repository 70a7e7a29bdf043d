"""``OutboxPipeline(watch_control_plane=True)``: control-plane tampering is reported on the alarm topic.

The example stack turns it on. Its template holds one EventBridge rule per service, each matching exactly the
watched CloudTrail calls (those docs/security.md lists: a call added to or removed from ``WATCHED_CALLS`` alone
fails here) on this pipeline's resources only, each notifying the alarm topic, which admits EventBridge for these
rules only. The patterns are then run, resolved to made-up physical names, through moto's implementation of
EventBridge's pattern matching: a ``StopPipe`` on the relay pipe matches, one on another pipe does not, and so on.
A pipeline without the prop has none of it, and one given a topic of yours warns that its policy must admit
EventBridge.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping
from functools import partial
from pathlib import Path
from typing import Any, Final

import pytest
from aws_cdk import App, Stack
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from aws_cdk.assertions import Annotations, Match, Template
from moto.events.models import EventPattern

from outbox_cdk import Alarms, OutboxPipeline
from outbox_cdk.control_plane import (
    CLOUDTRAIL_DETAIL_TYPE,
    NOTICE_FIELDS,
    RETRY_ATTEMPTS,
    RETRY_SECONDS,
    ROLE_CALLS,
    WATCHED_CALLS,
)
from stacks import outbox_stack
from stacks.app_factory import STACK_NAME
from tests.infrastructure.conftest import resources_of_type
from tests.infrastructure.template_queries import listed, only_resource
from tests.infrastructure.test_pipeline import APP_ENVIRONMENT, NOBODY, pipeline_stack

# docs/security.md's "Detected" list names the watched calls (its control-plane item): the contract the watch is
# held to. Each service is named as the list names it, followed by its calls in backticks.
SECURITY_DOC: Final = Path(__file__).resolve().parents[2] / "docs" / "security.md"
DOCUMENTED_SERVICES: Final = {
    "DynamoDB": "dynamodb.amazonaws.com",
    "SQS": "sqs.amazonaws.com",
    "Pipes": "pipes.amazonaws.com",
    "CloudWatch": "monitoring.amazonaws.com",
    "KMS": "kms.amazonaws.com",
    "SNS": "sns.amazonaws.com",
    "CloudTrail": "cloudtrail.amazonaws.com",
    "EventBridge": "events.amazonaws.com",
    "Lambda": "lambda.amazonaws.com",
}


def documented_calls() -> dict[str, set[str]]:
    """The calls docs/security.md says the watch reports, by CloudTrail eventSource: each `Call` (or `Call...`,
    a prefix) after a service's name in the control-plane item of "Detected", from the sentence that lists them."""
    text = SECURITY_DOC.read_text()
    start = text.index("- *A guard lifted or an alarm silenced through the control plane*")
    item = text[start : text.index("\n\n", start)]
    listed = item[item.index("changes them included.") :]
    calls: dict[str, set[str]] = {}
    service = None
    names = "|".join(DOCUMENTED_SERVICES)
    for match in re.finditer(rf"\b({names})\b|`([A-Z][A-Za-z]+)(?:\.\.\.)?`", listed):
        if match[1]:
            service = DOCUMENTED_SERVICES[match[1]]
        else:
            assert service is not None, match[0]
            calls.setdefault(service, set()).add(match[2])
    return calls


EXPECTED_CALLS: Final = {service: list(calls) for service, calls in WATCHED_CALLS.items()}
EVENTS: Final = "events.amazonaws.com"
LAMBDA: Final = "lambda.amazonaws.com"
# The calls that silence or rewrite an EventBridge rule, and the field each names it by (R12.7).
RULE_CALLS: Final = dict.fromkeys(("DisableRule", "DeleteRule", "PutRule"), "name") | dict.fromkeys(
    ("PutTargets", "RemoveTargets"), "rule"
)
WATCH_PREFIX: Final = "OutboxControlPlane"
ACCOUNT: Final = "123456789012"
REGION: Final = "us-east-1"
# EventBridge's default limit on an event pattern, in characters (R12.3).
PATTERN_LIMIT: Final = 2048


def every_watch_rule(template: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Every rule of the watch, by logical id: its properties."""
    return {
        logical: rule["Properties"]
        for logical, rule in resources_of_type(dict(template), "AWS::Events::Rule").items()
        if logical.startswith(WATCH_PREFIX)
    }


def service_of(rule: Mapping[str, Any]) -> str:
    return str(rule["EventPattern"]["detail"]["eventSource"][0])


def watch_rules(template: Mapping[str, Any]) -> dict[str, tuple[str, dict[str, Any]]]:
    """Each watch rule by the service it watches: (logical id, properties); EventBridge's rules, which watch
    the watch, and Lambda's, as many as the functions need, are not here."""
    found = [
        (service_of(rule), (logical, rule))
        for logical, rule in every_watch_rule(template).items()
        if service_of(rule) not in (EVENTS, LAMBDA)
    ]
    rules = dict(found)
    assert len(rules) == len(found), "one rule per service"
    return rules


def resource_part(pattern: dict[str, Any]) -> dict[str, Any]:
    """What a rule's pattern says about the resource: its detail without the service and the calls."""
    return {key: value for key, value in pattern["detail"].items() if key not in ("eventSource", "eventName")}


def logical_id(template: Mapping[str, Any], resource_type: str, prefix: str) -> str:
    return only_resource(dict(template), resource_type, prefix)[0]


def walk(value: Any) -> Iterator[tuple[str | None, Any]]:
    """Every (key, value) of a pattern, at every depth, and (None, scalar) for each scalar."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield key, item
            yield from walk(item)
    elif isinstance(value, list):
        for item in value:
            yield from walk(item)
    else:
        yield None, value


def watched_pipeline(stack: Stack, **options: Any) -> OutboxPipeline:
    """A pipeline with the watch in ``stack``; ``options`` say who reads its alarms."""
    return OutboxPipeline(
        stack,
        "Outbox",
        code=lambda_.Code.from_asset(str(outbox_stack.PROJECT_ROOT), exclude=outbox_stack.CODE_EXCLUDE),
        catalog=outbox_stack.CATALOG,
        environment=APP_ENVIRONMENT,
        operators=NOBODY["operators"],
        watch_control_plane=True,
        **options,
    )


# --- the template ------------------------------------------------------------------------------------------


def test_the_watched_calls_are_exactly_the_documented_ones() -> None:
    assert {service: set(calls) for service, calls in WATCHED_CALLS.items()} == documented_calls()
    # The calls that give a function a role (R12.8) are Lambda calls the list names
    assert set(ROLE_CALLS) <= set(WATCHED_CALLS[LAMBDA])


def test_one_rule_per_service_matches_exactly_the_watched_calls(stack_template: dict[str, Any]) -> None:
    rules = watch_rules(stack_template)
    assert set(rules) == set(EXPECTED_CALLS) - {EVENTS, LAMBDA}
    watches = [rule for rule in every_watch_rule(stack_template).values() if service_of(rule) == EVENTS]
    assert len(watches) == 2  # the rules rule, and the rule that watches it
    # Lambda's: the calls on the functions, and the calls that give a function a role, each name a prefix (R12.8).
    functions, roles = lambda_rules(stack_template)
    for rule in [*functions.values(), *roles.values()]:
        assert rule["State"] == "ENABLED"
        assert rule["EventPattern"]["detail-type"] == [CLOUDTRAIL_DETAIL_TYPE]
        assert rule["EventPattern"]["detail"]["eventSource"] == [LAMBDA]
    for rule in functions.values():
        assert rule["EventPattern"]["detail"]["eventName"] == [{"prefix": c} for c in EXPECTED_CALLS[LAMBDA]]
    for rule in roles.values():
        assert rule["EventPattern"]["detail"]["eventName"] == [{"prefix": c} for c in ROLE_CALLS]
    for service, rule in [*((s, r) for s, (_, r) in rules.items()), *((EVENTS, r) for r in watches)]:
        pattern = rule["EventPattern"]
        assert rule["State"] == "ENABLED"
        assert set(pattern) == {"detail-type", "detail"}, service
        assert pattern["detail-type"] == [CLOUDTRAIL_DETAIL_TYPE] == ["AWS API Call via CloudTrail"]
        assert pattern["detail"]["eventSource"] == [service]
        assert pattern["detail"]["eventName"] == EXPECTED_CALLS[service]


def test_each_rule_names_this_pipelines_resources_and_nothing_wider(stack_template: dict[str, Any]) -> None:
    rules = watch_rules(stack_template)
    table = logical_id(stack_template, "AWS::DynamoDB::Table", "EventsTable")
    table_arn = {"Fn::GetAtt": [table, "Arn"]}
    assert resource_part(rules["dynamodb.amazonaws.com"][1]["EventPattern"]) == {
        "$or": [
            {"requestParameters": {"tableName": [{"Ref": table}, table_arn]}},
            {"requestParameters": {"resourceArn": [table_arn, {"prefix": {"Fn::Join": ["", [table_arn, "/"]]}}]}},
            {"responseElements": {"tableDescription": {"tableName": [{"Ref": table}]}}},
        ]
    }
    # Every queue and DLQ of the template (the pipeline's, and the watch's own DLQ), each by the end of its URL.
    queue_urls = resource_part(rules["sqs.amazonaws.com"][1]["EventPattern"])["requestParameters"]["queueUrl"]
    queues = [url["suffix"]["Fn::Join"][1][3]["Fn::GetAtt"][0] for url in queue_urls]
    assert queue_urls == [
        {"suffix": {"Fn::Join": ["", ["/", {"Ref": "AWS::AccountId"}, "/", {"Fn::GetAtt": [queue, "QueueName"]}]]}}
        for queue in queues
    ]
    assert sorted(queues) == sorted(resources_of_type(stack_template, "AWS::SQS::Queue"))
    assert len(queues) == 12  # the WORKFLOW lane's settle pass's DLQ among them
    pipe_names = resource_part(rules["pipes.amazonaws.com"][1]["EventPattern"])["requestParameters"]["name"]
    assert sorted(name["Ref"] for name in pipe_names) == sorted(resources_of_type(stack_template, "AWS::Pipes::Pipe"))
    assert len(pipe_names) == 3  # relay, record-change, tamper
    stack_prefix = {"prefix": {"Fn::Join": ["", [{"Ref": "AWS::StackName"}, "-"]]}}
    assert resource_part(rules["monitoring.amazonaws.com"][1]["EventPattern"]) == {
        "$or": [
            {"requestParameters": {"alarmNames": [stack_prefix]}},
            {"requestParameters": {"alarmName": [stack_prefix]}},
        ]
    }
    key = logical_id(stack_template, "AWS::KMS::Key", "OutboxAlarmsKey")
    assert resource_part(rules["kms.amazonaws.com"][1]["EventPattern"]) == {
        "requestParameters": {"keyId": [{"Ref": key}, {"Fn::GetAtt": [key, "Arn"]}]}
    }
    topic = logical_id(stack_template, "AWS::SNS::Topic", "OutboxAlarmsTopic")
    assert resource_part(rules["sns.amazonaws.com"][1]["EventPattern"]) == {
        "$or": [
            {"requestParameters": {"topicArn": [{"Ref": topic}]}},
            {"requestParameters": {"subscriptionArn": [{"prefix": {"Fn::Join": ["", [{"Ref": topic}, ":"]]}}]}},
        ]
    }
    # Any trail: the watch needs one and cannot tell which.
    assert resource_part(rules["cloudtrail.amazonaws.com"][1]["EventPattern"]) == {}
    # No wildcard, no negation, no "exists": only names, ARNs and their prefixes or ends (Lambda's call names too).
    for service, rule in every_watch_rule(stack_template).items():
        found = list(walk(rule["EventPattern"]))
        assert {key for key, _ in found} & {"wildcard", "anything-but", "exists", "equals-ignore-case"} == set()
        assert [value for _, value in found if isinstance(value, str) and "*" in value] == [], service


def test_each_rule_notifies_the_alarm_topic_in_one_line_and_keeps_what_it_cannot_deliver(
    stack_template: dict[str, Any],
) -> None:
    topic = logical_id(stack_template, "AWS::SNS::Topic", "OutboxAlarmsTopic")
    dead_letters = logical_id(stack_template, "AWS::SQS::Queue", "OutboxControlPlaneDeadLetters")
    for service, rule in every_watch_rule(stack_template).items():
        [target] = rule["Targets"]
        assert target["Arn"] == {"Ref": topic}, service
        assert target["DeadLetterConfig"] == {"Arn": {"Fn::GetAtt": [dead_letters, "Arn"]}}
        assert (
            target["RetryPolicy"]
            == {
                "MaximumEventAgeInSeconds": RETRY_SECONDS,
                "MaximumRetryAttempts": RETRY_ATTEMPTS,
            }
            == {"MaximumEventAgeInSeconds": 86400, "MaximumRetryAttempts": 185}
        )
        assert "RoleArn" not in target  # SNS targets authorise by the topic's policy (R12.5)
        transformer = target["InputTransformer"]
        assert transformer["InputPathsMap"] == dict(NOTICE_FIELDS)
        # Which call, on what (the request names it), by whom, on whose behalf, from where, when.
        for field in ("eventName", "requestParameters", "userIdentity.arn", "userIdentity.invokedBy"):
            assert f"$.detail.{field}" in transformer["InputPathsMap"].values()
        for field in ("sourceIPAddress", "eventTime", "errorCode"):
            assert f"$.detail.{field}" in transformer["InputPathsMap"].values()
        text = "".join(
            part if isinstance(part, str) else "<stack>" for part in transformer["InputTemplate"]["Fn::Join"][1]
        )
        line = json.loads(text)
        assert "\n" not in line
        assert all(f"<{name}>" in line for name in NOTICE_FIELDS), line
        assert "invoked by: <invokedBy>" in line


def test_the_alarm_topic_admits_eventbridge_for_these_rules_only(stack_template: dict[str, Any]) -> None:
    topic = logical_id(stack_template, "AWS::SNS::Topic", "OutboxAlarmsTopic")
    [policy] = [
        p["Properties"]["PolicyDocument"]["Statement"]
        for p in resources_of_type(stack_template, "AWS::SNS::TopicPolicy").values()
        if p["Properties"]["Topics"] == [{"Ref": topic}]
    ]
    [statement] = [s for s in policy if s.get("Principal") == {"Service": "events.amazonaws.com"}]
    rule_arns = sorted(every_watch_rule(stack_template))
    assert sorted(arn["Fn::GetAtt"][0] for arn in statement["Condition"]["ArnEquals"]["aws:SourceArn"]) == rule_arns
    assert statement == {
        "Sid": "AllowTheControlPlaneWatchToPublish",
        "Effect": "Allow",
        "Principal": {"Service": "events.amazonaws.com"},
        "Action": "sns:Publish",
        "Resource": {"Ref": topic},
        "Condition": {
            "StringEquals": {"aws:SourceAccount": {"Ref": "AWS::AccountId"}},
            "ArnEquals": {"aws:SourceArn": statement["Condition"]["ArnEquals"]["aws:SourceArn"]},
        },
    }


def test_the_alarm_key_admits_eventbridge_for_these_rules_only(stack_template: dict[str, Any]) -> None:
    key = logical_id(stack_template, "AWS::KMS::Key", "OutboxAlarmsKey")
    statements = stack_template["Resources"][key]["Properties"]["KeyPolicy"]["Statement"]
    [statement] = [s for s in statements if s.get("Principal") == {"Service": "events.amazonaws.com"}]
    assert statement["Sid"] == "AllowTheControlPlaneWatchToPublishEncrypted"
    assert (statement["Effect"], statement["Resource"]) == ("Allow", "*")
    assert sorted(listed(statement["Action"])) == ["kms:Decrypt", "kms:GenerateDataKey"]
    assert statement["Condition"]["StringEquals"] == {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}
    assert set(statement["Condition"]) == {"StringEquals", "ArnEquals"}
    # Each rule of the watch by the ARN its name gives, and no other rule of the account; no reference to a rule
    # (the key would depend on the rule, which depends on the topic, which depends on the key).
    (arns,) = statement["Condition"]["ArnEquals"].values()
    assert "Fn::GetAtt" not in json.dumps(arns)
    names = physical_names(stack_template, stack_name=STACK_NAME)
    rules = every_watch_rule(stack_template)
    expected = sorted(f"arn:aws:events:{REGION}:{ACCOUNT}:rule/{rule['Name']}" for rule in rules.values())
    assert sorted(resolve(arns, names)) == expected
    assert len(expected) == len(rules) == len(set(expected))


def test_the_dead_letters_take_undeliverable_notices_from_these_rules_only(stack_template: dict[str, Any]) -> None:
    dead_letters = logical_id(stack_template, "AWS::SQS::Queue", "OutboxControlPlaneDeadLetters")
    [statements] = [
        p["Properties"]["PolicyDocument"]["Statement"]
        for p in resources_of_type(stack_template, "AWS::SQS::QueuePolicy").values()
        if p["Properties"]["Queues"] == [{"Ref": dead_letters}]
    ]
    admitted = [s for s in statements if s["Effect"] == "Allow"]
    assert all(s["Principal"] == {"Service": "events.amazonaws.com"} for s in admitted)
    assert all(s["Action"] == "sqs:SendMessage" for s in admitted)
    assert sorted(s["Condition"]["ArnEquals"]["aws:SourceArn"]["Fn::GetAtt"][0] for s in admitted) == sorted(
        every_watch_rule(stack_template)
    )


def test_the_alarms_rule_is_created_after_every_alarm(stack_template: dict[str, Any]) -> None:
    """A new stack's first deploy creates each alarm with PutMetricAlarm before the rule exists."""
    rule_id, _ = watch_rules(stack_template)["monitoring.amazonaws.com"]
    depends_on = set(stack_template["Resources"][rule_id]["DependsOn"])
    assert set(resources_of_type(stack_template, "AWS::CloudWatch::Alarm")) <= depends_on


# --- without the prop, and with a topic of yours ------------------------------------------------------------


def test_without_the_prop_nothing_watches_the_control_plane() -> None:
    template = Template.from_stack(pipeline_stack()).to_json()
    assert [i for i in template["Resources"] if "ControlPlane" in i] == []
    assert sorted(resources_of_type(template, "AWS::Events::Rule")) == [
        logical_id(template, "AWS::Events::Rule", "OutboxAuditorAnchoringSchedule"),
        logical_id(template, "AWS::Events::Rule", "OutboxWorkflowsSettlerSchedule"),  # the example's WORKFLOW lane
    ]
    assert "events.amazonaws.com" not in json.dumps(resources_of_type(template, "AWS::SNS::TopicPolicy"))
    assert "events.amazonaws.com" not in json.dumps(resources_of_type(template, "AWS::KMS::Key"))


def test_a_topic_of_yours_is_watched_and_the_synth_says_its_policy_must_admit_eventbridge() -> None:
    stack = Stack(App(context={"aws:cdk:bundling-stacks": []}), "Mine")
    arn = f"arn:aws:sns:{REGION}:{ACCOUNT}:paging"
    watched_pipeline(stack, alarms=Alarms.topic(sns.Topic.from_topic_arn(stack, "Paging", arn)))
    Annotations.from_stack(stack).has_warning(
        "/Mine/Outbox/ControlPlane", Match.string_like_regexp("must let events.amazonaws.com publish")
    )
    rules = watch_rules(Template.from_stack(stack).to_json())
    # Its key is not the app's to see: not watched. The topic is, by its ARN.
    assert set(rules) == set(EXPECTED_CALLS) - {"kms.amazonaws.com", EVENTS, LAMBDA}
    topic_part = resource_part(rules["sns.amazonaws.com"][1]["EventPattern"])
    assert topic_part["$or"][0] == {"requestParameters": {"topicArn": [arn]}}
    assert rules["sns.amazonaws.com"][1]["Targets"][0]["Arn"] == arn


# --- the patterns, run --------------------------------------------------------------------------------------


def physical_names(template: Mapping[str, Any], *, stack_name: str, longest: bool = False) -> dict[str, str]:
    """A made-up physical name or ARN for each reference a pattern holds (``Ref`` id, ``id.Attribute``, pseudo
    parameters): as CloudFormation names them, or as long as each service allows (``longest``)."""

    def named(logical: str, limit: int, suffix: str = "") -> str:
        name = f"{stack_name}-{logical}-ABCDEFGHIJKL"
        return (name.ljust(limit - len(suffix), "x") if longest else name)[: limit - len(suffix)] + suffix

    names = {
        "AWS::AccountId": ACCOUNT,
        "AWS::Region": REGION,
        "AWS::Partition": "aws",
        "AWS::StackName": stack_name,
    }
    for logical, resource in template["Resources"].items():
        kind = resource["Type"]
        if kind == "AWS::DynamoDB::Table":
            names[logical] = named(logical, 255)
            names[f"{logical}.Arn"] = f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/{names[logical]}"
        elif kind == "AWS::SQS::Queue":
            fifo = resource["Properties"].get("FifoQueue")
            queue = named(logical, 80, ".fifo" if fifo else "")
            names[f"{logical}.QueueName"] = queue
            names[logical] = f"https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/{queue}"
        elif kind == "AWS::Pipes::Pipe":
            names[logical] = named(logical, 64)
        elif kind == "AWS::KMS::Key":
            names[logical] = "1234abcd-12ab-34cd-56ef-1234567890ab"
            names[f"{logical}.Arn"] = f"arn:aws:kms:{REGION}:{ACCOUNT}:key/{names[logical]}"
        elif kind == "AWS::SNS::Topic":
            names[logical] = f"arn:aws:sns:{REGION}:{ACCOUNT}:{named(logical, 256)}"
        elif kind == "AWS::Events::Rule":
            names[logical] = resource["Properties"].get("Name") or named(logical, 64)
        elif kind == "AWS::Lambda::Function":
            names[logical] = named(logical, 64)
            names[f"{logical}.Arn"] = f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:{names[logical]}"
        elif kind == "AWS::IAM::Role":
            names[f"{logical}.Arn"] = f"arn:aws:iam::{ACCOUNT}:role/{named(logical, 64)}"
    return names


def resolve(value: Any, names: Mapping[str, str]) -> Any:
    """``value`` with ``Ref``, ``Fn::GetAtt`` and ``Fn::Join`` replaced by what CloudFormation would write."""
    if isinstance(value, list):
        return [resolve(item, names) for item in value]
    if isinstance(value, dict):
        if set(value) == {"Ref"}:
            return names[value["Ref"]]
        if set(value) == {"Fn::GetAtt"}:
            logical, attribute = value["Fn::GetAtt"]
            return names[f"{logical}.{attribute}"]
        if set(value) == {"Fn::Join"}:
            separator, parts = value["Fn::Join"]
            return separator.join(resolve(parts, names))
        assert not any(key.startswith("Fn::") for key in value), value
        return {key: resolve(item, names) for key, item in value.items()}
    return value


@pytest.fixture(scope="module")
def names(stack_template: dict[str, Any]) -> dict[str, str]:
    return physical_names(stack_template, stack_name=STACK_NAME)


@pytest.fixture(scope="module")
def patterns(stack_template: dict[str, Any], names: dict[str, str]) -> dict[str, EventPattern]:
    """Each rule's pattern as deployed, by logical id, loaded by moto's EventBridge (which also refuses a
    malformed one)."""
    return {
        logical: EventPattern.load(json.dumps(resolve(rule["EventPattern"], names)))
        for logical, rule in every_watch_rule(stack_template).items()
    }


def cloudtrail_event(
    service: str,
    call: str,
    request: dict[str, Any] | None,
    *,
    response: dict[str, Any] | None = None,
    error: str | None = None,
    detail_type: str = "AWS API Call via CloudTrail",
) -> dict[str, Any]:
    """What EventBridge receives from CloudTrail for a call (R12.1): the record is the ``detail``."""
    detail: dict[str, Any] = {
        "eventVersion": "1.09",
        "userIdentity": {
            "type": "AssumedRole",
            "arn": f"arn:aws:sts::{ACCOUNT}:assumed-role/Admin/mallory",
            "accountId": ACCOUNT,
        },
        "eventTime": "2026-01-01T00:00:00Z",
        "eventSource": service,
        "eventName": call,
        "awsRegion": REGION,
        "sourceIPAddress": "192.0.2.10",
        "userAgent": "aws-cli/2",
        "requestParameters": request,
        "responseElements": response,
        "eventType": "AwsApiCall",
        "managementEvent": True,
        "readOnly": False,
    }
    if error is not None:
        detail["errorCode"] = error
    return {
        "version": "0",
        "id": "11111111-2222-3333-4444-555555555555",
        "detail-type": detail_type,
        "source": f"aws.{service.split('.')[0]}",
        "account": ACCOUNT,
        "time": "2026-01-01T00:00:00Z",
        "region": REGION,
        "resources": [],
        "detail": detail,
    }


def cases(template: Mapping[str, Any], names: Mapping[str, str]) -> list[tuple[str, dict[str, Any], bool]]:
    """(what, event, whether the watch reports it)."""

    def named(resource_type: str, prefix: str, attribute: str = "") -> str:
        logical = logical_id(template, resource_type, prefix)
        return names[f"{logical}.{attribute}" if attribute else logical]

    def queue_url(queue: str, host: str = f"sqs.{REGION}.amazonaws.com") -> dict[str, str]:
        return {"queueUrl": f"https://{host}/{ACCOUNT}/{queue}"}

    table = named("AWS::DynamoDB::Table", "OutboxEventsTable")
    table_arn = named("AWS::DynamoDB::Table", "OutboxEventsTable", "Arn")
    relay = {"name": named("AWS::Pipes::Pipe", "OutboxRelayPipe")}
    durable = named("AWS::SQS::Queue", "OutboxDurableQueue", "QueueName")
    key = named("AWS::KMS::Key", "OutboxAlarmsKey")
    topic = named("AWS::SNS::Topic", "OutboxAlarmsTopic")
    subscription = f"{topic}:0b4c5f1e-1111-2222-3333-444455556666"
    alarm = f"{STACK_NAME}-OutboxMonitoringPipeExecutionFailedABCD1234-ABCDEFGHIJKL"
    other = f"arn:aws:sns:{REGION}:{ACCOUNT}:other"
    other_table_arn = f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/Orders"
    described_table = {"tableDescription": {"tableName": table}}
    key_arn = named("AWS::KMS::Key", "OutboxAlarmsKey", "Arn")

    def calls_of(service: str) -> Callable[..., dict[str, Any]]:
        return partial(cloudtrail_event, f"{service}.amazonaws.com")

    ddb, sqs, pipes, cw, kms, sns_ = map(calls_of, ("dynamodb", "sqs", "pipes", "monitoring", "kms", "sns"))
    tamper_dlq = named("AWS::SQS::Queue", "OutboxAuditorFindingsDeadLetters", "QueueName")
    stream_arn = f"{table_arn}/stream/2026-01-01T00:00:00.000"
    stream_off = {"tableName": table, "streamSpecification": {"streamEnabled": False}}
    return [
        ("StopPipe on the relay pipe", pipes("StopPipe", relay), True),
        (
            "UpdatePipe on the tamper pipe",
            pipes("UpdatePipe", {"name": named("AWS::Pipes::Pipe", "AuditorPipe")}),
            True,
        ),
        ("StopPipe on another pipe", pipes("StopPipe", {"name": "someone-elses"}), False),
        ("StartPipe on the relay pipe", pipes("StartPipe", relay), False),
        ("a StopPipe that was refused", pipes("StopPipe", relay, error="AccessDenied"), True),
        ("a StopPipe not from CloudTrail", pipes("StopPipe", relay, detail_type="Pipe State Change"), False),
        ("DisableKey on the alarm key by id", kms("DisableKey", {"keyId": key}), True),
        ("ScheduleKeyDeletion on it by ARN", kms("ScheduleKeyDeletion", {"keyId": key_arn}), True),
        ("PutKeyPolicy on the alarm key", kms("PutKeyPolicy", {"keyId": key, "policyName": "default"}), True),
        ("DisableKey on another key", kms("DisableKey", {"keyId": "ffffffff-0000-0000-0000-000000000000"}), False),
        ("Decrypt with the alarm key", kms("Decrypt", {"keyId": key}), False),
        ("SetQueueAttributes on the durable queue", sqs("SetQueueAttributes", queue_url(durable)), True),
        ("the same by a legacy URL", sqs("SetQueueAttributes", queue_url(durable, "queue.amazonaws.com")), True),
        ("PurgeQueue on the tamper DLQ", sqs("PurgeQueue", queue_url(tamper_dlq)), True),
        ("SetQueueAttributes on another queue", sqs("SetQueueAttributes", queue_url("orders")), False),
        ("on a queue named like ours", sqs("SetQueueAttributes", queue_url(f"x{durable}")), False),
        ("GetQueueAttributes on the durable queue", sqs("GetQueueAttributes", queue_url(durable)), False),
        ("DeleteResourcePolicy on the events table", ddb("DeleteResourcePolicy", {"resourceArn": table_arn}), True),
        ("PutResourcePolicy on its stream", ddb("PutResourcePolicy", {"resourceArn": stream_arn}), True),
        ("PutResourcePolicy on another table", ddb("PutResourcePolicy", {"resourceArn": other_table_arn}), False),
        ("UpdateTable (stream off) on the events table", ddb("UpdateTable", stream_off), True),
        ("UpdateTable on it by ARN", ddb("UpdateTable", {"tableName": table_arn}), True),
        ("UpdateTable as the DynamoDB guide's record", ddb("UpdateTable", {}, response=described_table), True),
        ("UpdateTimeToLive on the events table", ddb("UpdateTimeToLive", {"tableName": table}), True),
        ("UpdateTable on another table", ddb("UpdateTable", {"tableName": "Orders"}), False),
        (
            "DisableAlarmActions on a stack's alarm",
            cw("DisableAlarmActions", {"alarmNames": ["Other-Cpu", alarm]}),
            True,
        ),
        ("PutMetricAlarm rewriting it", cw("PutMetricAlarm", {"alarmName": alarm, "actionsEnabled": False}), True),
        ("DeleteAlarms on other stacks' alarms", cw("DeleteAlarms", {"alarmNames": [f"{STACK_NAME}2-Cpu"]}), False),
        ("SetTopicAttributes on the alarm topic", sns_("SetTopicAttributes", {"topicArn": topic}), True),
        ("Unsubscribe from the alarm topic", sns_("Unsubscribe", {"subscriptionArn": subscription}), True),
        ("a filter on its subscription", sns_("SetSubscriptionAttributes", {"subscriptionArn": subscription}), True),
        ("DeleteTopic on another topic", sns_("DeleteTopic", {"topicArn": other}), False),
        ("Unsubscribe from another topic", sns_("Unsubscribe", {"subscriptionArn": f"{other}:0b4c5f1e"}), False),
    ]


def test_the_patterns_report_the_calls_on_this_pipeline_and_nothing_else(
    stack_template: dict[str, Any], names: dict[str, str], patterns: dict[str, EventPattern]
) -> None:
    wrong = [
        f"{what}: {'missed' if expected else 'reported'}"
        for what, event, expected in cases(stack_template, names)
        if any(pattern.matches_event(event) for pattern in patterns.values()) != expected
    ]
    assert wrong == []
    # Each event is matched by one rule alone, its own service's: one notice per call.
    rules = every_watch_rule(stack_template)
    for what, event, expected in cases(stack_template, names):
        matching = [service_of(rules[logical]) for logical, pattern in patterns.items() if pattern.matches_event(event)]
        assert matching == ([event["detail"]["eventSource"]] if expected else []), what


def test_every_pattern_stays_within_eventbridges_limit_with_the_longest_names(stack_template: dict[str, Any]) -> None:
    longest = physical_names(stack_template, stack_name="S" * 128, longest=True)
    for service, rule in every_watch_rule(stack_template).items():
        resolved = json.dumps(resolve(rule["EventPattern"], longest))
        assert len(resolved) <= PATTERN_LIMIT, f"{service}: {len(resolved)} characters"


def test_every_watch_rule_silenced_or_rewritten_is_reported_by_another(
    stack_template: dict[str, Any], names: dict[str, str], patterns: dict[str, EventPattern]
) -> None:
    """One DisableRule would silence a rule that watched only the others: each rule is named by another, so the
    first call of an attempt to silence the watch is reported, and each by one rule alone."""
    events = partial(cloudtrail_event, EVENTS)
    rules = every_watch_rule(stack_template)
    # One per service (Lambda's: the functions' calls, over as many rules as their names need, and the roles given),
    # and the rule that watches the rules rule.
    function_rules, _ = lambda_rules(stack_template)
    assert len(rules) == len(EXPECTED_CALLS) + len(function_rules) + 1
    unreported = []
    for logical in rules:
        for call, field in RULE_CALLS.items():
            event = events(call, {field: names[logical]})
            reporting = [other for other, pattern in patterns.items() if pattern.matches_event(event)]
            if len(reporting) != 1 or reporting == [logical]:
                unreported.append(f"{call} on {logical}: reported by {reporting}")
    assert unreported == []
    # Another rule of the account (the anchoring schedule's), or a read of a watch rule, is not reported.
    schedule = names[logical_id(stack_template, "AWS::Events::Rule", "OutboxAuditorAnchoringSchedule")]
    for event in (
        events("DisableRule", {"name": schedule}),
        events("DisableRule", {"name": "someone-elses"}),
        events("DescribeRule", {"name": next(names[logical] for logical in rules)}),
    ):
        assert not any(pattern.matches_event(event) for pattern in patterns.values()), event["detail"]


def test_a_trail_stopped_or_made_to_log_less_is_reported(
    stack_template: dict[str, Any], patterns: dict[str, EventPattern]
) -> None:
    trail = f"arn:aws:cloudtrail:{REGION}:{ACCOUNT}:trail/management"
    trails = partial(cloudtrail_event, "cloudtrail.amazonaws.com")
    for call in EXPECTED_CALLS["cloudtrail.amazonaws.com"]:
        for request in ({"name": trail}, {"name": "management"}, {"trailName": trail}):
            event = trails(call, request)
            assert sum(pattern.matches_event(event) for pattern in patterns.values()) == 1, (call, request)
    for call in ("StartLogging", "GetTrailStatus", "LookupEvents"):
        assert not any(pattern.matches_event(trails(call, {"name": trail})) for pattern in patterns.values()), call


def test_the_rules_rules_name_fits_eventbridge_with_the_longest_stack_name() -> None:
    """The rules rule is named at synth (its watcher must name it): a stack name of 128 characters is cut to fit
    EventBridge's 64, and the watcher names the rule by that name."""
    stack = Stack(App(context={"aws:cdk:bundling-stacks": []}), "Mine", stack_name="S" * 128)
    watched_pipeline(stack, alarms=Alarms.email("ops@example.com"))
    rules = every_watch_rule(Template.from_stack(stack).to_json())
    # Every rule is named (the alarm key names each), each within 64 characters.
    assert all(len(rule["Name"]) == 64 for rule in rules.values())
    [name] = [rule["Name"] for rule in rules.values() if "-RulesRule-" in rule["Name"]]
    assert re.fullmatch(r"S+-RulesRule-[0-9A-F]{8}", name), name
    watchers = [rule for rule in rules.values() if name in json.dumps(rule["EventPattern"])]
    assert len(watchers) == 1


# --- Lambda: the functions whose role may emit or anchor -----------------------------------------------------


def lambda_rules(template: Mapping[str, Any]) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """The Lambda rules of the watch: those on the functions' calls, and those on the roles given to a function."""
    rules = {logical: rule for logical, rule in every_watch_rule(template).items() if service_of(rule) == LAMBDA}
    functions = {k: r for k, r in rules.items() if "functionName" in r["EventPattern"]["detail"]["requestParameters"]}
    roles = {k: r for k, r in rules.items() if "role" in r["EventPattern"]["detail"]["requestParameters"]}
    assert len(functions) + len(roles) == len(rules)
    return functions, roles


def emitting_and_anchoring(template: Mapping[str, Any]) -> tuple[set[str], set[str]]:
    """Found by relationship: the roles the events table's PutItem Deny admits but the operator role (what may
    append events), with the anchoring function's (the target of the anchoring schedule, what moves anchors), and
    every function that runs as one of them. (function logical ids, role logical ids)"""
    [table] = [
        resource
        for resource in resources_of_type(dict(template), "AWS::DynamoDB::Table").values()
        if "ResourcePolicy" in resource["Properties"]
    ]
    statements = table["Properties"]["ResourcePolicy"]["PolicyDocument"]["Statement"]
    [put_deny] = [s for s in statements if s["Effect"] == "Deny" and "dynamodb:PutItem" in listed(s["Action"])]
    admitted = [arn["Fn::GetAtt"][0] for arn in put_deny["Condition"]["ArnNotEquals"]["aws:PrincipalArn"]]
    operator_role = logical_id(template, "AWS::IAM::Role", "OutboxEventsOperatorRole")
    roles = set(admitted) - {operator_role}
    schedule = logical_id(template, "AWS::Events::Rule", "OutboxAuditorAnchoringSchedule")
    [target] = template["Resources"][schedule]["Properties"]["Targets"]
    anchoring = target["Arn"]["Fn::GetAtt"][0]
    roles.add(template["Resources"][anchoring]["Properties"]["Role"]["Fn::GetAtt"][0])
    functions = {
        logical
        for logical, function in resources_of_type(dict(template), "AWS::Lambda::Function").items()
        if function["Properties"]["Role"]["Fn::GetAtt"][0] in roles
    }
    return functions, roles


def test_every_function_whose_role_may_emit_or_anchor_and_its_role_are_watched(stack_template: dict[str, Any]) -> None:
    functions, roles = emitting_and_anchoring(stack_template)
    # The durable consumer's, the example's producer's, its workflow's (whose steps emit), the anchoring function's.
    assert len(functions) == len(roles) == 4
    assert_each_named_once(stack_template, functions, roles)


def assert_each_named_once(template: Mapping[str, Any], functions: set[str], roles: set[str]) -> None:
    function_rules, role_rules = lambda_rules(template)
    named_functions = [
        value["Ref"]
        for rule in function_rules.values()
        for value in rule["EventPattern"]["detail"]["requestParameters"]["functionName"]
        if isinstance(value, dict) and "Ref" in value
    ]
    assert sorted(named_functions) == sorted(functions)
    named_roles = [
        arn["Fn::GetAtt"][0]
        for rule in role_rules.values()
        for arn in rule["EventPattern"]["detail"]["requestParameters"]["role"]
    ]
    assert sorted(named_roles) == sorted(roles)


def lambda_cases(template: Mapping[str, Any], names: Mapping[str, str]) -> list[tuple[str, dict[str, Any], bool]]:
    """(what, event, whether the watch reports it), for every function whose role may emit or anchor."""
    functions, roles = emitting_and_anchoring(template)
    calls = partial(cloudtrail_event, LAMBDA)
    found: list[tuple[str, dict[str, Any], bool]] = []
    for function in sorted(functions):
        name = names[function]
        arn = f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:{name}"
        for form in (name, arn, f"{ACCOUNT}:function:{name}"):
            found += [
                (f"UpdateFunctionCode on {form}", calls("UpdateFunctionCode20150331v2", {"functionName": form}), True),
                (
                    f"its configuration (layers) on {form}",
                    calls("UpdateFunctionConfiguration20150331v2", {"functionName": form, "layers": ["x"]}),
                    True,
                ),
                (f"PublishVersion on {form}", calls("PublishVersion20150331", {"functionName": form}), True),
                (f"UpdateAlias on {form}", calls("UpdateAlias20150331", {"functionName": form, "name": "live"}), True),
                (
                    f"AddPermission on {form}:live",
                    calls("AddPermission20150331v2", {"functionName": f"{form}:live", "principal": "*"}),
                    True,
                ),
                (f"GetFunction on {form}", calls("GetFunction20150331v2", {"functionName": form}), False),
            ]
        found += [
            (
                f"a function URL for {name}",
                calls("CreateFunctionUrlConfig20181031", {"functionName": name, "authType": "NONE"}),
                True,
            ),
            (
                f"a refused DeleteFunction of {name}",
                calls("DeleteFunction20150331", {"functionName": name}, error="X"),
                True,
            ),
            (
                f"UpdateFunctionCode on x{name}",
                calls("UpdateFunctionCode20150331v2", {"functionName": f"x{name}"}),
                False,
            ),
            (f"on {name}x", calls("UpdateFunctionCode20150331v2", {"functionName": f"{arn}x"}), False),
        ]
    for role in sorted(roles):
        role_arn = names[f"{role}.Arn"]
        found += [
            (
                f"CreateFunction as {role}",
                calls("CreateFunction20150331", {"functionName": "new", "role": role_arn}),
                True,
            ),
            (
                f"another function given {role}",
                calls("UpdateFunctionConfiguration20150331v2", {"functionName": "other", "role": role_arn}),
                True,
            ),
        ]
    other_role = f"arn:aws:iam::{ACCOUNT}:role/someone-elses"
    found += [
        (
            "CreateFunction as another role",
            calls("CreateFunction20150331", {"functionName": "new", "role": other_role}),
            False,
        ),
        (
            "UpdateFunctionCode on another function",
            calls("UpdateFunctionCode20150331v2", {"functionName": "other"}),
            False,
        ),
    ]
    return found


def test_the_lambda_rules_report_the_calls_on_those_functions_and_roles_and_nothing_else(
    stack_template: dict[str, Any], names: dict[str, str], patterns: dict[str, EventPattern]
) -> None:
    cases_ = lambda_cases(stack_template, names)
    wrong = [
        f"{what}: {'missed' if expected else 'reported'}"
        for what, event, expected in cases_
        if sum(pattern.matches_event(event) for pattern in patterns.values()) != int(expected)  # one notice a call
    ]
    assert wrong == []
    assert len(cases_) > 50


def pipeline_with_emitters(count: int) -> Stack:
    """The watched pipeline in a stack of the longest name, with ``count`` more functions granted emit."""
    stack = Stack(App(context={"aws:cdk:bundling-stacks": []}), "Mine", stack_name="S" * 128)
    pipeline = watched_pipeline(stack, alarms=Alarms.email("ops@example.com"))
    for number in range(count):
        producer = lambda_.Function(
            stack,
            f"Producer{number}",
            runtime=lambda_.Runtime.PYTHON_3_12,
            handler="index.handler",
            code=lambda_.Code.from_inline("def handler(event, context): pass"),
        )
        pipeline.grant_emit(producer)
    return stack


def test_many_emitters_are_spread_over_rules_that_each_fit_and_name_every_one() -> None:
    """Ten emitting functions: each function and role is named once, over several rules, every pattern within
    EventBridge's limit with the longest names; twenty are refused at synth, with what to do (the rule that names
    every rule of the watch would not fit)."""
    template = Template.from_stack(pipeline_with_emitters(8)).to_json()
    functions, roles = emitting_and_anchoring(template)
    assert len(functions) == len(roles) == 11  # and the example's workflow
    function_rules, _ = lambda_rules(template)
    assert len(function_rules) > 1
    longest = physical_names(template, stack_name="S" * 128, longest=True)
    for logical, rule in every_watch_rule(template).items():
        assert len(json.dumps(resolve(rule["EventPattern"], longest))) <= PATTERN_LIMIT, logical
    assert_each_named_once(template, functions, roles)
    with pytest.raises(RuntimeError, match="let your producers share fewer functions or roles"):
        Template.from_stack(pipeline_with_emitters(20))
