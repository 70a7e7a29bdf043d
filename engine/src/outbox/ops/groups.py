"""Failure groups: open dead letters grouped the way an operator thinks of them, by subscription, failure
(the dead letter's reason and error type) and where it was raised (the recorded, redacted description),
across tenants; and the repairs of a whole group, ``replay_group`` and ``skip_group``.

A group's id is a digest of what defines it, not a row anywhere: the same failure has the same id in every
listing, from the CLI or the operator endpoint, today and next week, so ``outbox replay --group ID`` acts on
what ``outbox dead-letters groups`` showed. A repair of a group reruns or skips each of its pairs by the
rules of one pair (``outbox.ops.replay``, ``outbox.ops.ordering.skip``); run again, it finds the pairs it
already repaired resolved and leaves them alone.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Collection, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any, Final

from botocore.exceptions import ClientError

from outbox.exceptions import OperationRefusedError
from outbox.inbox import DeadLetter, DeadReason
from outbox.log.envelope import format_timestamp
from outbox.ops.completeness import MissingPair, completeness_state
from outbox.ops.context import (
    OperatorContext,
    ProgressCallback,
    no_progress,
    resolved_letter_update,
)
from outbox.ops.ordering import skip as skip_pair
from outbox.ops.replay import ReplayItem, dead_work, replay

GROUP_ID_PREFIX: Final = "g-"
GROUP_ID_HEX: Final = 10
# What varies from one event to the next inside a message written for the operator (a TerminalError's: "no
# capacity for order 4711"): ids, hashes and digests, then numbers. A failure's place (file.py:41 in book) is kept
# as it is.
EVENT_ID: Final = re.compile(r"\b[0-9A-HJKMNP-TV-Z]{26}\b")
UUID: Final = re.compile(r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b")
# A sha256 (an event's hash, a claim's digest) and the like: blanking its digits alone would leave its letters,
# other in every letter. At least one letter: a long number is blanked as a number, as it always was.
HASH: Final = re.compile(r"\b(?=[0-9]*[a-fA-F])[0-9a-fA-F]{16,}\b")
NUMBER: Final = re.compile(r"\d+")
PLACE: Final = re.compile(r" at \S+:\d+ in \S+")
# A tenant's name is these characters (keys.TENANT_PATTERN): a longer name that starts with it is another tenant.
TENANT_CHARACTERS: Final = r"A-Za-z0-9_.\-"


@dataclass(frozen=True)
class FailureKey:
    """What makes two dead letters one failure."""

    subscription: str
    reason: str  # exhausted, terminal, conflict, unverifiable
    error_type: str
    where: str  # the recorded description with what varies per event blanked

    @property
    def id(self) -> str:
        text = "\0".join((self.subscription, self.reason, self.error_type, self.where))
        return GROUP_ID_PREFIX + hashlib.sha256(text.encode()).hexdigest()[:GROUP_ID_HEX]


def failure_key(letter: DeadLetter) -> FailureKey:
    where = _blank_what_varies(letter.error, _named_tenant(letter))
    return FailureKey(letter.subscription, letter.reason, letter.error_type, where)


def _named_tenant(letter: DeadLetter) -> str | None:
    """The letter's tenant, for a conflict letter only: the engine writes those texts ("seq 3 of tenant acme"), and
    one incident across tenants is one group. A handler's text is left as it is, and so is its group's id."""
    return letter.tenant if letter.reason == DeadReason.CONFLICT else None


def _blank_what_varies(description: str, tenant: str | None = None) -> str:
    places = PLACE.findall(description)
    text = PLACE.sub("\0", description)
    if tenant is not None:
        # Where the text says "tenant <name>", not wherever the name occurs: a short name ("at", "no") is a word of
        # the text too. Before the numbers: a name of digits is still the tenant's.
        text = re.sub(rf"\btenant {re.escape(tenant)}(?![{TENANT_CHARACTERS}])", "tenant <tenant>", text)
    text = NUMBER.sub("#", HASH.sub("<hash>", UUID.sub("<id>", EVENT_ID.sub("<event>", text))))
    for place in places:  # the place where it was raised, line number included, stays as recorded
        text = text.replace("\0", place, 1)
    return text


@dataclass(frozen=True)
class FailureGroup:
    id: str
    subscription: str
    reason: str
    error_type: str
    where: str
    count: int
    tenants: list[str]
    first_seen: str
    last_seen: str
    example: DeadLetter | None  # None for a group of missing pairs, which have no dead letter
    # DEAD_LETTERS, or MISSING: pairs the completeness pass found with no outcome past its bound
    kind: str = "dead_letters"
    # A group of missing pairs: the command that repairs them (replay and skip --group act on dead letters only).
    command: str | None = None
    # A group of missing pairs: one of them, "<event id> (<tenant>)".
    sample: str = ""

    @property
    def repair(self) -> str:
        """The command that looks at what a repair of the group would do (for missing pairs, that repairs them)."""
        return self.command or f"outbox replay --group {self.id} --dry-run"

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "repair": self.repair}


def failure_groups(context: OperatorContext, *, tenant: str | None = None) -> list[FailureGroup]:
    """The open dead letters of every tenant (or one), grouped, the largest group first; then the pairs the last
    completeness pass found missing, a group of their own kind per subscription."""
    tenants = [context.require_tenant(tenant)] if tenant else context.tenants()
    found = _grouped(letter for name in tenants for letter in context.inbox.dead_letters(name))
    return found + missing_groups(pair for name in tenants for pair in completeness_state(context, name).missing)


MISSING_KIND: Final = "missing"
MISSING_WHERE: Final = "no outcome past the completeness bound: nothing ran, died or waits (outbox status)"


def missing_groups(pairs: Iterable[MissingPair]) -> list[FailureGroup]:
    """Missing pairs grouped by subscription, the largest group first. A group's repair is its pairs' command
    where they share one; else ``outbox status``, which names each pair's."""
    by_subscription: dict[str, list[MissingPair]] = {}
    for pair in pairs:
        by_subscription.setdefault(pair.subscription, []).append(pair)
    groups = []
    for subscription, members in by_subscription.items():
        members.sort(key=lambda pair: (pair.since, pair.tenant, pair.seq))
        commands = {pair.repair for pair in members}
        key = FailureKey(subscription, MISSING_KIND, "", MISSING_WHERE)
        groups.append(
            FailureGroup(
                id=key.id,
                subscription=subscription,
                reason=MISSING_KIND,
                error_type="",
                where=MISSING_WHERE,
                count=len(members),
                tenants=sorted({pair.tenant for pair in members}),
                first_seen=members[0].since,
                last_seen=members[-1].since,
                example=None,
                kind=MISSING_KIND,
                command=commands.pop() if len(commands) == 1 else "outbox status",
                sample=f"{members[-1].event_id} ({members[-1].tenant})",
            )
        )
    return sorted(groups, key=lambda group: (-group.count, group.subscription))


