"""Invariant 21, the WORKFLOW lane (a schedule with the shipping workflow, ``sim.ship``): a pair is handed to one
durable execution per attempt, and every pair's execution ends in the outcome its end says.

Read from what the local durable service ran (each execution's name, the pair and attempt of its input, its status:
``World.workflow_executions``) and from the inbox's claim rows, once the run has settled (every execution answered,
``simulation.workflows``):

- at most one execution per (pair, attempt), named as ``outbox.workflows.execution_name`` names that attempt;
- no execution left running, and none that no claim names (the pair's last execution, or one its history keeps);
- every logged item's ``sim.ship`` pair has its outcome: COMPLETED by an execution that SUCCEEDED (its packing
  step run once), or DEAD with its dead letter (the operator told) by one that FAILED, TIMED_OUT or was STOPPED, or
  by starts that failed every attempt; never a claim that names an execution of another attempt than its own, and
  never an outcome its execution's end contradicts. Once the inbox's retention has passed, a completed pair may be
  forgotten (no claim, or a dead letter "unverifiable" beside an execution that succeeded);
- no attempt given back for a start that applied (``check_given_back``, from the inbox's stream: the runner
  checks it at the end): the local durable service loses a start's answer only after the start applied, so the
  look-up by its name that follows finds it, and the attempt goes on; giving it back spends an attempt on work
  that is running, and a pair whose every answer is lost would be made dead as exhausted while it succeeds.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from outbox.workflows import execution_name
from simulation.catalog import ITEM_CREATED, SHIP
from simulation.invariants.base import Violation, name_of
from simulation.state import State
from simulation.world import World

WORKFLOWS = 21
# What the engine's record of the local durable service's lost answer (a 500 once the start applied) names, as a
# claim's last_error (``outbox.redaction.describe_failure`` of the Invoke's ClientError, redacted or in full).
LOST_START_ANSWER = ("ServiceException", "Invoke")
ENDED_FAILING = frozenset({"FAILED", "TIMED_OUT", "STOPPED"})


def check_workflows(world: World, state: State) -> list[Violation]:
    if not world.schedule.workflow:
        return []
    found: list[Violation] = []
    by_attempt: dict[tuple[str, int], list[str]] = defaultdict(list)
    by_arn = {}
    for name, arn, key, attempt, status in world.workflow_executions:
        by_attempt[key, attempt].append(name)
        by_arn[arn] = (name, key, attempt, status)
        event_id, _, subscription = key.partition(":")
        if name != execution_name(event_id, subscription, attempt):
            found.append(_v(f"{name_of(world, key)}: the execution {name} carries the input of attempt {attempt}"))
        if status not in ENDED_FAILING | {"SUCCEEDED"}:
            found.append(_v(f"{name_of(world, key)}: its execution {name} is {status} once the run settled"))
        if status == "SUCCEEDED" and world.workflow_packed[arn] != 1:
            found.append(
                _v(f"{name_of(world, key)}: its execution {name} succeeded having packed {world.workflow_packed[arn]}")
            )
    for (key, attempt), names in sorted(by_attempt.items()):
        if len(names) > 1:
            found.append(
                _v(f"{name_of(world, key)}: {len(names)} executions of attempt {attempt}: {', '.join(sorted(names))}")
            )
    letters = state.open_dead_letters()
    for envelope in sorted(state.events.values(), key=lambda e: (e.tenant, e.seq)):
        if envelope.type != ITEM_CREATED:
            continue
        key = f"{envelope.id}:{SHIP}"
        found.extend(_outcome(world, key, state.claims.get(key), letters.get(key), by_arn))
    found.extend(_every_execution_named(world, state, by_arn))
    return found


def _outcome(
    world: World, key: str, claim: dict[str, Any] | None, letter: Any, by_arn: dict[str, tuple[str, str, int, str]]
) -> list[Violation]:
    name = name_of(world, key)
    succeeded = any(k == key and status == "SUCCEEDED" for _, k, _, status in by_arn.values())
    if claim is None:
        if world.retention_passed and succeeded:
            return []  # completed, then forgotten by the inbox
        return [_v(f"{name}: no claim, and no outcome")]
    status = claim["status"]["S"]
    arn = claim.get("execution_arn", {}).get("S")
    execution = by_arn.get(arn) if arn is not None else None
    if execution is not None:
        attempt = int(claim.get("workflow_attempt", {}).get("N", "1"))
        if execution[2] != attempt:
            return [_v(f"{name}: its claim (attempt {attempt}) names {execution[0]}, an execution of another attempt")]
    if status == "COMPLETED":
        if execution is None or execution[3] != "SUCCEEDED":
            ended = "no execution" if execution is None else f"{execution[0]}, which ended {execution[3]}"
            return [_v(f"{name}: COMPLETED, but its claim names {ended}")]
        return []
    if status == "DEAD":
        if letter is None:
            return [_v(f"{name}: DEAD without an open dead letter: nothing tells the operator")]
        if letter.reason == "unverifiable" and world.retention_passed and succeeded:
            return []  # completed, forgotten, then refused as unverifiable when a late message came
        if execution is not None and execution[3] not in ENDED_FAILING:
            return [_v(f"{name}: DEAD, but its execution {execution[0]} ended {execution[3]}")]
        if execution is None and arn is not None:
            return [_v(f"{name}: DEAD, naming an execution the service never ran ({arn})")]
        return []
    return [_v(f"{name}: {status} once the run settled: its execution's end was never brought back")]


def _every_execution_named(world: World, state: State, by_arn: dict[str, tuple[str, str, int, str]]) -> list[Violation]:
    """Every execution is its pair's: the claim names it, or keeps it in its history (a replay's predecessor)."""
    named: set[str] = set()
    remembered: set[str] = set()  # pairs whose claim still names an execution (not forgotten past the retention)
    for key, claim in state.claims.items():
        if not key.endswith(f":{SHIP}") or "execution_arn" not in claim:
            continue
        remembered.add(key)
        named.add(claim["execution_arn"]["S"])
        named.update(item["S"] for item in claim.get("execution_history", {}).get("L", []))
    return [
        _v(f"{name_of(world, key)}: the execution {name} was started, and no claim names it")
        for arn, (name, key, _, _) in sorted(by_arn.items(), key=lambda item: item[1][0])
        if arn not in named and (key in remembered or not world.retention_passed)
    ]


def _v(message: str) -> Violation:
    return Violation(WORKFLOWS, message)


def check_given_back(world: World, given_back: tuple[tuple[str, str], ...]) -> list[Violation]:
    """Each ``sim.ship`` attempt given back (``simulation.reach``: the pair's key and the last_error the release
    wrote) for a start whose answer was lost after it applied."""
    if not world.schedule.workflow:
        return []
    return [
        _v(f"{name_of(world, key)}: its attempt was given back after a start that applied ({error})")
        for key, error in given_back
        if key.endswith(f":{SHIP}") and all(word in error for word in LOST_START_ANSWER)
    ]
