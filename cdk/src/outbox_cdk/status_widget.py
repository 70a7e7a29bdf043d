"""The dashboard's status widget: a CloudWatch custom widget whose function renders what ``outbox status`` knows
as HTML (``outbox.handlers.status_widget``), so that the dashboard operators look at first says what needs them
and the command for it.

The function reads what the operator endpoint reads but the queues' age (the dashboard graphs it), and may
change none of it. CloudWatch calls it with the credentials of whoever views the dashboard: a viewer needs
``lambda:InvokeFunction`` on it (``grant_view``; the stack grants it to the operator role), and the console asks
once before it runs a custom widget.
"""

from __future__ import annotations

from typing import Final

from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_iam as iam

from outbox_cdk.operator_endpoint import StatusReader

HANDLER: Final = "outbox.handlers.status_widget.handler"
SERVICE_NAME: Final = "status-widget"
TITLE: Final = "Outbox status: what needs an operator, and the command for it"
# In the dashboard's grid (24 units wide): the whole width, eight rows high, under the alarms.
WIDTH: Final = 24
HEIGHT: Final = 8


class StatusWidget(StatusReader):
    """``self.widget`` (a ``CustomWidget``) over ``self.function``, which reads as the operator endpoint reads
    but the queues' age (the graphs show it); ``self.errors_alarm`` fires on its first failed invocation. At most
    ``reserved_concurrency`` renderings run at once (2, as the endpoint's calls): a dashboard left refreshing by
    many viewers waits instead of taking the tables' read capacity.
    """

    HANDLER = HANDLER
    SERVICE_NAME = SERVICE_NAME
    DESCRIPTION = "Dashboard status widget: what outbox status knows, as HTML, with the command for each problem"
    FAILURES = (
        "Lambda's DeadLetterConfig applies to asynchronous invocations only; this function is invoked synchronously "
        "by the CloudWatch dashboard, which shows every failure in the widget, and the Errors alarm fires on the "
        "first one."
    )
    ERRORS = (
        "The dashboard's status widget failed an invocation (crash, timeout or out of memory): the widget shows the "
        "error instead of the status. Its log group has the error; outbox status reads the same."
    )
    CALLERS = "by the CloudWatch dashboards of the few principals granted grant_view"

    def _complete(self) -> None:
        self.widget = cloudwatch.CustomWidget(
            function_arn=self.function.function_arn, title=TITLE, width=WIDTH, height=HEIGHT
        )

    def grant_view(self, grantee: iam.IGrantable) -> iam.Grant:
        """Let ``grantee`` see the widget: CloudWatch invokes the function, by its ARN, with the viewer's
        credentials. The function's ARN only: no version or alias of it (``grant_invoke``'s ``:*``) is called."""
        return iam.Grant.add_to_principal(
            grantee=grantee, actions=["lambda:InvokeFunction"], resource_arns=[self.function.function_arn]
        )
