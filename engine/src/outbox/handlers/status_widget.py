"""The dashboard's status widget: a CloudWatch custom widget that shows, as HTML, what ``outbox status`` knows
(``outbox.ops.status_html``), sized to the widget. Read only.

CloudWatch invokes the function with ``widgetContext`` (the widget's width and height in pixels, the dashboard's
theme, ...) and shows the HTML it returns; invoked with ``"describe": true``, it returns what the widget shows, in
markdown, for the console's widget editor.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from functools import cache
from typing import Any, Final

from aws_lambda_powertools import Logger, Tracer
from aws_lambda_powertools.utilities.typing import LambdaContext

from outbox.handlers.operator_reads import read_only_operations
from outbox.ops import Operations
from outbox.ops.status_html import DEFAULT_HEIGHT, DEFAULT_WIDTH, Box, render

logger = Logger()
tracer = Tracer()

DESCRIPTION: Final = """## Outbox status

What `outbox status` knows, read when the widget loads or refreshes: healthy, or how many problems need an
operator; each tenant's chain and anchor, the last anchoring pass; every queue's and dead-letter queue's depth,
the pipes' states; the tenants that need attention, the failure groups of the open dead letters with their
counts, and every other problem, each with the `outbox` command that looks closer or repairs it. Read only:
it changes nothing. `outbox status --html FILE` writes the same page.
"""


@cache
def operations() -> Operations:
    # No CloudWatch client: the widget shows the queues' depths, the dashboard's graphs their age.
    return read_only_operations(os.environ, metrics=False)


def box_of(widget: Mapping[str, Any]) -> Box:
    """The widget's size and theme, from CloudWatch's ``widgetContext`` (the defaults where it says nothing)."""
    return Box(
        width=_pixels(widget.get("width"), DEFAULT_WIDTH),
        height=_pixels(widget.get("height"), DEFAULT_HEIGHT),
        dark=widget.get("theme") == "dark",
    )


def _pixels(value: Any, default: int) -> int:
    try:
        pixels = int(value)
    except (TypeError, ValueError):
        return default
    return pixels if pixels > 0 else default


@logger.inject_lambda_context
@tracer.capture_lambda_handler
def handler(event: dict[str, Any], context: LambdaContext) -> str:
    if event.get("describe"):
        return DESCRIPTION
    ops = operations()
    box = box_of(event.get("widgetContext") or {})
    return render(ops.status(), ops.failure_groups(), now=ops.now(), box=box)
