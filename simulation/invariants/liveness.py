"""Invariant 19, liveness: once the schedule's faults stop, the pipeline gets somewhere on its own.

Checked when the drain ends (the pipeline idle, no fault fires any more), before the operator's settling acts on
anything: a safety invariant checked at the end cannot tell work the pipeline finished from work an operator's
reconcile or replay finished for it, and that is exactly what is lost when an acknowledged message was never run,
a wake-up was swallowed or a completion left its pair open.

At that moment:

- no message sits in a lane queue (visible, in flight or delayed): the pipeline went idle with nothing owed;
- every (event, durable subscription) pair the deployed catalog runs has an outcome (done, skipped, dead with its
  letter, or waiting in its order behind such a pair: ``completeness.expected_missing`` reads the tables the same
  way), or the operator has been told: its message sits in an alarmed dead-letter queue, an injected fault lost
  it (or the message that owed it its wake-up) for good, or SQS may have honoured a first worker's rightful
  delete with an older receipt handle after a second worker received the message again and failed it (the
  completeness pass's alarm is what names these; invariant 18 holds the pass to that), or ``outbox status``
  names the order it waits in as held up by another pair, with the command that moves it on;
- the pipeline went idle within a bound the stack's settings give (every attempt of a message, each a visibility
  timeout after the last, and the pipe's retries): time spent past it is a loop, not progress.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

from outbox.exceptions import EnvelopeParseError
from outbox.inbox import VOUCH_MARGIN
from outbox.messages import parse_body
from outbox.ops import Topology, order_status
from outbox.ops.completeness import catalog_data, catalog_from_data
from outbox.ops.context import OperatorContext
from outbox.pairs import Route
from outbox.subscriptions import Lane
from simulation.invariants.base import Violation
from simulation.invariants.completeness import expected_missing
from simulation.state import State, queue_bodies
from simulation.world import World

LIVENESS = 19


def liveness_bound(
    visibility_timeout: timedelta, max_receives: int, pipe_max_age: timedelta, messages: int
) -> timedelta:
    """How long the pipeline may take to go idle once the faults stop: the relay's records are sent or discarded
    within the pipe's maximum record age, and each message the consumer took is done or dead-lettered within its
    receives, each a visibility timeout after the last (a FIFO group takes its messages one after another, so in
    the worst case they add up)."""
    return pipe_max_age + visibility_timeout * max_receives * (messages + 1)


def check_liveness(
    world: World, state: State, topology: Topology, idle_after: timedelta, bound: timedelta
) -> list[Violation]:
    violations = [
        Violation(LIVENESS, f"{count} message(s) sit in {url.rsplit('/', 1)[1]} after the pipeline went idle")
        for url, count in sorted(_lane_depths(state, topology).items())
        if count
    ]
    if idle_after > bound:
        violations.append(
            Violation(
                LIVENESS,
                f"the pipeline went idle {idle_after} after its last fault, past the bound of {bound}: a loop",
            )
        )
    if world.catalog is None or world.reader is None:
        return violations
    horizon = world.trace_clock() - topology.inbox_retention + VOUCH_MARGIN
    told = _told(world, state, topology)
    for event_id, subscription in sorted(expected_missing(world, state, horizon)):
        row = state.claims.get(f"{event_id}:{subscription}")
        if _told_of(told, state, event_id, subscription, row):
            continue
        status = row["status"]["S"] if row else "no claim"
        violations.append(
            Violation(
                LIVENESS,
                f"{world.trace.key(f'{event_id}:{subscription}')} has no outcome ({status}) once the faults stopped,"
                " and nothing tells the operator",
            )
        )
    return violations


def _told_of(told: _Told, state: State, event_id: str, subscription: str, row: dict[str, Any] | None) -> bool:
    """Whether the operator has been told of this pair: its message is dead-lettered or was lost, it is named by
    status, or it is deferred behind an event whose message, with the wake-up it owed this pair, a fault lost for
    good (the completeness pass names it then) or that sits in the alarmed dead-letter queue (a wake-up SQS refused
    fails that message, which had used its receives up: the redrive it alarms for runs it again, finds its event
    applied and wakes this one; status says the wake-up may be in the DLQ). A wake-up's debt goes with its message."""
    if event_id in told.lost or event_id in told.dead_lettered or (event_id, subscription) in told.named:
        return True
    if (event_id, subscription) in told.left_out:
        return True
    if row is None or row["status"]["S"] != "DEFERRED" or "waits_for" not in row:
        return False
    envelope = state.events.get(event_id)
    if envelope is None:
        return False
    waits_for = int(row["waits_for"]["N"])
    predecessor = next((e for e in state.logs.get(envelope.tenant, []) if e.seq == waits_for), None)
    return predecessor is not None and (predecessor.id in told.lost or predecessor.id in told.dead_lettered)


