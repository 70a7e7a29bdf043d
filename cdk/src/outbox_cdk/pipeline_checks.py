"""What ``OutboxPipeline`` refuses at synth, before anything deploys: each check raises a ``ValueError`` that
says what to change."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Final

from aws_cdk import Duration
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_sns as sns

from outbox.local.pipe_filter import MAX_PATTERN_LENGTH
from outbox.record_changes import ENTITY_NAME, entity_filter
from outbox.redaction import ErrorDetail
from outbox_cdk import timing
from outbox_cdk.stream_pipe import PIPE_LOG_LEVELS

# Variables the pipeline sets on its functions itself; the application's ``environment`` may not use them.
RESERVED_VARIABLES: Final = frozenset(
    {
        "SUBSCRIPTIONS",
        "EVENTS_TABLE_NAME",
        "INBOX_TABLE_NAME",
        "MAX_ATTEMPTS",
        "INBOX_RETENTION_DAYS",
        "POWERTOOLS_SERVICE_NAME",
        "POWERTOOLS_METRICS_NAMESPACE",
    }
)


def timeout_seconds(label: str, timeout: Duration | None, default_seconds: int) -> int:
    return timing.consumer_timeout_seconds(label, timeout.to_seconds() if timeout else default_seconds)


def check_options(
    environment: Mapping[str, str], pipe_log_level: str, record_changes_from: dynamodb.ITable | None
) -> None:
    """Refuse at synth what would deploy a broken pipeline; every message says what to change."""
    reserved = sorted(RESERVED_VARIABLES & set(environment))
    if reserved:
        raise ValueError(f"environment may not set {reserved}: the pipeline sets them on its functions")
    if pipe_log_level not in PIPE_LOG_LEVELS:
        raise ValueError(f"pipe_log_level must be one of {PIPE_LOG_LEVELS}, got {pipe_log_level!r}")
    if record_changes_from is not None and record_changes_from.table_stream_arn is None:
        raise ValueError(
            f"record_changes_from={record_changes_from.node.path} has no stream: create it with "
            "stream=StreamViewType.NEW_AND_OLD_IMAGES (or import it with its table_stream_arn)"
        )


def check_entities(entities: Sequence[str] | None, record_changes_from: dynamodb.ITable | None) -> None:
    if entities is None:
        return
    if record_changes_from is None:
        raise ValueError("record_change_entities filters the record-change lane: give record_changes_from too")
    if isinstance(entities, str) or not entities:
        raise ValueError(
            "record_change_entities must list entity names, like ['CONTACTADDRESS']; None carries every row change"
        )
    wrong = [name for name in entities if not isinstance(name, str) or not ENTITY_NAME.fullmatch(name)]
    if wrong:
        raise ValueError(
            f"record_change_entities: {wrong!r} are not entity names (a row's partition-key prefix before '#': "
            f"{ENTITY_NAME.pattern})"
        )
    length = len(json.dumps(entity_filter(entities)))
    if length > MAX_PATTERN_LENGTH:  # refused by Pipes at deploy, not at synth (docs/aws-behaviour.md R3.1)
        raise ValueError(
            f"record_change_entities: {len(entities)} entities make a pipe filter of {length} characters, and "
            f"Pipes takes at most {MAX_PATTERN_LENGTH}: name fewer, or pass None to carry every row change"
        )


def error_detail_of(value: object) -> ErrorDetail:
    try:
        return ErrorDetail(str(value))
    except ValueError:
        choices = ", ".join(f"ErrorDetail.{detail.name}" for detail in ErrorDetail)
        raise ValueError(f"error_detail must be {choices}, got {value!r}") from None


def check_alarm_subscriber(
    alarm_topic: sns.ITopic | None, alarm_email: str | None, no_alarm_subscriber: str | None
) -> None:
    """Exactly one answer to "who reads the alarms?"; none at all is refused, not defaulted to nobody."""
    given = [name for name, value in (("alarm_topic", alarm_topic), ("alarm_email", alarm_email)) if value is not None]
    if no_alarm_subscriber is not None:
        if not isinstance(no_alarm_subscriber, str) or not no_alarm_subscriber.strip():
            raise ValueError("no_alarm_subscriber must say why nobody subscribes (a sentence), got an empty value")
        given.append("no_alarm_subscriber")
    if not given:
        raise ValueError(
            "say who reads the alarms: alarm_email='ops@example.com' (subscribed to the topic the pipeline "
            "creates), alarm_topic=<an SNS topic of yours>, or no_alarm_subscriber='why' (you subscribe the "
            "topic elsewhere): alarms that notify nobody are never a default"
        )
    if len(given) > 1:
        raise ValueError(f"give one of alarm_topic, alarm_email and no_alarm_subscriber, not {' and '.join(given)}")
    if alarm_email is not None and (not isinstance(alarm_email, str) or "@" not in alarm_email):
        raise ValueError(f"alarm_email must be an e-mail address, got {alarm_email!r}")


def operators_of(operators: Sequence[iam.IPrincipal] | None) -> list[iam.IPrincipal]:
    """Who may assume the operator and runbook roles: given, never defaulted to the whole account."""
    if not operators:
        raise ValueError(
            "say who may assume the operator role, which may rewrite event rows: operators=[iam.ArnPrincipal("
            "'arn:aws:iam::<account>:role/<on-call role>')], or operators=[iam.AccountRootPrincipal()] to let any "
            "principal of the account whose IAM policy allows sts:AssumeRole on it"
        )
    # jsii's IPrincipal is a protocol isinstance cannot check: a principal is what has a policy fragment.
    if isinstance(operators, str) or not all(hasattr(p, "policy_fragment") for p in operators):
        raise ValueError(f"operators must be IAM principals (iam.ArnPrincipal(...)), got {operators!r}")
    return list(operators)
