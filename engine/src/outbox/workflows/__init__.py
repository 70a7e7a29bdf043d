"""The WORKFLOW lane: a subscription whose handler is a Lambda durable function, started once per pair.

A WORKFLOW subscription names its handler by its import path (``workflow("shop.shipping:handler")``): a
function decorated with the AWS Durable Execution SDK's ``@durable_execution``, deployed as a durable function of
its own from the app's code asset (``outbox_cdk.WorkflowFunction``). The durable consumer never imports it: it
claims the pair, starts one execution whose name is derived from the pair (``execution_name``) with the event as
its input (``WorkflowInput``), and records the execution's ARN on the claim, which moves to HANDED
(``outbox.pairs``: "handed to a workflow"). The execution's end is brought back to the inbox by
``outbox.workflows.ends``: SUCCEEDED completes the pair, FAILED, TIMED_OUT and STOPPED make it dead with a dead
letter that names the execution and its error.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from outbox import keys
from outbox.exceptions import ContractViolationError, OutboxValidationError
from outbox.log.canonical import canonical_json
from outbox.log.envelope import Envelope

# Lambda's DurableExecutionName: 1..64 characters of [a-zA-Z0-9-_] (the Invoke API's model).
EXECUTION_NAME_PATTERN: Final = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
EXECUTION_NAME_MAX_LENGTH: Final = 64
# An event id is a ULID: always 26 characters, so the name's first part ends at a fixed place.
_EVENT_ID_LENGTH: Final = 26
# The hashed form of a subscription too long to spell out: a readable prefix, "H" and 16 hex digits (64 bits) in
# upper case. A spelled-out name has no upper-case letter after the event id (subscription names are lower case),
# so the two forms never meet.
_HASH_DIGITS: Final = 16
HANDLER_PATH_PATTERN: Final = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*$")
# The durable consumer's variable naming each WORKFLOW subscription's function: JSON {subscription: {"arn": its
# qualified ARN, "execution_timeout": seconds}}.
WORKFLOW_FUNCTIONS_VARIABLE: Final = "WORKFLOW_FUNCTIONS"
# The module of the SDK's decorator: a durable handler is the wrapper it returns (``is_durable_handler``).
DURABLE_SDK_MODULE: Final = "aws_durable_execution_sdk_python"


def execution_name(event_id: str, subscription: str, attempt: int = 1) -> str:
    """The durable execution's name for the pair's ``attempt``-th execution (1 for the first; a replay of a dead
    workflow pair starts the next): ``<event id>-<attempt>-<subscription, dots as dashes>``, or, when that is longer
    than 64 characters, ``<event id>-<attempt>-<prefix>H<16 hex digits of sha256(subscription)>``.

    Injective over (event id, subscription, attempt) as long as no two subscriptions of a catalog share the 64-bit
    digest (``SubscriptionRegistry`` refuses two that do): the event id has a fixed length, the attempt is digits
    up to the next dash, a subscription name has no dash (a dot becomes one) and no upper-case letter."""
    if len(event_id) != _EVENT_ID_LENGTH or not re.fullmatch(r"[0-9A-Z]+", event_id):
        raise OutboxValidationError(f"event id {event_id!r} is not a ULID: an execution name starts with one")
    if isinstance(attempt, bool) or attempt < 1:
        raise OutboxValidationError(f"a workflow attempt counts from 1, not {attempt!r}")
    head = f"{event_id}-{attempt}-"
    spelled = subscription.replace(".", "-")
    if len(head) + len(spelled) <= EXECUTION_NAME_MAX_LENGTH:
        return head + spelled
    room = EXECUTION_NAME_MAX_LENGTH - len(head) - 1 - _HASH_DIGITS
    if room < 0:
        raise OutboxValidationError(f"workflow attempt {attempt} of {event_id}: no room left in an execution name")
    return f"{head}{spelled[:room]}H{subscription_digest(subscription)}"


def subscription_digest(subscription: str) -> str:
    """The 16 upper-case hex digits a long subscription name is named by in ``execution_name``."""
    return hashlib.sha256(subscription.encode()).hexdigest()[:_HASH_DIGITS].upper()


@dataclass(frozen=True)
class WorkflowHandler:
    """A WORKFLOW subscription's handler: where its durable function is (``"package.module:function"`` in the
    app's code asset). It runs in its own durable function, never in the consumer: calling it here is a mistake,
    and raises. ``resolve`` imports it (the synth's check, the local runtime)."""

    path: str

    def __post_init__(self) -> None:
        if not isinstance(self.path, str) or not HANDLER_PATH_PATTERN.fullmatch(self.path):
            raise OutboxValidationError(
                f"workflow handler {self.path!r} must be 'package.module:function' (a function decorated with "
                f"{DURABLE_SDK_MODULE}.durable_execution, in the code asset)"
            )

    @property
    def lambda_handler(self) -> str:
        """The Lambda function's handler setting: ``package.module.function``."""
        return self.path.replace(":", ".")

    def resolve(self) -> Any:
        module, _, attribute = self.path.partition(":")
        return getattr(importlib.import_module(module), attribute)

    def __call__(self, _delivery: Any) -> None:
        raise ContractViolationError(
            f"the workflow handler {self.path} runs in its own durable function, started by the durable consumer; "
            "it is never called in the consumer"
        )


def workflow(path: str) -> WorkflowHandler:
    """The handler of a WORKFLOW subscription: ``Subscription("shipping.ship", "order.paid", Lane.WORKFLOW,
    workflow("shop.shipping:handler"))``."""
    return WorkflowHandler(path)


def is_durable_handler(handler: Any) -> bool:
    """Whether ``handler`` is what the SDK's ``@durable_execution`` returns: the SDK's own wrapper (its code is the
    one every decorated function shares), never the plain function, which Lambda would invoke with the durable
    service's envelope instead of its input. False when the SDK is not installed."""
    try:
        from aws_durable_execution_sdk_python.execution import durable_execution
    except ImportError:
        return False
    wrapper_code = durable_execution(_probe).__code__
    return callable(handler) and getattr(handler, "__code__", None) is wrapper_code


def _probe(event: Any, context: Any) -> None:
    return None


def durable_handler_problem(handler: WorkflowHandler) -> str | None:
    """What is wrong with a WORKFLOW subscription's handler, or None: it must import, and be a durable handler."""
    try:
        resolved = handler.resolve()
    except Exception as exc:  # whatever importing the app's module raised, the synth says it
        return f"cannot import {handler.path}: {type(exc).__name__}: {str(exc)[:300]}"
    if not is_durable_handler(resolved):
        return (
            f"{handler.path} is not a durable handler: decorate it with @durable_execution from "
            f"{DURABLE_SDK_MODULE} (Lambda invokes a durable function with its own envelope, not the event)"
        )
    return None


@dataclass(frozen=True)
class WorkflowInput:
    """What a workflow execution is started with: the event as delivered (its payload brought to the type's current
    version), the subscription, the pair's idempotency key and the attempt. The same bytes on every start of one
    attempt (canonical JSON), so a start re-sent after a lost answer finds the execution it started."""

    envelope: Envelope
    subscription: str
    attempt: int

    @property
    def idempotency_key(self) -> str:
        return keys.idempotency_key(self.envelope.id, self.subscription)

    def payload(self) -> bytes:
        return canonical_json(
            {
                "outbox_workflow": 1,
                "subscription": self.subscription,
                "attempt": self.attempt,
                "idempotency_key": self.idempotency_key,
                "envelope": self.envelope.model_dump(mode="json"),
            }
        )

    @classmethod
    def of(cls, event: Mapping[str, Any] | str | bytes) -> WorkflowInput:
        """The input a durable handler receives (its ``event``), read back: ``WorkflowInput.of(event).envelope``."""
        document = json.loads(event) if isinstance(event, str | bytes) else dict(event)
        if document.get("outbox_workflow") != 1:
            raise OutboxValidationError("not a workflow input of the outbox: started by something else?")
        return cls(
            Envelope.model_validate(document["envelope"]), str(document["subscription"]), int(document["attempt"])
        )


__all__ = [
    "EXECUTION_NAME_MAX_LENGTH",
    "EXECUTION_NAME_PATTERN",
    "WORKFLOW_FUNCTIONS_VARIABLE",
    "WorkflowHandler",
    "WorkflowInput",
    "durable_handler_problem",
    "execution_name",
    "is_durable_handler",
    "subscription_digest",
    "workflow",
]
