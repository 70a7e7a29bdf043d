"""What a pair's run tells whoever observes it: the named moments of a delivery, and fault points.

The durable consumer's writes and runs are seams: each is told to the observers registered with ``observing``
before it starts (``BEFORE_CLAIM``), once it returned (``CLAIMED``, with what it returned) or when it raised
(``CLAIM_RAISED``, with what it raised), as a ``Happening``. A test, the simulator or the local runtime's faults
watch the engine through them and never replace its methods. An observer that raises is a fault point: raised
at a ``BEFORE_`` moment, the call never starts and the exception propagates exactly as if the call had raised it;
raised once a call returned, the call's effect stands and its caller sees the exception instead of the answer.

Observers nest like context managers: the one registered last is the outermost, told of a call's start first
and of its end last, so a fault armed inside a recording block sees what the recording saw (and never hides a
committed claim from it). Registration is process-wide (every thread's calls, as the local runtime runs workers
in threads) and safe from any thread; nobody observing costs one check of an empty tuple per call.

The log has two moments of its own, an emit's transaction and a check's read of the chain head (no pair: their
ids are ""). The moments reuse the names of ``outbox.pairs.machine.Step`` where they are the same thing (a
claim, a commit, a release, a deferral, a wake-up). A ``Happening``'s ``detail`` holds the call's own arguments
by their parameter names: what each moment carries is the engine method's signature, listed with ``AROUND``. A
pair's ``Run`` is the ``by`` of its own moments (its pair, its remaining time, its lease policy), whose arguments
are only what varies from call to call.
"""

from __future__ import annotations

import functools
import inspect
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ParamSpec, Protocol, TypeVar

from outbox import keys

__all__ = ["AROUND", "Around", "Detail", "Happening", "Moment", "Observer", "observed", "observing", "point"]


class Moment(StrEnum):
    """Each named moment of a pair's run (``BEFORE_`` one starts, then it returned, or ``_RAISED``)."""

    BEFORE_CLAIM = "before_claim"  # Inbox.claim: the lease-claim write
    CLAIMED = "claimed"  # result: the ClaimResult (claimed or refused)
    CLAIM_RAISED = "claim_raised"
    BEFORE_RUN = "before_run"  # Run.run_handler: one run of a handler, the time it takes noted
    RAN = "ran"  # result: the checked HandlerResult
    RUN_RAISED = "run_raised"  # error: what the handler (or its result's check) raised
    HANDLER_STARTS = "handler_starts"  # inside the run, as the handler's own code is called: a point, no end
    BEFORE_COMPLETION = "before_completion"  # Run.commit: the fenced COMPLETED mark with the writes
    COMPLETED = "completed"
    COMPLETION_RAISED = "completion_raised"
    BEFORE_DIRECT_COMMIT = "before_direct_commit"  # Run.commit_directly: the DynamoDB-only path's marker and writes
    DIRECT_COMMIT_DONE = "direct_commit_done"  # result: None once committed, else the row that stopped it
    DIRECT_COMMIT_RAISED = "direct_commit_raised"
    BEFORE_DIRECT_RUN = "before_direct_run"  # DirectPath: a DynamoDB-only pair run and committed, no claim
    DIRECT_RAN = "direct_ran"  # result: the DeliveryOutcome, or None when the pair had a row (the lease path runs it)
    DIRECT_RUN_RAISED = "direct_run_raised"
    BEFORE_DIRECT_APPLY = "before_direct_apply"  # OrderedGate: the next in order, run with no claim
    DIRECT_APPLIED = "direct_applied"  # result: (DeliveryOutcome, Watermark | None), or None (looked at again)
    DIRECT_APPLY_RAISED = "direct_apply_raised"
    BEFORE_DIRECT_FAILURE = "before_direct_failure"  # Run.fail_unclaimed: a direct run failed, claimed now
    DIRECT_FAILED = "direct_failed"  # result: the DeliveryOutcome
    DIRECT_FAILURE_RAISED = "direct_failure_raised"
    BEFORE_RELEASE = "before_release"  # Inbox.release: the lease given back
    RELEASED = "released"
    RELEASE_RAISED = "release_raised"
    BEFORE_DEATH = "before_death"  # Inbox.mark_dead: DEAD and its dead letter
    DEAD = "dead"
    DEATH_RAISED = "death_raised"
    BEFORE_DEFERRAL = "before_deferral"  # Inbox.defer: an ordered pair put aside behind its predecessor
    DEFERRED = "deferred"
    DEFERRAL_RAISED = "deferral_raised"
    BEFORE_FORGIVENESS = "before_forgiveness"  # Inbox.forgive: an attempt cut off for others' time not counted
    FORGIVEN = "forgiven"  # result: the Claim with one attempt less
    FORGIVENESS_RAISED = "forgiveness_raised"
    BEFORE_PLACING = "before_placing"  # OrderedGate.place: a claimed ordered pair next in order, or deferred
    PLACED = "placed"  # result: the Watermark to advance, or DEFERRED
    PLACING_RAISED = "placing_raised"
    BEFORE_ADVANCE = "before_advance"  # OrderBook.advance_items: the watermark's move, as transaction items
    ADVANCED = "advanced"  # result: the items (no pair: the envelope and watermark are in the arguments)
    ADVANCE_RAISED = "advance_raised"
    BEFORE_WAKE_UP = "before_wake_up"  # WakeUps.send: a deferred pair sent back to the queue
    WAKE_UP_SENT = "wake_up_sent"
    WAKE_UP_RAISED = "wake_up_raised"
    BEFORE_WOKEN_RUN = "before_woken_run"  # OrderedGate.run_woken: a woken pair run in place
    WOKEN = "woken"  # result: (DeliveryOutcome, Watermark | None)
    WOKEN_RUN_RAISED = "woken_run_raised"
    BEFORE_DELIVERY = "before_delivery"  # DurableConsumer.deliver: one pair of a message, to its outcome
    DELIVERED = "delivered"  # result: the DeliveryOutcome
    DELIVERY_RAISED = "delivery_raised"
    BEFORE_RECORD = "before_record"  # DurableConsumer.process_record: one SQS record (no pair: ids are "")
    RECORD_DONE = "record_done"
    RECORD_RAISED = "record_raised"
    BEFORE_EMIT_COMMIT = "before_emit_commit"  # EventStore: one attempt of an emit's transaction
    EMIT_COMMITTED = "emit_committed"  # result: None once committed, else why the emit tries again
    EMIT_COMMIT_RAISED = "emit_commit_raised"
    CHECK_READS_HEAD = "check_reads_head"  # verify_tenant read the rows and reads the chain head next: a point
    BEFORE_BATCH = "before_batch"  # DurableConsumer.handle: one invocation's batch (no pair: ids are "")
    BATCH_DONE = "batch_done"  # result: the partial batch response
    BATCH_RAISED = "batch_raised"  # the invocation failed as a whole