def _lane_depths(state: State, topology: Topology) -> dict[str, int]:
    lanes = [topology.durable_queue_url, topology.record_change_queue_url]
    return {url: state.queue_depths.get(url, 0) for url in lanes if url}


class _Told:
    """What the operator has been told about pairs with no outcome."""

    def __init__(self) -> None:
        self.lost: set[str] = set()  # event ids whose message a fault lost for good (the completeness pass's)
        self.dead_lettered: set[str] = set()  # event ids whose message sits in the alarmed DLQ
        self.named: set[tuple[str, str]] = set()  # (event id, subscription) of orders status names as held up
        # Pairs under way when a deploy left them out (the deployed catalog no longer runs them): the deploy's
        # decision, which the completeness pass's alarm names and the runbook's window reconcile makes dead.
        self.left_out: set[tuple[str, str]] = set()


def _told(world: World, state: State, topology: Topology) -> _Told:
    told = _Told()
    told.lost = set(world.lost_messages) | set(world.stale_deletes)
    for body in queue_bodies(topology.durable_dlq_url):
        event_id = _event_id(body)
        if event_id is not None:
            told.dead_lettered.add(event_id)
    told.named = _named_by_status(world, state, topology)
    told.left_out = _left_out_by_a_deploy(world, state)
    return told


def _event_id(body: str) -> str | None:
    """The event a dead-lettered body carries (a stream image, as the pipe forwards it), if it is one."""
    try:
        return parse_body(body).id
    except EnvelopeParseError:
        return None


def _named_by_status(world: World, state: State, topology: Topology) -> set[tuple[str, str]]:
    """The deferred pairs of an order ``outbox status`` names as held up, with the command that moves it on: the
    operator is told. Those behind the pair status names as holding the order up (that pair is judged on its own:
    dead, it has its letter; waiting for a wake-up that never comes, it is the loss looked for), and that pair too
    when a deploy took it out of its order (unordered now, or left out: no wake-up will come, by design)."""
    assert world.catalog is not None
    assert world.reader is not None
    context = OperatorContext(
        replace(topology),
        dynamodb=world.reader,
        sqs=None,
        catalog=catalog_from_data(catalog_data(world.catalog)),
        clock=world.trace_clock,
    )
    blocked = order_status.blocked(context, list(world.schedule.tenants))
    held = {(b.tenant, b.subscription): b.waits_for_seq for b in blocked if b.hint}
    events = state.events
    named = set()
    for key, row in state.claims.items():
        event_id, _, subscription = key.partition(":")
        envelope = events.get(event_id)
        if row["status"]["S"] != "DEFERRED" or envelope is None or (envelope.tenant, subscription) not in held:
            continue
        if envelope.seq != held[envelope.tenant, subscription]:
            named.add((event_id, subscription))
            continue
        place = context.placement(envelope.tenant, envelope.seq, envelope.type, subscription)
        if place.route is not Route.IN_ORDER:
            named.add((event_id, subscription))
    return named


def _left_out_by_a_deploy(world: World, state: State) -> set[tuple[str, str]]:
    """The pairs with a claim whose subscription the deployed catalog no longer runs for their event."""
    assert world.catalog is not None
    if world.deployed_at is None:
        return set()
    durable = [s for s in world.catalog.registry.subscriptions if s.lane in (Lane.DURABLE, Lane.WORKFLOW)]
    events = state.events
    left = set()
    for key in state.claims:
        event_id, _, name = key.partition(":")
        envelope = events.get(event_id)
        if envelope is not None and not any(s.name == name and s.matches(envelope.type) for s in durable):
            left.add((event_id, name))
    return left
