"""Tamper evidence outside the producers' and consumers' reach: the audit table, the tamper pipe and the auditor.

- ``AuditTable``: each tenant's anchor (the last verified seq and hash) and its tamper findings. Only the
  auditor's two functions and the operator role may write it; producers and consumers get nothing on it.
- ``TamperPipe``: a second reader of the events stream (two per shard at most, R7.5) that keeps the
  MODIFY and REMOVE records of event rows, which emit() never writes, and sends each whole record (old and new
  image) to the tamper queue. ``TamperAlarm`` fires on the first message the queue receives.
- ``Auditor``: ``recorder`` turns each tamper message into a finding; ``anchoring`` verifies each tenant's
  log from its anchor every hour, advances the anchor, and records a broken chain (alarmed at zero). Each
  pass also reports the stack's pipes that are not running and that it ran, alarmed when either stops
  (``outbox_cdk.liveness``).

Both functions run the engine only (``engine_only/`` as code, the handlers from the engine layer).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from outbox.audit.auditor import Metric
from outbox_cdk.alarmed_dlq import AlarmedDeadLetterQueue
from outbox_cdk.alarms import alarm_above
from outbox_cdk.events_table import EventsTable
from outbox_cdk.grants import grant_items
from outbox_cdk.lambda_defaults import ApplicationCode, engine_metric
from outbox_cdk.liveness import (
    anchoring_not_invoked_alarm,
    anchoring_stopped_alarm,
    pipes_not_running_alarm,
    watch_pipes,
    zero_filled,
)
from outbox_cdk.queue_consumer import MIN_MAX_CONCURRENCY, QueueConsumer
from outbox_cdk.redriven_queue import RedrivenQueue
from outbox_cdk.rule_names import rule_name
from outbox_cdk.scheduled_pass import PassIds, PassWords, scheduled_pass
from outbox_cdk.stream_pipe import PipeLogLevel, StreamPipe
from outbox_cdk.table_defaults import protected_table
from outbox_cdk.timing import visibility_timeout_seconds

ENGINE_ONLY_CODE: Final = Path(__file__).parent / "engine_only"
RECORDER_HANDLER: Final = "outbox.handlers.auditor.record_findings"
ANCHOR_HANDLER: Final = "outbox.handlers.auditor.anchor"
RECORDER_SERVICE: Final = "tamper-recorder"
ANCHOR_SERVICE: Final = "chain-anchor"
RECORDER_TIMEOUT_SECONDS: Final = 30
# One pass verifies what every tenant appended in the last hour; the anchors it advanced stay advanced if a
# later tenant's verification outlives the timeout, and the next pass goes on from there.
ANCHOR_TIMEOUT_SECONDS: Final = 300
ANCHOR_SCHEDULE: Final = Duration.hours(1)
TAMPER_MAX_RECEIVE_COUNT: Final = 5
# The anchoring schedule's construct id; its rule is named from it at synth (rule_names).
ANCHORING_SCHEDULE_ID: Final = "AnchoringSchedule"
# Passes in a row that left tenants to the next before AnchorsDeferredAlarm fires: a burst of new tenants (each
# verified from genesis, first) may defer one or two passes and be caught up; three mean the passes fall behind.
DEFERRAL_PERIODS: Final = 3

# Attribute names of an event row (outbox.log.envelope.Envelope.to_item), as in relay_pipe.
KIND_ATTRIBUTE: Final = "kind"
EVENT_KIND: Final = "EVENT"
# An event row's old image exists only when the row is changed (MODIFY) or deleted (REMOVE, R7.6): emit() inserts
# event rows and never touches them again, so every record this matches is a finding.
TAMPER_FILTER_PATTERN: Final = {"dynamodb": {"OldImage": {KIND_ATTRIBUTE: {"S": [EVENT_KIND]}}}}

# What each may do on the audit table: the recorder writes findings (conditioned on absence), the anchoring
# reads an anchor and writes anchors and findings, the status readers read anchors and list findings.
AUDIT_RECORD_ACTIONS: Final = ["dynamodb:PutItem"]
AUDIT_ANCHOR_ACTIONS: Final = ["dynamodb:BatchGetItem", "dynamodb:PutItem"]  # anchors read 100 at a time
AUDIT_READ_ACTIONS: Final = ["dynamodb:GetItem", "dynamodb:Query"]
# The recorder's writes are bound to the findings' partitions (outbox.keys.finding_partition): it can add a
# finding, never move an anchor (TENANT#<t>#ANCHOR), which is what a rewrite of the log would need.
FINDING_PARTITION_PATTERN: Final = "TENANT#*#FINDING"
AUDIT_RECORD_CONDITIONS: Final[dict[str, dict[str, Any]]] = {
    "ForAllValues:StringLike": {"dynamodb:LeadingKeys": [FINDING_PARTITION_PATTERN]},
    "Null": {"dynamodb:LeadingKeys": "false"},
}


class AuditTable(Construct):
    """``self.table``: anchors and findings (``outbox.audit``), written by the auditor and the operator role."""

    def __init__(self, scope: Construct, construct_id: str, *, encryption_key: kms.IKey | None = None) -> None:
        super().__init__(scope, construct_id)
        self.table = protected_table(self, "Table", encryption_key=encryption_key)

    def grant_record(self, grantee: iam.IGrantable) -> None:
        grant_items(self.table, grantee, AUDIT_RECORD_ACTIONS, conditions=AUDIT_RECORD_CONDITIONS)

    def grant_anchor(self, grantee: iam.IGrantable) -> None:
        self._grant(grantee, AUDIT_ANCHOR_ACTIONS)

    def grant_read(self, grantee: iam.IGrantable) -> None:
        self._grant(grantee, AUDIT_READ_ACTIONS)

    def _grant(self, grantee: iam.IGrantable, actions: list[str]) -> None:
        grant_items(self.table, grantee, actions)  # and the table's key without wildcards, if it has one


class TamperQueue(RedrivenQueue):
    """Standard: findings need no order (each names its seq), and nothing may block one behind another."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        alarm_topic: sns.ITopic,
        encryption_key: kms.IKey | None,
        senders: Sequence[iam.IRole] = (),
    ) -> None:
        super().__init__(
            scope,
            construct_id,
            alarm_topic=alarm_topic,
            encryption_key=encryption_key,
            senders=senders,
            fifo=False,
            visibility_timeout_seconds=visibility_timeout_seconds(RECORDER_TIMEOUT_SECONDS, 0),
            dead_letter_description="tamper findings the auditor could not record (read them here: each message "
            "is the stream record of a changed or deleted event row)",
            max_receive_count=TAMPER_MAX_RECEIVE_COUNT,
        )


