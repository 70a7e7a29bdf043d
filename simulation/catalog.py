"""The simulated application: one module that uses every lane and both kinds of effect.

``sim.item_created`` (an entity row and its event, one transaction) fans out to

- ``sim.audit`` (INLINE): refuses flagged items (fail-closed), else adds to the transaction an audit row that
  names the event's seq and hash, and the tenant's item counter read and incremented (a read-modify-write that
  is right only if INLINE handlers run again for every seal);
- ``sim.note_locally`` (LOCAL): best effort, after the commit;
- ``sim.charge`` (DURABLE): an external effect through an idempotency-keyed ``FakeService``, plus a
  DynamoDB effect committed with the completion (``HandlerResult.writes``);
- ``sim.announce`` (DURABLE): a follow-up event ``sim.item_noted`` plus the DynamoDB effect, both
  committed with the completion; ``sim.archive`` (DURABLE, ``effects="dynamodb"``: no lease on a first
  delivery) handles the follow-up with a DynamoDB effect committed with its completion marker;
- ``sim.ledger`` (DURABLE, ``ordered=True``, in a schedule that has it: ``Schedule.ordered``): applies each
  tenant's items strictly in seq order, each once; its completion appends the seq to the tenant's ledger
  row, so the order it applied in is read from what committed (invariant 14). It declares
  ``effects="dynamodb"``: its next item in order, on its first receive, commits with no claim (the ordered
  gate's direct run), and everything else runs under a lease;
- ``sim.watch_items`` (BEST_EFFORT): the item row's changes, through the record-change lane;
- ``sim.ship`` (WORKFLOW, in a schedule that has it: ``Schedule.workflow``): a durable execution per item, of the
  simulator's own durable function (``simulation.shipping``), which the simulated carrier answers
  (``simulation.workflows``).

``sim.item_created`` is at schema version 2: version 1 named the audit's refusal ``flagged``. A schedule may
have one emitter run last year's code (``legacy_catalog_for``), which stores version 1; the durable handlers
read only version 2, so each of its events must reach them through the upcaster.

Every DynamoDB effect is an ``ADD applied :one`` on a ledger row per (event, subscription): applied twice
reads 2, so a doubled effect cannot hide behind an idempotent write. The row also keeps the amount it was
computed from, so an effect of other content than the logged event's shows.

One file: the simulated application, as a user's catalog module is one: its event types, schemas,
handlers and subscriptions side by side, so that what each handler does to the data is read with what
delivers to it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from botocore.exceptions import ClientError
from pydantic import BaseModel, ConfigDict, Field

from modules.services import ServiceUnavailableError
from outbox import (
    Delivery,
    Effects,
    Envelope,
    EventStore,
    FollowUp,
    HandlerResult,
    Lane,
    NewEvent,
    Subscription,
    TerminalError,
    Upcaster,
    writes,
)
from outbox.best_effort.changes import RecordChange
from outbox.catalog import Catalog, EntitySpec, EventTypeSpec, Module
from outbox.log.writes import typed
from outbox.messages import MAX_MESSAGE_BYTES, MAX_RELAY_BODY_BYTES
from outbox.workflows import workflow
from simulation.schedule import Fault
from simulation.world import InjectedError, World, world_of

ITEM_CREATED = "sim.item_created"
ITEM_NOTED = "sim.item_noted"
AUDIT, NOTE_LOCALLY, WATCH = "sim.audit", "sim.note_locally", "sim.watch_items"
CHARGE, ANNOUNCE, ARCHIVE = "sim.charge", "sim.announce", "sim.archive"
LEDGER = "sim.ledger"  # ordered: a tenant's items applied in seq order (only in a schedule that has it)
SHIP = "sim.ship"  # the shipping workflow (Lane.WORKFLOW: simulation.shipping), in a schedule that has it
TALLY = "sim.tally"  # the subscription a deploy adds, removes or narrows (only in a schedule with that deploy)
# The entities whose row changes sim.watch_items reads: what the record-change pipe carries (runner.run_seed).
WATCHED_ENTITIES = ("SIMITEM",)
# The durable subscriptions of each event type: the (event, subscription) pairs invariant 2 accounts for.
DURABLE = {ITEM_CREATED: (CHARGE, ANNOUNCE), ITEM_NOTED: (ARCHIVE,)}
ORDERED_DURABLE = {ITEM_CREATED: (CHARGE, ANNOUNCE, LEDGER), ITEM_NOTED: (ARCHIVE,)}
RUN_VARIABLE = "SIMULATION_RUN"
CONTRACT_BREACH = "returned a dict; a DURABLE handler returns a HandlerResult or None"
THROTTLED_READ_TRIES = 20
# Padding of an event's payload: "near_bound" leaves its relay body a few KB under the bound (the envelope
# and its type tags take the rest); "over_bound" is past what the durable queue takes, so emit must refuse it.
PADDING = {"near_bound": MAX_RELAY_BODY_BYTES - 3_000, "over_bound": MAX_MESSAGE_BYTES + 1_000}


class CarrierRefusedError(Exception):
    """The carrier refused an item: the shipping workflow fails (``simulation.shipping``; its execution's error is
    named by this type, fully qualified, so it is defined here, in a module of a stable name)."""


class ItemCreated(BaseModel):
    model_config = ConfigDict(extra="forbid")

    operation: str = Field(min_length=1)
    item_id: str = Field(min_length=1)
    amount: int = Field(ge=0)
    reject: bool = False
    note: str = ""  # padding: some events carry a relay body near the bound, or past it
    weight: float = 0.0  # a float: its canonical JSON (RFC 8785) is part of every event's hash


class ItemCreatedV1(BaseModel):
    """``sim.item_created`` as version 1 stored it: the refusal flag was ``flagged``."""

    model_config = ConfigDict(extra="forbid")

    operation: str = Field(min_length=1)
    item_id: str = Field(min_length=1)
    amount: int = Field(ge=0)
    flagged: bool = False
    note: str = ""
    weight: float = 0.0


def item_created_v1_to_v2(payload: dict[str, Any]) -> dict[str, Any]:
    upcast = {name: value for name, value in payload.items() if name != "flagged"}
    return {**upcast, "reject": bool(payload.get("flagged", False))}


class ItemCreatedV3(ItemCreated):
    """``sim.item_created`` after the schedule's version deploy: a channel field (optional, so compatible)."""

    channel: str = "web"


