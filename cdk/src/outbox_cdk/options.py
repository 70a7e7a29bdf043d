"""``OutboxPipeline``'s options, grouped where a user looks for them: who reads the alarms, who operates, each
lane's consumer, the pipes' logs, the workflows.

    OutboxPipeline(
        self, "Outbox",
        code=..., catalog="shop.catalog:build",
        alarms=Alarms.email("ops@example.com"),          # or Alarms.topic(topic), or Alarms.nobody("why")
        operators=[iam.ArnPrincipal(oncall_role_arn)],
        operator_access=OperatorAccess(trust=OperatorTrust(require_mfa=True)),
        durable_consumer=ConsumerOptions(timeout=Duration.seconds(120)),
        record_changes=RecordChanges(orders, entities=["ORDER"]),
        pipe_logs=PipeLogs(level="INFO"),
        workflows=WorkflowOptions(execution_timeout=Duration.days(7)),
    )

The flat options these replace (``alarm_email=``, ``record_changes_from=``, ``consumer_timeout=``, ...) still work
for this release: each is read into its group (``read_flat_options``), with a ``DeprecationWarning`` and a
warning on the construct that ``cdk synth`` prints, naming what to write instead.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from aws_cdk import Duration
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_sns as sns

from outbox_cdk import operator_endpoint, queue_consumer, workflow_function
from outbox_cdk.grants import OperatorTrust
from outbox_cdk.stream_pipe import PipeLogLevel


@dataclass(frozen=True)
class Alarms:
    """Who reads the pipeline's alarms: exactly one answer, never nobody by default.
    ``Alarms.email(address)`` subscribes an address to the encrypted topic the pipeline creates;
    ``Alarms.topic(topic)`` sends every alarm to an SNS topic of yours (it must let CloudWatch publish, and, if
    encrypted, use its key); ``Alarms.nobody(reason)`` creates the topic with no subscriber, the reason recorded
    on it (you subscribe it outside this app, say)."""

    existing_topic: sns.ITopic | None = None
    email_address: str | None = None
    no_subscriber_reason: str | None = None

    @classmethod
    def email(cls, address: str) -> Alarms:
        return cls(email_address=address)

    @classmethod
    def topic(cls, topic: sns.ITopic) -> Alarms:
        return cls(existing_topic=topic)

    @classmethod
    def nobody(cls, reason: str) -> Alarms:
        return cls(no_subscriber_reason=reason)


@dataclass(frozen=True)
class OperatorAccess:
    """How ``operators`` reach the pipeline. ``trust``: what every assumption of the operator and runbook roles
    must show besides coming from ``operators`` (``OperatorTrust(require_mfa=True)``, or
    ``OperatorTrust(principal_tag=("team", "oncall"))``); None: the ``operators`` alone decide.
    ``endpoint_concurrency``: the reserved concurrency of the operator endpoint and of the dashboard's status
    widget, each (2): a caller looping on ``GET /status`` is throttled instead of taking the account's
    concurrency. It comes out of the account's unreserved pool, which Lambda keeps at 100 or more: in an account
    with no room above that, pass None (no reservation) or raise the account's quota."""

    trust: OperatorTrust | None = None
    endpoint_concurrency: int | None = operator_endpoint.DEFAULT_RESERVED_CONCURRENCY


@dataclass(frozen=True)
class ConsumerOptions:
    """A lane's consumer. ``max_concurrency``: its event source mapping's MaximumConcurrency, 2..1000.
    ``timeout``: its function's timeout, 10 s..15 min (None: 60 s for the durable consumer, 30 s for the
    record-change one). Its queue's visibility timeout is six times that (AWS's rule) and its queue-age alarm two
    visibility timeouts; a durable handler's inbox lease lives at most that long, so give slow remote calls room
    here."""

    max_concurrency: int = queue_consumer.DEFAULT_MAX_CONCURRENCY
    timeout: Duration | None = None


@dataclass(frozen=True)
class RecordChanges:
    """The BEST_EFFORT lane: ``source``, a table of yours whose stream (new and old images) feeds it;
    ``entities``, the entities (partition-key prefixes, ``EntitySpec`` names) your BEST_EFFORT subscriptions
    watch (the pipe drops every other row's change at the source; None: every row change, the consumer drops
    what matches no subscription); ``consumer``, its consumer's options."""

    source: dynamodb.ITable
    entities: Sequence[str] | None = None
    consumer: ConsumerOptions = field(default_factory=ConsumerOptions)


@dataclass(frozen=True)
class PipeLogs:
    """The pipes' log level (OFF, ERROR, INFO, TRACE) and whether their logs carry the records' payload."""

    level: PipeLogLevel = "ERROR"
    execution_data: bool = False


@dataclass(frozen=True)
class WorkflowOptions:
    """For each WORKFLOW subscription of the catalog, a durable function of its own (``WorkflowFunction``) whose
    executions may run ``execution_timeout`` (30 days by default, at most 366) and whose history Lambda keeps
    ``retention_days`` once closed (30 by default, 1..90); with ``encryption_key``, the payloads use it."""

    execution_timeout: Duration = workflow_function.DEFAULT_EXECUTION_TIMEOUT
    retention_days: int = workflow_function.DEFAULT_RETENTION_DAYS


