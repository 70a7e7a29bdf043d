"""The served runtime's clock, for ``outbox --local``: the CLI's times (``--since``, reconcile's staleness,
skip's live lease, "poison pills today") are the served runtime's, whose virtual clock runs ahead of this
machine's where the pipeline skipped a wait; the CLI says so when it does."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

import click
import typer

from outbox import clock as engine_clock
from outbox.cli.context import say
from outbox.local.served import ServedAppError, ServedClock

# A difference from this machine's clock worth a line on the terminal.
NOTICEABLE = timedelta(minutes=1)


def served_clock(endpoint_url: str) -> Callable[[], datetime]:
    """The served clock, installed as the engine's for the rest of the command, and said on stderr when it is
    a minute or more away from this machine's."""
    clock = ServedClock(endpoint_url)
    try:
        now = clock()
    except ServedAppError as exc:
        raise typer.BadParameter(str(exc), param_hint="--local") from exc
    ahead = now - datetime.now(UTC)
    if abs(ahead) >= NOTICEABLE:
        direction = "ahead of" if ahead > timedelta(0) else "behind"
        say(
            f"times are the served runtime's virtual clock: {now:%Y-%m-%d %H:%M:%S} UTC, {_span(abs(ahead))} "
            f"{direction} this machine's (it skips the waits of visibility timeouts and backoffs)"
        )
    context = click.get_current_context(silent=True)
    if context is not None:
        context.with_resource(_engine_clock(clock))
    return clock


@contextmanager
def _engine_clock(clock: Callable[[], datetime]) -> Iterator[None]:
    with engine_clock.use(clock, time.sleep):
        yield


def _span(delta: timedelta) -> str:
    minutes = int(delta.total_seconds() // 60)
    return f"{minutes // 60} h {minutes % 60} min" if minutes >= 60 else f"{minutes} min"