def item_created_v2_to_v3(payload: dict[str, Any]) -> dict[str, Any]:
    return {**payload, "channel": "web"}


ITEM_CREATED_V3 = EventTypeSpec(
    ITEM_CREATED,
    ItemCreatedV3,
    "An item was created (the row and the event together)",
    version=3,
    upcasters=(
        Upcaster(1, ItemCreatedV1, item_created_v1_to_v2),
        Upcaster(2, ItemCreated, item_created_v2_to_v3),
    ),
)
ITEM_CREATED_V2 = EventTypeSpec(
    ITEM_CREATED,
    ItemCreated,
    "An item was created (the row and the event together)",
    version=2,
    upcasters=(Upcaster(1, ItemCreatedV1, item_created_v1_to_v2),),
)
# What last year's code declared: version 1 was current then.
ITEM_CREATED_V1 = EventTypeSpec(ITEM_CREATED, ItemCreatedV1, "An item was created (the row and the event together)")


class ItemNoted(BaseModel):
    model_config = ConfigDict(extra="forbid")

    item_id: str
    amount: int


class ItemNotedV2(ItemNoted):
    """``sim.item_noted`` after the schedule's deploy (any kind): who noted it. Its consumer, ``sim.archive``, takes
    the DynamoDB-only path, so follow-ups noted before the deploy reach it through this upcaster there."""

    noted_by: str


def item_noted_v1_to_v2(payload: dict[str, Any]) -> dict[str, Any]:
    return {**payload, "noted_by": ANNOUNCE}


ITEM_NOTED_DESCRIPTION = "sim.announce noted an item (a follow-up event)"
ITEM_NOTED_V1 = EventTypeSpec(ITEM_NOTED, ItemNoted, ITEM_NOTED_DESCRIPTION)
ITEM_NOTED_V2 = EventTypeSpec(
    ITEM_NOTED, ItemNotedV2, ITEM_NOTED_DESCRIPTION, version=2, upcasters=(Upcaster(1, ItemNoted, item_noted_v1_to_v2),)
)