@dataclass(frozen=True)
class Grouped:
    """Every group, as the construct uses them (the flat options read in)."""

    alarms: Alarms | None
    operator_access: OperatorAccess
    durable_consumer: ConsumerOptions
    record_changes: RecordChanges | None
    pipe_logs: PipeLogs
    workflows: WorkflowOptions


# Each flat option of the earlier releases -> (its group, the group's field: "consumer.timeout" in a group's own).
FLAT_OPTIONS: Final[Mapping[str, tuple[str, str]]] = {
    "alarm_email": ("alarms", "email_address"),
    "alarm_topic": ("alarms", "existing_topic"),
    "no_alarm_subscriber": ("alarms", "no_subscriber_reason"),
    "operator_trust": ("operator_access", "trust"),
    "operator_endpoint_concurrency": ("operator_access", "endpoint_concurrency"),
    "consumer_max_concurrency": ("durable_consumer", "max_concurrency"),
    "consumer_timeout": ("durable_consumer", "timeout"),
    "record_changes_from": ("record_changes", "source"),
    "record_change_entities": ("record_changes", "entities"),
    "record_change_max_concurrency": ("record_changes", "consumer.max_concurrency"),
    "record_change_timeout": ("record_changes", "consumer.timeout"),
    "pipe_log_level": ("pipe_logs", "level"),
    "pipe_log_execution_data": ("pipe_logs", "execution_data"),
    "workflow_execution_timeout": ("workflows", "execution_timeout"),
    "workflow_retention_days": ("workflows", "retention_days"),
}
# The groups with defaults of their own (the alarms have none; the record-change lane is none by default).
DEFAULTED_GROUPS: Final[Mapping[str, type]] = {
    "operator_access": OperatorAccess,
    "durable_consumer": ConsumerOptions,
    "pipe_logs": PipeLogs,
    "workflows": WorkflowOptions,
}
ALARM_ANSWERS: Final = {"email_address": "email", "existing_topic": "topic", "no_subscriber_reason": "nobody"}


def replacement(flat_name: str) -> str:
    """What to write instead of ``flat_name``: ``durable_consumer=ConsumerOptions(timeout=...)`` for
    ``consumer_timeout``."""
    group, path = FLAT_OPTIONS[flat_name]
    if group == "alarms":
        return f"alarms=Alarms.{ALARM_ANSWERS[path]}(...)"
    inner, _, nested = path.partition(".")
    argument = f"consumer=ConsumerOptions({nested}=...)" if nested else f"{inner}=..."
    before = "..., " if group == "record_changes" and inner != "source" else ""
    kind = RecordChanges if group == "record_changes" else DEFAULTED_GROUPS[group]
    return f"{group}={kind.__name__}({before}{argument})"


# Removed in the release after the next; until then each is read into its group.
REMOVED_IN = "0.9.0"


def read_flat_options(grouped: Grouped, flat: Mapping[str, Any]) -> tuple[Grouped, list[str]]:
    """``grouped`` with the flat options of earlier releases read into their groups, and one deprecation notice
    for each. A name no release had is a TypeError (as Python says it); a flat option beside the group that
    replaces it, a ValueError (which one counts would be a guess)."""
    unknown = sorted(set(flat) - set(FLAT_OPTIONS))
    if unknown:
        raise TypeError(f"OutboxPipeline() got unexpected keyword arguments: {', '.join(unknown)}")
    values = {group.name: getattr(grouped, group.name) for group in dataclasses.fields(grouped)}
    given: dict[str, dict[str, Any]] = {}
    for name, value in flat.items():
        group, path = FLAT_OPTIONS[name]
        given.setdefault(group, {})[path] = value
    notices = []
    for group, fields in given.items():
        names = [n for n in flat if FLAT_OPTIONS[n][0] == group]
        if not _untouched(group, values[group]):
            raise ValueError(f"give {group}= or {' and '.join(names)}, not both: {group}= replaces them")
        values[group] = _group_of(group, fields)
        notices += [
            f"OutboxPipeline({n}=...) is deprecated: write {replacement(n)} ({n} goes in {REMOVED_IN})" for n in names
        ]
    for notice in notices:
        # Said at the caller's line: here <- OutboxPipeline.__init__ <- jsii's construction of it <- the caller.
        warnings.warn(notice, DeprecationWarning, stacklevel=4)
    return Grouped(**values), notices


def _untouched(group: str, value: object) -> bool:
    return value is None if group not in DEFAULTED_GROUPS else value == DEFAULTED_GROUPS[group]()


def _group_of(group: str, fields: dict[str, Any]) -> object:
    if group == "alarms":
        return Alarms(**fields)
    if group == "record_changes":
        consumer = ConsumerOptions(
            **{path.split(".", 1)[1]: value for path, value in fields.items() if path.startswith("consumer.")}
        )
        source = fields.get("source")
        if source is None:
            if "entities" in fields:
                raise ValueError("record_change_entities filters the record-change lane: give record_changes_from too")
            return None  # a consumer's options without a lane: they never had an effect
        return RecordChanges(source=source, entities=fields.get("entities"), consumer=consumer)
    return dataclasses.replace(DEFAULTED_GROUPS[group](), **fields)
