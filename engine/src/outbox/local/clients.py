"""boto3 clients of a local endpoint: the local runtime's moto server, or moto in process.

Imports boto3 alone (no moto), so the operator CLI can use it without the ``local`` extra; the Lambda
handlers never do (they get their clients from the environment, as on AWS).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import boto3
from botocore.config import Config

REGION = "us-east-1"
CREDENTIALS = "local"  # moto accepts any
# The local runtime's own clients say so in their User-Agent: the served endpoint tells their requests from the
# changes that come from outside (outbox.local.loopback).
RUNTIME_AGENT = "outbox-local-runtime"
# botocore's standard retry mode, up to three retries (four attempts): what the local runtime's clients use.
STANDARD_RETRIES: Mapping[str, Any] = {"mode": "standard", "max_attempts": 3}


def local_client(
    service: str,
    endpoint_url: str | None = None,
    *,
    retries: Mapping[str, Any] | None = None,
    config: Config | None = None,
) -> Any:
    """A client of ``service`` at ``endpoint_url`` (None: moto in process, or whatever the environment
    names), in us-east-1 with fake credentials. Account-based endpoints are off: moto and current botocore
    disagree on them (DynamoDB Streams). ``retries`` is botocore's retry config (None: botocore's default);
    ``config`` is merged over both (a function's own client configuration, say)."""
    options: dict[str, Any] = {"account_id_endpoint_mode": "disabled"}
    if retries is not None:
        options["retries"] = dict(retries)
    merged = Config(**options) if config is None else Config(**options).merge(config)
    return boto3.client(
        service,
        region_name=REGION,
        endpoint_url=endpoint_url,
        aws_access_key_id=CREDENTIALS,
        aws_secret_access_key=CREDENTIALS,
        config=merged,
    )