def _grouped(letters: Iterable[DeadLetter]) -> list[FailureGroup]:
    by_key: dict[FailureKey, list[DeadLetter]] = {}
    for letter in letters:
        by_key.setdefault(failure_key(letter), []).append(letter)
    groups = [_group(key, rows) for key, rows in by_key.items()]
    return sorted(groups, key=lambda group: (-group.count, group.subscription, group.id))


def _group(key: FailureKey, rows: list[DeadLetter]) -> FailureGroup:
    rows = sorted(rows, key=lambda row: (row.dead_at, row.tenant, row.event_seq))
    return FailureGroup(
        id=key.id,
        subscription=key.subscription,
        reason=key.reason,
        error_type=key.error_type,
        where=key.where,
        count=len(rows),
        tenants=sorted({row.tenant for row in rows}),
        first_seen=rows[0].dead_at,
        last_seen=rows[-1].dead_at,
        example=rows[-1],
    )


def group_letters(
    context: OperatorContext, group_id: str, only: Collection[GroupPair] | None = None
) -> list[DeadLetter]:
    """The open dead letters of ``group_id`` (of the pairs ``only`` names, where given: what an operator
    approved, not what died since). Empty when every one of them was repaired (a rerun of a group's repair);
    refused when no dead letter, open or resolved, was ever of that group."""
    letters = [row for name in context.tenants() for row in context.inbox.dead_letters(name, include_resolved=True)]
    members = [row for row in letters if failure_key(row).id == group_id]
    if not members:
        for group in missing_groups(p for name in context.tenants() for p in completeness_state(context, name).missing):
            if group.id == group_id:
                raise OperationRefusedError(
                    f"{group_id} is a group of missing pairs, which have no dead letter to replay or skip: "
                    f"{group.repair}"
                )
        raise OperationRefusedError(
            f"no failure group {group_id!r}: outbox dead-letters groups lists the groups and their ids"
        )
    approved = None if only is None else {(pair.event_id, pair.subscription) for pair in only}
    open_ = [
        r for r in members if r.resolved is None and (approved is None or (r.event_id, r.subscription) in approved)
    ]
    return sorted(open_, key=lambda row: (row.tenant, row.event_seq))


