"""The application's modules. Lambda functions load the catalog through ``SUBSCRIPTIONS=modules:build_catalog``;
tests and the local runtime build their own with injected dependencies."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

import boto3

from modules.commerce import Commerce
from modules.profile import Profile
from modules.services import Services
from outbox.catalog import Catalog


def build_catalog(
    data_table: str | None = None,
    services: Services | None = None,
    dynamodb: Callable[[], Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> Catalog:
    """Every module with its event types, entities and subscriptions. In Lambda the arguments come from
    the function's environment (DATA_TABLE_NAME, COMMERCE_SERVICES); a missing one fails the start."""
    environ = os.environ if environ is None else environ
    table = data_table or environ.get("DATA_TABLE_NAME")
    if not table:
        raise ValueError("build_catalog needs the data table: pass data_table or set DATA_TABLE_NAME")
    client = dynamodb or _lazy_client()
    return Catalog(
        [
            Commerce(table, services or Services.from_env(environ)).module(),
            Profile(table, client).module(),
        ]
    )


def _lazy_client() -> Callable[[], Any]:
    cache: dict[str, Any] = {}

    def get() -> Any:
        if "client" not in cache:
            cache["client"] = boto3.client("dynamodb")
        return cache["client"]

    return get
