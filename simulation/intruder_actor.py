"""Whoever alters the log or the queue behind the engine's back in a run: a chain head set back, rows
rewritten (one, or a tail with every hash recomputed), an event forged into the durable queue, a malformed
body sent to it."""

from __future__ import annotations

import json
from typing import Any

from outbox import Envelope, EnvelopeParseError, keys
from simulation.bodies import MALFORMED_BODIES
from simulation.catalog import ITEM_CREATED
from simulation.driver_state import SCHEDULED_EVENT, DriverState, reseal
from simulation.schedule import Poison


class Intrusions(DriverState):
    def _log_to_alter(self, tenant: str) -> list[Envelope]:
        """The tenant's log as the engine reads it, or nothing when a row of it does not read as an event (the
        invariants report such a row; the intruder leaves that log alone)."""
        try:
            return list(self.emitters[tenant][0].store.events(tenant))
        except EnvelopeParseError as exc:
            self.trace.add("log", f"{tenant}'s log is left alone: {exc}")
            return []

    def tamper(self) -> None:
        """Someone with write access to the events table rewrites an event in the middle of a tenant's log,
        with a hash that matches its new content (the row after it still links to the old hash)."""
        for tenant in self.world.schedule.tenants:
            if self._tamper_with(tenant):
                return

    def rewrite_in_the_reset_second(self, tenant: str) -> None:
        """Right after the operator's anchor reset, in its second (the virtual clock has not moved), a row below
        the new anchor is rewritten again: only the stream's finding shows it, stamped with AWS's second, which
        the reset's own time (the operator's clock) does not precede. The reset must not have dealt with it."""
        with self.chaos.paused():
            self._tamper_with(tenant)
        self.runtime.run_until_idle()  # the tamper pipe records the finding

    def _tamper_with(self, tenant: str) -> bool:
        log = self._log_to_alter(tenant)
        if len(log) < 2:
            return False
        victim = log[self._random.randrange(len(log) - 1)]
        payload = {**victim.payload, "amount": int(victim.payload["amount"]) + 1}
        rewritten = reseal(victim, payload)
        self.operations.dynamodb.put_item(TableName=self.runtime.output("EventsTableName"), Item=rewritten.to_item())
        self.world.tampered[tenant] = victim
        self.trace.add("log", f"{tenant} seq {victim.seq} is rewritten with a recomputed hash")
        return True

    def rewrite(self) -> None:
        """The hourly anchoring pass runs; then a role that may emit rewrites a tenant's log from some seq to its
        end with ``PutItem``, every hash recomputed and the head row moved to the new last hash: verification
        from genesis finds nothing. The anchored row (the head when the pass ran) is among the rewritten."""
        with self.world.chaos.paused():
            self.runtime.function("AnchoringFunctionName").invoke(SCHEDULED_EVENT)
        for tenant in self.world.schedule.tenants:
            log = self._log_to_alter(tenant)
            if tenant in self.world.tampered or not log:
                continue
            start = self._random.randrange(len(log))
            table = self.runtime.output("EventsTableName")
            prev_hash = log[start].prev_hash
            for index, victim in enumerate(log[start:]):
                changes: dict[str, Any] = {"prev_hash": prev_hash}
                if index == 0:
                    changes["payload"] = {**victim.payload, "amount": int(victim.payload["amount"]) + 7}
                unsealed = victim.model_copy(update=changes)
                forged = unsealed.model_copy(update={"hash": unsealed.computed_hash()})
                self.operations.dynamodb.put_item(TableName=table, Item=forged.to_item())
                prev_hash = forged.hash
            head = self.operations.dynamodb.get_item(TableName=table, Key=keys.head_key(tenant), ConsistentRead=True)
            self.operations.dynamodb.put_item(TableName=table, Item={**head["Item"], "last_hash": {"S": prev_hash}})
            self.world.rewritten[tenant] = log[start:]
            self.trace.add(
                "log", f"{tenant} seqs {log[start].seq}..{log[-1].seq} rewritten, hashes recomputed, head moved"
            )
            return

    def forge(self) -> None:
        """Someone the durable queue admits (or a policy that admits too much) sends it a tenant's next event:
        linked to the head's hash, sealed with a hash that matches, of a type with durable subscriptions. Only
        the log can tell it from a real one: it never held it."""
        for tenant in self.world.schedule.tenants:
            log = list(self.emitters[tenant][0].store.events(tenant))
            created = [event for event in log if event.type == ITEM_CREATED]
            if not created:
                continue
            event_id = self.world.ids()
            unsealed = created[-1].model_copy(
                update={
                    "id": event_id,
                    "seq": log[-1].seq + 1,
                    "prev_hash": log[-1].hash,
                    "correlation_id": event_id,
                    "causation_id": None,
                    "actor": "forger",
                    "payload": {**created[-1].payload, "amount": int(created[-1].payload["amount"]) + 1000},
                }
            )
            forged = unsealed.model_copy(update={"hash": unsealed.computed_hash()})
            self.world.forged.append(event_id)
            self.sqs.send_message(
                QueueUrl=self.durable_queue_url,
                MessageBody=json.dumps(forged.to_item()),
                MessageGroupId=tenant,
                MessageDeduplicationId=f"forged-{event_id}",
            )
            self.trace.add("sqs", f"{tenant}'s next event, seq {forged.seq}, forged: the log never held it")
            return

    def forge_batch(self) -> None:
        """A forged batch, as one incident: for each tenant, copies of up to two of its items at the places the log
        holds them (other content, new ids, hashes that match), and its next event, which the log never held.
        Each is refused with a conflict per subscription; the refusals of one kind are one failure group."""
        for tenant in self.world.schedule.tenants:
            log = self._log_to_alter(tenant)
            created = [event for event in log if event.type == ITEM_CREATED]
            if not created:
                continue
            for place in created[:2]:
                self._send_forged(place, "held")
            self._send_forged(
                created[-1].model_copy(update={"seq": log[-1].seq + 1, "prev_hash": log[-1].hash}), "unheld"
            )

    def _send_forged(self, at: Envelope, kind: str) -> None:
        """``at`` (seq and link as the forger wants them) as a new event of the forger's, sealed, sent."""
        event_id = self.world.ids()
        unsealed = at.model_copy(
            update={
                "id": event_id,
                "correlation_id": event_id,
                "causation_id": None,
                "actor": "forger",
                "payload": {**at.payload, "amount": int(at.payload["amount"]) + 1000},
            }
        )
        forged = unsealed.model_copy(update={"hash": unsealed.computed_hash()})
        self.world.forged.append(event_id)
        self.world.forged_batch[event_id] = kind
        self.sqs.send_message(
            QueueUrl=self.durable_queue_url,
            MessageBody=json.dumps(forged.to_item()),
            MessageGroupId=forged.tenant,
            MessageDeduplicationId=f"forged-{event_id}",
        )
        where = "a place the log holds" if kind == "held" else "the next place, which the log never held"
        self.trace.add("sqs", f"{forged.tenant}'s seq {forged.seq} forged at {where}")

    def _roll_back_head(self, tenant: str) -> None:
        """The tenant's head goes back one event, as a restore from an older backup would set it: the next
        emit must refuse to write over the event at the seq it thinks is free."""
        with self.chaos.paused():
            log = list(self.emitters[tenant][0].store.events(tenant))
            if not log:
                return
            self._write_head(tenant, log[:-1])
        self.world.rolled_back.add(tenant)
        self.trace.add("log", f"{tenant}'s chain head is set back to seq {len(log) - 1}")

    def _send_poison(self, action: Poison) -> None:
        self._poison_serial += 1
        self.world.poison_sent += 1
        body = MALFORMED_BODIES[action.kind] or self._altered_event(action.tenant)
        self.sqs.send_message(
            QueueUrl=self.durable_queue_url,
            MessageBody=body,
            MessageGroupId=action.tenant,
            MessageDeduplicationId=f"poison-{self._poison_serial}",
        )
        self.trace.add("sqs", f"a malformed body ({action.kind}) lands in {action.tenant}'s group")

    def _altered_event(self, tenant: str) -> str:
        """A real event row of ``tenant`` with its amount changed and its hash kept: tampered in transit."""
        rows = self.operations.dynamodb.query(
            TableName=self.runtime.output("EventsTableName"),
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": {"S": keys.event_partition(tenant)}},
            Limit=1,
        )["Items"]
        if not rows:
            return json.dumps({"kind": {"S": "EVENT"}})
        row = rows[0]
        self.world.altered_in_transit.add(row["event_id"]["S"])
        payload = row["payload"]["M"]
        if "amount" in payload:
            payload["amount"] = {"N": str(int(payload["amount"]["N"]) + 1)}
        else:
            payload["tampered"] = {"BOOL": True}
        return json.dumps(row)
