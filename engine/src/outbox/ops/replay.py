"""Replay: rerun exactly the selected dead (event, subscription) pairs.

Each DEAD claim is turned REPLAYING (the row that vouches for the re-sent message, and carries the pair's
open dead letter), the event is re-sent from the events table naming only those subscriptions, and only
then are the dead letters resolved: an interrupted replay leaves REPLAYING rows with open dead letters,
which the next replay re-sends.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from botocore.exceptions import ClientError

from outbox import keys
from outbox.exceptions import NothingToDoError, OperationRefusedError
from outbox.inbox import COMPLETED, DEAD, DEFERRED, PENDING, REPLAYING, SKIPPED, ClaimRecord, DeadLetter, DeadReason
from outbox.inbox.rows import HANDED
from outbox.log.chain import read_event_rows
from outbox.log.envelope import ULID_PATTERN, format_timestamp
from outbox.ops.context import OperatorContext, ProgressCallback, no_progress, repair_dedup_id
from outbox.ops.ordering import order_book
from outbox.pairs import Act, Route

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReplayItem:
    tenant: str
    event_id: str
    event_seq: int
    subscription: str
    claim_status: str | None  # REPLAYING: a replay stopped after clearing the claim, before re-sending
    forced: bool = False  # a COMPLETED or unverifiable pair the operator asked to rerun (--force)
    event_type: str | None = None  # None: read from the log when the deployed catalog's answer needs it


@dataclass
class ReplayResult:
    cleared: list[ReplayItem] = field(default_factory=list)
    republished: list[str] = field(default_factory=list)  # event ids


def plan_replay(
    context: OperatorContext,
    *,
    tenant: str | None = None,
    event_ids: Iterable[str] = (),
    subscription: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    force: bool = False,
) -> list[ReplayItem]:
    """The (event, subscription) pairs a replay would rerun. Dead work is selected from the open dead
    letters of a tenant, or by event id. A COMPLETED pair (named by id) and a pair the inbox could not
    vouch for are refused unless ``force``: either may run an effect a second time."""
    ids = list(event_ids)
    _check_selection(context, ids, tenant, subscription, timed=since is not None or until is not None)
    if ids:
        selected = _replay_by_ids(context, ids, tenant, subscription, force)
    else:
        assert tenant is not None
        selected = _replay_dead_letters(context, tenant, subscription, since, until, force)
    items, left_out = _deployed_only(context, selected)
    if not items and left_out:
        raise OperationRefusedError(
            f"the selection's dead work is of pairs the deployed catalog no longer runs ({'; '.join(left_out)}): no "
            "consumer would run it, and its claims would wait for ever. Deploy the subscription again (or widen its "
            "pattern) to replay it, or acknowledge it without running: outbox skip --tenant T --subscription S "
            '--seq N (or --group ID) --reason "..."; its dead letters stay open until then (outbox dead-letters '
            "list shows them)"
        )
    if not items:
        raise NothingToDoError("the selection matches no dead work: nothing to replay")
    return items


def _deployed_only(context: OperatorContext, items: list[ReplayItem]) -> tuple[list[ReplayItem], list[str]]:
    """The items the deployed catalog runs, and why each of the others is left out (its subscription removed,
    renamed, narrowed, or moved off DURABLE: ``outbox.pairs``): a repair message naming one would run
    nothing (the consumer marks it dead again)."""
    kept, left_out = [], []
    for item in items:
        placement = context.placement(item.tenant, item.event_seq, item.event_type, item.subscription)
        if placement.route is Route.LEFT_OUT:
            left_out.append(f"{item.event_id}:{item.subscription}: {placement.left_out_because}")
        else:
            kept.append(item)
    if left_out and kept:
        logger.warning("replay leaves dead work the deployed catalog no longer runs: %s", left_out)
    return kept, sorted(set(left_out))


def _deployed(context: OperatorContext) -> set[str]:
    return {subscription.name for subscription in context.catalog.registry.subscriptions}


def _check_selection(
    context: OperatorContext, ids: list[str], tenant: str | None, subscription: str | None, *, timed: bool
) -> None:
    for event_id in ids:
        if not re.fullmatch(ULID_PATTERN, event_id):
            raise OperationRefusedError(f"{event_id!r} is not an event id (a 26-character ULID)")
    if ids and timed:
        raise OperationRefusedError(
            "--since/--until select a tenant's dead letters by time; with --event-id they would be ignored: "
            "give one or the other"
        )
    if subscription is not None and subscription not in _deployed(context):
        raise OperationRefusedError(
            f"unknown subscription {subscription!r}: the deployed catalog does not have it (outbox catalog lists "
            "them). If a deploy removed it, no consumer would run its dead work: deploy it again to replay it; its "
            "dead letters stay open until then"
        )
    if tenant is not None:
        context.require_tenant(tenant)
    if tenant is None and not ids:
        raise OperationRefusedError("select what to replay: a tenant, or one or more event ids")


def _replay_dead_letters(
    context: OperatorContext,
    tenant: str,
    subscription: str | None,
    since: datetime | None,
    until: datetime | None,
    force: bool,
) -> list[ReplayItem]:
    items, unverifiable = [], 0
    for letter in context.inbox.dead_letters(tenant, subscription=subscription, since=since, until=until):
        work = dead_work(context, letter, force=force, deployed_only=False)
        if isinstance(work, ReplayItem):
            items.append(work)
        elif work == UNVERIFIABLE:
            unverifiable += 1
    if not items and unverifiable:
        raise OperationRefusedError(
            f"{unverifiable} dead letter(s) of {tenant} are unverifiable: the inbox had forgotten whether they "
            "completed. Replay them with --force only if you know they did not run."
        )
    return items


UNVERIFIABLE = "unverifiable: the inbox had forgotten whether it completed (--force reruns it, if you know it did not)"
CONFLICT = "a conflict, not dead work: the event's original content already ran (skip acknowledges it)"


def dead_work(
    context: OperatorContext, letter: DeadLetter, *, force: bool, deployed_only: bool = True
) -> ReplayItem | str | None:
    """What a replay would do with one open dead letter: the pair to rerun; or why it refuses (a conflict, an
    unverifiable pair without ``force``, a subscription the deployed catalog lacks); or None when the pair is
    no longer dead (a take-over completed it, or it was skipped)."""
    if letter.reason == DeadReason.CONFLICT:
        return CONFLICT
    claim = context.inbox.read_claim(letter.event_id, letter.subscription)
    status = None if claim is None else claim.status
    if status not in (DEAD, REPLAYING):  # REPLAYING: a replay that stopped before it re-sent the event
        return None
    placement = context.placement(letter.tenant, letter.event_seq, letter.event_type, letter.subscription)
    if deployed_only and placement.rule(status).replay is Act.REFUSE:
        return f"{placement.why(status)}: no consumer would run it (deploy it again, or skip it to acknowledge it)"
    unverifiable = _dead_reason(claim) == DeadReason.UNVERIFIABLE
    if status == DEAD and unverifiable and not force:
        return UNVERIFIABLE
    return ReplayItem(
        letter.tenant,
        letter.event_id,
        letter.event_seq,
        letter.subscription,
        status,
        forced=unverifiable,
        event_type=letter.event_type,
    )


def _replay_by_ids(
    context: OperatorContext, ids: list[str], tenant: str | None, subscription: str | None, force: bool
) -> list[ReplayItem]:
    items = []
    for event_id in ids:
        claims = list(context.inbox.claims_of(event_id).values())
        if not claims:
            raise OperationRefusedError(f"event {event_id} has no claims: was it ever delivered? (try reconcile)")
        owner = claims[0].tenant
        if tenant is not None and owner != tenant:
            raise OperationRefusedError(f"event {event_id} belongs to tenant {owner!r}, not {tenant!r}")
        selected = [claim for claim in claims if subscription is None or claim.subscription == subscription]
        risky = [claim for claim in selected if _risky(claim)]
        if risky and not force:
            raise OperationRefusedError(_risky_refusal(event_id, risky, claims, subscription))
        for claim in selected:
            if claim.status == HANDED:  # its execution is its run: never a second one beside it (outbox.pairs)
                raise OperationRefusedError(
                    f"{event_id}:{claim.subscription} is handed to a workflow: its durable execution is running. Stop "
                    "it (aws lambda stop-durable-execution): its end makes the pair dead, and then it is replayed"
                )
            if claim.status in (PENDING, SKIPPED):
                continue  # in progress (the inbox will finish or take it over), or skipped: final
            seq = _event_seq(context, claim)
            if claim.status == COMPLETED:
                _refuse_if_applied_in_order(context, claim, seq)
            elif claim.status == DEFERRED:
                _refuse_if_waiting_in_order(context, claim, seq)
            items.append(
                ReplayItem(owner, event_id, seq, claim.subscription, claim.status, _risky(claim), claim.event_type)
            )
    return items


def _refuse_if_waiting_in_order(context: OperatorContext, claim: ClaimRecord, seq: int) -> None:
    """A DEFERRED pair still in its order waits for its predecessor, which its wake-up follows: a replay would
    only run it out of order. One a deploy took out of the order is re-sent (``outbox.pairs``: DEFERRED,
    UNORDERED); one left out of the catalog is refused with the others (``_deployed_only``)."""
    placement = context.placement(claim.tenant, seq, claim.event_type, claim.subscription)
    if placement.route is Route.IN_ORDER:
        raise OperationRefusedError(
            f"{claim.event_id}:{claim.subscription} waits in tenant {claim.tenant}'s order for seq {claim.waits_for}: "
            "it runs when that one is applied. outbox status says what holds the order up"
        )


def _risky(claim: ClaimRecord) -> bool:
    """A pair whose effect may have run: replaying it may run it again."""
    return claim.status == COMPLETED or _dead_reason(claim) == DeadReason.UNVERIFIABLE


def _risky_refusal(event_id: str, risky: list[ClaimRecord], claims: list[ClaimRecord], subscription: str | None) -> str:
    """Why the replay is refused, and the narrowest command that does what the operator needs: the event's
    dead pairs alone where it has any; --force only with what it would run again."""
    names = ", ".join(claim.subscription for claim in risky)
    what = "completed" if all(claim.status == COMPLETED for claim in risky) else "may have completed"
    message = f"event {event_id}: {names} {what}, and a replay would run {'it' if len(risky) == 1 else 'them'} again."
    dead = [c.subscription for c in claims if c.status in (DEAD, REPLAYING) and not _risky(c)]
    if dead and subscription is None:
        commands = "; ".join(f"outbox replay --event-id {event_id} --subscription {name}" for name in dead)
        message += f" To rerun only its dead work: {commands}."
    elif not dead:
        message += " Nothing of it is dead."
    return f"{message} Only if its effect must run again: add --force (reruns {names})."


def _refuse_if_applied_in_order(context: OperatorContext, claim: ClaimRecord, seq: int) -> None:
    """An ordered subscription applies each event of its order once, in seq order: its watermark has passed a
    completed pair, and the consumer would skip the replayed message. Refused instead of reported as
    republished (an event before the order's start is no part of it, and is replayed like any pair)."""
    if context.placement(claim.tenant, seq, claim.event_type, claim.subscription).route is not Route.IN_ORDER:
        return
    watermark = order_book(context).watermark(claim.tenant, claim.subscription)
    if watermark.applied_seq >= seq:
        raise OperationRefusedError(
            f"{claim.event_id}:{claim.subscription} was applied in tenant {claim.tenant}'s order (its watermark is "
            f"at seq {watermark.applied_seq}): an ordered subscription applies each event once, in order, so a "
            "replay would run nothing. To apply its effect again, emit a new event that does it."
        )


def replay(
    context: OperatorContext, items: list[ReplayItem], *, on_progress: ProgressCallback = no_progress
) -> ReplayResult:
    """Clear each selected claim (marking its dead letter as being replayed, in the same transaction),
    re-send each event naming only its selected subscriptions, then resolve the dead letters."""
    result = ReplayResult()
    now = context.now()
    for done, item in enumerate(items, start=1):
        allowed = (DEAD, COMPLETED) if item.forced else (DEAD,)
        # A DEFERRED pair out of its order since a deploy is claimable as it is: the consumer that claims it takes
        # its deferred row out of the order (an interrupted replay leaves the row, for status to name again).
        if item.claim_status in (DEFERRED, REPLAYING) or _clear_claim(context, item, allowed, now):
            result.cleared.append(item)
        on_progress("clearing claims", done, len(items))
    by_event: dict[tuple[str, int, str], list[str]] = {}
    for item in result.cleared:
        by_event.setdefault((item.tenant, item.event_seq, item.event_id), []).append(item.subscription)
    for done, ((tenant, seq, event_id), subscriptions) in enumerate(sorted(by_event.items()), start=1):
        context.publish(
            context.event_image(tenant, seq),
            tenant,
            repair_dedup_id("replay", event_id),
            targets=subscriptions,
            repair="replay",
        )
        result.republished.append(event_id)
        on_progress("re-sending events", done, len(by_event))
    for done, item in enumerate(result.cleared, start=1):
        _resolve_dead_letter(context, item.tenant, item.event_id, item.subscription, "replayed")
        on_progress("resolving dead letters", done, len(result.cleared))
    return result


def _clear_claim(context: OperatorContext, item: ReplayItem, allowed: tuple[str, ...], now: datetime) -> bool:
    """Turn the claim into REPLAYING: claimable by the next delivery, and carrying the pair's open dead
    letter, which the completion resolves in its own transaction. An interrupted replay loses nothing
    (the row stays REPLAYING, and the next replay re-sends it) and done work never stays open work."""
    values: dict[str, Any] = {f":s{i}": {"S": status} for i, status in enumerate(allowed)}
    values.update({":replaying": {"S": REPLAYING}, ":zero": {"N": "0"}, ":now": {"S": format_timestamp(now)}})
    sets = "SET #status = :replaying, attempts = :zero, replayed_at = :now"
    removes = "REMOVE #owner, lease_expires_at, expires_at"
    if context.inbox.dead_letter(item.tenant, item.event_id, item.subscription) is not None:
        sets += ", open_dead_letter = :letter"
        values[":letter"] = {"S": keys.dead_letter_sort_key(item.event_id, item.subscription)}
    else:
        removes += ", open_dead_letter"
    status_names = ", ".join(name for name in values if name.startswith(":s"))
    try:
        context.dynamodb.update_item(
            TableName=context.topology.inbox_table,
            Key=keys.claim_key(item.event_id, item.subscription),
            UpdateExpression=f"{sets} {removes}",
            ConditionExpression=f"#status IN ({status_names})",
            ExpressionAttributeNames={"#status": "status", "#owner": "owner"},
            ExpressionAttributeValues=values,
        )
    except ClientError as exc:
        if exc.response["Error"]["Code"] == "ConditionalCheckFailedException":
            return False  # already replayed, or picked up again meanwhile: leave it to the inbox
        raise
    return True


def _resolve_dead_letter(context: OperatorContext, tenant: str, event_id: str, subscription: str, how: str) -> None:
    try:
        context.dynamodb.update_item(
            TableName=context.topology.inbox_table,
            Key=keys.dead_letter_key(tenant, event_id, subscription),
            UpdateExpression="SET resolved = :how",
            ConditionExpression="attribute_exists(pk)",
            ExpressionAttributeValues={":how": {"S": f"{how} at {format_timestamp(context.now())}"}},
        )
    except ClientError as exc:
        if exc.response["Error"]["Code"] != "ConditionalCheckFailedException":
            raise


def _event_seq(context: OperatorContext, claim: ClaimRecord) -> int:
    """The claimed event's seq: from the claim row, or else from its dead letter or its tenant's log."""
    if claim.event_seq is not None:
        return claim.event_seq
    rows = context.inbox.dead_letters(claim.tenant, event_id=claim.event_id, include_resolved=True)
    if rows:
        return rows[0].event_seq
    for item in read_event_rows(context.dynamodb, context.topology.events_table, claim.tenant):
        if item["event_id"]["S"] == claim.event_id:
            return int(item["seq"]["N"])
    raise OperationRefusedError(f"event {claim.event_id} is not in its tenant's log")


def _dead_reason(claim: ClaimRecord | None) -> str | None:
    return None if claim is None else claim.dead_reason
