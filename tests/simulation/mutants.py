"""The seed article's two bugs, re-introduced for the mutation tests (and only there: the engine has no
switch for them), and two faults of the machinery that invariants 4 and 6 watch. Each replaces one method
for the duration of a ``monkeypatch``."""

from __future__ import annotations

from datetime import timedelta
from typing import Any
from unittest import mock

import pytest
from botocore.exceptions import ClientError

from outbox.delivery.consumer import DeliveryOutcome
from outbox.delivery.run import Run
from outbox.exceptions import LeaseLostError, TerminalError
from outbox.inbox import PENDING, Claim, ClaimOutcome, ClaimResult, DeadReason, Inbox, envelope_digest
from outbox.keys import claim_key
from outbox.local.esm import SqsEventSourceMapping
from outbox.log.envelope import Envelope, format_timestamp


def plain_claim(
    inbox: Inbox,
    envelope: Envelope,
    subscription: str,
    lease: timedelta,
    digest: str | None = None,
    *,
    may_create: bool = True,
) -> ClaimResult:
    """Bug 1: the claim is a put conditioned on ``attribute_not_exists(pk)``. Any existing row refuses it:
    a stale PENDING row is never taken over, a DEAD row never retried."""
    now, owner, digest = inbox._clock(), inbox._new_owner(), digest or envelope_digest(envelope)
    row = {
        **claim_key(envelope.id, subscription),
        "status": {"S": PENDING},
        "owner": {"S": owner},
        "lease_expires_at": {"N": str(int((now + lease).timestamp() * 1000))},
        "attempts": {"N": "1"},
        "digest": {"S": digest},
        "event_id": {"S": envelope.id},
        "subscription": {"S": subscription},
        "tenant": {"S": envelope.tenant},
        "event_type": {"S": envelope.type},
        "created_at": {"S": format_timestamp(now)},
        "updated_at": {"S": format_timestamp(now)},
    }
    try:
        inbox.client.put_item(TableName=inbox.table_name, Item=row, ConditionExpression="attribute_not_exists(pk)")
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
            raise
        key = claim_key(envelope.id, subscription)
        existing = inbox.client.get_item(TableName=inbox.table_name, Key=key, ConsistentRead=True).get("Item", {})
        return ClaimResult(inbox._why_not_claimable(existing, digest), existing=existing)
    claim = Claim(envelope.id, subscription, envelope.tenant, owner, 1, digest, now + lease)
    return ClaimResult(ClaimOutcome.CLAIMED, claim=claim)


def dead_on_first_error(run: Run, claim: Claim, exc: BaseException, terminal: bool | None = None) -> DeliveryOutcome:
    """Bug 2: the first handler error marks the claim dead and writes the dead letter, and the message is
    deleted as after a success: it is never retried."""
    reason = DeadReason.TERMINAL if isinstance(exc, TerminalError) else DeadReason.EXHAUSTED
    try:
        run.inbox.mark_dead(
            claim, run.envelope, f"{type(exc).__name__}: {exc}", type(exc).__name__, reason, run.pair.receive_count
        )
    except LeaseLostError:
        return DeliveryOutcome.SKIPPED
    return DeliveryOutcome.DEAD


def introduce_plain_claim(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Inbox, "claim", plain_claim)


def introduce_dead_on_first_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Run, "fail", dead_on_first_error)


# -- two more, to show that the fencing and the FIFO invariants have teeth -----------------------------------


def unfenced_completion(inbox: Inbox, claim: Claim) -> dict[str, Any]:
    """The COMPLETED mark without its fencing token: a worker whose lease was taken over still completes."""
    write = _completion_write(inbox, claim)
    update = write["Update"]
    update["ConditionExpression"] = "#status = :pending"
    del update["ExpressionAttributeNames"]["#owner"]
    del update["ExpressionAttributeValues"][":owner"]
    return write


def reversed_receive(mapping: SqsEventSourceMapping) -> Any:
    """An event source mapping that hands each batch over back to front (FIFO order broken in transport)."""
    sqs = mapping.sqs

    class Reversing:
        def receive_message(self, **request: Any) -> dict[str, Any]:
            response: dict[str, Any] = sqs.receive_message(**request)
            response["Messages"] = list(reversed(response.get("Messages", [])))
            return response

        def __getattr__(self, name: str) -> Any:
            return getattr(sqs, name)

    with mock.patch.object(mapping, "sqs", Reversing()):
        return _poll(mapping)


_completion_write = Inbox.completion_write
_poll = SqsEventSourceMapping.poll


def introduce_unfenced_completion(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Inbox, "completion_write", unfenced_completion)


def introduce_reversed_receive(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(SqsEventSourceMapping, "poll", reversed_receive)


# -- and that a deploy's narrowing has teeth: a pair it left out never runs after it ---------------------------


def introduce_left_out_run_in_place(monkeypatch: pytest.MonkeyPatch) -> None:
    """A deferred event a deploy took out of the order is woken as if still in it, and run in place (the
    catalogue's ``woken-out-of-the-order-runs-in-place``): a narrowed-away event runs after the deploy."""
    from outbox.delivery import ordered

    monkeypatch.setattr(ordered, "_in_the_order", lambda subscription, envelope: True)
