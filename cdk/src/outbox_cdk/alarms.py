"""The alarm shapes of the app, each notifying the alarm topic of ALARM and OK: ``alarm_above`` for a count of
something that happened (silence is health), ``liveness_alarm`` for a metric published on a schedule (silence
is the failure)."""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cloudwatch_actions
from aws_cdk import aws_sns as sns
from constructs import Construct


def alarm_above(
    scope: Construct,
    construct_id: str,
    metric: cloudwatch.IMetric,
    *,
    threshold: float,
    description: str,
    alarm_topic: sns.ITopic,
    evaluation_periods: int = 1,
    datapoints_to_alarm: int = 1,
) -> cloudwatch.Alarm:
    """An alarm that fires when ``datapoints_to_alarm`` of the last ``evaluation_periods`` datapoints are above
    ``threshold`` (by default the first one is) and notifies ``alarm_topic`` of ALARM and OK.

    Missing data is not breaching: SQS, Pipes and an idle function publish nothing while there is
    nothing to do, and silence is health there, not an incident. With more than one datapoint to alarm on
    such a metric, CloudWatch may join datapoints across quiet periods (docs/aws-behaviour.md R9.6): a run
    that must be consecutive fills the gaps with zeros (``QueueConsumer.persistent_failure_alarm``).

    Example
    -------
    >>> alarm_above(self, "Errors", function.metric_errors(), threshold=0, description="...", alarm_topic=topic)
    """
    above = cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD
    silence = cloudwatch.TreatMissingData.NOT_BREACHING
    shape = _Shape(above, threshold, evaluation_periods, datapoints_to_alarm, silence)
    return _notifying_alarm(scope, construct_id, metric, description, alarm_topic, shape)


def liveness_alarm(
    scope: Construct,
    construct_id: str,
    metric: cloudwatch.IMetric,
    *,
    comparison: cloudwatch.ComparisonOperator,
    threshold: float,
    periods: int,
    description: str,
    alarm_topic: sns.ITopic,
) -> cloudwatch.Alarm:
    """An alarm on a metric that code publishes on a schedule, every time (``outbox.audit.liveness``): it fires when
    each of the last ``periods`` datapoints compares to ``threshold`` as ``comparison`` says, and notifies
    ``alarm_topic`` of ALARM and OK.

    Missing data is breaching: a publisher that stopped publishes nothing, and that silence is what this alarm
    is for. A new stack is therefore in ALARM until the schedule first runs. CloudWatch applies it only when
    fewer than ``periods`` real datapoints are left in its evaluation range (docs/aws-behaviour.md R9.6): a
    heartbeat whose every period counts fills its gaps with zeros (``outbox_cdk.liveness``).
    """
    shape = _Shape(comparison, threshold, periods, periods, cloudwatch.TreatMissingData.BREACHING)
    return _notifying_alarm(scope, construct_id, metric, description, alarm_topic, shape)


@dataclass(frozen=True)
class _Shape:
    """When an alarm fires: how its datapoints compare, how many must, and what a missing one counts as."""

    comparison: cloudwatch.ComparisonOperator
    threshold: float
    evaluation_periods: int
    datapoints_to_alarm: int
    missing: cloudwatch.TreatMissingData


def _notifying_alarm(
    scope: Construct,
    construct_id: str,
    metric: cloudwatch.IMetric,
    description: str,
    alarm_topic: sns.ITopic,
    shape: _Shape,
) -> cloudwatch.Alarm:
    alarm = cloudwatch.Alarm(
        scope,
        construct_id,
        alarm_description=description,
        metric=metric,
        threshold=shape.threshold,
        comparison_operator=shape.comparison,
        evaluation_periods=shape.evaluation_periods,
        datapoints_to_alarm=shape.datapoints_to_alarm,
        treat_missing_data=shape.missing,
    )
    action = cloudwatch_actions.SnsAction(alarm_topic)
    alarm.add_alarm_action(action)
    alarm.add_ok_action(action)
    return alarm
