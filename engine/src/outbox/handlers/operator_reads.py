"""What the operator's read-only functions share: the operations over the stack their environment names
(``OperatorSettings``), with boto3 clients. The operator endpoint (``operator_api``) and the dashboard's status
widget (``status_widget``) each hold one."""

from __future__ import annotations

from collections.abc import Mapping

import boto3

from outbox.ops import Operations, Topology
from outbox.settings import OperatorSettings, load_catalog


def read_only_operations(environ: Mapping[str, str], *, metrics: bool = True) -> Operations:
    """The operations over the stack ``environ`` names. ``metrics``: a CloudWatch client, for the queues' age
    (ApproximateAgeOfOldestMessage); without it, status reports each queue's depth and no age."""
    settings = OperatorSettings.from_env(environ)
    topology = Topology(
        events_table=settings.events_table_name,
        inbox_table=settings.inbox_table_name,
        durable_queue_url=settings.durable_queue_url,
        durable_dlq_url=settings.durable_dlq_url,
        relay_dlq_url=settings.relay_dlq_url,
        audit_table=settings.audit_table_name,
        tamper_pipe_name=settings.tamper_pipe_name,
        tamper_queue_url=settings.tamper_queue_url,
        tamper_dlq_url=settings.tamper_dlq_url,
        tamper_pipe_dlq_url=settings.tamper_pipe_dlq_url,
        anchoring_dlq_url=settings.anchoring_dlq_url,
        workflow_settle_dlq_url=settings.workflow_settle_dlq_url,
        record_change_queue_url=settings.record_change_queue_url,
        record_change_dlq_url=settings.record_change_dlq_url,
        record_change_pipe_dlq_url=settings.record_change_pipe_dlq_url,
        relay_pipe_name=settings.relay_pipe_name,
        record_change_pipe_name=settings.record_change_pipe_name,
    )
    return Operations(
        topology,
        dynamodb=boto3.client("dynamodb"),
        sqs=boto3.client("sqs"),
        pipes=boto3.client("pipes"),
        cloudwatch=boto3.client("cloudwatch") if metrics else None,
        catalog=load_catalog(settings.subscriptions),
    )
