"""The one alarm shape of the app: datapoints above a threshold notify the alarm topic."""

from __future__ import annotations

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
    alarm = cloudwatch.Alarm(
        scope,
        construct_id,
        alarm_description=description,
        metric=metric,
        threshold=threshold,
        comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
        evaluation_periods=evaluation_periods,
        datapoints_to_alarm=datapoints_to_alarm,
        treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
    )
    action = cloudwatch_actions.SnsAction(alarm_topic)
    alarm.add_alarm_action(action)
    alarm.add_ok_action(action)
    return alarm
