"""The example app's deployment settings, read once from CDK context (cdk.json or ``cdk synth -c key=value``)
into one typed object; the stack passes them to ``OutboxPipeline`` as props."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Final, cast

from constructs import Node

from modules.services import ServicesNotConfiguredError, parse_services_choice
from outbox_cdk import OperatorTrust, inbox_table, queue_consumer
from outbox_cdk.stream_pipe import PIPE_LOG_LEVELS, PipeLogLevel

# CDK context keys (cdk.json or `cdk synth -c key=value`).
# Required, with no default: "fake" or the base URL of the services the commerce module calls.
COMMERCE_SERVICES_CONTEXT: Final = "commerceServices"
ALARM_EMAIL_CONTEXT: Final = "alarmEmail"
IAM_PRINCIPAL_ARN: Final = re.compile(r"arn:aws[a-z-]*:iam::\d{12}:(role|user)/[\w+=,.@/-]+")
# Required: who may assume the operator and runbook roles, IAM role or user ARNs, comma-separated. No default:
# the operator role is the one role the event-row Deny exempts, so the example will not trust the whole account.
OPERATOR_ARNS_CONTEXT: Final = "operatorArns"
# What every assumption of the operator and runbook roles must also show (OutboxPipeline's operator_trust): "mfa"
# (the default: signed in with MFA, for IAM users who assume with --serial-number), "tag:<key>=<value>" (the caller
# carries that principal tag, for IAM Identity Center and other role sessions, which carry no MFA key), or "none".
OPERATOR_TRUST_CONTEXT: Final = "operatorTrust"
MFA: Final = OperatorTrust(require_mfa=True)
# Instead of alarmEmail: why nobody subscribes to the alarm topic here (one of the two is required).
NO_ALARM_SUBSCRIBER_CONTEXT: Final = "noAlarmSubscriber"
PIPE_LOG_LEVEL_CONTEXT: Final = "pipeLogLevel"
PIPE_LOG_EXECUTION_DATA_CONTEXT: Final = "pipeLogExecutionData"
INBOX_RETENTION_DAYS_CONTEXT: Final = "inboxRetentionDays"
CONSUMER_MAX_CONCURRENCY_CONTEXT: Final = "consumerMaxConcurrency"
RECORD_CHANGE_MAX_CONCURRENCY_CONTEXT: Final = "recordChangeMaxConcurrency"
# Whose row changes the record-change pipe carries: entity names, comma-separated, or "*" for every row.
RECORD_CHANGE_ENTITIES_CONTEXT: Final = "recordChangeEntities"
# The entities the example's BEST_EFFORT subscriptions watch (tests/unit/test_catalog_contract.py compares them
# with the catalog): every other row's change is dropped by the pipe, unpaid for.
WATCHED_ENTITIES: Final = ("CONTACTADDRESS",)
EVERY_ROW: Final = "*"


@dataclass(frozen=True)
class ExampleSettings:
    """What may change between deployments, read once from CDK context and validated."""

    # "fake" or a base URL (modules.services): which services the deployed functions call.
    commerce_services: str
    # Who may assume the operator and runbook roles (IAM role or user ARNs): your on-call role.
    operator_arns: tuple[str, ...]
    # What their assumption must show besides (None: nothing more): MFA unless told otherwise.
    operator_trust: OperatorTrust | None = MFA
    alarm_email: str | None = None
    no_alarm_subscriber: str | None = None
    pipe_log_level: PipeLogLevel = "ERROR"
    pipe_log_execution_data: bool = False
    inbox_retention_days: int = inbox_table.DEFAULT_RETENTION_DAYS
    consumer_max_concurrency: int = queue_consumer.DEFAULT_MAX_CONCURRENCY
    # Its own key: the standard queue scales its consumer far beyond the FIFO queue's one-per-tenant, so
    # a burst of row changes (a bulk import) is capped here without touching the durable lane.
    record_change_max_concurrency: int = queue_consumer.DEFAULT_MAX_CONCURRENCY
    # None: every row change reaches the record-change queue.
    record_change_entities: tuple[str, ...] | None = WATCHED_ENTITIES

    @classmethod
    def from_context(cls, node: Node) -> ExampleSettings:
        """Read the settings; a value that is present but wrong fails the synth, never falls back."""
        email = node.try_get_context(ALARM_EMAIL_CONTEXT)
        if email is not None and (not isinstance(email, str) or "@" not in email):
            raise ValueError(f"context {ALARM_EMAIL_CONTEXT} must be an e-mail address, got {email!r}")
        no_subscriber = _no_alarm_subscriber(node, email)
        level = node.try_get_context(PIPE_LOG_LEVEL_CONTEXT) or "ERROR"
        if level not in PIPE_LOG_LEVELS:
            raise ValueError(f"context {PIPE_LOG_LEVEL_CONTEXT} must be one of {PIPE_LOG_LEVELS}, got {level!r}")
        return cls(
            commerce_services=_commerce_services(node),
            alarm_email=email or None,
            no_alarm_subscriber=no_subscriber,
            operator_arns=_operator_arns(node.try_get_context(OPERATOR_ARNS_CONTEXT)),
            operator_trust=_operator_trust(node.try_get_context(OPERATOR_TRUST_CONTEXT)),
            pipe_log_level=cast(PipeLogLevel, level),
            pipe_log_execution_data=_flag(node.try_get_context(PIPE_LOG_EXECUTION_DATA_CONTEXT)),
            inbox_retention_days=_integer(
                node,
                INBOX_RETENTION_DAYS_CONTEXT,
                default=inbox_table.DEFAULT_RETENTION_DAYS,
                minimum=inbox_table.MIN_RETENTION_DAYS,
                maximum=inbox_table.MAX_RETENTION_DAYS,
            ),
            consumer_max_concurrency=_max_concurrency(node, CONSUMER_MAX_CONCURRENCY_CONTEXT),
            record_change_max_concurrency=_max_concurrency(node, RECORD_CHANGE_MAX_CONCURRENCY_CONTEXT),
            record_change_entities=_record_change_entities(node.try_get_context(RECORD_CHANGE_ENTITIES_CONTEXT)),
        )


def _record_change_entities(value: Any) -> tuple[str, ...] | None:
    if value is None:
        return WATCHED_ENTITIES
    if value == EVERY_ROW:
        return None
    names = tuple(name.strip() for name in str(value).split(",") if name.strip())
    if not names:
        raise ValueError(
            f"context {RECORD_CHANGE_ENTITIES_CONTEXT} must name entities, comma-separated (like CONTACTADDRESS), "
            f"or be {EVERY_ROW!r} for every row; got {value!r}"
        )
    return names


def _no_alarm_subscriber(node: Node, email: object) -> str | None:
    """Required unless alarmEmail is given: a deployed example says who reads its alarms, or why nobody."""
    reason = node.try_get_context(NO_ALARM_SUBSCRIBER_CONTEXT)
    if email is None and reason is None:
        raise ValueError(
            f"context {ALARM_EMAIL_CONTEXT} is missing: say who reads the alarms, "
            f"-c {ALARM_EMAIL_CONTEXT}=ops@example.com, or why nobody does here, "
            f"-c {NO_ALARM_SUBSCRIBER_CONTEXT}='subscribed by our paging setup'"
        )
    if email is not None and reason is not None:
        raise ValueError(f"give context {ALARM_EMAIL_CONTEXT} or {NO_ALARM_SUBSCRIBER_CONTEXT}, not both")
    if reason is not None and (not isinstance(reason, str) or not reason.strip()):
        raise ValueError(f"context {NO_ALARM_SUBSCRIBER_CONTEXT} must say why nobody subscribes, got {reason!r}")
    return reason


def _operator_arns(value: Any) -> tuple[str, ...]:
    """Required: the operator role may rewrite event rows, so the example names who may assume it."""
    if value is None:
        raise ValueError(
            f"context {OPERATOR_ARNS_CONTEXT} is missing: say who may assume the operator role (the one role that may "
            f"repair event rows) and the runbook role, -c {OPERATOR_ARNS_CONTEXT}=arn:aws:iam::123456789012:role/"
            "oncall (IAM role or user ARNs, comma-separated)"
        )
    arns = value.split(",") if isinstance(value, str) else value
    if not isinstance(arns, list | tuple) or not arns:
        raise ValueError(
            f"context {OPERATOR_ARNS_CONTEXT} must be IAM role or user ARNs, comma-separated, got {value!r}"
        )
    cleaned = tuple(str(arn).strip() for arn in arns)
    wrong = [arn for arn in cleaned if not IAM_PRINCIPAL_ARN.fullmatch(arn)]
    if wrong:
        raise ValueError(f"context {OPERATOR_ARNS_CONTEXT}: not an IAM role or user ARN: {', '.join(wrong)}")
    return cleaned


def _operator_trust(value: Any) -> OperatorTrust | None:
    """MFA unless told otherwise: the operator role may rewrite event rows."""
    if value is None or value == "mfa":
        return MFA
    if value == "none":
        return None
    if isinstance(value, str) and value.startswith("tag:") and "=" in value:
        key, tag_value = value.removeprefix("tag:").split("=", 1)
        return OperatorTrust(principal_tag=(key, tag_value))
    raise ValueError(
        f"context {OPERATOR_TRUST_CONTEXT} must be mfa (the default: the operators sign in with MFA), "
        f"tag:<key>=<value> (they carry that principal tag, as IAM Identity Center sessions can: tag:team=oncall) "
        f"or none; got {value!r}"
    )


def _commerce_services(node: Node) -> str:
    """Required: a deployed example must say whether it calls real services or books into fakes."""
    value = node.try_get_context(COMMERCE_SERVICES_CONTEXT)
    try:
        return parse_services_choice(value)
    except ServicesNotConfiguredError as exc:
        # The services' own reason for a value it refused (it never repeats credentials), else "missing".
        what = "is missing" if value is None else f"is refused ({exc})"
        raise ValueError(
            f"context {COMMERCE_SERVICES_CONTEXT} {what}: say which services the example's functions call, "
            f"-c {COMMERCE_SERVICES_CONTEXT}=fake (in-memory fakes: nothing is shipped or mailed) or "
            f"-c {COMMERCE_SERVICES_CONTEXT}=https://your-api.example.com (its /storefront, /carrier and "
            "/notifier endpoints)"
        ) from None


def _flag(value: Any) -> bool:
    # `-c key=true` arrives as a string, cdk.json as a JSON boolean.
    if value is None:
        return False
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise ValueError(f"context {PIPE_LOG_EXECUTION_DATA_CONTEXT} must be true or false, got {value!r}")


def _max_concurrency(node: Node, key: str) -> int:
    return _integer(
        node,
        key,
        default=queue_consumer.DEFAULT_MAX_CONCURRENCY,
        minimum=queue_consumer.MIN_MAX_CONCURRENCY,
        maximum=queue_consumer.MAX_MAX_CONCURRENCY,
    )


def _integer(node: Node, key: str, *, default: int, minimum: int, maximum: int) -> int:
    # `-c key=14` arrives as a string, cdk.json as a JSON number; a bool is not a number here.
    value = node.try_get_context(key)
    if value is None:
        return default
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        raise ValueError(f"context {key} must be a whole number from {minimum} to {maximum}, got {value!r}")
    return value
