"""Liveness of the stack's pipes, as the hourly anchoring pass checks it.

Every other alarm counts something that happened. A pipe that is stopped or failed publishes nothing at all:
its events stay in the log, nothing delivers them, and after 24 hours the stream has trimmed the records
(only ``outbox reconcile`` sends them then). So each anchoring pass asks Pipes for the state of each of the
stack's pipes and publishes how many are not ``RUNNING`` (``Metric.PIPES_NOT_RUNNING``); the pass itself
publishes that it ran (``Metric.ANCHORING_PASSES``). Both are alarmed with missing data as breaching
(``outbox_cdk.liveness``): silence is the failure these alarms are for.

Why the anchoring pass and not a check of its own: it already runs every hour on a schedule, with a DLQ and
an errors alarm. A function of its own would be one more schedule to stop silently, and the anchoring's
heartbeat would still be needed (a stopped anchoring schedule silences chain-break detection); one pass, one
heartbeat, covers both.

Every state but ``RUNNING`` counts, the passing ones too (``STARTING``, ``UPDATING``, ``CREATING``): no other
state is sure to deliver, and a pipe stuck in one never does. A pass that lands while a deploy updates a pipe
sees it for the minute that lasts; the alarm waits for two passes in a row, so that is no page. A pipe whose
state cannot be read (access denied, not found, throttled past the retries) counts too, as unknown.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from botocore.exceptions import BotoCoreError, ClientError

from outbox.audit.auditor import Metric

logger = logging.getLogger(__name__)

__all__ = ["RUNNING", "PipeWatch", "not_running", "pipe_states"]

RUNNING: Final = "RUNNING"


def pipe_states(client: Any, names: Sequence[str]) -> dict[str, str]:
    """Each pipe's ``CurrentState`` (DescribePipe), or ``"unknown (<why>)"`` when it could not be read."""
    states = {}
    for name in names:
        try:
            states[name] = str(client.describe_pipe(Name=name)["CurrentState"])
        except ClientError as exc:
            states[name] = f"unknown ({exc.response['Error']['Code']})"
        except BotoCoreError as exc:  # no answer at all (a connection that failed every retry)
            states[name] = f"unknown ({type(exc).__name__})"
    return states


def not_running(states: Mapping[str, str]) -> list[str]:
    """The pipes of ``states`` that are not ``RUNNING``, unknown ones included."""
    return [name for name, state in states.items() if state != RUNNING]


@dataclass(frozen=True)
class PipeWatch:
    """The stack's pipes, by name; ``check()`` publishes how many are not running (with ``metrics``)."""

    client: Any  # a boto3 pipes client
    names: tuple[str, ...]
    metrics: Any | None = None  # Powertools Metrics

    def check(self) -> dict[str, str]:
        """Each pipe's state; the count not ``RUNNING`` is published, 0 included (the alarm needs a datapoint
        every hour: missing data is breaching)."""
        states = pipe_states(self.client, self.names)
        stopped = not_running(states)
        if stopped:
            logger.error(
                "%d pipe(s) not running: %s (docs/operating.md, runbook: PipesNotRunningAlarm)",
                len(stopped),
                ", ".join(f"{name} ({states[name]})" for name in stopped),
            )
        if self.metrics is not None:
            self.metrics.add_metric(name=Metric.PIPES_NOT_RUNNING.value, unit="Count", value=len(stopped))
        return states
