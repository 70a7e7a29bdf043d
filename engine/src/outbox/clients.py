"""The boto3 client configuration of the engine's own functions.

botocore checks every request against the service model before it sends it (``parameter_validation``): for
the durable consumer's claims and completions that check is some 15 % of the client CPU of each request, and
it checks requests the engine builds itself, from code the tests exercise against botocore with the check on.
DynamoDB validates every request again on arrival, so a malformed one still fails, as a ValidationException
(terminal for a completion, like botocore's ParamValidationError) instead of before it leaves. The handlers'
own writes are checked by ``outbox.log.limits.describe_write`` before they join a transaction either way.
"""

from __future__ import annotations

from typing import Any, Final

import boto3
from botocore.config import Config

ENGINE_CLIENT_CONFIG: Final = Config(parameter_validation=False)


def engine_dynamodb_client() -> Any:
    """A DynamoDB client for the engine's hot path: botocore's retries as they are, no client-side validation."""
    return boto3.client("dynamodb", config=ENGINE_CLIENT_CONFIG)