def item_key(tenant: str, item_id: str) -> dict[str, str]:
    return {"pk": f"SIMITEM#{tenant}#{item_id}", "sk": "ITEM"}


def audit_key(event_id: str) -> dict[str, str]:
    return {"pk": f"SIMAUDIT#{event_id}", "sk": "AUDIT"}


def counter_key(tenant: str) -> dict[str, str]:
    return {"pk": f"SIMCOUNT#{tenant}", "sk": "ITEMS"}


def effect_key(event_id: str, subscription: str) -> dict[str, str]:
    return {"pk": f"SIMEFFECT#{event_id}", "sk": subscription}


def applied_order_key(tenant: str) -> dict[str, str]:
    """The ordered subscription's row of a tenant: the seqs it applied, in the order their completions committed."""
    return {"pk": f"SIMORDER#{tenant}", "sk": LEDGER}


def durable_subscriptions(world: World) -> dict[str, tuple[str, ...]]:
    """The durable subscriptions of each event type in this run's catalog, but the one a deploy changes."""
    return ORDERED_DURABLE if world.schedule.ordered else DURABLE


def expected_pairs(world: World, envelope: Envelope) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The durable subscriptions that must run ``envelope`` once, and those that may (at most once): sim.tally
    as the schedule's deploy left it. Added, it must run every event (its backfill sends the older ones);
    removed or narrowed away, it may have run an event from before the switch, and none after. A deploy of a
    pair's route: the ledger narrowed to sim.item_noted must run every note (it had them before too) and may have
    run an item from before the switch; made unordered, or ordered from the switch on, it must still run every
    item once (what the deploy took out of the order, the unordered way); sim.tally moved to LOCAL may have run an
    item from before the switch (durably), and none after."""
    required = durable_subscriptions(world)[envelope.type]
    deploy, at = world.schedule.deploy, world.deployed_at
    before = at is None or envelope.occurred_at < at
    created = envelope.type == ITEM_CREATED
    if deploy == "ledger_narrowed":
        if not created:
            return (*required, LEDGER), ()
        return tuple(s for s in required if s != LEDGER), (LEDGER,) if before else ()
    if deploy == "tally_to_local":
        return required, (TALLY,) if created and before else ()
    if (deploy == "added" and created) or (deploy == "narrowed" and created):
        return (*required, TALLY), ()
    if (deploy == "removed" and created and before) or (deploy == "narrowed" and before):
        return required, (TALLY,)
    return required, ()


def left_out_by_the_deploy(world: World, envelope: Envelope, subscription: str) -> bool:
    """Whether the schedule's deploy (gone out) left this pair out of the deployed catalog (``outbox.pairs``)."""
    deploy = world.schedule.deploy if world.deployed_at is not None else None
    created = envelope.type == ITEM_CREATED
    if deploy == "ledger_narrowed":
        return subscription == LEDGER and created
    if deploy == "tally_to_local":
        return subscription == TALLY
    return False


@dataclass(frozen=True)
class NewItem:
    """One item of the application's command: what its row and its event hold."""

    operation: str
    item_id: str
    amount: int
    reject: bool
    size: str = "small"


def create_item(
    store: EventStore,
    data_table: str,
    *,
    tenant: str,
    actor: str,
    operation: str,
    item_id: str,
    amount: int,
    reject: bool,
    size: str = "small",
) -> Envelope:
    """The application's one command: the item row and its event commit together, or neither does. The row
    carries a binary fingerprint, which the BEST_EFFORT lane must deliver as bytes."""
    item = NewItem(operation, item_id, amount, reject, size)
    return store.emit(
        "sim.item_created",  # a literal: the catalog's contract reads what the module emits from its source
        _item_payload(store, item),
        tenant=tenant,
        actor=actor,
        extra_writes=[writes.put(data_table, _item_row(tenant, item), condition="attribute_not_exists(pk)")],
    )


