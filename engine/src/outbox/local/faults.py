"""Fault injection for the local runtime: the failures the design must survive, on demand.

Each fault is a context manager that counts what it did (``FaultCount.fired``). By default a fault fires
on its next ``times`` opportunities; pass ``count=`` (a ``FaultCount`` whose ``take`` decides, e.g. from a
seeded random source) to decide per opportunity instead. ``take`` is told the subject of the opportunity
(the ``event_id:subscription`` key, the tenant, the DynamoDB operation), so a schedule can aim and log.

The worker's faults are this module's; AWS's (throttles, lost answers, unprocessed keys, a rival emit,
redelivery) are ``outbox.local.aws_faults``, exported from here too.

Handlers stay unmodified: the worker's faults are fault points of the engine's published seam
(``outbox.observing``: an observer that raises at the claim, the completion or as a handler starts), never
patches of its methods; AWS's are fault points of emit's transaction or patches of moto's DynamoDB front door
(throttling), and ``crash_after_external_effect`` is the hook of the in-process remote service it is given. Pipe
faults (duplicate delivery, reordered records) are ``PipeEmulator.faults``; redelivery is ``redeliver()``.

The crash points of the claim protocol, in order::

    crash_before_claim ─► claim ─► crash_after_claim ─► handler ─► crash_after_external_effect (inside a
    FakeService call) ─► crash_before_completion ─► completion ─► crash_after_completion ─► ack

A DynamoDB-only subscription's first delivery has no claim (handler ─► crash_before_completion ─► commit of
the writes and the marker ─► crash_after_completion ─► ack); its redeliveries take the lease path.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Protocol

from outbox.local import deadline
from outbox.local.aws_faults import (
    DYNAMODB_OPERATIONS,
    leave_keys_unprocessed,
    lose_answers_after_commit,
    redeliver,
    rival_emit_before_commit,
    throttle_dynamodb,
    throttle_dynamodb_calls,
)
from outbox.local.clock import VirtualClock
from outbox.local.esm import SqsEventSourceMapping, change_visibility_if_in_flight
from outbox.local.fault_count import FaultCount, WorkerCrash
from outbox.observing import Happening, Moment, observing
from outbox.subscriptions import Delivery

__all__ = [
    "DYNAMODB_OPERATIONS",
    "FaultCount",
    "SecondWorker",
    "WorkerCrash",
    "crash_after_claim",
    "crash_after_completion",
    "crash_after_external_effect",
    "crash_before_claim",
    "crash_before_completion",
    "expire_lease_while_running",
    "fail_handler",
    "leave_keys_unprocessed",
    "lose_answers_after_commit",
    "redeliver",
    "rival_emit_before_commit",
    "throttle_dynamodb",
    "throttle_dynamodb_calls",
    "visibility_timeout_during_handler",
]


class RemoteService(Protocol):
    """What ``crash_after_external_effect`` crashes in: an in-process stand-in for a remote API with a hook once a
    call is answered (``outbox.testing.services.FakeService``)."""

    name: str
    after_call: Callable[[str], None] | None


logger = logging.getLogger(__name__)


def _selected(subscription: str, only: str | None) -> bool:
    return only is None or subscription == only


@contextmanager
def crash_before_claim(
    times: int = 1, subscription: str | None = None, *, count: FaultCount | None = None
) -> Iterator[FaultCount]:
    """The worker dies right before its claim: the message was received, nothing was written."""
    count = count or FaultCount(times)

    def crash(happening: Happening) -> None:
        if happening.moment is not Moment.BEFORE_CLAIM or not _selected(happening.subscription, subscription):
            return
        if count.take(happening.key):
            raise WorkerCrash(f"crashed before claiming {happening.key}")

    with observing(crash):
        yield count


@contextmanager
def crash_after_claim(
    times: int = 1, subscription: str | None = None, *, count: FaultCount | None = None, key: str | None = None
) -> Iterator[FaultCount]:
    """The worker dies right after its claim committed, before the handler ran (only for the idempotency
    ``key``, when given)."""
    count = count or FaultCount(times)

    def crash(happening: Happening) -> None:
        if happening.moment is not Moment.CLAIMED:
            return
        claim = happening.detail.result.claim
        chosen = _selected(happening.subscription, subscription) and key in (None, happening.key)
        if claim is not None and chosen and count.take(claim.idempotency_key):
            raise WorkerCrash(f"crashed after claiming {claim.idempotency_key}")

    with observing(crash):
        yield count


@contextmanager
def crash_after_external_effect(
    service: RemoteService, times: int = 1, *, count: FaultCount | None = None
) -> Iterator[FaultCount]:
    """The remote side applied the effect, and the worker dies before the answer reaches the handler.

    Works on an in-process ``FakeService`` (the crash must happen in the worker's thread)."""
    count, previous = count or FaultCount(times), service.after_call

    def crash(idempotency_key: str) -> None:
        if previous is not None:
            previous(idempotency_key)
        if count.take(idempotency_key):
            raise WorkerCrash(f"crashed after {service.name} applied {idempotency_key}")

    service.after_call = crash
    try:
        yield count
    finally:
        service.after_call = previous


@contextmanager
def crash_before_completion(
    times: int = 1, subscription: str | None = None, *, count: FaultCount | None = None
) -> Iterator[FaultCount]:
    """The worker dies after the handler's effect and before the COMPLETED mark: the worst moment. On the
    direct path of a DynamoDB-only subscription, before the commit of its writes and marker."""
    count = count or FaultCount(times)

    def before(name: str, key: str) -> None:
        if _selected(name, subscription) and count.take(key):
            raise WorkerCrash(f"crashed before completing {key}")

    with _around_completion(before=before):
        yield count


@contextmanager
def crash_after_completion(
    times: int = 1, subscription: str | None = None, *, count: FaultCount | None = None
) -> Iterator[FaultCount]:
    """The completion committed, and the worker dies before it can acknowledge the message: the message
    comes back, and the claim (or the marker's condition) must answer "already completed"."""
    count = count or FaultCount(times)

    def after(name: str, key: str) -> None:
        if _selected(name, subscription) and count.take(key):
            raise WorkerCrash(f"crashed after completing {key}")

    with _around_completion(after=after):
        yield count


@contextmanager
def _around_completion(
    before: Callable[[str, str], None] = lambda _sub, _key: None,
    after: Callable[[str, str], None] = lambda _sub, _key: None,
) -> Iterator[None]:
    """Run ``before`` and ``after`` around both completions: the lease path's (``BEFORE_COMPLETION``,
    ``COMPLETED``) and the direct path's commit (``BEFORE_DIRECT_COMMIT``, and ``DIRECT_COMMIT_DONE`` only when it
    committed), told the subscription and the pair's idempotency key."""

    def fault_point(happening: Happening) -> None:
        moment = happening.moment
        if moment in (Moment.BEFORE_COMPLETION, Moment.BEFORE_DIRECT_COMMIT):
            before(happening.subscription, happening.key)
        elif moment is Moment.COMPLETED or (moment is Moment.DIRECT_COMMIT_DONE and happening.detail.result is None):
            after(happening.subscription, happening.key)

    with observing(fault_point):
        yield


@contextmanager
def fail_handler(
    subscription: str,
    times: int,
    error: Callable[[], BaseException] = lambda: ConnectionError("injected"),
    *,
    count: FaultCount | None = None,
) -> Iterator[FaultCount]:
    """The named subscription's handler raises ``error()`` on its next ``times`` runs."""
    count = count or FaultCount(times)

    def before(_happening: Happening, delivery: Delivery) -> None:
        if count.take(delivery.idempotency_key):
            raise error()

    with _before_handler(lambda name: name == subscription, before):
        yield count


@contextmanager
def expire_lease_while_running(
    clock: VirtualClock, subscription: str | None, times: int = 1, *, count: FaultCount | None = None
) -> Iterator[FaultCount]:
    """Virtual time jumps past the lease while the handler runs (a handler slower than its lease).

    A lease outlasts the invocation, so only a skewed clock (the taker's ahead of the owner's) lets another
    worker see it expired while its owner still runs: the owner's deadline moves with the jump (it is alive,
    and Lambda has not stopped it), and it is the others who judge its lease by the later time."""
    count = count or FaultCount(times)

    def before(happening: Happening, delivery: Delivery) -> None:
        if count.take(delivery.idempotency_key):
            lease_policy = happening.detail.by.lease_policy  # the pair's ``Run``: the consumer's lease policy
            jump = lease_policy.lease_for(delivery.remaining_time_ms()) + timedelta(seconds=1)
            clock.advance(jump)
            deadline.extend(jump)

    with _before_handler(lambda name: _selected(name, subscription), before):
        yield count


@dataclass(frozen=True)
class SecondWorker:
    """What happens when a message's visibility runs out while its handler still runs.

    ``after``: how long the handler has run by then; None means the queue's own visibility timeout (which the
    design makes outlast the invocation), a shorter time stands for a queue configured with a visibility
    timeout shorter than the handler. ``dies``: the second worker takes the claim over and dies holding it.
    """

    after: timedelta | None = None
    dies: bool = False


@contextmanager
def visibility_timeout_during_handler(
    mapping: SqsEventSourceMapping,
    times: int = 1,
    subscription: str | None = None,
    *,
    count: FaultCount | None = None,
    second_worker: Callable[[str], SecondWorker] = lambda _key: SecondWorker(),
) -> Iterator[FaultCount]:
    """The handler outlives its message's visibility timeout: SQS hands the message to a second worker
    (a nested poll of ``mapping``) before the first one finishes. ``second_worker(idempotency_key)`` says
    when that happens and whether the second worker runs to the end or takes the claim over and dies holding
    it, so the first worker finishes (completes, fails or dies) while another owns its claim.

    After the queue's visibility timeout the first invocation is past its deadline and its lease has expired:
    the second worker may take the claim over, and fencing must keep the first one out. Sooner, the first
    worker's lease is still live: the second worker must leave the claim alone.

    The design rules this out by configuration (visibility >= 6 x the function timeout); this fault shows
    what the lease and the fencing token do when the configuration is wrong."""
    count = count or FaultCount(times)
    nested = False

    def before(_happening: Happening, delivery: Delivery) -> None:
        nonlocal nested
        if nested or not count.take(delivery.idempotency_key):
            return
        plan = second_worker(delivery.idempotency_key)
        jump = mapping.visibility_timeout + timedelta(seconds=1) if plan.after is None else plan.after
        mapping.clock.advance(jump)
        # The first worker is alive through the jump (Lambda has not stopped it: what a skewed clock, or a
        # visibility timeout shorter than the function's, amounts to), so its deadline moves with it.
        deadline.extend(jump)
        if plan.after is not None:
            _make_visible(mapping)
        nested = True
        try:
            if plan.dies:
                with crash_after_claim(key=delivery.idempotency_key):
                    mapping.poll()  # the second worker, which dies right after its take-over
            else:
                mapping.poll()  # the second worker
        finally:
            nested = False

    with _before_handler(lambda name: _selected(name, subscription), before):
        yield count


def _make_visible(mapping: SqsEventSourceMapping) -> None:
    """The messages the invocation under way received become visible again now, as they would all at once
    under a visibility timeout shorter than the handler (they were received together)."""
    for message in mapping.receiving:
        change_visibility_if_in_flight(mapping.sqs, mapping.queue_url, message["ReceiptHandle"])


@contextmanager
def _before_handler(selected: Callable[[str], bool], before: Callable[[Happening, Delivery], None]) -> Iterator[None]:
    """Run ``before(happening, delivery)`` as the selected subscriptions' handler starts (``HANDLER_STARTS``), after
    the claim and before the handler's own code: the fault point the handler-level faults share. Every run of the
    handler counts: a delivery's, and a deferred pair's the ordered gate runs in place after its predecessor."""

    def fault_point(happening: Happening) -> None:
        if happening.moment is Moment.HANDLER_STARTS and selected(happening.subscription):
            before(happening, happening.detail.arguments["delivery"])

    with observing(fault_point):
        yield
