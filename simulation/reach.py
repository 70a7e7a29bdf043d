"""Reach coverage: which transitions of a pair's state machine (``outbox.pairs.machine``) a run reached, and
whether every change the engine made to a pair was one of them.

Observed, not told: the simulated stack's inbox table gets a DynamoDB stream (``with_inbox_stream``: the table as
the engine deploys it, plus a stream of its old and new images), and at the end of the run every change of a
claim row and every conflict letter is read back from it, in order. Nothing in the engine knows it is watched.

A change of a claim row from one state to another is the transition of the machine that leaves that state for the
other; where two steps do (a lapsed lease taken over, a lease given back), the row's owner tells them apart. A
conflict letter is the CONFLICT step of the pair's state at that moment. A change that no transition makes is a
violation (invariant 20): the engine wrote what its own machine says cannot happen. Steps that write nothing are
not seen here (a duplicate that finds its pair done, a wake-up, which sends a message and leaves the row as it
is); ``UNSEEN`` names them, and ``NOT_DRAWN`` names the transitions no schedule draws, each with its reason:
every other transition must be reached by the CI seeds (tests/simulation/test_simulation.py).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any, Final

from outbox.local.runtime import LocalRuntime
from outbox.local.template import StackSpec
from outbox.outputs import StackOutput
from outbox.pairs.machine import TRANSITIONS, State, Step

Transition = tuple[State, Step]

STREAM_VIEW = "NEW_AND_OLD_IMAGES"

# Steps that leave their claim row as it is: no change of the row shows them.
UNSEEN: Final[dict[Transition, str]] = {
    (State.COMPLETED, Step.CLAIM): "a duplicate finds the pair done: its claim is refused, nothing is written",
    (State.SKIPPED, Step.CLAIM): "a duplicate finds the pair skipped: its claim is refused, nothing is written",
    (State.HANDED, Step.CLAIM): "a duplicate finds the pair handed to a workflow: nothing is written",
    (State.DEFERRED, Step.WAKE): "a wake-up sends the event again and leaves the row DEFERRED",
    (State.SKIPPED, Step.SKIP): "a rerun of a skip sends its wake-up again and leaves the row SKIPPED",
    (State.PENDING, Step.RECONCILE): "reconcile re-sends a pair that has a row without writing it",
    (State.REPLAYING, Step.RECONCILE): "reconcile re-sends a pair that has a row without writing it",
    (State.DEFERRED, Step.RECONCILE): "reconcile re-sends a pair that has a row without writing it",
    (State.REPLAYING, Step.REPLAY): "a replay re-sends a pair already on its way as it is, without writing it",
    (State.DEFERRED, Step.REPLAY): "a replay re-sends a pair deferred out of its order as it is, without writing it",
}
# Transitions of the machine that the simulator draws no schedule for, and why.
NOT_DRAWN: Final[dict[Transition, str]] = {
    # Weak spots: no schedule of seeds 1..150 reaches these (docs/simulation.md, "Reach").
    (State.COMPLETED, Step.REPLAY): "no schedule reaches it yet: the forced replays drawn are of applied ledger "
    "pairs, which the direct path completed with a marker the replay refuses or rewrites",
    (State.COMPLETED, Step.SKIP): "no schedule reaches it yet: a skip in an order of a pair completed before the "
    "order started (a deploy that makes a subscription ordered, then a skip of an event from before the switch)",
    (State.REPLAYING, Step.CONFLICT): "no schedule reaches it yet: a copy with other content while a repair's "
    "message is on its way",
    (State.SKIPPED, Step.CONFLICT): "no schedule reaches it yet: a copy with other content of a skipped event",
    (State.HANDED, Step.CONFLICT): "no schedule reaches it yet: a copy with other content of an event whose "
    "sim.ship pair is handed (conflicting_copy follows a crash that left a claim waiting, not a hand-off)",
}


def with_inbox_stream(stack: StackSpec) -> StackSpec:
    """``stack`` with a stream on its inbox table: the simulator's window on every change of a pair."""
    inbox = stack.output_reference(StackOutput.INBOX_TABLE).logical_id
    tables = {**stack.tables, inbox: replace(stack.tables[inbox], stream_view_type=STREAM_VIEW)}
    return replace(stack, tables=tables)