class TamperPipe(StreamPipe):
    """The events stream's MODIFY and REMOVE records of event rows, whole, into the tamper queue."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        events: EventsTable,
        target: sqs.IQueue,
        alarm_topic: sns.ITopic,
        log_level: PipeLogLevel,
        encryption_key: kms.IKey | None,
    ) -> None:
        super().__init__(
            scope,
            construct_id,
            table=events.table,
            target=target,
            alarm_topic=alarm_topic,
            label="tamper pipe",
            description="Sends every change or deletion of an event row on the events stream to the tamper queue",
            role_description="The tamper pipe: reads the events stream, sends to the tamper queue and its DLQ",
            dead_letter_description="stream batches of changed or deleted event rows the tamper pipe could not "
            "deliver: the log was changed; verify every tenant's chain in full",
            filter_pattern=TAMPER_FILTER_PATTERN,
            # No input template: the whole stream record (eventName, keys, old and new image) is the finding.
            target_parameters=None,
            log_level=log_level,
            # Never the payload: a changed event row is a tenant's data.
            log_execution_data=False,
            encryption_key=encryption_key,
        )


class Auditor(Construct):
    """The tamper recorder (``self.recorder``), the hourly anchoring (``self.anchoring``) and their alarms."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        events: EventsTable,
        audit: AuditTable,
        layer: lambda_.ILayerVersion,
        alarm_topic: sns.ITopic,
        pipe_log_level: PipeLogLevel,
        encryption_key: kms.IKey | None = None,
        senders: Sequence[iam.IRole] = (),
    ) -> None:
        super().__init__(scope, construct_id)
        code = ApplicationCode(code=lambda_.Code.from_asset(str(ENGINE_ONLY_CODE)), catalog=None, layer=layer)
        environment = {"EVENTS_TABLE_NAME": events.table.table_name, "AUDIT_TABLE_NAME": audit.table.table_name}
        self.queue = TamperQueue(
            self, "Findings", alarm_topic=alarm_topic, encryption_key=encryption_key, senders=senders
        )
        self.pipe = TamperPipe(
            self,
            "Pipe",
            events=events,
            target=self.queue.queue,
            alarm_topic=alarm_topic,
            log_level=pipe_log_level,
            encryption_key=encryption_key,
        )
        # A forged finding would page someone for nothing, or bury a real one: only the pipe (and a redrive of
        # the tamper DLQ, by a repair role) sends here.
        self.queue.fed_by(self.pipe)
        self.recorder = QueueConsumer(
            self,
            "Recorder",
            queue=self.queue,
            handler=RECORDER_HANDLER,
            service_name=RECORDER_SERVICE,
            label="tamper recorder",
            description="Tamper recorder: records each changed or deleted event row as a finding in the audit table",
            timeout_seconds=RECORDER_TIMEOUT_SECONDS,
            batching_window_seconds=0,
            application=code,
            environment=environment,
            alarm_topic=alarm_topic,
            max_concurrency=MIN_MAX_CONCURRENCY,
            encryption_key=encryption_key,
        )
        audit.grant_record(self.recorder.function)
        self.anchoring = self._anchoring(code, environment, events, audit, alarm_topic, encryption_key)
        self.tamper_alarm = alarm_above(
            self,
            "TamperAlarm",
            self.queue.queue.metric_number_of_messages_sent(period=Duration.minutes(1), statistic=cloudwatch.Stats.SUM),
            threshold=0,
            description="An event row was changed or deleted: emit() never does either, so someone or something "
            "rewrote the log (a repair by the operator role, or not). `outbox findings` lists what changed; "
            "`outbox verify-chain --full` checks every tenant. See the runbook (Tamper finding).",
            alarm_topic=alarm_topic,
        )
        self.chain_break_alarm = alarm_above(
            self,
            "ChainBreakAlarm",
            engine_metric(
                ANCHOR_SERVICE, Metric.CHAIN_BREAKS.value, statistic=cloudwatch.Stats.SUM, period=ANCHOR_SCHEDULE
            ),
            threshold=0,
            description="The hourly verification found a tenant's chain broken or its anchor contradicted: the "
            "log was rewritten. `outbox findings` and `outbox verify-chain --full`; see the runbook (Chain broken).",
            alarm_topic=alarm_topic,
        )
        self.pipes_not_running_alarm = pipes_not_running_alarm(
            self, service=ANCHOR_SERVICE, schedule=ANCHOR_SCHEDULE, alarm_topic=alarm_topic
        )
        self.anchoring_stopped_alarm = anchoring_stopped_alarm(
            self, service=ANCHOR_SERVICE, schedule=ANCHOR_SCHEDULE, alarm_topic=alarm_topic
        )
        self.anchoring_not_invoked_alarm = anchoring_not_invoked_alarm(
            self, function=self.anchoring, schedule=ANCHOR_SCHEDULE, alarm_topic=alarm_topic
        )
        self.anchors_deferred_alarm = _anchors_deferred_alarm(self, alarm_topic)
        # outbox_cdk.completeness.check_completeness sets it, where the synth loaded the catalog
        self.missing_pairs_alarm: cloudwatch.Alarm | None = None

    def watch_pipes(self, pipes: Sequence[StreamPipe]) -> None:
        """Each anchoring pass publishes how many of ``pipes`` are not running (``PipesNotRunningAlarm``): call
        it once, with every pipe of the stack (``OutboxPipeline`` does, once the last pipe exists)."""
        watch_pipes(self.anchoring, pipes)

    @property
    def alarms(self) -> list[cloudwatch.IAlarm]:
        """Every alarm but the dead-letter queues' (``dead_letters`` has those)."""
        return [
            self.tamper_alarm,
            self.chain_break_alarm,
            *self.recorder.alarms,
            self.anchoring_errors_alarm,
            self.pipes_not_running_alarm,
            self.anchoring_stopped_alarm,
            self.anchoring_not_invoked_alarm,
            self.anchors_deferred_alarm,
            *([self.missing_pairs_alarm] if self.missing_pairs_alarm is not None else []),
        ]

    @property
    def dead_letters(self) -> list[tuple[str, AlarmedDeadLetterQueue]]:
        return [
            ("tamper DLQ", self.queue.dead_letters),
            ("tamper pipe DLQ", self.pipe.dead_letters),
            ("anchoring DLQ", self.anchoring_dead_letters),
        ]

    def _anchoring(
        self,
        code: ApplicationCode,
        environment: dict[str, str],
        events: EventsTable,
        audit: AuditTable,
        alarm_topic: sns.ITopic,
        encryption_key: kms.IKey | None,
    ) -> lambda_.Function:
        def grant(function: lambda_.Function) -> None:
            events.grant_read(function)
            audit.grant_anchor(function)

        anchoring = scheduled_pass(
            self,
            PassIds("Anchoring", "AnchoringDeadLetters", ANCHORING_SCHEDULE_ID, "AnchoringErrorsAlarm"),
            PassWords(
                function="Chain anchoring: verifies each tenant's log since its anchor every hour and advances it",
                dead_letters="anchoring passes that failed every retry (the next hourly pass repeats the work)",
                schedule="Runs the chain anchoring pass",
                errors_alarm="The hourly chain anchoring failed (its log group has the error): anchors do not advance "
                "and the verification it does did not happen.",
                why_no_reserved_concurrency="Invoked once an hour by its schedule; passes that overlap only advance "
                "anchors forward, so a limit protects nothing.",
            ),
            handler=ANCHOR_HANDLER,
            service_name=ANCHOR_SERVICE,
            timeout=Duration.seconds(ANCHOR_TIMEOUT_SECONDS),
            application=code,
            environment=environment,
            rate=ANCHOR_SCHEDULE,
            max_event_age=ANCHOR_SCHEDULE,
            errors_period=Duration.minutes(5),
            alarm_topic=alarm_topic,
            encryption_key=encryption_key,
            grant=grant,
            rule_name=rule_name(self, ANCHORING_SCHEDULE_ID),  # the pipeline key's policy names it (encryption)
        )
        self.anchoring_dead_letters = anchoring.dead_letters
        self.anchoring_schedule = anchoring.schedule
        self.anchoring_errors_alarm = anchoring.errors_alarm
        return anchoring.function


def _anchors_deferred_alarm(scope: Construct, alarm_topic: sns.ITopic) -> cloudwatch.Alarm:
    """Every pass of ``DEFERRAL_PERIODS`` hours in a row left tenants unverified: their breaks go unseen while it
    lasts. Counted only when a pass defers, so filled with zeros: quiet hours between deferrals do not join."""
    deferred = engine_metric(
        ANCHOR_SERVICE, Metric.ANCHORS_DEFERRED.value, statistic=cloudwatch.Stats.SUM, period=ANCHOR_SCHEDULE
    )
    return alarm_above(
        scope,
        "AnchorsDeferredAlarm",
        zero_filled(deferred, "deferred", Metric.ANCHORS_DEFERRED.value),
        threshold=0,
        evaluation_periods=DEFERRAL_PERIODS,
        datapoints_to_alarm=DEFERRAL_PERIODS,
        description="Three hourly anchoring passes in a row left tenants unverified (out of time, or their anchors "
        "unreadable): the passes fall behind the tenants, and those left over are checked late. `outbox anchor` "
        "catches up by hand; see the runbook (AnchorsDeferredAlarm).",
        alarm_topic=alarm_topic,
    )
