"""The operator's AWS clients in a run: a process that may die before a call of an action that changes something
(the ``operator_interrupted`` fault), and SQS refusing one of its sends (``send_refused``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError


class OperatorInterrupted(BaseException):
    """The operator's process died in the middle of an action (a laptop lid, a lost SSH session)."""


# The calls that change something: an operator's process dying before one of them leaves an action half done.
MUTATING_CALLS = frozenset(
    {
        "send_message",
        "delete_message",
        "change_message_visibility",
        "start_message_move_task",
        "transact_write_items",
        "update_item",
        "delete_item",
        "put_item",
    }
)


@dataclass
class OperatorDeath:
    """When the operator's process dies during the action under way (the ``operator_interrupted`` fault):
    before its ``at``-th call that changes something, or never (None)."""

    at: int | None = None
    calls: int = 0
    # Decides ``at`` on the action's first changing call, so an action with nothing to change costs no fault.
    plan: Callable[[], tuple[int | None, bool]] | None = None
    # What the operator's clients did, in order: (call, request, answer or None if it raised). Read by the
    # invariants (a DLQ message the redrive deleted must have been sent back first).
    log: list[tuple[str, dict[str, Any], Any]] = field(default_factory=list)

    # Or: before the action's first send_message, the moment a repair hands its work to the queue.
    at_first_send: bool = False
    sent: bool = False
    # Whether SQS refuses a send of the operator's (``send_refused``): the action fails there, and is run again.
    refuse_send: Callable[[], bool] | None = None

    def before(self, name: str) -> None:
        if name == "send_message" and self.refuse_send is not None and self.refuse_send():
            raise refused_send()
        if self.calls == 0 and self.plan is not None:
            self.at, self.at_first_send = self.plan()
        self.calls += 1
        first_send = name == "send_message" and not self.sent
        self.sent = self.sent or name == "send_message"
        if (self.at is not None and self.calls == self.at) or (self.at_first_send and first_send):
            raise OperatorInterrupted(f"the operator's process died before {name} (call {self.calls} of the action)")


class Interrupting:
    """An operator's AWS client whose process may die before a call of an action that changes something;
    the simulator's own reads through it (``armed`` False) never do. Both operator clients share one death."""

    def __init__(self, client: Any, death: OperatorDeath) -> None:
        self._client = client
        self._death = death
        self.armed = False

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._client, name)
        if not callable(attribute) or (name not in MUTATING_CALLS and name != "receive_message"):
            return attribute

        def call(**kwargs: Any) -> Any:
            if not self.armed:
                return attribute(**kwargs)
            if name in MUTATING_CALLS:
                self._death.before(name)
            answer = attribute(**kwargs)
            self._death.log.append((name, kwargs, answer))
            return answer

        return call


def refused_send() -> ClientError:
    """What SQS answers a SendMessage it will not take right now."""
    return ClientError(
        {"Error": {"Code": "ServiceUnavailable", "Message": "injected: SQS refused the send"}}, "SendMessage"
    )
