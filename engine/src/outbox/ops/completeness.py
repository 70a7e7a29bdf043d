"""The completeness pass: nothing goes missing silently, even through the engine's own bugs.

The chain proves the log is whole; this pass checks that the log's *effects* are. On the hourly anchoring
pass, for each tenant, every event older than the completeness bound must have an outcome for every durable
subscription the deployed catalog runs it for (DURABLE, and WORKFLOW: handed to its execution is an outcome in
progress), as ``outbox.pairs`` says what that is: completed, skipped by an
operator, dead with an open dead letter, waiting in its order behind a predecessor that has one, or left out by a
catalog change. A pair with none past the bound is **missing**: counted (``Metric.MISSING_PAIRS``, alarmed
above zero), recorded for ``outbox status`` with the command that repairs it, and, where the stack allows it,
re-sent by the pass itself (at most ``repairs`` a pass, as reconcile re-sends, each recorded with why).

The bound is derived from the stack's settings (``outbox_cdk.timing.completeness_bound_seconds``): the longest a
pair may legitimately travel before it has an outcome or its message lands in an alarmed dead-letter queue.

Engine code only: the pass is given the deployed catalog as data made at synth (``catalog_data``: each durable
subscription's name, pattern, ordering and ``ordered_since``, each WORKFLOW one's name, pattern and handler), never
the application's modules, so a module that no longer imports cannot stop the check that would notice it.

Its cost stays flat in the log's size: each tenant has a completeness watermark in the audit table
(``TENANT#<tenant>#COMPLETENESS``), the seq below which every pair is settled or held in the tenant's short list
of open pairs (dead, waiting, or under way), which each pass judges again. A pass reads only the events appended
since, and the open pairs. A subscription is judged from the first pass that sees it in the catalog on
(``COMPLETENESS#CATALOG``): the events emitted before it existed come by a reconcile, as they always did.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime, timedelta
from typing import Any

from botocore.exceptions import ClientError

from outbox.audit.auditor import Metric
from outbox.exceptions import OperationRefusedError, OutboxValidationError
from outbox.inbox import VOUCH_MARGIN, ClaimRecord
from outbox.log.chain import read_event_rows
from outbox.log.envelope import Envelope, format_timestamp
from outbox.ops.completeness_data import (
    EVENTS_PER_PASS,
    MAX_OPEN_PAIRS,
    PASS_MARGIN_SECONDS,
    CompletenessLog,
    MissingPair,
    PairRef,
    PassResult,
    TenantState,
    Verdict,
    catalog_data,
    catalog_from_data,
)
from outbox.ops.context import OperatorContext, repair_dedup_id
from outbox.ops.ordering import order_book
from outbox.pairs import Outcome, Placement, Route
from outbox.subscriptions import Subscription

logger = logging.getLogger(__name__)

__all__ = [
    "CompletenessLog",
    "CompletenessPass",
    "MissingPair",
    "PairRef",
    "PassResult",
    "TenantState",
    "Verdict",
    "catalog_data",
    "catalog_from_data",
    "completeness_state",
]

# -- the pass -----------------------------------------------------------------------------------------------


class CompletenessPass:
    """One pass over every tenant (``run``). ``context`` reads the log and the inbox (and, with ``repairs``,
    sends to the durable queue); ``log`` keeps the watermarks."""

    def __init__(
        self,
        context: OperatorContext,
        log: CompletenessLog,
        *,
        bound: timedelta,
        repairs: int = 0,
        metrics: Any | None = None,
        events_per_pass: int = EVENTS_PER_PASS,
    ) -> None:
        if bound <= timedelta(0) or repairs < 0:
            raise OutboxValidationError("the completeness bound must be positive and the repairs per pass >= 0")
        self.context, self.log, self.bound, self.repairs = context, log, bound, repairs
        self.events_per_pass, self.metrics = events_per_pass, metrics
        self._resent = 0

    def run(self, tenants: Sequence[str] | None = None, *, time_left: Callable[[], float] | None = None) -> PassResult:
        now = self.context.now()
        result = PassResult()
        self._resent = 0  # the cap is per pass
        deployed = self.context.deployed.consumed()
        seen = self.log.first_seen([s.name for s in deployed], now)
        names = list(self.context.tenants() if tenants is None else tenants)
        for index, tenant in enumerate(names):
            if time_left is not None and time_left() < PASS_MARGIN_SECONDS:
                result.deferred = names[index:]
                # Their last pass's findings still count: the alarm stays on what is known missing.
                result.missing_count += sum(self.log.state(name).missing_count for name in result.deferred)
                logger.warning("completeness pass out of time: %d tenant(s) left to the next", len(result.deferred))
                break
            state = self._tenant(tenant, deployed, seen, now, result, time_left)
            result.missing_count += state.missing_count
            result.open_pairs += len(state.open)
            if state.missing:
                result.missing[tenant] = state.missing
        result.resent = self._resent
        if self.metrics is not None:  # every pass, 0 included: the alarm reads the last pass's count
            self.metrics.add_metric(name=Metric.MISSING_PAIRS.value, unit="Count", value=result.missing_count)
            if result.resent:
                self.metrics.add_metric(name=Metric.PAIRS_RESENT.value, unit="Count", value=result.resent)
        return result

    def _tenant(
        self,
        tenant: str,
        deployed: list[Subscription],
        seen: dict[str, str],
        now: datetime,
        result: PassResult,
        time_left: Callable[[], float] | None = None,
    ) -> TenantState:
        before = self.log.state(tenant)
        state = TenantState(tenant, seq=before.seq, checked_at=format_timestamp(now))
        # The open pairs first: each judged again, one claim read each.
        judged = [
            self.judge(tenant, ref, self.context.inbox.read_claim(ref.event_id, ref.subscription), now)
            for ref in before.open
        ]
        held = sum(1 for _, verdict, _ in judged if verdict is not Verdict.SETTLED)
        horizon = format_timestamp(now - self.bound)
        read = 0
        for item in read_event_rows(self.context.dynamodb, self.context.topology.events_table, tenant, before.seq + 1):
            if not all(name in item for name in ("seq", "event_id", "type", "occurred_at")):
                # Not an event row any more (rewritten): the chain's checks and the tamper alarm report it
                logger.error("tenant %s: a row of the log does not read as an event: skipped", tenant)
                continue
            occurred_at = item["occurred_at"]["S"]
            if occurred_at > horizon or read >= self.events_per_pass:
                break  # younger than the bound: the next pass judges it (and everything after it)
            if time_left is not None and time_left() < PASS_MARGIN_SECONDS:
                break  # a long first pass over a tenant's log: the watermark keeps what it did
            read += 1
            if held >= MAX_OPEN_PAIRS:
                break  # the watermark waits here until an operator has dealt with some
            # One query of the event's claims: the pairs the catalog runs, and any other it has a claim of (a run a
            # deploy left out is stranded until an operator acknowledges it, as the machine says)
            claims = self.context.inbox.claims_of(item["event_id"]["S"])
            # A pair with no claim whose event the inbox may have forgotten (a first pass over an old log, a pass
            # that did not run for a month) cannot be judged: a completion may have been swept
            refs = [
                ref
                for ref in self._pairs(tenant, item, deployed, seen)
                if ref.subscription in claims or self._vouched(ref)
            ]
            refs += [_ref(item, name) for name in sorted(set(claims) - {ref.subscription for ref in refs})]
            found = [self.judge(tenant, ref, claims.get(ref.subscription), now) for ref in refs]
            held += sum(1 for _, verdict, _ in found if verdict is not Verdict.SETTLED)
            judged += found
            state.seq = int(item["seq"]["N"])
        result.events_read += read
        for ref, verdict, missing in judged:
            if verdict is not Verdict.SETTLED:
                state.open.append(ref)
            if missing is not None:
                state.missing.append(self._repaired(missing, ref))
        state.missing_count = len(state.missing)
        if state.missing:
            logger.error(
                "tenant %s: %d pair(s) with no outcome past the completeness bound (%s): %s",
                tenant,
                state.missing_count,
                self.bound,
                "; ".join(f"{m.event_id}:{m.subscription} ({m.state}) -> {m.repair}" for m in state.missing[:5]),
            )
        self.log.save(state)
        return state

    def _pairs(
        self, tenant: str, item: dict[str, Any], deployed: list[Subscription], seen: dict[str, str]
    ) -> Iterator[PairRef]:
        """The pairs of the event row ``item`` the deployed catalog runs, of the subscriptions seen before it
        occurred (the pass judges a subscription's events from the first pass that saw it on: an older event
        without a claim was emitted before the subscription existed, and comes by a reconcile; one with a claim
        was delivered, and its claim is judged with the others of the event)."""
        event_type, occurred_at = item["type"]["S"], item["occurred_at"]["S"]
        for subscription in deployed:
            if subscription.matches(event_type) and seen.get(subscription.name, occurred_at) < occurred_at:
                yield _ref(item, subscription.name)

    def judge(
        self, tenant: str, ref: PairRef, claim: ClaimRecord | None, now: datetime
    ) -> tuple[PairRef, Verdict, MissingPair | None]:
        status = claim.status if claim is not None else None
        placement = self.context.deployed.place(ref.subscription, ref.event_type, ref.occurred_at)
        rule = placement.rule(status)
        if rule.outcome in (Outcome.DONE, Outcome.SKIPPED, Outcome.LEFT_OUT):
            return ref, Verdict.SETTLED, None
        if rule.outcome is Outcome.DEAD:
            return ref, Verdict.OPEN, None
        if rule.outcome is Outcome.IN_WORKFLOW:
            # Its durable execution is its run, under its own bound (its execution timeout: outbox status names one
            # past it, docs/workflows.md), not this pass's: judged again each pass until its end settles it.
            return ref, Verdict.OPEN, None
        since = _last_moved(ref, claim)
        if now - _moment(since) <= self.bound:
            return ref, Verdict.UNDER_WAY, None
        why = placement.why(status)
        if rule.outcome is Outcome.WAITING:
            stuck = self._stuck_in_order(tenant, ref, claim)
            if stuck is None:
                return ref, Verdict.OPEN, None  # behind a predecessor that is dead, or judged on its own
            why = stuck
        return ref, Verdict.MISSING, self._missing(tenant, ref, status, since, why, placement)

    def _stuck_in_order(self, tenant: str, ref: PairRef, claim: ClaimRecord | None) -> str | None:
        """Why a deferred pair past the bound will never run, or None while its order still moves towards it: it
        was woken (its claim no longer says what it waits for) and the wake-up never came, what it waits for was
        applied and no wake-up came, or what it waits for is no longer in the order (a deploy took it out)."""
        waits_for = claim.waits_for if claim is not None else None
        if waits_for is None:  # woken: the wake-up that takes it out of its row is on its way, or lost
            return "it was woken, and its wake-up never arrived"
        watermark = order_book(self.context).watermark(tenant, ref.subscription)
        if watermark.applied_seq >= waits_for:
            return f"its predecessor seq {waits_for} was applied, and no wake-up came"
        try:
            predecessor = self.context.placement(tenant, waits_for, None, ref.subscription)
        except (OperationRefusedError, KeyError):
            return f"the event it waits for, seq {waits_for}, does not read"
        if predecessor.route is not Route.IN_ORDER:
            return f"it waits for seq {waits_for}, which is no longer in the order"
        return None

    def _missing(
        self, tenant: str, ref: PairRef, status: str | None, since: str, why: str, placement: Placement
    ) -> MissingPair:
        rule = placement.rule(status)
        if rule.repair:
            names = {"tenant": tenant, "subscription": ref.subscription, "event_id": ref.event_id, "seq": ref.seq}
            repair = rule.repair.format(**names)
        elif placement.route is Route.IN_ORDER:
            repair = f"outbox reconcile --tenant {tenant} --subscription {ref.subscription}"
        elif not self._vouched(ref):  # reconcile refuses a window the inbox may have forgotten
            repair = (
                "none can vouch for it any more (older than the inbox's retention, it may have completed and been "
                "forgotten): decide by hand, see the runbook (MissingPairsAlarm)"
            )
        else:
            repair = (
                f"outbox reconcile --tenant {tenant} --subscription {ref.subscription} --since {ref.occurred_at[:19]}Z"
            )
        state = status or "absent"
        return MissingPair(tenant, ref.seq, ref.event_id, ref.subscription, state, since, why, repair)

    def _vouched(self, ref: PairRef) -> bool:
        """Whether the inbox still remembers a completion of the pair's event (reconcile's horizon)."""
        horizon = self.context.now() - self.context.topology.inbox_retention + VOUCH_MARGIN
        return ref.occurred_at >= format_timestamp(horizon)

    def _repaired(self, missing: MissingPair, ref: PairRef) -> MissingPair:
        """``missing``, re-sent by the pass when the stack lets it repair and this pass's cap is not reached."""
        if self._resent >= self.repairs:
            return missing
        if not self._resend(missing, ref):
            return missing
        self._resent += 1
        logger.warning(
            "completeness repair: re-sent %s:%s of tenant %s (%s since %s: %s)",
            missing.event_id,
            missing.subscription,
            missing.tenant,
            missing.state,
            missing.since,
            missing.why,
        )
        return MissingPair(**{**missing.as_dict(), "resent": True})

    def _resend(self, missing: MissingPair, ref: PairRef) -> bool:
        """Re-send the pair's event as reconcile does, where the machine says a reconcile re-sends it; never a
        pair whose rule says otherwise (those wait for an operator's decision)."""
        from outbox.inbox import reconcile_row
        from outbox.pairs import Act

        context = self.context
        status = None if missing.state == "absent" else missing.state
        placement = context.deployed.place(ref.subscription, ref.event_type, ref.occurred_at)
        if placement.rule(status).reconcile is not Act.RESEND:
            return False
        if status is None and not self._vouched(ref):
            return False  # no claim, older than the inbox's memory: it may have completed and been forgotten
        image = context.event_image(missing.tenant, missing.seq)
        if status is None:
            try:
                context.dynamodb.put_item(
                    TableName=context.topology.inbox_table,
                    Item=reconcile_row(Envelope.from_item(image), ref.subscription, context.now()),
                    ConditionExpression="attribute_not_exists(pk)",
                )
            except ClientError as exc:
                if exc.response["Error"]["Code"] != "ConditionalCheckFailedException":
                    raise
                return False  # a claim appeared since it was read: in hand
        dedup = repair_dedup_id("completeness", missing.event_id)
        context.publish(image, missing.tenant, dedup, targets=[ref.subscription], repair="completeness")
        return True


def _ref(item: dict[str, Any], subscription: str) -> PairRef:
    """The pair of the event row ``item`` and ``subscription``."""
    seq, event_id = int(item["seq"]["N"]), item["event_id"]["S"]
    return PairRef(seq, event_id, item["type"]["S"], item["occurred_at"]["S"], subscription)


def _moment(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _last_moved(ref: PairRef, claim: ClaimRecord | None) -> str:
    """When the pair last moved: its event's time, or its claim's last write, whichever is later."""
    moments = [ref.occurred_at]
    if claim is not None:
        moments += [m for m in (claim.updated_at, claim.created_at, claim.replayed_at) if m]
    return max(moments)


def completeness_state(context: OperatorContext, tenant: str) -> TenantState:
    """What the last completeness pass found for ``tenant`` (nothing without an audit table, or before a pass)."""
    table = context.topology.audit_table
    return CompletenessLog(table, context.dynamodb).state(tenant) if table else TenantState(tenant)
