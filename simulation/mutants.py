"""The mutants of ``make mutants``: small, realistic bugs in the engine's guarantee code, as data.

Each one replaces a snippet that must occur exactly once in its module's source today (the engine moves
on: ``python -m simulation.mutation --check`` says which snippets went stale). A fencing condition is
loosened with an OR rather than cut, because DynamoDB refuses an expression value the expression does
not use; the bug is the same: a PENDING claim of another owner satisfies it.

One file: the catalogue, read top to bottom, grouped by the guarantee each mutant breaks; every entry is
data, and ``make mutants`` and docs/simulation.md list them in this order.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Mutant:
    """One bug, as data: ``original`` (exactly once in ``module``'s source) becomes ``replacement``."""

    id: str
    module: str  # dotted, e.g. "outbox.inbox"
    original: str
    replacement: str
    description: str
    what_should_catch_it: str
    # Why no run of the pipeline can tell this mutant from the engine (an equivalent mutant): it is still run,
    # and left out of the score only while it survives. A caught "equivalent" mutant is a catalogue error.
    equivalent: str = ""
    # Seeds that caught it in the last ``make mutants`` run: CI replays them (tests/simulation/test_fault_classes.py),
    # in this order, and stops at the first that catches it: the quickest to catch it comes first.
    seeds: tuple[int, ...] = ()


CONSUMER, MESSAGES = "outbox.delivery.consumer", "outbox.messages"
CLAIMS, INBOX_TABLE, DEAD_WORK = "outbox.inbox.claims", "outbox.inbox.table", "outbox.inbox.dead_work"
MARKERS = "outbox.inbox.markers"
STORE, CHAIN, AUDIT = "outbox.log.store", "outbox.log.chain", "outbox.audit.table"
FINDINGS = "outbox.audit.findings"
VERIFICATION = "outbox.log.verification"
SEALING, EMIT_TRANSACTION, LANES = "outbox.log.sealing", "outbox.log.transaction", "outbox.log.lanes"
SCHEMAS = "outbox.log.schemas"
ORDERING, SKIP = "outbox.pairs.order", "outbox.ops.ordering"
REPLAY, REDRIVE, RECONCILE = "outbox.ops.replay", "outbox.ops.redrive", "outbox.ops.reconcile"
STATUS, GROUPS = "outbox.ops.status", "outbox.ops.groups"
CANONICAL, ENVELOPE = "outbox.log.canonical", "outbox.log.envelope"
RUNTIME = "outbox.local.runtime"
RUN, RUNS, DIRECT = "outbox.delivery.run", "outbox.delivery.runs", "outbox.delivery.direct"
GATE, TIMING, LOG_CHECK = "outbox.delivery.ordered", "outbox.delivery.timing", "outbox.delivery.log_check"
PAIRS = "outbox.pairs.machine"
ROWS = "outbox.inbox.rows"
COMPLETENESS = "outbox.ops.completeness"
WORKFLOW, WORKFLOW_ENDS = "outbox.delivery.workflow", "outbox.workflows.ends"
WORKFLOW_HANDOFFS, WORKFLOW_STARTER = "outbox.workflows.handoffs", "outbox.workflows.starter"
_LEFT_OUT_RUN = "    (State.PENDING, Route.LEFT_OUT): Rule(\n        Act.MARK_DEAD, Act.REFUSE, Act.ACKNOWLEDGE, "

MUTANTS: tuple[Mutant, ...] = (
    # -- the claim -----------------------------------------------------------------------------------------
    Mutant(
        id="claim-no-takeover",
        module=CLAIMS,
        original='claimable = "(#status = :pending AND lease_expires_at < :now) OR #status IN (:replaying, :deferred)"',
        replacement=(
            'claimable = "(attribute_not_exists(pk) AND lease_expires_at < :now) OR #status IN (:replaying, :deferred)"'
        ),
        description="the claim is a plain create (attribute_not_exists): an expired lease is never taken over",
        what_should_catch_it="a crash after the claim: the stale PENDING row blocks every redelivery (invariant 2)",
        seeds=(1, 2, 3),
    ),
    Mutant(
        id="claim-takes-over-live-lease",
        module=CLAIMS,
        original='"(#status = :pending AND lease_expires_at < :now) OR',
        replacement='"(#status = :pending AND lease_expires_at < :lease) OR',
        description="the take-over compares the lease with the new lease's end, not now: live leases are taken",
        what_should_catch_it="a redelivery while the owner runs: two runs of one pair (invariants 3, 4)",
        seeds=(1, 2, 3),
    ),
    Mutant(
        id="claim-ignores-digest",
        module=CLAIMS,
        original='ConditionExpression=f"(attribute_not_exists(pk) OR {same_content}) AND ({claimable})"',
        replacement='ConditionExpression=f"(attribute_not_exists(pk) OR {same_content} OR attribute_exists(digest)) '
        'AND ({claimable})"',
        description="the claim does not compare the digest: other content under the same event id takes over",
        what_should_catch_it="the same event id redelivered with other content while its lease is expired",
        equivalent=(
            "the consumer checks every event against the events table before it claims, and refuses other content "
            "under a logged event's id there; the claim's digest decides alone only when the log itself changed "
            "between two deliveries (an operator's rewrite, then a repair), which no schedule does "
            "(tests/functional/test_inbox_delivery.py does)"
        ),
    ),
    Mutant(
        id="claim-ignores-may-create",
        module=CLAIMS,
        original='        if may_create:\n            claimable = f"attribute_not_exists(pk) OR {claimable}"',
        replacement='        claimable = f"attribute_not_exists(pk) OR {claimable}"',
        description="a missing row is created even for a message older than the retention (may_create ignored)",
        what_should_catch_it="an old message redelivered after the retention: a forgotten completion runs again",
        seeds=(16, 19, 13),
    ),
    Mutant(
        id="claim-never-counts-attempts",
        module=CLAIMS,
        original='"attempts = if_not_exists(attempts, :zero) + :one, digest = :digest, tenant = :tenant, "',
        replacement='"attempts = if_not_exists(attempts, :one) + :zero, digest = :digest, tenant = :tenant, "',
        description="the claim's attempts stay at 1 (placeholders swapped): a failing pair is retried forever",
        what_should_catch_it="a dependency down or repeated crashes: never dead-lettered (invariant 2)",
        seeds=(2, 8, 11),
    ),
    Mutant(
        id="own-claim-not-recognised",
        module=INBOX_TABLE,
        original='return _string(existing, "owner") == owner and _string(existing, "status") == PENDING',
        replacement='return _string(existing, "owner") == owner and _string(existing, "status") == "COMPLETED"',
        description="a claim whose answer was lost (applied, re-sent) is not recognised as ours: IN_PROGRESS",
        what_should_catch_it="a lost answer on the claim: the pair waits a lease out and burns an attempt",
        seeds=(4, 10, 45),
    ),
    Mutant(
        id="vouch-margin-wrong-way",
        module=CLAIMS,
        original="return self._clock() < issued_at + self.retention - VOUCH_MARGIN",
        replacement="return self._clock() < issued_at + self.retention + VOUCH_MARGIN",
        description="the inbox vouches for a message an hour past the retention instead of an hour before it",
        what_should_catch_it="a redelivery just after the retention (a time jump of exactly the retention)",
        seeds=(31, 132),
    ),
    # -- fencing -------------------------------------------------------------------------------------------
    Mutant(
        id="completion-unfenced",
        module=CLAIMS,
        original=(
            '+ (", waits_for, deferred_at" if claim.waits_for is not None else "")\n'
            "                ),\n"
            '                "ConditionExpression": "#owner = :owner AND #status = :pending",'
        ),
        replacement=(
            '+ (", waits_for, deferred_at" if claim.waits_for is not None else "")\n'
            "                ),\n"
            '                "ConditionExpression": "#owner = :owner OR #status = :pending",'
        ),
        description="the COMPLETED mark holds for any PENDING claim: a worker whose lease was taken completes",
        what_should_catch_it="a lease expiry while the handler runs (invariant 4: completed by a non-owner)",
        seeds=(17, 20, 46),
    ),
    Mutant(
        id="release-unfenced",
        module=CLAIMS,
        original=(
            'self._fenced_update(claim, "release", {"UpdateExpression": update, "ExpressionAttributeValues": values})'
        ),
        replacement=(
            'self._fenced_update(claim, "release", {"TableName": self.table_name, '
            '"Key": keys.claim_key(claim.event_id, claim.subscription), '
            '"UpdateExpression": update.replace(", updated_at = :now_iso", ""), "ExpressionAttributeValues": values})'
        ),
        description="release is a plain update by key: a worker whose lease was taken ends the new owner's lease",
        what_should_catch_it="a lease expiry, then a retryable error of the old owner (invariant 4: releases)",
        seeds=(2, 3, 10),
    ),
    Mutant(
        id="mark-dead-unfenced",
        module=DEAD_WORK,
        original=(
            "        dead_letter = self.dead_letter_item(envelope, claim.subscription, error, error_type, reason, "
            "receive_count)"
        ),
        replacement=(
            '        claim_update["ConditionExpression"] = "#owner = :owner OR #status = :pending"\n'
            "        dead_letter = self.dead_letter_item(envelope, claim.subscription, error, error_type, reason, "
            "receive_count)"
        ),
        description="the DEAD mark holds for any PENDING claim: a worker whose lease was taken kills the claim",
        what_should_catch_it="a lease expiry, then a terminal error of the old owner (invariant 4)",
        seeds=(2, 3, 26),
    ),
    Mutant(
        id="completion-writes-separate",
        module=CLAIMS,
        original=(
            "        self._fenced_transaction(\n"
            '            claim, "complete", [*completion, *map(dict, writes)], landed=COMPLETED, '
            "watermark_at=watermark_at\n"
        ),
        replacement=(
            "        self.client.transact_write_items(TransactItems=[*map(dict, writes)])\n"
            "        self._fenced_transaction(\n"
            '            claim, "complete", completion, landed=COMPLETED, watermark_at=watermark_at\n'
        ),
        description="the handler's writes commit in their own call before the COMPLETED mark",
        what_should_catch_it="a lost lease or a throttle between the two calls: the writes apply twice (2)",
        seeds=(17, 5, 11),
    ),
    # -- the consumer: completion and classification --------------------------------------------------------
    Mutant(
        id="follow-up-before-completion",
        module=RUN,
        original="self._emit_follow_up(result, [*completion, *result.writes])",
        replacement="self._emit_follow_up(result, [*result.writes])\n"
        "            self.inbox.mark_completed(claim, (), order)",
        description="the follow-up event commits without the COMPLETED mark, which is written after it",
        what_should_catch_it="a lost lease or a throttle after the follow-up: two follow-ups for one effect (2)",
        seeds=(58, 76, 83),
    ),
    Mutant(
        id="every-error-terminal",
        module=RUN,
        original="terminal = isinstance(exc, TerminalError | ContractViolationError) or (",
        replacement="terminal = isinstance(exc, Exception) or (",
        description="a retryable handler error is dead at once",
        what_should_catch_it="a retryable error: dead-lettered without its retries (invariant 2, not earned)",
        seeds=(25, 68, 82),
    ),
    Mutant(
        id="contract-violation-retryable",
        module=RUN,
        original="terminal = isinstance(exc, TerminalError | ContractViolationError) or (",
        replacement="terminal = isinstance(exc, TerminalError) or (",
        description="a handler that breaks its contract is retried instead of dead at once",
        what_should_catch_it="a contract breach: retried, and it runs its effect again on the retry",
        seeds=(4, 22, 26),
    ),
    Mutant(
        id="terminal-error-retried",
        module=RUN,
        original="terminal = isinstance(exc, TerminalError | ContractViolationError) or (",
        replacement="terminal = isinstance(exc, ContractViolationError) or (",
        description="a handler's TerminalError is retried like any other error instead of dead at once",
        what_should_catch_it="a terminal error: released and run again, not marked dead by its attempt (2)",
        seeds=(5, 3, 2),
    ),
    Mutant(
        id="dead-by-receive-count",
        module=RUN,
        original="exhausted = claim.attempts >= self.inbox.max_attempts",
        replacement="exhausted = receive_count >= self.inbox.max_attempts",
        description="dead is decided by the message's receive count, which followers of a failing head collect too",
        what_should_catch_it="a backlog behind a failing head: healthy followers dead after one failure (2)",
        seeds=(3, 2, 7),
    ),
    Mutant(
        id="attempts-check-one-late",
        module=RUN,
        original="exhausted = claim.attempts >= self.inbox.max_attempts",
        replacement="exhausted = claim.attempts > self.inbox.max_attempts",
        description="the attempts check is off by one: a failing pair gets one attempt more than allowed",
        what_should_catch_it="a dependency down: the last failure is released, then dead unrun as a crash",
        seeds=(2, 11, 15),
    ),
    Mutant(
        id="attempts-check-one-early",
        module=RUN,
        original="exhausted = claim.attempts >= self.inbox.max_attempts",
        replacement="exhausted = claim.attempts + 1 >= self.inbox.max_attempts",
        description="the attempts check is off by one: a failing pair is dead one attempt early",
        what_should_catch_it="retryable errors on max_attempts - 1 attempts: dead, not earned (invariant 2)",
        seeds=(2, 3, 11),
    ),
    Mutant(
        id="crash-check-off-by-one",
        module=RUN,
        original="if claim.attempts > self.inbox.max_attempts:",
        replacement="if claim.attempts >= self.inbox.max_attempts:",
        description="the last allowed attempt is taken for a crash and dead-lettered without running",
        what_should_catch_it="a crash or a retry before the last attempt: dead, not earned (invariant 2)",
        seeds=(8, 2, 11),
    ),
    Mutant(
        id="in-progress-acknowledged",
        module=RUN,
        original="subscription=subscription.name)\n            return DeliveryOutcome.RETRY",
        replacement="subscription=subscription.name)\n            return DeliveryOutcome.SKIPPED",
        description="a message whose pair is in progress elsewhere is acknowledged instead of retried",
        what_should_catch_it="a redelivery while the owner runs, then the owner crashes: the effect is lost (2)",
        seeds=(17, 31),
    ),
    Mutant(
        id="log-refusal-unrecorded",
        module=CONSUMER,
        original="        for subscription in subscriptions:\n            with observed_pair(",
        replacement="        for subscription in ():\n            with observed_pair(",
        description="an event the events table does not hold is acknowledged unrun, but no dead letter says so",
        what_should_catch_it="a forged event, or a copy with other content: refused, and no conflict recorded (2)",
        seeds=(4, 2, 1),
    ),
    Mutant(
        id="log-check-skipped",
        module=CONSUMER,
        original="        doubt = self.log_check.doubt(envelope, ahead)\n",
        replacement="        doubt = None\n",
        description="the consumer does not check an event against the events table: a forged event with a valid "
        "hash runs",
        what_should_catch_it="a forged event the log never held: it runs, and its follow-up takes a real seq (1)",
        seeds=(4, 2, 1),
    ),
    Mutant(
        id="poison-raised",
        module=CONSUMER,
        original=('self._poison(record, str(exc) if isinstance(exc, EnvelopeParseError) else f"{type(exc).__name__}")'),
        replacement="raise",
        description="an unreadable body raises instead of being recorded as a poison pill",
        what_should_catch_it="a malformed body: no poison pill, and it blocks its group until the DLQ (9)",
        seeds=(4, 5, 6),
    ),
    Mutant(
        id="lease-shorter-than-invocation",
        module=TIMING,
        original="return max(timedelta(milliseconds=remaining_ms), self.floor) + self.margin",
        replacement="return self.floor + self.margin",
        description="the lease is a fixed 10 seconds, shorter than the invocation can run",
        what_should_catch_it="a slow handler: taken over while it runs (invariants 3, 4)",
        seeds=(17, 30, 10),
    ),
    # -- reading a message ---------------------------------------------------------------------------------
    Mutant(
        id="altered-envelope-accepted",
        module=MESSAGES,
        original=(
            "    if envelope.computed_hash() != envelope.hash:\n"
            '        raise EnvelopeParseError(f"event {envelope.id} does not match its own hash: altered after emit")\n'
        ),
        replacement="",
        description="the consumer does not check an envelope against its own hash",
        what_should_catch_it="a body that is a genuine event image with one field altered (a poison pill, 9)",
        seeds=(25, 26, 34),
    ),
    Mutant(
        id="newer-fields-refused",
        module=ENVELOPE,
        original="            return cls.model_validate(plain)",
        replacement='            return cls.model_validate(plain, extra="forbid")',
        description="an event row is read as emit() seals an envelope: a field of a newer engine is refused",
        what_should_catch_it="an emit by a newer engine (newer_emitter): its rows no longer read as events, so "
        "status reports a chain nobody altered as broken (invariant 7) and the log lacks them (1)",
        seeds=(10, 11, 7),
    ),
    Mutant(
        id="newer-fields-dropped",
        module=ENVELOPE,
        original='    model_config = ConfigDict(frozen=True, extra="allow")',
        replacement='    model_config = ConfigDict(frozen=True, extra="ignore")',
        description="a field of a newer engine is dropped when its row is read: the event no longer matches its hash",
        what_should_catch_it="an emit by a newer engine (newer_emitter): its events fail their own hash, so status "
        "reports a chain nobody altered as broken (invariant 7)",
        seeds=(10, 11, 7),
    ),
    Mutant(
        id="repair-targets-ignored",
        module=MESSAGES,
        original="        return Message(envelope, _targets(attributes), receive_count)",
        replacement="        return Message(envelope, None, receive_count)",
        description="a repair message runs every subscription of its event, not only the ones it names",
        what_should_catch_it="a replay after the retention: a completed, forgotten sibling pair runs again (2)",
        seeds=(4, 3, 2),
    ),
    Mutant(
        id="group-repair-ignores-approval",
        module=GROUPS,
        original="    approved = None if only is None else {(pair.event_id, pair.subscription) for pair in only}\n",
        replacement="    approved = None\n",
        description="a failure group's replay runs every open dead letter of the group, not the pairs its dry run "
        "showed the operator: what died in the group since runs unapproved",
        what_should_catch_it="the operator replaying a failure group a turn after its dry run, new dead letters of "
        "the group in between: a repair message names a pair no repair had selected yet (2)",
        # Rare: in seeds 1..40 a group grew between its dry run and its replay in 3 and 34; of 1..240, 34 catches it.
        seeds=(34,),
    ),
    # -- emit: the head and the chain ----------------------------------------------------------------------
    Mutant(
        id="local-error-escapes",
        module=LANES,
        original="except BaseException as exc:  # best effort by contract: the caller must learn that its event "
        "committed",
        replacement="except ValueError as exc:",
        description="an error of a LOCAL handler other than a ValueError escapes emit() after the commit",
        what_should_catch_it="a LOCAL handler that fails: the caller sees an error for a committed event (5)",
        seeds=(35, 27, 2),
    ),
    Mutant(
        id="event-put-unconditional",
        module=EMIT_TRANSACTION,
        original='"Item": envelope.to_item(),\n            "ConditionExpression": "attribute_not_exists(pk)",',
        replacement='"Item": envelope.to_item(),',
        description="the event row is put without attribute_not_exists: it may replace an event at its seq",
        what_should_catch_it="a head and log out of step (only a bug elsewhere): the head condition covers it",
        seeds=(1, 10, 23),
    ),
    Mutant(
        id="head-condition-without-hash",
        module=EMIT_TRANSACTION,
        original='"ConditionExpression": "last_seq = :prev AND last_hash = :prev_hash",',
        replacement='"ConditionExpression": "last_seq = :prev OR last_hash = :prev_hash",',
        description="the head condition ORs in last_hash: in effect it checks last_seq only",
        what_should_catch_it="two heads at one seq with different hashes, which only another bug can make",
        equivalent=(
            "the head row is written only by emit(), which moves it forward one seq at a time with that seq's "
            "hash, so a head whose last_seq matches always has the expected last_hash; only a head rewritten "
            "outside emit() tells the two conditions apart, and then the event row's own condition refuses the "
            "write"
        ),
    ),
    Mutant(
        id="inline-writes-not-resealed",
        module=STORE,
        original=(
            "envelopes = attempted[head.last_seq + len(drafts)] = self._seal_all(drafts, head)\n"
            "                writes = self._sealed_writes(own, envelopes, caller_writes, inline)"
        ),
        replacement="envelopes = attempted[head.last_seq + len(drafts)] = self._seal_all(drafts, head)",
        description="after a lost head race the event is re-sealed, but the INLINE writes of the first seal are sent",
        what_should_catch_it="a rival emit: the audit row names a seal that never committed, the counter loses "
        "an item (invariant 1)",
        seeds=(3, 7, 10),
    ),
    Mutant(
        id="relay-bound-unchecked",
        module=SEALING,
        original="if body > MAX_RELAY_BODY_BYTES:",
        replacement="if body > 4 * MAX_RELAY_BODY_BYTES:",
        description="emit() bounds the event row only, not the relay body: it accepts events the relay cannot send",
        what_should_catch_it="an emit past the bound commits (invariant 5), and its durable pairs never run (2)",
        seeds=(33, 2, 7),
    ),
    Mutant(
        id="head-race-retries-stale-head",
        module=STORE,
        original="head = current if current is not None else self._read_head(tenant)",
        replacement="head = head if current is not None else self._read_head(tenant)",
        description="a lost head race is retried on the stale head instead of the current one returned",
        what_should_catch_it="a rival emit: every retry loses, the emit fails with ChainHeadContentionError",
        seeds=(3, 7, 10),
    ),
    Mutant(
        id="unknown-outcome-new-token",
        module=STORE,
        original='                in_doubt = in_doubt or kind == "unknown"\n',
        replacement=(
            '                in_doubt = in_doubt or kind == "unknown"\n'
            "                token_serial, first_sent = token_serial + 1, self._clock()\n"
        ),
        description="a send whose answer was ambiguous (or throttled) is re-sent with a new ClientRequestToken "
        "instead of the same one",
        what_should_catch_it="a lost answer, a rival commit, then a re-seal: the event commits twice (1, 2)",
        seeds=(7, 14, 26),
    ),
    Mutant(
        id="seal-hash-without-prev",
        module=SEALING,
        original="chain_hash(head.last_hash, unsealed.hashed_body())",
        replacement="chain_hash(GENESIS_HASH, unsealed.hashed_body())",
        description="the event's hash leaves out the previous hash (the genesis hash instead)",
        what_should_catch_it="verify_chain (invariant 1) and the consumer's hash check (poison pills)",
        seeds=(1, 2, 3),
    ),
    Mutant(
        id="head-forgets-last-event-id",
        module=CHAIN,
        original='last_event_id=item.get("last_event_id", {}).get("S"),',
        replacement="last_event_id=None,",
        description="the head read loses last_event_id: emit cannot recognise its own commit after a lost answer",
        what_should_catch_it="a lost answer on emit: the event is re-sealed on its own head and commits twice",
        equivalent=(
            "a lost or ambiguous answer is re-sent with the same ClientRequestToken, which DynamoDB answers with "
            "success for 10 minutes, and emit() stops re-sending after 9: the head's last_event_id check is "
            "reached only if DynamoDB broke that promise; it stays as defence in depth"
        ),
    ),
    Mutant(
        id="verify-ignores-links",
        module=VERIFICATION,
        original="if envelope.prev_hash != self.prev_hash:",
        replacement="if False:",
        description="verify_chain does not check that each row links to the one before it",
        what_should_catch_it="a row replaced or moved in the log; the simulator never tampers with the log",
        seeds=(4, 3, 1),
    ),
    # -- the operator's repairs ----------------------------------------------------------------------------
    Mutant(
        id="replay-without-targets",
        module=REPLAY,
        original="targets=subscriptions,",
        replacement='targets=[s.name for s in context.catalog.registry.subscriptions if s.lane == "DURABLE"],',
        description="replay sends the event to all its durable subscriptions, not only the selected dead pairs",
        what_should_catch_it="a replay after the retention: a completed, forgotten pair runs again (2)",
        seeds=(2, 3, 4),
    ),
    Mutant(
        id="replay-reruns-completed",
        module=REPLAY,
        original=(
            "    if status not in (DEAD, REPLAYING):  # REPLAYING: a replay that stopped before it re-sent the event\n"
            "        return None\n"
        ),
        replacement=(
            "    if status not in (DEAD, REPLAYING, COMPLETED):\n"
            "        return None\n"
            "    if status == COMPLETED:\n"
            "        return ReplayItem(\n"
            "            letter.tenant, letter.event_id, letter.event_seq, letter.subscription, status, forced=True\n"
            "        )\n"
        ),
        description="the tenant replay clears and reruns a COMPLETED claim whose dead letter is still open",
        what_should_catch_it="a replay interrupted after the re-send, then run again: the pair runs twice (2)",
        equivalent=(
            "a COMPLETED claim never has an open dead letter: the completion of a REPLAYING claim resolves the "
            "letter it carries in the same transaction, and a DEAD mark writes the letter in the transaction that "
            "makes the claim DEAD (invariant 2 checks that no pair is completed and dead-lettered)"
        ),
    ),
    Mutant(
        id="replay-unverifiable-without-force",
        module=REPLAY,
        original="if status == DEAD and unverifiable and not force:",
        replacement="if status == DEAD and unverifiable and force:",
        description="the tenant replay reruns unverifiable pairs without --force",
        what_should_catch_it="a redelivery after the retention, then a replay: a forgotten completion reruns (2)",
        seeds=(13, 32, 38),
    ),
    Mutant(
        id="replay-resolves-at-clear",
        module=REPLAY,
        original=(
            "        if item.claim_status in (DEFERRED, REPLAYING) or _clear_claim(context, item, allowed, now):\n"
            "            result.cleared.append(item)\n"
        ),
        replacement=(
            "        if item.claim_status in (DEFERRED, REPLAYING) or _clear_claim(context, item, allowed, now):\n"
            "            result.cleared.append(item)\n"
            '            _resolve_dead_letter(context, item.tenant, item.event_id, item.subscription, "replayed")\n'
        ),
        description="replay resolves the dead letter when it clears the claim, before the event is re-sent",
        what_should_catch_it="a replay interrupted before the re-send: a REPLAYING claim, no open dead letter (2)",
        seeds=(4, 21, 22),
    ),
    Mutant(
        id="redrive-deletes-before-send",
        module=REDRIVE,
        original=(
            "        context.sqs.send_message(**send)  # put back first ...\n"
            '    context.sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])  # ... then remove'
        ),
        replacement=(
            '        context.sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])\n'
            "        context.sqs.send_message(**send)"
        ),
        description="redrive deletes the DLQ message before sending it back",
        what_should_catch_it="a redrive interrupted between the two calls: the message is lost (2)",
        seeds=(1, 10, 11),
    ),
    Mutant(
        id="redrive-trusts-dead-bodies",
        module=REDRIVE,
        original="    except (ValueError, RecursionError):\n        return None",
        replacement="    except ValueError:\n        return None",
        description="redrive reads each dead message's trace context and takes any body that is not valid JSON "
        "for no event, but not one nested deeper than the parser recurses: the command crashes there",
        what_should_catch_it="a deeply nested poison body in the DLQ after a broken deploy, then the operator's "
        "receive-send-delete redrive (17)",
        seeds=(11, 7331030),  # 7331030: drawn for its deep-nesting body and redrive, of 7330001..7332000
    ),
    Mutant(
        id="reconcile-stale-pending-handled",
        module=RECONCILE,
        original="    if claim.status != PENDING:\n        return None",
        replacement='    if claim.status != "never":\n        return None',
        description="reconcile counts a stale PENDING claim as handled",
        what_should_catch_it="a message lost after its claim: reconcile does not re-send it (2)",
        seeds=(3, 12, 19),
    ),
    Mutant(
        id="reconcile-waits-for-replaying",
        module=RECONCILE,
        original="    return claim.status == REPLAYING or (lease_end is not None and now - lease_end > stale)",
        replacement="    return lease_end is not None and now - lease_end > stale",
        description="reconcile leaves a REPLAYING pair alone: what a run cut short marked, the next run does not send",
        what_should_catch_it="a reconcile interrupted between marking a pair and sending it, then run again (2)",
        seeds=(23, 34, 54),
    ),
    Mutant(
        id="reconcile-ignores-horizon",
        module=RECONCILE,
        original="if since < horizon:",
        replacement="if False:",
        description="reconcile re-sends events older than the inbox's retention",
        what_should_catch_it="a reconcile over more days than the retention: forgotten completions rerun (2)",
        seeds=(32, 38, 58),
    ),
    Mutant(
        id="anchor-hash-unchecked",
        module=VERIFICATION,
        original="        if envelope.hash != self.anchor.hash or envelope.computed_hash() != envelope.hash:",
        replacement="        if envelope.computed_hash() != envelope.hash:",
        description="an incremental verification takes the anchored row as verified if it matches its own hash, "
        "not the anchored one: a log rewritten with recomputed hashes passes",
        what_should_catch_it="a rewrite with every hash recomputed after an anchoring pass: status says intact (7)",
        seeds=(16, 6, 15),
    ),
    Mutant(
        id="finding-old-hash-from-new-image",
        module=FINDINGS,
        original='        old_hash=old.get("hash", {}).get("S"),',
        replacement='        old_hash=new.get("hash", {}).get("S"),',
        description="a tamper finding records the row's new hash as the one it had: the evidence of what the "
        "log held is lost",
        what_should_catch_it="a rewritten event row: no finding names the hash it had (12)",
        seeds=(4, 3, 1),
    ),
    Mutant(
        id="direct-marker-unconditional",
        module=MARKERS,
        original='                "Item": row,\n                "ConditionExpression": "attribute_not_exists(pk)",\n',
        replacement='                "Item": row,\n',
        description="a DynamoDB-only subscription's completion marker is written whatever row is there: a "
        "duplicate delivery commits the handler's writes again",
        what_should_catch_it="a copy of an event delivered after the deduplication window, or a conflicting copy: "
        "its DynamoDB effect applied twice (2)",
        seeds=(1, 3, 7),
    ),
    # -- ordered subscriptions --------------------------------------------------------------------------
    Mutant(
        id="watermark-outside-completion",
        module=GATE,
        original=("            try:\n                run.commit(claim, result, order)\n"),
        replacement=(
            "            try:\n"
            "                run.commit(claim, result)\n"
            "                self.inbox.client.transact_write_items(TransactItems=order)\n"
        ),
        description="the watermark is advanced in a write of its own after the completion's transaction",
        what_should_catch_it="a crash after the completion (or a throttled watermark write): the pair is applied, "
        "the watermark stays behind it, and its followers wait for ever (14)",
        seeds=(5,),
    ),
    Mutant(
        id="watermark-unversioned",
        module=ORDERING,
        original=(
            "    if watermark.version == 0:\n"
            '        return {"ConditionExpression": "attribute_not_exists(pk)", "ExpressionAttributeValues": values}\n'
            "    return {\n"
            '        "ConditionExpression": "version = :version",\n'
            '        "ExpressionAttributeValues": {**values, ":version": {"N": str(watermark.version)}},\n'
            "    }\n"
        ),
        replacement='    return {"ExpressionAttributeValues": values}\n',
        description="the watermark's writes are not conditioned on the version read: a deferral that read it "
        "before a skip moved it writes the old seq back",
        what_should_catch_it="the operator skips the event a delivery waits for between its watermark read and its "
        "write (watermark_race): the watermark goes back, the follower is deferred for ever (14)",
        seeds=(37, 11),
    ),
    Mutant(
        id="defer-spends-attempt",
        module=CLAIMS,
        original='"attempts = attempts - :one, updated_at = :now_iso REMOVE lease_expires_at, started_with_ms"',
        replacement=(
            '"attempts = if_not_exists(attempts, :one), updated_at = :now_iso REMOVE lease_expires_at, started_with_ms"'
        ),
        description="a deferral keeps the attempt it was claimed with: waiting for a predecessor spends attempts",
        what_should_catch_it="an event deferred behind its predecessor (a reordered batch, a dead predecessor): its "
        "claim counts an attempt no run took (14), and enough waits kill it unrun (2)",
        seeds=(2, 10, 11),
    ),
    Mutant(
        id="predecessor-ignored",
        module=ORDERING,
        original='and subscription.in_order(item["occurred_at"]["S"]):',
        replacement='and not subscription.in_order(item["occurred_at"]["S"]):',
        description="the predecessor search keeps only events before ordered_since (the test the wrong way round): "
        "no event waits for another, and each runs as it arrives",
        what_should_catch_it="an event delivered before its predecessor is applied (a reordered batch, a dead "
        "predecessor, a replay): applied out of seq order (14)",
        seeds=(2, 10, 11),
    ),
    Mutant(
        id="wake-up-skipped",
        module=GATE,
        original=(
            "            woke = self._wake(one.subscription, one.watermark, DeliveryOutcome.COMPLETED, remaining_ms, "
            "batch)\n"
        ),
        replacement="            woke = DeliveryOutcome.COMPLETED\n",
        description="a batch's completions advance the watermark and wake nothing (neither run the event deferred "
        "behind them nor send it back to the queue): that event stays deferred",
        what_should_catch_it="an event deferred behind a predecessor that then completes (a replay of a dead one, a "
        "reordered batch): left DEFERRED when the run settles (14)",
        seeds=(2, 10, 11),
    ),
    Mutant(
        id="skip-wakes-nothing",
        module=SKIP,
        original="False, _woken_seq(wake(context, book, after)))",
        replacement="False, None)",
        description="outbox skip moves the watermark past the event and sends no wake-up to the one deferred behind it",
        what_should_catch_it="the operator skips a dead predecessor with followers deferred behind it: the skip "
        "woke nothing though the lowest deferred event waited for it (14)",
        seeds=(38, 124, 240),
    ),
    Mutant(
        id="deferral-uncounted",
        module=ORDERING,
        original="watermark, version=watermark.version + 1, deferred=watermark.deferred + (0 if was_deferred else 1)",
        replacement="watermark, version=watermark.version + 1, deferred=watermark.deferred",
        description="a deferral moves the watermark's version but does not count its event among the deferred "
        "ones (in the row and in the copy the batch carries, both written from the same state): nothing wakes it",
        what_should_catch_it="a batch that holds an event before its predecessor (a reordered batch, a replay): "
        "the follower stays DEFERRED behind an applied predecessor when the run settles (14)",
        seeds=(2, 10),
    ),
    Mutant(
        id="ordered-direct-ignores-predecessor",
        module=GATE,
        original="            if waits_for is None:\n                applied = self._apply_directly(",
        replacement="            if True:\n                applied = self._apply_directly(",
        description="a DynamoDB-only ordered pair runs with no claim whether or not its predecessor is applied: its "
        "commit moves the watermark past the predecessor, which is then skipped as applied",
        what_should_catch_it="an ordered item received before its predecessor (a reordered batch, a retried or dead "
        "predecessor): applied out of order, the predecessor never (14)",
        seeds=(7, 27, 38),
    ),
    Mutant(
        id="ordered-direct-leaves-the-watermark",
        module=GATE,
        original="            existing = run.commit_directly(result, order)\n",
        replacement="            existing = run.commit_directly(result)\n",
        description="a DynamoDB-only ordered pair's direct completion commits its writes and marker without moving "
        "the watermark, while the batch carries it as moved",
        what_should_catch_it="any ordered item applied on its first receive: the watermark stays behind what the "
        "ledger applied (14)",
        seeds=(6, 24),
    ),
    Mutant(
        id="ordered-direct-lost-answer-claimed",
        module=GATE,
        original=(
            "            run.tell(Told.DIRECT_COMPLETION_FAILED, key=pair.key, error=exc)\n            return None\n"
        ),
        replacement=(
            "            carried.forget(envelope.tenant, subscription.name)\n"
            "            return run.fail_unclaimed(exc, False), None\n"
        ),
        description="a direct ordered completion that raised is handled as a failed run, claimed after the fact: "
        "when it had committed (its answer lost) the claim finds the pair done, and the event deferred behind it "
        "is never woken",
        what_should_catch_it="a lost answer to the direct completion of an ordered item whose successor was deferred "
        "before it (a reordered batch): the successor stays DEFERRED behind an applied item (14)",
        seeds=(231,),  # of 1..400: one tenant's ledger items reordered, then the predecessor's answer lost
    ),
    # -- the deadline ----------------------------------------------------------------------------------
    Mutant(
        id="wake-runs-before-the-batch",
        module=GATE,
        original=(
            "        if pair.batch is not None:\n"
            "            pair.batch.owe(pair.subscription, watermark)\n"
            "            return outcome\n"
        ),
        replacement="",
        description="an ordered completion runs the events deferred behind it at once, inside its record's turn: "
        "one tenant's backlog spends the time the batch's later records (other tenants') need",
        what_should_catch_it="a late or replayed predecessor with followers deferred behind it, and more records "
        "after it in the same batch: they run after in-place work (15)",
        seeds=(2, 11),
    ),
    Mutant(
        id="unfinished-attempt-forgotten",
        module=RUN,
        original="            return self._after_unfinished(result.claim)\n",
        replacement="            return result.claim\n",
        description="the claim ignores an attempt that never ended: a container that timed out is replaced and "
        "forgets the handler's time, so the pair starts late again, is cut off again and spends its attempts",
        what_should_catch_it="crowded batches: a tenant's charge behind another tenant's slow ordered backlog in "
        "each batch, cut off every time, then dead as exhausted (15)",
        # 77, 82 and 154 of the crowded schedules of 1..154 (15 caught it until the look-up after a failed start and the
        # throttled starts changed that schedule's workflow: its batches no longer crowd the charge the same way)
        seeds=(77, 82, 154),
    ),
    Mutant(
        id="mapping-judges-its-own-deadline",
        module=RUNTIME,
        original="                handler=function.invoke,\n",
        replacement="                handler=lambda event, _context, function=function: function.invoke(event),\n",
        description="the event source mapping judges the invocation by a deadline of its own, which a fault that "
        "keeps the worker alive through a time jump does not move: a batch finished in time fails, warm",
        what_should_catch_it="a second worker after a visibility timeout inside a slow handler: the container "
        "keeps what it learnt through a timeout it never saw, and starts a slow pair too late (15)",
        # Caught by soak seed 2623927 until the ordered ledger's next event took the direct path (it changed that
        # schedule's runs); no seed catches it now: a soak has to find the shape again. tests/local_runtime/
        # test_esm_timeout.py pins the rule it breaks.
        seeds=(),
    ),
    Mutant(
        id="started-without-time",
        module=CONSUMER,
        original="        if self.runs.lacks_time(subscription, remaining_ms, log):\n",
        replacement="        if False:\n",
        description="a pair starts however little of the invocation is left: the deadline stops it, an attempt "
        "spent for what the records before it took",
        what_should_catch_it="slow handlers of two tenants in one batch (slow_handler): the later one is cut off "
        "at the deadline again and again, then dead as exhausted (15)",
        seeds=(2, 6, 7),
    ),
    Mutant(
        id="direct-second-run-without-time",
        module=DIRECT,
        original="            if run.lacks_time():\n",
        replacement="            if False:\n",
        description="a DynamoDB-only pair whose direct commit found a row runs again under a lease however little "
        "of the invocation its first run left: the deadline stops it, an attempt spent",
        what_should_catch_it="the operator's reconcile during a slow direct run (reconcile_during_run): the run "
        "after the refused commit starts with too little left, and the deadline stops it (15)",
        seeds=(13, 10, 11),
    ),
    Mutant(
        id="ordered-direct-second-run-without-time",
        module=GATE,
        original="                if run.lacks_time():\n",
        replacement="                if False:\n",
        description="the next event of an ordered DynamoDB-only subscription whose direct commit found a row runs "
        "again under a lease however little of the invocation its first run left: the deadline stops it",
        what_should_catch_it="the operator's reconcile during a slow direct run of the ordered ledger "
        "(reconcile_during_run): the run after the refused commit starts with too little left (15)",
        seeds=(53,),
    ),
    # -- deploys ---------------------------------------------------------------------------------------
    Mutant(
        id="ordered-since-skips-the-switch",
        module=CONSUMER,
        original="            outcome = self.path_for(pair).deliver(Run(pair, remaining_ms, self.runs))\n",
        replacement=(
            "            if subscription.ordered and not subscription.orders(envelope.occurred_at):\n"
            "                return DeliveryOutcome.SKIPPED\n"
            "            outcome = self.path_for(pair).deliver(Run(pair, remaining_ms, self.runs))\n"
        ),
        description="an event that occurred before an ordered subscription's order starts (ordered_since) is "
        "acknowledged as skipped, whatever its pair's state: work in flight when the subscription was made "
        "ordered never runs",
        what_should_catch_it="a deploy that makes the ledger ordered while its events are relayed, retried or "
        "dead: their pairs lost, no effect and no dead letter (2)",
        seeds=(12, 13, 14),
    ),
    # -- read-only passes and repairs -----------------------------------------------------------------
    Mutant(
        id="verify-never-reads-on",
        module=VERIFICATION,
        original="    if head.last_seq > walk.prev_seq:\n        walk.watch(head.last_seq)\n",
        replacement="    if False:\n        walk.watch(head.last_seq)\n",
        description="verify_chain compares the head it read after the log with the log as read: an emit that "
        "commits between the two reads looks like a head the log does not hold",
        what_should_catch_it="emits landing inside the anchoring pass, status and verify-chain (emit_during_check), "
        "twice in a row where the check reads again: a broken chain reported, a finding recorded (16, 12)",
        seeds=(6, 1, 7),
    ),
    Mutant(
        id="reset-marks-nothing",
        module=AUDIT,
        original=(
            "        now_marked, later = dealing_with[:RESET_MARKS_IN_TRANSACTION], "
            "dealing_with[RESET_MARKS_IN_TRANSACTION:]"
        ),
        replacement="        now_marked, later = (), ()",
        description="an anchor reset records itself but marks none of the findings it deals with: after the "
        "documented repair the tenant never reports healthy again",
        what_should_catch_it="a rewritten log repaired and re-anchored (the schedule's repair): status still shows "
        "its findings (7)",
        seeds=(18, 45, 12),
    ),
    Mutant(
        id="reset-deals-with-nothing",
        module=STATUS,
        original="audit.finding_count(tenant, after=reset)",
        replacement="audit.finding_count(tenant)",
        description="status counts every finding, also those the tenant's anchor reset dealt with: after the "
        "documented repair it never reports healthy again",
        what_should_catch_it="a rewritten log repaired and re-anchored (the schedule's repair): status still shows "
        "its findings (7)",
        seeds=(18, 45, 12),
    ),
    Mutant(
        id="forced-replay-of-applied-order",
        module=REPLAY,
        original=(
            "            if claim.status == COMPLETED:\n"
            "                _refuse_if_applied_in_order(context, claim, seq)\n"
        ),
        replacement="            if False:\n                pass\n",
        description="a forced replay of a pair the ordered subscription applied is taken and reported republished; "
        "the consumer skips it (the watermark covers it): nothing runs",
        what_should_catch_it="the operator forces a replay of an applied ledger pair (the schedule's force_replay): "
        "reported republished, never run (2)",
        seeds=(5, 12, 14),
    ),
    # -- partial answers, refused sends, repairs' attempts, floats ----------------------------------------
    Mutant(
        id="unprocessed-key-is-no-row",
        module=LOG_CHECK,
        original=(
            '                found.pop((table, key["pk"]["S"], key["sk"]["S"]), None)'
            "  # unknown: read when it comes up\n"
        ),
        replacement="                pass\n",
        description="a key the batch's BatchGetItem left unprocessed is taken for an event the table does not "
        "hold: a genuine event is refused as not in the log",
        what_should_catch_it="DynamoDB leaving keys of the consumer's read of its batch unprocessed "
        "(unprocessed_keys): a conflict dead letter for an event the log holds, its pair never run (2)",
        seeds=(33, 41, 21),
    ),
    Mutant(
        id="wake-up-refusal-swallowed",
        module=GATE,
        original="subscription=watermark.subscription, error=exc)\n            return DeliveryOutcome.RETRY\n",
        replacement="subscription=watermark.subscription, error=exc)\n            return outcome\n",
        description="a wake-up SQS refused is logged and the message that owed it acknowledged: the deferred "
        "event waits for a wake-up that never comes",
        what_should_catch_it="SQS refusing a consumer's wake-up send (send_refused) behind a slow ordered ledger, "
        "which sends every wake-up: an event left deferred behind an applied one (14)",
        seeds=(70, 74),
    ),
    Mutant(
        id="retry-acknowledged",
        module=RUN,
        original="error=error)\n        return DeliveryOutcome.RETRY",
        replacement="error=error)\n        return DeliveryOutcome.SKIPPED",
        description="a retryable failure gives the lease back and acknowledges the message: the pair waits, "
        "released, for a delivery that will never come",
        what_should_catch_it="any retryable error: once the faults stop, a pair PENDING with nothing on its way "
        "(19, liveness, before the operator's reconcile can hide it)",
        seeds=(1, 2, 3),
    ),
    Mutant(
        id="claim-takes-dead-rows",
        module=CLAIMS,
        original='claimable = "(#status = :pending AND lease_expires_at < :now) OR #status IN (:replaying, :deferred)"',
        replacement='claimable = "(#status = :pending AND lease_expires_at < :now) OR #status IN (:replaying, '
        ':deferred) OR attribute_exists(dead_at)"',
        description="a delivery may claim a DEAD pair (any row with a dead mark), which only a repair may move",
        what_should_catch_it="a copy of a dead pair's message (a redelivery, a duplicate batch): the claim row goes "
        "from DEAD to PENDING, a change no transition of the machine makes (20); and dead work runs again (10)",
        seeds=(2, 3, 4),
    ),
    Mutant(
        id="replay-keeps-attempts",
        module=REPLAY,
        original='    sets = "SET #status = :replaying, attempts = :zero, replayed_at = :now"',
        replacement=(
            '    sets = "SET #status = :replaying, attempts = if_not_exists(attempts, :zero), replayed_at = :now"'
        ),
        description="a replay reruns a dead pair with the attempts it had left (none, if it was exhausted), not "
        "all of them",
        what_should_catch_it="a replay of an exhausted pair whose handler still fails: dead again before it used "
        "its attempts (2)",
        seeds=(3, 11, 21),
    ),
    Mutant(
        id="floats-take-the-plain-path",
        module=CANONICAL,
        original="    if isinstance(value, int):\n        return -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER\n",
        replacement=(
            "    if isinstance(value, int | float):\n        return -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER\n"
        ),
        description="the canonical JSON's fast path takes floats too: Python writes 2.0 where RFC 8785 writes 2, so "
        "an event's hash at emit is not the hash of the row it reads back as",
        what_should_catch_it="a payload float with an integral value (the workload's weight): the message fails its "
        "own hash, the chain its verification (9, 1)",
        seeds=(4, 3, 2),
    ),
    # -- deploys that change a pair's route (outbox.pairs) -------------------------------------------------
    Mutant(
        id="left-out-replay-runs-nothing",
        module=PAIRS,
        original="    (State.REPLAYING, Route.LEFT_OUT): Rule(\n        Act.MARK_DEAD,",
        replacement="    (State.REPLAYING, Route.LEFT_OUT): Rule(\n        Act.NOTHING,",
        description="a replay's message for a pair the deployed catalog no longer runs is acknowledged and nothing "
        "recorded: the pair stays REPLAYING, its dead letter resolved, for ever",
        what_should_catch_it="a replay that races a deploy leaving its pair out (the ledger narrowed, sim.tally moved "
        "to LOCAL): a pair left REPLAYING with no dead letter (2)",
        seeds=(26, 36, 101),
    ),
    Mutant(
        id="unordered-deferred-not-reconciled",
        module=PAIRS,
        original="        Act.ACKNOWLEDGE,\n        Act.RESEND,\n        Outcome.STRANDED,",
        replacement="        Act.ACKNOWLEDGE,\n        Act.NOTHING,\n        Outcome.STRANDED,",
        description="reconcile passes over a deferred pair a deploy took out of its order (made unordered, or "
        "ordered_since moved past it), which status names for it: no wake-up will come, and nothing re-sends it",
        what_should_catch_it="the ledger made unordered, or its ordered_since moved, while events wait deferred: the "
        "operator runs the reconcile status names and a pair is left DEFERRED (2, 14)",
        seeds=(143, 206, 295),  # of the unordering schedules of 1..295 (46 lost it by 2026-12-07)
    ),
    Mutant(
        id="woken-out-of-the-order-runs-in-place",
        module=GATE,
        original="    return DeployedCatalog.route_of(subscription, envelope.type, envelope.occurred_at) is "
        "Route.IN_ORDER\n",
        replacement="    return True\n",
        description="a deferred event a deploy took out of the order (ordered_since moved past it) is run in place "
        "after the order's next completion, as if it were next in order: the watermark goes back to it",
        what_should_catch_it="a narrowing that leaves out an event deferred in the order, then a completion of the "
        "narrowed order waking it: it runs in place although the deployed catalog no longer runs it (2)",
        seeds=(26, 65),  # of the 20 narrowing schedules of 1..248, once invariant 2 told a run after the deploy apart
    ),
    Mutant(
        id="lease-lost-acknowledged",
        module=RUN,
        original="            return DeliveryOutcome.RETRY\n"
        "        except Exception as exc:  # every completion failure is classified\n",
        replacement="            return DeliveryOutcome.SKIPPED\n"
        "        except Exception as exc:  # every completion failure is classified\n",
        description="a worker that lost its lease before completing acknowledges the message for the new owner: "
        "its receipt handle is an older receive's, which SQS may honour, and the new owner may die holding the pair",
        what_should_catch_it="a visibility timeout during a run, a second worker taking the pair over and dying "
        "holding it: the first worker's delete, with the older receipt handle, removes the message, and the pair is "
        "PENDING with nothing to run it once the faults stop (19)",
        seeds=(17, 23),  # of 1..40, once the recorder stopped taking that delete for a rightful acknowledgement
    ),
    Mutant(
        id="woken-past-the-order-wakes-no-more",
        module=GATE,
        original="                    passed, whatever_it_waits_for = ready.seq, True\n                    continue\n",
        replacement="                    break\n",
        description="the wake-up after a completion goes to the lowest deferred row, which a deploy took out of the "
        "order (ordered_since moved past it): it is sent to run the unordered way, and nothing wakes the event "
        "deferred behind the one just applied",
        what_should_catch_it="ordered_since moved past a dead event and the events deferred behind it, then an event "
        "of the new order deferred behind another: left DEFERRED once the faults stop (19)",
        seeds=(6000137,),
    ),
    Mutant(
        id="left-out-run-never-reconciled",
        module=PAIRS,
        original=_LEFT_OUT_RUN + "Act.RESEND,",
        replacement=_LEFT_OUT_RUN + "Act.NOTHING,",
        description="a window reconcile passes over a run a deploy cut short and left out (PENDING, its lease long "
        "over): its own message no longer names it, and nothing else will send one",
        what_should_catch_it="a deploy that narrows the ledger while one of its runs is being retried: the pair left "
        "PENDING after the operator's reconcile (2)",
        seeds=(6887357, 7330351),  # 7330351: drawn for a ledger narrowed while a replay races the deploy
    ),
    Mutant(
        id="left-order-never-woken",
        module=SKIP,
        original="    return first if waited.route is not Route.IN_ORDER else None\n",
        replacement="    return None\n",
        description="a deferred event that waits for one the deployed order no longer has (narrowed away) is never "
        "woken: neither the skip that acknowledges the dead one nor the reconcile status names sends it on",
        what_should_catch_it="the ledger narrowed right after the item it refuses, so that the item's own note waits "
        "behind the dead one: the note left deferred for ever after the operator's skip (2)",
        seeds=(544, 760, 882),
    ),
    Mutant(
        id="acknowledge-refused",
        module=SKIP,
        original="    if act is Act.ACKNOWLEDGE:\n        return acknowledge(",
        replacement="    if act is Act.ACKNOWLEDGE and False:\n        return acknowledge(",
        description="skip refuses to acknowledge a pair outside any order (dead work the deployed catalog no "
        "longer runs or no longer orders), which status and the refused replay tell the operator to skip",
        what_should_catch_it="a deploy that leaves dead work out (sim.tally moved to LOCAL, the ledger narrowed): "
        "the skip status names refused (17)",
        seeds=(6, 9, 26),
    ),
    # -- emit_many, and old versions on the DynamoDB-only path -------------------------------------------
    Mutant(
        id="emit-many-links-to-the-head",
        module=SEALING,
        original="        head = ChainHead(head.tenant, envelope.seq, envelope.hash, envelope.id)\n",
        replacement="        head = ChainHead(head.tenant, envelope.seq, head.last_hash, envelope.id)\n",
        description="emit_many links every event of the batch to the chain head it read, not each to the event "
        "before it: the second event's prev_hash is not the first one's hash",
        what_should_catch_it="an import (several items in one emit_many): the log's chain is broken at the "
        "second event (1)",
        seeds=(3, 9, 2),
    ),
    Mutant(
        id="emit-many-audits-the-first-only",
        module=STORE,
        original="            for envelope, subscriptions in zip(envelopes, inline, strict=True):\n",
        replacement="            for envelope, subscriptions in zip(envelopes[:1], inline, strict=False):\n",
        description="emit_many runs the INLINE subscribers of its first event only: the others commit without "
        "their INLINE writes",
        what_should_catch_it="an import: an item committed without its INLINE audit row, and the counter short (1)",
        seeds=(2, 3, 9),
    ),
    Mutant(
        id="direct-path-skips-upcast",
        module=DIRECT,
        original="            handler_result = run.run_handler(run.pair.key, 1)\n",
        # The direct path's run made from a copy of what the runs share, whose delivered envelope is made as stored
        # (not upcast): a run under a lease stays as it is. Plain source, as a bug would be written: no patch.
        replacement=(
            "            import copy as _copy\n"
            "\n"
            "            as_stored = _copy.copy(run.runs)\n"
            "            as_stored.delivered = lambda envelope: envelope.handler_copy()\n"
            "            handler_result = Run(run.pair, run.remaining_ms, as_stored).run_handler(run.pair.key, 1)\n"
        ),
        description="the DynamoDB-only path hands its handler the payload as stored, not brought to the type's "
        "current version",
        what_should_catch_it="the version deploy: a sim.item_noted follow-up noted at version 1 before it reaches "
        "sim.archive (DynamoDB-only) after it, not upcast (13)",
        seeds=(25, 50),
    ),
    # -- schema versions -------------------------------------------------------------------------------
    Mutant(
        id="upcast-skipped",
        module=RUNS,
        original="        payload = catalog.delivered_payload(envelope.type, envelope.schema_version, copy.payload)\n",
        replacement="        payload = copy.payload\n",
        description="the consumer hands handlers the payload as stored: an old event reaches today's handler in "
        "last year's shape",
        what_should_catch_it="an emitter running last year's code (the schedule's legacy producer): today's handler "
        "gets a version-1 payload (13), refuses it, and the pair is dead without a cause (2)",
        seeds=(6, 5, 12),
    ),
    Mutant(
        id="upcast-one-version-late",
        module=SCHEMAS,
        original="    for upcaster in upcasters[stored_version - 1 : current_version - 1]:",
        replacement="    for upcaster in upcasters[stored_version : current_version - 1]:",
        description="upcasting starts one version too late: a version-1 payload skips its first upcaster",
        what_should_catch_it="the legacy producer's version-1 events: delivered un-upcast, then refused (13, 2)",
        seeds=(5, 6, 12),
    ),
    # -- an upgrade's rows, the engine's own conflicts grouped, a reset's second ------------------------------
    Mutant(
        id="upgrade-forgets-the-older-digest",
        module=ROWS,
        original='    return canonical, _sha256({**envelope.digested_body(), "trace_context": None})\n',
        replacement="    return (canonical,)\n",
        description="the claim rows the previous release wrote for an event without a trace context (its digest "
        "had the context as null) are taken for other content: after the upgrade, a pair it left pending, dead or "
        "done comes back as a conflict dead letter, never run",
        what_should_catch_it="the engine upgraded from 0.6.0 mid-schedule (its rows' digests), then the pair "
        "retried, replayed or its message redelivered: a conflict for the log's own content (2)",
        seeds=(37, 55, 56),
    ),
    Mutant(
        id="conflict-groups-keep-hashes",
        module=GROUPS,
        original='NUMBER.sub("#", HASH.sub("<hash>", UUID.sub("<id>", EVENT_ID.sub("<event>", text))))',
        replacement='NUMBER.sub("#", UUID.sub("<id>", EVENT_ID.sub("<event>", text)))',
        description="failure groups blank the digits of a hash but keep its letters: the engine's conflict dead "
        "letters of one incident (each names the hash the log holds) are one group each",
        what_should_catch_it="a forged batch (copies of several events at places the log holds): its conflict "
        "letters in more than one failure group (7)",
        seeds=(2, 6, 7),
    ),
    Mutant(
        id="conflict-groups-per-tenant",
        module=GROUPS,
        original="    return letter.tenant if letter.reason == DeadReason.CONFLICT else None\n",
        replacement="    return None\n",
        description="failure groups keep the tenant an engine's conflict text names: one incident across tenants is "
        "a group per tenant",
        what_should_catch_it="a forged batch across two tenants: its conflict letters in a group per tenant (7)",
        equivalent="the simulator's tenants are t0 and t1, whose names differ in a digit only, which a failure "
        "group blanks as it blanks every number: no run can tell the two tenants' texts apart (30 two-tenant "
        "forged batches of 1..170 ran without a catch). tests/functional/test_failure_groups_of_conflicts.py, with "
        "acme, globex and initech, catches it",
    ),
    Mutant(
        id="reset-hides-its-second",
        module=AUDIT,
        original=(
            '            condition += " AND attribute_not_exists(#dealt)"\n'
            '            names["#dealt"] = DEALT_WITH_BY\n'
        ),
        replacement=(
            '            condition += " AND observed_at > :after"\n'
            '            values[":after"] = {"S": reset.observed_at if reset is not None else str(after)}\n'
        ),
        description="status counts only the findings stamped after the tenant's last anchor reset (AWS's second "
        "against the operator's clock): a row rewritten in the reset's second is taken as dealt with",
        what_should_catch_it="a row rewritten again right after the repair's anchor reset, in its second: status "
        "healthy, with no finding (7)",
        seeds=(63, 66, 75),
    ),
    # -- completeness ----------------------------------------------------------------------------------------
    Mutant(
        id="completeness-no-check",
        module=COMPLETENESS,
        original="        return ref, Verdict.MISSING, self._missing(tenant, ref, status, since, why, placement)\n",
        replacement="        return ref, Verdict.OPEN, None\n",
        description="the completeness pass judges every pair and reports none missing: a lost message is silent",
        what_should_catch_it="the completeness invariant's probe: a completed pair read as if its claim were lost "
        "is not reported (18)",
        seeds=(1, 2, 3),
    ),
    Mutant(
        id="completeness-dead-is-missing",
        module=COMPLETENESS,
        original="        if rule.outcome is Outcome.DEAD:\n",
        replacement="        if rule.outcome is Outcome.DEAD and not rule.repair:\n",
        description="the completeness pass counts a dead pair, which has its open dead letter, as missing: a false "
        "alarm on every dead letter",
        what_should_catch_it="any run with a dead pair: the pass reports a pair with an outcome (18)",
        seeds=(3, 8, 13),
    ),
    # -- the WORKFLOW lane ---------------------------------------------------------------------------------
    Mutant(
        id="workflow-start-named-per-receive",
        module=WORKFLOW,
        original="        name = execution_name(envelope.id, subscription.name, attempt)\n",
        replacement=(
            "        name = execution_name(envelope.id, subscription.name, attempt + run.pair.receive_count - 1)\n"
        ),
        description="the execution is named by the delivery (its receive count), not by the pair's attempt: a start "
        "sent again after a crash or a lost answer makes a second execution of the same attempt",
        what_should_catch_it="a worker's death right after a start, its message received again: two executions of "
        "one (pair, attempt), one no claim names (21)",
        seeds=(35, 12, 23),
    ),
    Mutant(
        id="workflow-start-failure-acknowledged",
        module=WORKFLOW,
        original="            return run.fail(claim, exc)\n",
        replacement="            return DeliveryOutcome.HANDED\n",
        description="a start that failed (Lambda throttled it, and the look-up by its name found no execution) is "
        "taken as handed: the message is acknowledged, and nothing will start the pair's execution",
        what_should_catch_it="a throttled start: the pair stays PENDING with no execution and nothing on its way "
        "(19, 21)",
        # 27, 41 and 52 of the throttled schedules of 1..58 (since the look-up after a failed start, a lost answer
        # no longer reaches this line: 23 and 26, which caught it through lost answers, no longer do)
        seeds=(27, 41, 52),
    ),
    Mutant(
        id="workflow-start-lookup-dropped",
        module=WORKFLOW_STARTER,
        original="            found = self.find(function, name)\n",
        replacement="            found = None\n",
        description="a start that failed in a way that may have applied (its answer lost) is not followed by the "
        "look-up of its execution by name: the attempt fails though its execution runs, and a pair whose every "
        "attempt's answer is lost is made dead as exhausted while its execution succeeds",
        what_should_catch_it="a start's answer lost: the attempt given back for a start that applied (21); every "
        "answer of a pair's attempts lost: dead as exhausted while its execution succeeded (2)",
        # 7, 15 and 22 of the schedules of 1..45 with lost start answers, by invariant 21 (4 drew none to a start);
        # 7500058 and 7502743, of soak-sized schedules, reach the dead pair itself (invariant 2)
        seeds=(7, 15, 22),
    ),
    Mutant(
        id="workflow-failed-end-completes",
        module=WORKFLOW_ENDS,
        original='        if status == "SUCCEEDED":\n',
        replacement='        if status in ("SUCCEEDED", "FAILED"):\n',
        description="an execution that failed is settled as one that succeeded: the pair COMPLETED, no dead letter",
        what_should_catch_it="the carrier refuses: a pair COMPLETED by an execution that FAILED (21)",
        seeds=(5, 26, 11),
    ),
    Mutant(
        id="workflow-timed-out-still-running",
        module=WORKFLOW_ENDS,
        original='RUNNING_STATUSES = frozenset({"RUNNING", "PAUSING", "PAUSED"})\n',
        replacement='RUNNING_STATUSES = frozenset({"RUNNING", "PAUSING", "PAUSED", "TIMED_OUT"})\n',
        description="an execution that timed out is taken for one still running: its pair stays handed for good",
        what_should_catch_it="the carrier never answers and the execution's timeout passes: the pair HANDED once "
        "the run settled (19, 21)",
        seeds=(13, 26, 7),
    ),
    Mutant(
        id="workflow-stopped-still-running",
        module=WORKFLOW_ENDS,
        original='RUNNING_STATUSES = frozenset({"RUNNING", "PAUSING", "PAUSED"})\n',
        replacement='RUNNING_STATUSES = frozenset({"RUNNING", "PAUSING", "PAUSED", "STOPPED"})\n',
        description="an execution the operator stopped by hand is taken for one still running: its pair stays "
        "handed for good",
        what_should_catch_it="the operator stops an execution: the pair HANDED once the run settled (19, 21)",
        seeds=(35, 5, 37),
    ),
    Mutant(
        id="settle-pass-reads-one-shard",
        module=WORKFLOW_HANDOFFS,
        original="    for shard in range(RUNNING_SHARDS):\n",
        replacement="    for shard in range(1):\n",
        description="the settle pass reads the first shard of the running index only: a handed pair listed in "
        "another is settled only by its end's notice",
        what_should_catch_it="the notice of an execution's end is lost: its pair HANDED once the run settled (19, 21)",
        seeds=(4, 28, 27),
    ),
)
