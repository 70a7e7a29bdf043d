"""The alarms that fire when something stops, rather than when something happens.

A pipe that is stopped or failed publishes no metric, and a stopped anchoring schedule publishes nothing
either: every other alarm of the stack stays quiet through both. So each hourly anchoring pass publishes how
many of the stack's pipes are not ``RUNNING``, and that it ran (``outbox.audit.liveness``,
``outbox.audit.auditor.Metric``),
and two alarms here read them with missing data as breaching (``alarms.liveness_alarm``); a third reads what
Lambda itself counts:

- ``PipesNotRunningAlarm``: a pipe was not running at two passes in a row (a deploy that updates a pipe
  shows it ``UPDATING`` to one pass at most). A stopped pipe is seen within about two hours, well inside the
  24 hours the stream keeps what it did not deliver.
- ``AnchoringStoppedAlarm``: no pass ended in two hourly periods in a row (the schedule disabled or deleted,
  every pass failing). Its count is filled with zeros, so each hour without a pass breaches, however many
  passes came before (docs/aws-behaviour.md R9.6).
- ``AnchoringNotInvokedAlarm``: the anchoring function was not invoked in two hourly periods in a row (the
  schedule rule disabled, deleted or its target removed). The two custom metrics above can be published by
  anyone allowed ``cloudwatch:PutMetricData``, which would keep them quiet with the schedule off; ``AWS/Lambda``'s
  ``Invocations`` cannot be (PutMetricData refuses the ``AWS/`` namespaces). Filled with zeros as above.

All three are in ALARM from a new stack's creation until its first scheduled pass, an hour later.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from aws_cdk import Duration, Fn
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from constructs import Construct

from outbox.audit.auditor import Metric
from outbox_cdk.alarms import liveness_alarm
from outbox_cdk.grants import grant_pipe_status
from outbox_cdk.lambda_defaults import engine_metric
from outbox_cdk.stream_pipe import StreamPipe

# outbox.settings.AuditorSettings.watched_pipe_names
WATCHED_PIPES_VARIABLE: Final = "WATCHED_PIPE_NAMES"
# Two passes (or two hours without one) in a row: one pass late across an hour's boundary is no page.
LIVENESS_PERIODS: Final = 2


def watch_pipes(anchoring: lambda_.Function, pipes: Sequence[StreamPipe]) -> None:
    """The anchoring function reads the state of each of ``pipes``: their names, and DescribePipe on them."""
    anchoring.add_environment(WATCHED_PIPES_VARIABLE, Fn.join(",", [pipe.pipe_name for pipe in pipes]))
    grant_pipe_status(anchoring, [pipe.pipe.attr_arn for pipe in pipes])


def pipes_not_running_alarm(
    scope: Construct, *, service: str, schedule: Duration, alarm_topic: sns.ITopic
) -> cloudwatch.Alarm:
    return liveness_alarm(
        scope,
        "PipesNotRunningAlarm",
        engine_metric(service, Metric.PIPES_NOT_RUNNING.value, statistic=cloudwatch.Stats.MAXIMUM, period=schedule),
        comparison=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
        threshold=0,
        periods=LIVENESS_PERIODS,
        description="A pipe of the stack was not RUNNING at two hourly passes in a row, or the passes stopped "
        "reporting: nothing delivers what it reads, and after 24 hours the stream has trimmed it. `outbox status` "
        "names the pipe and its state; start it, then `outbox reconcile --since <when it stopped>` (relay pipe). "
        "See the runbook (PipesNotRunningAlarm).",
        alarm_topic=alarm_topic,
    )


def zero_filled(metric: cloudwatch.Metric, name: str, label: str) -> cloudwatch.MathExpression:
    """``metric`` with each period it has no datapoint in counted as 0 (R9.6: only consecutive periods fire)."""
    return cloudwatch.MathExpression(
        expression=f"FILL({name}, 0)",
        using_metrics={name: metric},
        period=metric.period,
        label=f"{label} (0 when none)",
    )


def anchoring_stopped_alarm(
    scope: Construct, *, service: str, schedule: Duration, alarm_topic: sns.ITopic
) -> cloudwatch.Alarm:
    passes = engine_metric(service, Metric.ANCHORING_PASSES.value, statistic=cloudwatch.Stats.SUM, period=schedule)
    return liveness_alarm(
        scope,
        "AnchoringStoppedAlarm",
        zero_filled(passes, "passes", Metric.ANCHORING_PASSES.value),
        comparison=cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD,
        threshold=1,
        periods=LIVENESS_PERIODS,
        description="No hourly anchoring pass ended in two hours: chain breaks go unseen, anchors do not advance, "
        "and nothing checks that the pipes run. Check the schedule rule is enabled and the function's errors "
        "(its log, its DLQ); `outbox anchor` runs the pass by hand. See the runbook (AnchoringStoppedAlarm).",
        alarm_topic=alarm_topic,
    )


def anchoring_not_invoked_alarm(
    scope: Construct, *, function: lambda_.IFunction, schedule: Duration, alarm_topic: sns.ITopic
) -> cloudwatch.Alarm:
    # Lambda's own count of the function's invocations, which no principal can publish: a disabled schedule rule
    # fires it even while someone publishes AnchoringPasses and PipesNotRunning by hand.
    invocations = function.metric_invocations(period=schedule, statistic=cloudwatch.Stats.SUM)
    return liveness_alarm(
        scope,
        "AnchoringNotInvokedAlarm",
        zero_filled(invocations, "invocations", "Invocations"),
        comparison=cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD,
        threshold=1,
        periods=LIVENESS_PERIODS,
        description="The anchoring function was not invoked in two hours (AWS/Lambda Invocations, which no one can "
        "publish): its schedule rule is disabled, deleted or lost its target. Check the rule is enabled and targets "
        "the function; `outbox anchor` runs the pass by hand. See the runbook (AnchoringNotInvokedAlarm).",
        alarm_topic=alarm_topic,
    )
