"""The one alarm shape of the app: the first datapoint above a threshold notifies the alarm topic."""

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
) -> cloudwatch.Alarm:
    """An alarm that fires on one datapoint above ``threshold`` and notifies ``alarm_topic`` of ALARM and OK.

    Missing data is not breaching: SQS, Pipes and an idle function publish nothing while there is
    nothing to do, and silence is health there, not an incident.

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
        evaluation_periods=1,
        datapoints_to_alarm=1,
        treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
    )
    action = cloudwatch_actions.SnsAction(alarm_topic)
    alarm.add_alarm_action(action)
    alarm.add_ok_action(action)
    return alarm