@dataclass(frozen=True)
class GroupPair:
    tenant: str
    event_id: str
    event_seq: int
    subscription: str

    @classmethod
    def of(cls, letter: DeadLetter) -> GroupPair:
        return cls(letter.tenant, letter.event_id, letter.event_seq, letter.subscription)


@dataclass(frozen=True)
class Refusal:
    pair: GroupPair
    why: str


@dataclass
class GroupRepair:
    """What a repair of a group did (or, dry, would do): ``planned`` the pairs it acts on; ``sent`` those it
    sent to the queue (replay: re-sent; skip: the deferred events a skip let go on); ``skipped`` those it did
    not run (replay: no longer dead by the time it came to them; skip: recorded as skipped, final);
    ``refused`` those it would not touch, each with why."""

    group: str
    action: str
    dry_run: bool
    planned: list[GroupPair] = field(default_factory=list)
    sent: list[GroupPair] = field(default_factory=list)
    skipped: list[GroupPair] = field(default_factory=list)
    refused: list[Refusal] = field(default_factory=list)

    @property
    def nothing_to_do(self) -> bool:
        return not self.planned and not self.refused

    def counts(self) -> dict[str, int]:
        return {
            "planned": len(self.planned),
            "sent": len(self.sent),
            "skipped": len(self.skipped),
            "refused": len(self.refused),
        }

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "counts": self.counts()}


def replay_group(
    context: OperatorContext,
    group_id: str,
    *,
    force: bool = False,
    dry_run: bool = False,
    only: Collection[GroupPair] | None = None,
    on_progress: ProgressCallback = no_progress,
) -> GroupRepair:
    """Rerun every dead pair of the group (of ``only``: the pairs a dry run showed), by replay's rules: an
    unverifiable pair is refused unless ``force``, a conflict is no dead work, a pair of a subscription the
    deployed catalog lacks would run nowhere."""
    outcome = GroupRepair(group_id, "replay", dry_run)
    items: list[ReplayItem] = []
    for letter in group_letters(context, group_id, only):
        work = dead_work(context, letter, force=force)
        if isinstance(work, ReplayItem):
            items.append(work)
            outcome.planned.append(GroupPair.of(letter))
        elif work is not None:
            outcome.refused.append(Refusal(GroupPair.of(letter), work))
        # None: no longer dead (a take-over completed it); nothing to do
    if dry_run or not items:
        return outcome
    result = replay(context, items, on_progress=on_progress)
    cleared = {(item.event_id, item.subscription) for item in result.cleared}
    for pair in outcome.planned:
        (outcome.sent if (pair.event_id, pair.subscription) in cleared else outcome.skipped).append(pair)
    return outcome


def skip_group(
    context: OperatorContext,
    group_id: str,
    *,
    by: str,
    reason: str,
    dry_run: bool = False,
    only: Collection[GroupPair] | None = None,
    on_progress: ProgressCallback = no_progress,
) -> GroupRepair:
    """Let every dead pair of the group (of ``only``) go without running: recorded with who and why, final (a
    replay never runs a skipped pair). An ordered subscription's pair is skipped as ``outbox skip`` skips it,
    in seq order, and only when it is next in its order (run again later for the rest: each skip sends the
    deferred event that waited for it back to the queue)."""
    if not by.strip() or not reason.strip():
        raise OperationRefusedError("a skip records who decided it and why: give --by and --reason")
    outcome = GroupRepair(group_id, "skip", dry_run)
    letters = group_letters(context, group_id, only)
    outcome.planned = [GroupPair.of(letter) for letter in letters]
    if dry_run:
        return outcome
    for done, letter in enumerate(letters, start=1):
        pair = GroupPair.of(letter)
        decision = f"skipped by {by} at {format_timestamp(context.now())}: {reason}"
        try:
            if letter.reason == DeadReason.CONFLICT:  # a record, not dead work: acknowledged
                _resolve_letter_only(context, letter, decision)
            else:
                # As ``outbox skip`` does, by the pair's rule: in its order, or acknowledged outside any.
                woke = skip_pair(context, pair.tenant, pair.subscription, pair.event_seq, by=by, reason=reason)
                if woke.woke_seq is not None:
                    outcome.sent.append(pair)
            outcome.skipped.append(pair)
        except OperationRefusedError as exc:
            outcome.refused.append(Refusal(pair, str(exc)))
        on_progress("skipping", done, len(letters))
    return outcome


def _resolve_letter_only(context: OperatorContext, letter: DeadLetter, decision: str) -> None:
    try:
        context.dynamodb.update_item(**resolved_letter_update(context, letter.key, decision))
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
            raise
        raise OperationRefusedError(f"{letter.event_id}:{letter.subscription} was resolved meanwhile") from exc
