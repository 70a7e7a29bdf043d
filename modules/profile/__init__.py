"""The profile module: a buyer's contact address. Its row changes feed the BEST_EFFORT lane, where the
mailing list follows the address (no order, no inbox: a stale write is overwritten by the next change)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from outbox import Envelope, EventStore, Lane, Subscription, writes
from outbox.best_effort.changes import RecordChange
from outbox.catalog import EntitySpec, EventTypeSpec, Module


class AddressChanged(BaseModel):
    model_config = ConfigDict(extra="forbid")

    profile_id: str = Field(min_length=1, max_length=64)
    address: str = Field(min_length=1, max_length=500)


@dataclass
class Profile:
    data_table: str
    dynamodb: Callable[[], Any]  # a client factory: best-effort handlers write directly, outside any claim

    @staticmethod
    def address_key(tenant: str, profile_id: str) -> dict[str, str]:
        return {"pk": f"CONTACTADDRESS#{tenant}#{profile_id}", "sk": "ADDRESS"}

    def change_address(self, store: EventStore, *, tenant: str, actor: str, profile_id: str, address: str) -> Envelope:
        payload = AddressChanged(profile_id=profile_id, address=address).model_dump()
        row = {**self.address_key(tenant, profile_id), "tenant": tenant, "profile_id": profile_id, "address": address}
        return store.emit(
            "profile.address_changed",
            payload,
            tenant=tenant,
            actor=actor,
            extra_writes=[writes.put(self.data_table, row)],
        )

    def refresh_mailing_list(self, change: RecordChange) -> None:
        """BEST_EFFORT: keep the mailing list on the current address; a removed address is unsubscribed."""
        image = change.new_image or change.old_image or {}
        key = {"pk": f"MAILING#{image['tenant']}#{image['profile_id']}", "sk": "MAILING"}
        if change.operation == "REMOVE":
            self.dynamodb().delete_item(TableName=self.data_table, Key=writes.typed(key))
            return
        self.dynamodb().put_item(
            TableName=self.data_table,
            Item=writes.typed({**key, "address": image["address"], "source": change.event_id}),
        )

    def module(self) -> Module:
        return Module(
            name="profile",
            code=("modules.profile",),
            event_types=(EventTypeSpec("profile.address_changed", AddressChanged, "A buyer moved"),),
            entities=(
                EntitySpec("CONTACTADDRESS", "A buyer's current postal address"),
                EntitySpec("MAILING", "Mailing-list entries derived from addresses"),
            ),
            subscriptions=(
                Subscription(
                    "profile.refresh_mailing_list",
                    "record.CONTACTADDRESS.*",
                    Lane.BEST_EFFORT,
                    self.refresh_mailing_list,
                    description="mailing list follows the contact address",
                ),
            ),
        )