@dataclass(frozen=True)
class Around:
    """The three moments of one observed call."""

    before: Moment
    done: Moment
    raised: Moment


def _around(name: str, done: str) -> Around:
    return Around(Moment[f"BEFORE_{name}"], Moment[done], Moment[f"{name}_RAISED"])


# Each observed call of the engine, by its Step-like name.
AROUND: Mapping[str, Around] = {
    "claim": _around("CLAIM", "CLAIMED"),
    "run": _around("RUN", "RAN"),
    "commit": Around(Moment.BEFORE_COMPLETION, Moment.COMPLETED, Moment.COMPLETION_RAISED),
    "commit_directly": Around(Moment.BEFORE_DIRECT_COMMIT, Moment.DIRECT_COMMIT_DONE, Moment.DIRECT_COMMIT_RAISED),
    "fail_directly": Around(Moment.BEFORE_DIRECT_FAILURE, Moment.DIRECT_FAILED, Moment.DIRECT_FAILURE_RAISED),
    "run_directly": _around("DIRECT_RUN", "DIRECT_RAN"),
    "apply_directly": _around("DIRECT_APPLY", "DIRECT_APPLIED"),
    "place": Around(Moment.BEFORE_PLACING, Moment.PLACED, Moment.PLACING_RAISED),
    "advance": _around("ADVANCE", "ADVANCED"),
    "release": _around("RELEASE", "RELEASED"),
    "die": Around(Moment.BEFORE_DEATH, Moment.DEAD, Moment.DEATH_RAISED),
    "defer": Around(Moment.BEFORE_DEFERRAL, Moment.DEFERRED, Moment.DEFERRAL_RAISED),
    "forgive": Around(Moment.BEFORE_FORGIVENESS, Moment.FORGIVEN, Moment.FORGIVENESS_RAISED),
    "wake": _around("WAKE_UP", "WAKE_UP_SENT"),
    "run_woken": _around("WOKEN_RUN", "WOKEN"),
    "deliver": _around("DELIVERY", "DELIVERED"),
    "read_record": _around("RECORD", "RECORD_DONE"),
    "handle": _around("BATCH", "BATCH_DONE"),
    "commit_emit": Around(Moment.BEFORE_EMIT_COMMIT, Moment.EMIT_COMMITTED, Moment.EMIT_COMMIT_RAISED),
}


