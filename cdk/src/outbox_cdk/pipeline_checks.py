"""What ``OutboxPipeline`` refuses at synth, before anything deploys: each check raises a ``ValueError`` that
says what to change."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Final

from aws_cdk import Duration
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam

from outbox.best_effort.changes import ENTITY_NAME, entity_filter
from outbox.local.pipe_filter import MAX_PATTERN_LENGTH
from outbox.redaction import ErrorDetail
from outbox_cdk import timing
from outbox_cdk.options import Alarms
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
        raise ValueError(f"PipeLogs(level=...) must be one of {PIPE_LOG_LEVELS}, got {pipe_log_level!r}")
    if record_changes_from is not None and record_changes_from.table_stream_arn is None:
        raise ValueError(
            f"RecordChanges(source={record_changes_from.node.path}) has no stream: create it with "
            "stream=StreamViewType.NEW_AND_OLD_IMAGES (or import it with its table_stream_arn)"
        )


def check_entities(entities: Sequence[str] | None, record_changes_from: dynamodb.ITable | None) -> None:
    if entities is None:
        return
    if record_changes_from is None:
        raise ValueError("entities filter the record-change lane: give RecordChanges(source=...) too")
    if isinstance(entities, str) or not entities:
        raise ValueError(
            "RecordChanges(entities=...) must list entity names, like ['CONTACTADDRESS']; None carries every row change"
        )
    wrong = [name for name in entities if not isinstance(name, str) or not ENTITY_NAME.fullmatch(name)]
    if wrong:
        raise ValueError(
            f"RecordChanges(entities=...): {wrong!r} are not entity names (a row's partition-key prefix before '#': "
            f"{ENTITY_NAME.pattern})"
        )
    length = len(json.dumps(entity_filter(entities)))
    if length > MAX_PATTERN_LENGTH:  # refused by Pipes at deploy, not at synth (docs/aws-behaviour.md R3.1)
        raise ValueError(
            f"RecordChanges(entities=...): {len(entities)} entities make a pipe filter of {length} characters, and "
            f"Pipes takes at most {MAX_PATTERN_LENGTH}: name fewer, or pass None to carry every row change"
        )


def error_detail_of(value: object) -> ErrorDetail:
    try:
        return ErrorDetail(str(value))
    except ValueError:
        choices = ", ".join(f"ErrorDetail.{detail.name}" for detail in ErrorDetail)
        raise ValueError(f"error_detail must be {choices}, got {value!r}") from None


def check_alarm_subscriber(alarms: Alarms | None) -> None:
    """Exactly one answer to "who reads the alarms?"; none at all is refused, not defaulted to nobody."""
    if alarms is None:
        raise ValueError(
            "say who reads the alarms: alarms=Alarms.email('ops@example.com') (subscribed to the topic the pipeline "
            "creates), Alarms.topic(<an SNS topic of yours>), or Alarms.nobody('why') (you subscribe the topic "
            "elsewhere): alarms that notify nobody are never a default"
        )
    if not isinstance(alarms, Alarms):
        raise ValueError(f"alarms must be Alarms.email(...), Alarms.topic(...) or Alarms.nobody(...), got {alarms!r}")
    answers = {"a topic": alarms.existing_topic, "an email": alarms.email_address}
    given = [name for name, value in answers.items() if value is not None]
    if alarms.no_subscriber_reason is not None:
        reason = alarms.no_subscriber_reason
        if not isinstance(reason, str) or not reason.strip():
            raise ValueError("Alarms.nobody(reason) must say why nobody subscribes (a sentence), got an empty value")
        given.append("nobody's reason")
    if not given:
        raise ValueError("Alarms() names nobody: use Alarms.email(...), Alarms.topic(...) or Alarms.nobody(...)")
    if len(given) > 1:
        raise ValueError(f"alarms: give one of a topic, an email and nobody's reason, not {' and '.join(given)}")
    email = alarms.email_address
    if email is not None and (not isinstance(email, str) or "@" not in email):
        raise ValueError(f"Alarms.email(...) needs an e-mail address, got {email!r}")


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
