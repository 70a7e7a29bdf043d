"""Starting a pair's durable execution: one start per (pair, attempt), whatever answers are lost.

Lambda makes a durable start idempotent by its name (the Invoke API's ``DurableExecutionName``): a start with a name
that exists and the same input returns that execution; with other input, or while one of that name runs, Lambda
may answer ``DurableExecutionAlreadyStartedException``. The starter never chooses a new name to get past either:
the name is the pair's (``outbox.workflows.execution_name``), and the input the same bytes on every start of one
attempt. A start whose answer is lost is sent again as it was; an answer without the execution's ARN, an
``AlreadyStarted``, and a start that failed in a way that may have applied (a 5xx or a throttle once botocore's
re-sends are spent, a timeout) are followed by a look-up of the execution by its name
(``ListDurableExecutionsByFunction``). So a start, its re-sends and a worker's take-over after a crash find one
execution, and a pair whose start applied is never failed for an answer it did not get (its last attempt dead,
and a replay starting a second execution under the next attempt's name).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from botocore.exceptions import BotoCoreError, ClientError

from outbox.exceptions import OutboxError, TerminalError

logger = logging.getLogger(__name__)

ALREADY_STARTED: Final = "DurableExecutionAlreadyStartedException"
# What a start answers that no retry changes: the function or its alias is gone, the input is too large or
# malformed, the key is unusable. The pair is dead with its letter; a deploy that fixes it and a replay run it.
TERMINAL_START_ERRORS: Final = frozenset(
    {
        "ResourceNotFoundException",
        "InvalidParameterValueException",
        "RequestTooLargeException",
        "InvalidRequestContentException",
        "UnsupportedMediaTypeException",
        "KMSAccessDeniedException",
        "KMSDisabledException",
        "KMSNotFoundException",
        "KMSInvalidStateException",
        "AccessDeniedException",
    }
)


class WorkflowStartError(OutboxError):
    """A start whose execution could not be found by its name: retried (the next start, with the same name, finds it
    or makes it)."""


class WorkflowStartRefusedError(TerminalError):
    """Lambda refused the start for a reason no retry changes (``TERMINAL_START_ERRORS``)."""


@dataclass(frozen=True)
class QualifiedFunction:
    """A durable function's qualified ARN (``arn:...:function:<name>:<alias or version>``), its parts, and how long
    one of its executions may run (seconds; None where the caller did not say)."""

    arn: str
    execution_timeout: int | None = None

    @classmethod
    def of(cls, described: str | Mapping[str, Any]) -> QualifiedFunction:
        """From ``WORKFLOW_FUNCTIONS``: ``{"arn": ..., "execution_timeout": seconds}``, or the ARN alone."""
        if isinstance(described, str):
            return cls(described)
        timeout = described.get("execution_timeout")
        return cls(str(described["arn"]), int(timeout) if timeout is not None else None)

    def __post_init__(self) -> None:
        parts = self.arn.split(":")
        if len(parts) != 8 or parts[2] != "lambda" or parts[5] != "function" or not parts[7]:
            raise ValueError(
                f"{self.arn!r} is not a qualified Lambda function ARN (arn:aws:lambda:<region>:<account>:function:"
                "<name>:<alias>): an asynchronous start of a durable function must name a version or an alias"
            )

    @property
    def unqualified(self) -> str:
        return self.arn.rpartition(":")[0]

    @property
    def qualifier(self) -> str:
        return self.arn.rpartition(":")[2]


class WorkflowStarter:
    """Starts executions of durable functions through a boto3 Lambda client (``lambda_client``)."""

    def __init__(self, lambda_client: Any) -> None:
        self.client = lambda_client

    def start(self, function: QualifiedFunction, name: str, payload: bytes) -> str:
        """The ARN of the execution named ``name`` of ``function``: started with ``payload`` now, or found, if a
        start of that name happened before. ``WorkflowStartError`` when neither (try again later, the same way);
        ``WorkflowStartRefusedError`` when Lambda refuses it for good."""
        try:
            response = self.client.invoke(
                FunctionName=function.arn, InvocationType="Event", DurableExecutionName=name, Payload=payload
            )
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            if code in TERMINAL_START_ERRORS:
                raise WorkflowStartRefusedError(f"Lambda refused to start {name}: {code}") from exc
            if code != ALREADY_STARTED:
                return self._found_after(function, name, exc)
            # Started before under this name: that execution is the pair's (never a second one).
            logger.info("the execution %s was started before; looking it up by its name", name)
            response = {}
        except BotoCoreError as exc:  # a timeout, a dropped connection: the start may have applied
            return self._found_after(function, name, exc)
        arn = response.get("DurableExecutionArn")
        if isinstance(arn, str) and arn:
            return arn
        found = self.find(function, name)
        if found is None:
            raise WorkflowStartError(f"the execution {name} of {function.arn} was not found after its start")
        return found

    def _found_after(self, function: QualifiedFunction, name: str, failure: Exception) -> str:
        """After a start that failed and may have applied: the execution of its name, if there is one; else the
        start's own error (the next receive starts again, with the same name and input)."""
        try:
            found = self.find(function, name)
        except (ClientError, BotoCoreError):
            found = None  # the look-up failed too: the start's error is what the caller must see
        if found is None:
            raise failure
        logger.info("the start of %s failed (%s) after it applied: its execution was found by its name", name, failure)
        return found

    def find(self, function: QualifiedFunction, name: str) -> str | None:
        """The ARN of ``function``'s execution named ``name``, or None."""
        response = self.client.list_durable_executions_by_function(
            FunctionName=function.unqualified, Qualifier=function.qualifier, DurableExecutionName=name
        )
        for execution in response.get("DurableExecutions") or []:
            if execution.get("DurableExecutionName") == name:
                return str(execution["DurableExecutionArn"])
        return None

    def describe(self, execution_arn: str) -> dict[str, Any]:
        """``GetDurableExecution`` of one execution: its Status, and its Error once it failed."""
        response: dict[str, Any] = self.client.get_durable_execution(DurableExecutionArn=execution_arn)
        return response
