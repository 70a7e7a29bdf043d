"""The completeness pass's part of the stack (``outbox.ops.completeness``): what the anchoring function is given
(the deployed catalog as data made at synth, the bound, the inbox it reads), what it may read and write, and
``MissingPairsAlarm``, which fires on the first pass that finds a pair the durable consumer runs (a DURABLE one, or a
WORKFLOW one: handed to its execution is an outcome in progress) with no outcome past the bound."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from outbox.audit.auditor import Metric
from outbox_cdk.alarms import alarm_above
from outbox_cdk.grants import QUEUE_SEND_ACTIONS, grant_items, grant_messages
from outbox_cdk.inbox_table import InboxTable
from outbox_cdk.lambda_defaults import engine_metric

if TYPE_CHECKING:
    from outbox_cdk.audit import AuditTable

# The completeness pass reads claims (one pair's, or an event's partition) and an ordered subscription's
# watermark; its optional self-repair writes the REPLAYING row that vouches for a re-send where there is none.
COMPLETENESS_INBOX_READ_ACTIONS: Final = ["dynamodb:GetItem", "dynamodb:Query"]
COMPLETENESS_INBOX_REPAIR_ACTIONS: Final = ["dynamodb:PutItem"]
# Its watermarks, in the audit table (besides the anchoring's own actions there).
COMPLETENESS_AUDIT_ACTIONS: Final = ["dynamodb:GetItem", "dynamodb:PutItem"]


def check_completeness(
    scope: Construct,
    function: lambda_.Function,
    *,
    audit: AuditTable,
    catalog_data: str,
    inbox: InboxTable,
    bound_seconds: int,
    durable_queue: sqs.IQueue | None,
    repairs: int,
    alarm_topic: sns.ITopic,
    service: str,
    period: Duration,
) -> cloudwatch.Alarm:
    """The anchoring ``function`` checks that every durable pair older than ``bound_seconds`` has an outcome
    (``outbox.ops.completeness``), from ``catalog_data`` (the deployed catalog, made at synth): it reads the log
    and the inbox, keeps its watermarks in the audit table, and publishes ``MissingPairs``, alarmed above zero
    (the alarm, returned). With ``repairs``, it re-sends at most that many missing pairs a pass to
    ``durable_queue`` (whose policy must admit the function's role as a sender), writing the claim row that
    vouches for each, as reconcile does. ``service`` and ``period``: the anchoring's metrics and schedule."""
    grant_items(audit.table, function, COMPLETENESS_AUDIT_ACTIONS)
    function.add_environment("COMPLETENESS_CATALOG", catalog_data)
    function.add_environment("COMPLETENESS_BOUND_SECONDS", str(bound_seconds))
    function.add_environment("INBOX_TABLE_NAME", inbox.table.table_name)
    function.add_environment("INBOX_RETENTION_DAYS", str(inbox.retention_days))
    grant_items(inbox.table, function, COMPLETENESS_INBOX_READ_ACTIONS)
    if repairs:
        if durable_queue is None:
            raise ValueError("completeness repairs need the durable queue they send to")
        function.add_environment("COMPLETENESS_REPAIRS", str(repairs))
        function.add_environment("DURABLE_QUEUE_URL", durable_queue.queue_url)
        grant_items(inbox.table, function, COMPLETENESS_INBOX_REPAIR_ACTIONS)
        grant_messages(durable_queue, function, QUEUE_SEND_ACTIONS)
    return alarm_above(
        scope,
        "MissingPairsAlarm",
        engine_metric(service, Metric.MISSING_PAIRS.value, statistic=cloudwatch.Stats.MAXIMUM, period=period),
        threshold=0,
        description="The hourly completeness pass found (event, subscription) pairs with no outcome past the "
        f"completeness bound ({bound_seconds // 3600} h {bound_seconds % 3600 // 60} min, from the stack's "
        "settings): not completed, not dead with a dead letter, not skipped, and "
        "nothing on its way. Work was lost without an error: a queue purged, a message deleted, a consumer that "
        "acknowledged without running. `outbox status` lists each with the command that repairs it; see the "
        "runbook (MissingPairsAlarm).",
        alarm_topic=alarm_topic,
    )