@dataclass(frozen=True)
class Reach:
    """What one run reached: each transition, how often; and the changes no transition makes."""

    transitions: Counter[Transition]
    forbidden: tuple[str, ...]
    given_back: tuple[tuple[str, str], ...] = ()  # each lease given back (RELEASE): the pair's key, its last_error


def reach_of(runtime: LocalRuntime, name: Callable[[str], str] = str) -> Reach:
    """What the run reached; ``name`` names a pair (``<event id>:<subscription>``) in a violation."""
    reached: Counter[Transition] = Counter()
    forbidden = []
    given_back = []
    states: dict[str, State] = {}  # claim key -> its state as of the change read last
    for change in _changes(runtime):
        keys = change["Keys"]
        pk, sk = keys["pk"]["S"], keys["sk"]["S"]
        if pk.startswith("CLAIM#"):
            key = f"{pk.removeprefix('CLAIM#')}:{sk}"
            old, new = change.get("OldImage"), change.get("NewImage")
            before, after = _state(old), _state(new)
            states[key] = after
            if new is None:  # forgotten (the TTL sweep): not a step of the machine
                continue
            steps = _steps(before, after, old, new)
            if steps is None:
                forbidden.append(f"{name(key)}: {before} -> {after}, which no transition of the machine makes")
            reached.update((before, step) for step in steps or ())
            if steps and Step.RELEASE in steps:
                given_back.append((key, _attribute(new, "last_error") or ""))
        elif "#CONFLICT#" in sk and change.get("OldImage") is None:
            event_id, subscription = sk.split("#CONFLICT#")[0].split("#", 1)
            reached[(states.get(f"{event_id}:{subscription}", State.ABSENT), Step.CONFLICT)] += 1
    return Reach(reached, tuple(forbidden), tuple(given_back))


def _changes(runtime: LocalRuntime) -> Iterator[dict[str, Any]]:
    """Every change of the inbox table, in the order the stream holds them (one shard per table here)."""
    streams = runtime.client("dynamodbstreams")
    inbox = runtime.stack.output_reference(StackOutput.INBOX_TABLE).logical_id
    arn = runtime.resources.stream_arns[inbox]
    for shard in streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"]:
        iterator = streams.get_shard_iterator(
            StreamArn=arn, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        while iterator:
            page = streams.get_records(ShardIterator=iterator, Limit=1000)
            if not page["Records"]:
                break
            yield from (record["dynamodb"] for record in page["Records"])
            iterator = page.get("NextShardIterator")


def _state(image: Mapping[str, Any] | None) -> State:
    return State.ABSENT if image is None else State(image["status"]["S"])


def _steps(
    before: State, after: State, old: Mapping[str, Any] | None, new: Mapping[str, Any]
) -> tuple[Step, ...] | None:
    """The step(s) that made this change; None: no transition of the machine does."""
    if before is after is State.PENDING and old is not None:
        if _attribute(old, "owner") == _attribute(new, "owner"):
            return (Step.RELEASE,)
        if _attribute(old, "lease_expires_at") == "0":
            return (Step.CLAIM,)  # a lease given back (released at the epoch), taken by the next delivery
        return (Step.LAPSE, Step.CLAIM)  # a lease that ran out under its owner, taken over by another delivery
    if before is after:
        if old is not None and _attribute(old, "replayed_at") != _attribute(new, "replayed_at"):
            return (Step.REPLAY,)  # a replay re-sent it as it is (its attempts start over)
        return ()  # the same state, rewritten (an attempt given back): no step of the machine
    steps = [step for (state, step), to in TRANSITIONS.items() if state is before and to is after]
    if len(steps) > 1:  # dead: as a terminal failure or exhausted, or as a repair's message it no longer runs
        left_out = _attribute(new, "dead_reason") == "left_out"
        steps = [Step.LEAVE_OUT] if left_out else [step for step in steps if step is not Step.LEAVE_OUT]
    return tuple(steps) or None


def _attribute(image: Mapping[str, Any], name: str) -> str | None:
    value = image.get(name)
    return None if value is None else next(iter(value.values()))


def reachable() -> set[Transition]:
    """The transitions the CI seeds must reach: every one of the machine, but those no row change shows and those
    no schedule draws."""
    return set(TRANSITIONS) - set(UNSEEN) - set(NOT_DRAWN)