def create_items(
    store: EventStore, data_table: str, *, tenant: str, actor: str, items: list[NewItem]
) -> list[Envelope]:
    """The command for an import of several items: their rows and events in one ``emit_many``, all or none."""
    return store.emit_many(
        [NewEvent("sim.item_created", _item_payload(store, item)) for item in items],
        tenant=tenant,
        actor=actor,
        extra_writes=[
            writes.put(data_table, _item_row(tenant, item), condition="attribute_not_exists(pk)") for item in items
        ],
    )


def _item_payload(store: EventStore, item: NewItem) -> dict[str, Any]:
    """The payload at the version the emitter's code stores: 1 (last year's code), 2, or 3 after the deploy."""
    note = "n" * PADDING.get(item.size, 0)
    weight = item.amount / 7  # a float with no short decimal form (and 0.0 for a zero amount)
    spec = store.catalog.spec(ITEM_CREATED) if store.catalog is not None else None
    if spec is not None and spec.version == 1:  # an emitter running last year's code
        old = ItemCreatedV1(
            operation=item.operation,
            item_id=item.item_id,
            amount=item.amount,
            flagged=item.reject,
            note=note,
            weight=weight,
        )
        return old.model_dump()
    model = ItemCreatedV3 if spec is not None and spec.version == 3 else ItemCreated
    current = model(
        operation=item.operation, item_id=item.item_id, amount=item.amount, reject=item.reject, note=note, weight=weight
    )
    return current.model_dump()


def _item_row(tenant: str, item: NewItem) -> dict[str, Any]:
    return {
        **item_key(tenant, item.item_id),
        "tenant": tenant,
        "operation": item.operation,
        "amount": item.amount,
        "fingerprint": item.operation.encode() + b"\x00\xff",
    }


