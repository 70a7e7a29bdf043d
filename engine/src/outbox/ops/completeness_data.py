"""The completeness pass's data (``outbox.ops.completeness``): the deployed catalog as data made at synth, the
pairs it holds open and finds missing, and its rows in the audit table (``CompletenessLog``)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, Final

from outbox.catalog import Catalog, Module
from outbox.exceptions import OutboxValidationError
from outbox.log.envelope import format_timestamp
from outbox.subscriptions import Lane, Subscription
from outbox.workflows import WorkflowHandler, workflow

CATALOG_DATA_VERSION: Final = 1
# Open pairs a tenant's watermark may hold below it; past this, the watermark waits (the events above it are
# read again by the next pass): a tenant with that many dead letters needs an operator first.
MAX_OPEN_PAIRS: Final = 2000
# Missing pairs recorded per tenant for status (all are counted).
MISSING_LISTED: Final = 50
# Events a pass reads per tenant: a tenant's first pass over a long log is spread over several passes.
EVENTS_PER_PASS: Final = 20_000
# A pass stops when less than this is left of its invocation, and leaves the rest to the next.
PASS_MARGIN_SECONDS: Final = 20.0

STATE_SORT_KEY: Final = "STATE"
CATALOG_PARTITION: Final = "COMPLETENESS#CATALOG"
# Beside the subscriptions first seen: what the scheduled pass last ran with (``PassSettings``).
SETTINGS_SORT_KEY: Final = "DEPLOYED"
_SETTINGS_KEY: Final = {"pk": {"S": CATALOG_PARTITION}, "sk": {"S": SETTINGS_SORT_KEY}}


def state_partition(tenant: str) -> str:
    return f"TENANT#{tenant}#COMPLETENESS"


# -- the catalog, as data made at synth ---------------------------------------------------------------------


def catalog_data(catalog: Catalog) -> str:
    """What the pass needs of ``catalog``: the subscriptions the durable consumer runs, as compact JSON (the
    anchoring function's environment carries it; Lambda's 4 KB for all variables holds some forty subscriptions):
    each DURABLE one's name, pattern and ordering, each WORKFLOW one's name, pattern and handler (its lane's rule)."""
    subscriptions = sorted(catalog.registry.subscriptions, key=lambda s: s.name)
    rows = [
        [s.name, s.pattern, int(s.ordered), format_timestamp(s.ordered_since) if s.ordered_since else ""]
        for s in subscriptions
        if s.lane is Lane.DURABLE
    ]
    document: dict[str, Any] = {"v": CATALOG_DATA_VERSION, "durable": rows}
    flows = [[s.name, s.pattern, s.handler.path] for s in subscriptions if isinstance(s.handler, WorkflowHandler)]
    if flows:  # absent without: the data of a catalog with none reads as it always did
        document["workflow"] = flows
    return json.dumps(document, separators=(",", ":"))


def _moment(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _never_run(_delivery: Any) -> None:
    raise RuntimeError("the completeness pass holds the catalog as data: it runs no handler")


def catalog_from_data(text: str) -> Catalog:
    """The catalog ``catalog_data`` wrote, with handlers that refuse to run; refused, saying what to do, when the
    text is not that."""
    try:
        document = json.loads(text)
        if document.get("v") != CATALOG_DATA_VERSION:
            raise ValueError(f"version {document.get('v')!r}, this engine reads {CATALOG_DATA_VERSION}")
        subscriptions = tuple(
            Subscription(
                name=name,
                pattern=pattern,
                lane=Lane.DURABLE,
                handler=_never_run,
                ordered=bool(ordered),
                ordered_since=_moment(since) if since else None,
            )
            for name, pattern, ordered, since in document["durable"]
        ) + tuple(
            Subscription(name=name, pattern=pattern, lane=Lane.WORKFLOW, handler=workflow(path))
            for name, pattern, path in document.get("workflow", [])
        )
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise OutboxValidationError(
            f"the completeness pass's catalog data does not read ({exc}): deploy the stack again with this "
            "engine's outbox_cdk, which writes it at synth"
        ) from exc
    return Catalog(modules=[Module(name="deployed", code=(), subscriptions=subscriptions)])


@dataclass(frozen=True)
class PassSettings:
    """What the deployed anchoring function runs the pass with, from its environment (made at synth): the catalog
    as data (``catalog_data``), the bound, and the re-sends a pass may make. The scheduled pass records them in the
    audit table (``CompletenessLog.remember``), so that ``outbox anchor`` runs the pass the stack runs."""

    catalog: str
    bound_seconds: int
    repairs: int = 0


# -- what the pass finds ------------------------------------------------------------------------------------


class Verdict(StrEnum):
    SETTLED = "settled"  # final: nothing more will happen to it, nor needs to
    OPEN = "open"  # an outcome that an operator's repair may still move (dead; waiting in its order)
    UNDER_WAY = "under_way"  # within the bound: judged again by the next pass
    MISSING = "missing"


@dataclass(frozen=True)
class PairRef:
    """A pair the watermark holds open: enough to judge it again without reading its event."""

    seq: int
    event_id: str
    event_type: str
    occurred_at: str
    subscription: str

    def row(self) -> list[Any]:
        return [self.seq, self.event_id, self.event_type, self.occurred_at, self.subscription]


@dataclass(frozen=True)
class MissingPair:
    """A pair with no outcome past the bound: what status lists, with the command that repairs it."""

    tenant: str
    seq: int
    event_id: str
    subscription: str
    state: str  # its claim's status, or "absent"
    since: str  # when it last moved (the event's time, or its claim's last write)
    why: str
    repair: str
    resent: bool = False  # the pass re-sent it itself (self-repair)

    @property
    def line(self) -> str:
        return (
            f"tenant {self.tenant}: seq {self.seq} ({self.event_id}) has no outcome for {self.subscription} since "
            f"{self.since} ({self.state}: {self.why})"
        )

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def of(cls, row: dict[str, Any]) -> MissingPair:
        return cls(**row)


@dataclass
class TenantState:
    """A tenant's completeness watermark, the open pairs below it, and what the last pass found missing."""

    tenant: str
    seq: int = 0  # every pair of an event up to here is settled or in ``open``
    open: list[PairRef] = field(default_factory=list)
    missing: list[MissingPair] = field(default_factory=list)
    missing_count: int = 0
    checked_at: str = ""


@dataclass
class PassResult:
    """What one pass found, per tenant, and what it could not reach in time."""

    missing: dict[str, list[MissingPair]] = field(default_factory=dict)
    missing_count: int = 0
    events_read: int = 0
    open_pairs: int = 0
    resent: int = 0
    deferred: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "missing_pairs": self.missing_count,
            "missing": {t: [m.as_dict() for m in pairs] for t, pairs in self.missing.items()},
            "events_read": self.events_read,
            "open_pairs": self.open_pairs,
            "resent": self.resent,
            "deferred": self.deferred,
        }


class CompletenessLog:
    """The pass's rows in the audit table: each tenant's state, and when each subscription was first seen."""

    def __init__(self, table_name: str, client: Any) -> None:
        self.table_name, self.client = table_name, client

    def state(self, tenant: str) -> TenantState:
        item = self.client.get_item(
            TableName=self.table_name,
            Key={"pk": {"S": state_partition(tenant)}, "sk": {"S": STATE_SORT_KEY}},
            ConsistentRead=True,
        ).get("Item")
        if item is None:
            return TenantState(tenant)
        return TenantState(
            tenant,
            seq=int(item["seq"]["N"]),
            open=[PairRef(*row) for row in json.loads(item["open"]["S"])],
            missing=[MissingPair.of(row) for row in json.loads(item["missing"]["S"])],
            missing_count=int(item["missing_count"]["N"]),
            checked_at=item.get("checked_at", {}).get("S", ""),
        )

    def save(self, state: TenantState) -> None:
        self.client.put_item(
            TableName=self.table_name,
            Item={
                "pk": {"S": state_partition(state.tenant)},
                "sk": {"S": STATE_SORT_KEY},
                "tenant": {"S": state.tenant},
                "seq": {"N": str(state.seq)},
                "open": {"S": json.dumps([ref.row() for ref in state.open], separators=(",", ":"))},
                "missing": {"S": json.dumps([m.as_dict() for m in state.missing[:MISSING_LISTED]])},
                "missing_count": {"N": str(state.missing_count)},
                "checked_at": {"S": state.checked_at},
            },
        )

    def first_seen(self, names: Iterable[str], now: datetime) -> dict[str, str]:
        """When the pass first saw each subscription of ``names`` in the deployed catalog (now, for a new one)."""
        key = {"pk": {"S": CATALOG_PARTITION}, "sk": {"S": STATE_SORT_KEY}}
        item = self.client.get_item(TableName=self.table_name, Key=key, ConsistentRead=True).get("Item")
        seen: dict[str, str] = json.loads(item["seen"]["S"]) if item else {}
        new = {name: format_timestamp(now) for name in names if name not in seen}
        if new:
            seen |= new
            self.client.put_item(TableName=self.table_name, Item={**key, "seen": {"S": json.dumps(seen)}})
        return seen

    def remember(self, settings: PassSettings) -> None:
        """Record ``settings``, what the scheduled pass runs with (one read, and a write only when they changed)."""
        if self.remembered() == settings:
            return
        item = {
            **_SETTINGS_KEY,
            "catalog": {"S": settings.catalog},
            "bound_seconds": {"N": str(settings.bound_seconds)},
            "repairs": {"N": str(settings.repairs)},
        }
        self.client.put_item(TableName=self.table_name, Item=item)

    def remembered(self) -> PassSettings | None:
        """What the scheduled pass last ran with; None before its first pass (or on a stack without the pass)."""
        item = self.client.get_item(TableName=self.table_name, Key=_SETTINGS_KEY, ConsistentRead=True).get("Item")
        if item is None:
            return None
        return PassSettings(item["catalog"]["S"], int(item["bound_seconds"]["N"]), int(item["repairs"]["N"]))