@dataclass(frozen=True)
class Detail:
    """The call a moment belongs to: the engine object whose call it is (``by``: an ``Inbox``, a ``Run``,
    a ``DurableConsumer``...), its arguments by parameter name (defaults filled in), and, once it ended, what it
    returned or raised."""

    by: Any
    arguments: Mapping[str, Any] = field(default_factory=dict)
    result: Any = None
    error: BaseException | None = None


@dataclass(frozen=True)
class Happening:
    """One moment of one pair's run."""

    moment: Moment
    event_id: str  # "" where the moment is no one pair's (a record read, a batch)
    subscription: str
    detail: Detail

    @property
    def key(self) -> str:
        """The pair's idempotency key (``event_id:subscription``)."""
        return keys.idempotency_key(self.event_id, self.subscription)


class Observer(Protocol):
    """Told of each happening; raising makes it a fault point."""

    def __call__(self, happening: Happening, /) -> None: ...


_lock = threading.Lock()
_observers: tuple[Observer, ...] = ()  # the first registered is the innermost


@contextmanager
def observing(observer: Observer) -> Iterator[Observer]:
    """Tell ``observer`` of every happening inside the block (process-wide: every thread's), outermost of those
    registered before it."""
    global _observers
    with _lock:
        _observers = (*_observers, observer)
    try:
        yield observer
    finally:
        with _lock:
            last = max(i for i, o in enumerate(_observers) if o is observer)
            _observers = _observers[:last] + _observers[last + 1 :]


def point(moment: Moment, by: Any, **arguments: Any) -> None:
    """A moment inside a call, with no end of its own: told outermost first, as a call's start is."""
    observers = _observers
    if not observers:
        return
    event_id, subscription = _pair_of(arguments)
    happening = Happening(moment, event_id, subscription, Detail(by, arguments))
    for observer in reversed(observers):
        observer(happening)


P = ParamSpec("P")
R = TypeVar("R")


def observed(around: Around) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Make an engine method an observed call: its observers are told of ``around``'s moments."""

    def decorate(method: Callable[P, R]) -> Callable[P, R]:
        signature = inspect.signature(method)

        @functools.wraps(method)
        def call(*args: P.args, **kwargs: P.kwargs) -> R:
            observers = _observers
            if not observers:
                return method(*args, **kwargs)
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            by, *_ = bound.arguments.values()
            arguments = dict(list(bound.arguments.items())[1:])
            event_id, subscription = _pair_of(arguments, by)

            def tell(
                observer: Observer, moment: Moment, result: Any = None, error: BaseException | None = None
            ) -> None:
                observer(Happening(moment, event_id, subscription, Detail(by, arguments, result, error)))

            def nest(inner: Callable[[], R], observer: Observer) -> Callable[[], R]:
                def outer() -> R:
                    tell(observer, around.before)
                    try:
                        result = inner()
                    except BaseException as exc:
                        tell(observer, around.raised, error=exc)
                        raise
                    tell(observer, around.done, result)
                    return result

                return outer

            run: Callable[[], R] = functools.partial(method, *args, **kwargs)
            for observer in observers:
                run = nest(run, observer)
            return run()

        call.observed = around  # type: ignore[attr-defined]  # which moments it tells (pinned by the tests)
        return call

    return decorate


def _pair_of(arguments: Mapping[str, Any], by: Any = None) -> tuple[str, str]:
    """The (event id, subscription) a call is about, read from the engine's own names for its arguments; else the
    pair of the run whose call it is (``by``: a ``Run``'s moments are its pair's)."""
    for name in ("claim", "ready", "deferred"):
        waiting = arguments.get(name)
        if waiting is not None:
            subscription = arguments.get("subscription", waiting.subscription)
            return waiting.event_id, getattr(subscription, "name", subscription)
    run = arguments.get("run")
    pair = arguments.get("pair") or getattr(run, "pair", None)
    if pair is not None:
        return pair.envelope.id, pair.subscription.name
    envelope, subscription = arguments.get("envelope"), arguments.get("subscription")
    if envelope is not None and subscription is not None:
        return envelope.id, getattr(subscription, "name", subscription)
    pair = getattr(by, "pair", None)
    if pair is not None:
        return pair.envelope.id, pair.subscription.name
    return "", ""