class SimulatedApp:
    """The handlers, bound to one run's world (its fault decisions, fake service and records)."""

    def __init__(self, world: World, *, legacy: bool = False) -> None:
        self.world = world
        self.legacy = legacy  # last year's code: sim.item_created was at version 1
        self.ordered = world.schedule.ordered  # the schedule has the ordered ledger

    # -- in the emitter's process ---------------------------------------------------------------------

    def audit(self, delivery: Delivery) -> HandlerResult:
        # INLINE runs in the producer's own code, on the version it emits.
        if self.legacy:
            old = ItemCreatedV1.model_validate(delivery.envelope.payload)
            item = ItemCreated.model_validate(item_created_v1_to_v2(old.model_dump()))
        else:
            item = self._model().model_validate(delivery.envelope.payload)
        if item.reject:
            raise TerminalError(f"{item.item_id} refused by the audit")
        envelope = delivery.envelope
        row = {**audit_key(envelope.id), "operation": item.operation, "seq": envelope.seq, "hash": envelope.hash}
        audited = writes.put(self.world.data_table, row)
        batch = self.world.importing
        if batch is not None and envelope.actor == batch.actor:
            # One emit_many: each of its events is audited, and the counter written once, by the last of them
            # (one transaction may not write an item twice). Its handlers run again for every seal, in order.
            position, batch.seen = batch.seen % batch.size, batch.seen + 1
            if position < batch.size - 1:
                return HandlerResult(writes=[audited])
            counted = {**counter_key(envelope.tenant), "items": self._items_counted(envelope.tenant) + batch.size}
        else:
            counted = {**counter_key(envelope.tenant), "items": self._items_counted(envelope.tenant) + 1}
        return HandlerResult(writes=[audited, writes.put(self.world.data_table, counted)])

    def _items_counted(self, tenant: str) -> int:
        """The counter as the transaction will find it (a throttled read is retried, as an SDK would)."""
        for _ in range(THROTTLED_READ_TRIES):
            try:
                item = self.world.reader.get_item(
                    TableName=self.world.data_table, Key=typed(counter_key(tenant)), ConsistentRead=True
                ).get("Item")
            except ClientError as exc:
                if exc.response["Error"]["Code"] != "ProvisionedThroughputExceededException":
                    raise
                continue
            return int(item["items"]["N"]) if item else 0
        raise TerminalError("the item counter stayed throttled")

    def note_locally(self, delivery: Delivery) -> HandlerResult | None:
        """Best effort; for every third item it also returns writes, which the LOCAL lane must not commit."""
        self.world.local_runs[delivery.envelope.id] += 1
        if self.world.chaos.fires(Fault.LOCAL_HANDLER_ERROR, delivery.idempotency_key):
            raise RuntimeError("injected: the LOCAL handler failed")
        if delivery.envelope.payload["amount"] % 3 == 0:
            row = {"pk": f"SIMLOCAL#{delivery.envelope.id}", "sk": "NOTE"}
            return HandlerResult(writes=[writes.put(self.world.data_table, row)])
        return None

    # -- durable: the consumer Lambda ---------------------------------------------------------------

    def charge(self, delivery: Delivery) -> Any:
        self._trace_run(delivery)
        self._maybe_fail(delivery)
        item = self._current_item(delivery)
        self.world.service.call("charges", delivery.idempotency_key, {"amount": item.amount})
        self._maybe_fail(delivery)  # failing after the remote effect: the retry must not charge twice
        return self._result(delivery, HandlerResult(writes=[self._effect(delivery)]))

    def announce(self, delivery: Delivery) -> Any:
        self._trace_run(delivery)
        self._maybe_fail(delivery)
        item = self._current_item(delivery)
        if self._noted_v2():
            noted = ItemNotedV2(item_id=item.item_id, amount=item.amount, noted_by=ANNOUNCE).model_dump()
        else:
            noted = ItemNoted(item_id=item.item_id, amount=item.amount).model_dump()
        result = HandlerResult(writes=[self._effect(delivery)], follow_up=FollowUp("sim.item_noted", noted))
        return self._result(delivery, result)

    def archive(self, delivery: Delivery) -> Any:
        self._trace_run(delivery)
        self._maybe_fail(delivery)
        self._current_note(delivery)
        return self._result(delivery, HandlerResult(writes=[self._effect(delivery)]))

    def tally(self, delivery: Delivery) -> Any:
        """The subscription a deploy adds, removes, narrows or moves to LOCAL: a DynamoDB effect under a lease. In a
        schedule that moves it to LOCAL, it refuses one item once (its dead work at the switch)."""
        self._trace_run(delivery)
        self._maybe_fail(delivery)
        key = delivery.idempotency_key
        refuses = self.world.schedule.tally_refuses
        refused = refuses is not None and delivery.envelope.payload.get("operation") == refuses
        if refused and key not in self.world.ledger_refused:
            self.world.ledger_refused.add(key)  # once: a replay of it (before the switch) succeeds
            raise self._injected(delivery, "terminal", TerminalError, "the tally refuses it (once)")
        return self._result(delivery, HandlerResult(writes=[self._effect(delivery)]))

    def ledger(self, delivery: Delivery) -> Any:
        """Ordered: the effect, and the item's seq appended to its tenant's ledger row, both committed with the
        completion (and the watermark's advance): the row lists what was applied, in the order it committed."""
        self._trace_run(delivery)
        if left_out_by_the_deploy(self.world, delivery.envelope, LEDGER):  # the deployed catalog no longer runs it
            self.world.left_out_runs.append(delivery.idempotency_key)
        self._maybe_fail(delivery)
        key = delivery.idempotency_key
        if delivery.envelope.type == ITEM_NOTED:  # a ledger of sim.item_* (the ledger_narrowed deploy's, before it)
            self._current_note(delivery)
            return self._result(delivery, HandlerResult(writes=[self._effect(delivery), self._applied(delivery)]))
        item = self._current_item(delivery)
        if item.operation == self.world.schedule.ledger_refuses and key not in self.world.ledger_refused:
            self.world.ledger_refused.add(key)  # once: a replay of it succeeds
            raise self._injected(delivery, "terminal", TerminalError, "the ledger refuses it (once)")
        return self._result(delivery, HandlerResult(writes=[self._effect(delivery), self._applied(delivery)]))

    def _applied(self, delivery: Delivery) -> Mapping[str, Any]:
        """The event's seq appended to its tenant's ledger row (the order the ledger applied in)."""
        envelope = delivery.envelope
        values = {":none": [], ":seq": [envelope.seq]}
        return writes.update(
            self.world.data_table,
            applied_order_key(envelope.tenant),
            "SET seqs = list_append(if_not_exists(seqs, :none), :seq)",
            values=values,
        )

    def _result(self, delivery: Delivery, result: HandlerResult) -> Any:
        """The handler's result, or (the ``contract_breach`` fault) a dict where a HandlerResult belongs."""
        key = delivery.idempotency_key
        if self.world.chaos.fires(Fault.CONTRACT_BREACH, key):
            self.world.injected[key].append(InjectedError("terminal", CONTRACT_BREACH, delivery.attempt))
            return {"writes": list(result.writes)}
        return result

    def tally_locally(self, delivery: Delivery) -> None:
        """sim.tally after the tally_to_local deploy: best effort, after the commit, with no effect to count (the
        LOCAL lane's promises are invariant 1's, on sim.note_locally)."""

    # -- best effort: the record-change Lambda --------------------------------------------------------

    def watch_items(self, change: RecordChange) -> None:
        fingerprint = (change.new_image or change.old_image or {}).get("fingerprint")
        if not isinstance(fingerprint, bytes):
            raise TypeError(f"the binary fingerprint arrived as {type(fingerprint).__name__}, not bytes")
        self.world.row_changes[str(change.keys["pk"])] += 1

    # -- helpers ------------------------------------------------------------------------------------

    def _model(self) -> type[ItemCreated]:
        """``sim.item_created`` as today's code reads it: version 2, or 3 once the version deploy went out."""
        return ItemCreatedV3 if self.world.deployed("version") else ItemCreated

    def _current_item(self, delivery: Delivery) -> ItemCreated:
        """The payload as today's handler reads it: the current version only. Anything else is recorded
        (invariant 13), then refused by the model, as a handler of today's code would."""
        payload, model = delivery.envelope.payload, self._model()
        if set(payload) != set(model.model_fields):
            self.world.stale_deliveries.append((delivery.idempotency_key, delivery.envelope.schema_version))
        return model.model_validate(payload)

    def _noted_v2(self) -> bool:
        """Every deploy of the schedule takes ``sim.item_noted`` to version 2, whatever else it changes."""
        return self.world.deployed_at is not None

    def _current_note(self, delivery: Delivery) -> ItemNoted:
        """``sim.item_noted`` as today's code reads it (version 2 after a deploy): on the DynamoDB-only path too,
        a follow-up noted before the deploy must arrive upcast (invariant 13)."""
        payload = delivery.envelope.payload
        model = ItemNotedV2 if self._noted_v2() else ItemNoted
        if set(payload) != set(model.model_fields):
            self.world.stale_deliveries.append((delivery.idempotency_key, delivery.envelope.schema_version))
        return model.model_validate(payload)

    def _effect(self, delivery: Delivery) -> Mapping[str, Any]:
        """The ledger row: how often the effect was applied, and from what content (the event's amount)."""
        key = effect_key(delivery.envelope.id, delivery.subscription)
        amount = int(delivery.envelope.payload["amount"])
        values = {":one": 1, ":amount": amount}
        return writes.update(self.world.data_table, key, "ADD applied :one SET amount = :amount", values=values)

    def _trace_run(self, delivery: Delivery) -> None:
        self.world.handler_runs.append((delivery.idempotency_key, self.world.trace_clock()))
        self.world.run_attempts.add((delivery.idempotency_key, delivery.attempt))
        self.world.run_log.append((delivery.idempotency_key, delivery.attempt))
        self.world.trace.add("handler", f"{self.world.trace.key(delivery.idempotency_key)} attempt {delivery.attempt}")
        self._take_time(delivery)

    def _take_time(self, delivery: Delivery) -> None:
        """The time this pair's handler takes on every run (the ``slow_handler`` fault, the schedule's slow
        ordered ledger, or its crowded batches), drawn at its first slow run: most fit the function's timeout,
        some take just what is left of the invocation or just more, some never fit. The virtual clock moves on
        while it runs; Lambda stops the invocation at its deadline."""
        key, chaos = delivery.idempotency_key, self.world.chaos
        if not chaos.active or self.world.sleep is None:
            return
        duration = self.world.durations.get(key)
        if duration is None:
            slow_ledger = self.world.schedule.slow_ledger
            crowded = self.world.schedule.crowded
            if slow_ledger is not None and delivery.subscription == LEDGER:
                duration = slow_ledger
            elif crowded and (delivery.subscription, delivery.envelope.tenant) == (LEDGER, crowded.busy):
                duration = crowded.ledger_takes
            elif crowded and (delivery.subscription, delivery.envelope.tenant) == (CHARGE, crowded.neighbour):
                duration = crowded.charge_takes
            elif chaos.fires(Fault.SLOW_HANDLER, key):
                duration = self._drawn_duration(key, timedelta(milliseconds=delivery.remaining_time_ms()))
            else:
                return
            self.world.durations[key] = duration
        self.world.trace.add("handler", f"{self.world.trace.key(key)} takes {duration.total_seconds():.1f} s")
        self.world.sleep(duration)  # what the consumer learns of the run, the recorder notes (from BEFORE_RUN to RAN)

    def _drawn_duration(self, key: str, left: timedelta) -> timedelta:
        draw = self.world.chaos.draw(Fault.SLOW_HANDLER)
        timeout = self.world.function_timeout
        kind = draw.choices(("fits", "just within", "just past", "never fits"), weights=(5, 2, 2, 1))[0]
        if kind == "just within":
            return max(left - timedelta(seconds=draw.uniform(0.5, 3)), timedelta(seconds=1))
        if kind == "just past" and left + timedelta(seconds=3) < timeout:
            return left + timedelta(seconds=draw.uniform(0.5, 3))
        if kind == "never fits":
            self.world.too_slow.add(key)
            return timeout + timedelta(seconds=draw.uniform(1, 30))
        return timedelta(seconds=draw.uniform(5, 35))

    def _maybe_fail(self, delivery: Delivery) -> None:
        """Raise the error the schedule has for this run of the handler, if any."""
        key, chaos = delivery.idempotency_key, self.world.chaos
        stale = self.world.stale_owner_failure.pop(key, None)
        if stale == "retryable":
            raise self._injected(delivery, "retryable", ServiceUnavailableError, "failed after losing its claim")
        if stale == "terminal":
            raise self._injected(delivery, "terminal", TerminalError, "failed for good after losing its claim")
        if chaos.active and (key in self.world.down or chaos.fires(Fault.DEPENDENCY_DOWN, key)):
            self.world.down.add(key)
            raise self._injected(delivery, "retryable", ServiceUnavailableError, "its dependency is down")
        if chaos.fires(Fault.TERMINAL_ERROR, key):
            raise self._injected(delivery, "terminal", TerminalError, "no retry can fix this")
        if chaos.fires(Fault.RETRYABLE_ERROR, key):
            raise self._injected(delivery, "retryable", ServiceUnavailableError, "try again later")

    def _injected(self, delivery: Delivery, kind: str, error: type[Exception], what: str) -> Exception:
        key = delivery.idempotency_key
        errors = self.world.injected[key]
        message = f"injected {kind} error #{len(errors) + 1} of {self.world.trace.key(key)}: {what}"
        errors.append(InjectedError(kind, message, delivery.attempt))
        return error(message)

    # -- the module ---------------------------------------------------------------------------------

    def module(self) -> Module:
        return Module(
            name="simulation",
            code=("simulation.catalog",),
            event_types=(
                self._item_created_spec(),
                ITEM_NOTED_V2 if self._noted_v2() else ITEM_NOTED_V1,
            ),
            entities=(
                EntitySpec("SIMITEM", "Items"),
                EntitySpec("SIMAUDIT", "Audit rows the INLINE subscriber adds to the transaction"),
                EntitySpec("SIMCOUNT", "Per tenant, the items the INLINE subscriber counted"),
                EntitySpec("SIMEFFECT", "One ledger row per (event, durable subscription): the DynamoDB effect"),
                EntitySpec("SIMORDER", "Per tenant, the seqs the ordered subscription applied, in commit order"),
            ),
            subscriptions=(
                Subscription(AUDIT, ITEM_CREATED, Lane.INLINE, self.audit),
                Subscription(NOTE_LOCALLY, ITEM_CREATED, Lane.LOCAL, self.note_locally),
                Subscription(CHARGE, ITEM_CREATED, Lane.DURABLE, self.charge),
                Subscription(ANNOUNCE, ITEM_CREATED, Lane.DURABLE, self.announce),
                # DynamoDB-only: no lease on a first delivery, its writes commit with a marker (Effects).
                Subscription(ARCHIVE, ITEM_NOTED, Lane.DURABLE, self.archive, effects=Effects.DYNAMODB),
                Subscription(WATCH, "record.SIMITEM.*", Lane.BEST_EFFORT, self.watch_items),
                *self._ordered(),
                *self._tally(),
                *self._workflow(),
            ),
        )

    def _item_created_spec(self) -> EventTypeSpec:
        if self.legacy:
            return ITEM_CREATED_V1
        return ITEM_CREATED_V3 if self.world.deployed("version") else ITEM_CREATED_V2

    def _ordered(self) -> tuple[Subscription, ...]:
        if not self.ordered:
            return ()
        deploy, since = self.world.schedule.deploy, self.world.deployed_at
        pattern = ITEM_CREATED
        options: dict[str, Any] = {"ordered": True}
        if deploy == "ordered":
            # Unordered until the deploy; then ordered from the switch on (its old completions moved no watermark).
            options = {"ordered": True, "ordered_since": since} if since is not None else {}
        elif deploy == "ledger_narrowed":
            # Ordered over sim.item_* until the deploy; then over sim.item_noted alone.
            pattern = ITEM_NOTED if since is not None else "sim.item_*"
        elif deploy == "ledger_unordered" and since is not None:
            options = {}
        elif deploy == "ledger_since_moved" and since is not None:
            options = {"ordered": True, "ordered_since": since}
        # effects="dynamodb": the next item in order commits with no claim on its first receive (the gate's direct run).
        return (Subscription(LEDGER, pattern, Lane.DURABLE, self.ledger, effects=Effects.DYNAMODB, **options),)

    def _workflow(self) -> tuple[Subscription, ...]:
        """sim.ship, in a schedule that has the workflow: a durable execution per item (``simulation.shipping``)."""
        if not self.world.schedule.workflow:
            return ()
        return (Subscription(SHIP, ITEM_CREATED, Lane.WORKFLOW, workflow("simulation.shipping:ship")),)

    def _tally(self) -> tuple[Subscription, ...]:
        """sim.tally as the schedule's deploy has it now: added by it, removed by it, or narrowed by it."""
        deploy, deployed = self.world.schedule.deploy, self.world.deployed_at is not None
        if (deploy == "added" and deployed) or (deploy == "removed" and not deployed):
            return (Subscription(TALLY, ITEM_CREATED, Lane.DURABLE, self.tally),)
        if deploy == "narrowed":
            return (Subscription(TALLY, ITEM_CREATED if deployed else "sim.item_*", Lane.DURABLE, self.tally),)
        if deploy == "tally_to_local":
            if deployed:
                return (Subscription(TALLY, ITEM_CREATED, Lane.LOCAL, self.tally_locally),)
            return (Subscription(TALLY, ITEM_CREATED, Lane.DURABLE, self.tally),)
        return ()


def catalog_for(world: World) -> Catalog:
    return Catalog([SimulatedApp(world).module()])


def legacy_catalog_for(world: World) -> Catalog:
    """The catalog of last year's code: ``sim.item_created`` at version 1, the same subscriptions."""
    return Catalog([SimulatedApp(world, legacy=True).module()])


def build_catalog() -> Catalog:
    """``SUBSCRIPTIONS=simulation.catalog:build_catalog``: the catalog of the run named by SIMULATION_RUN."""
    world = world_of(os.environ[RUN_VARIABLE])
    if world.catalog is None:
        world.catalog = catalog_for(world)
    return world.catalog
