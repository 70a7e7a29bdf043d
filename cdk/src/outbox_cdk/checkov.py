"""checkov suppressions, written the way the cdk-nag acknowledgements are: on the one resource, with a reason.

checkov reads ``Metadata.checkov.skip`` of each CloudFormation resource: a list of ``{"id", "comment"}``.
``skip`` adds one entry there, next to whatever the resource's metadata already holds; call it where the
resource is made, so the reason sits beside the code it explains (``grep -rn "checkov.skip("``).
"""

from __future__ import annotations

import re
from typing import Any, Final

from aws_cdk import CfnResource
from constructs import IConstruct

METADATA_KEY: Final = "checkov"
CHECK_ID: Final = re.compile(r"CKV2?_AWS_\d+")
# Short enough to say nothing is too short: the infrastructure test holds every comment to this length too.
MIN_REASON_LENGTH: Final = 40

# The tail of every suppression of a customer-managed-key check: without a key, the resource is encrypted
# with a key AWS owns or manages, and the pipeline's one option for a customer-managed key is named here.
CUSTOMER_KEY_OPTION: Final = "pass encryption_key to OutboxPipeline for a customer-managed key"
# CKV_AWS_158, for the log groups of the functions and of the pipes alike.
LOG_GROUP_KEY_REASON: Final = (
    "Encrypted at rest by CloudWatch Logs by default, with a key the service manages (KmsKeyId only names "
    f"a customer-managed key); {CUSTOMER_KEY_OPTION}."
)


def skip(scope: IConstruct, check_id: str, reason: str) -> None:
    """Suppress checkov's ``check_id`` on ``scope``'s CloudFormation resource (``scope`` itself if it is one,
    else its default child), saying why. A check is skipped at most once per resource."""
    resource = _resource(scope)
    if not CHECK_ID.fullmatch(check_id):
        raise ValueError(f"not a checkov AWS check id: {check_id!r}")
    if len(reason.strip()) < MIN_REASON_LENGTH:
        raise ValueError(f"{check_id} on {resource.node.path}: give a real reason, got {reason!r}")
    metadata: dict[str, Any] = dict(resource.get_metadata(METADATA_KEY) or {})
    skips: list[dict[str, str]] = list(metadata.get("skip", []))
    if any(entry.get("id") == check_id for entry in skips):
        raise ValueError(f"{check_id} is already skipped on {resource.node.path}")
    skips.append({"id": check_id, "comment": reason.strip()})
    resource.add_metadata(METADATA_KEY, {**metadata, "skip": skips})


def _resource(scope: IConstruct) -> CfnResource:
    if isinstance(scope, CfnResource):
        return scope
    child = scope.node.default_child
    if not isinstance(child, CfnResource):
        raise TypeError(f"{scope.node.path} has no CloudFormation resource to put a checkov skip on")
    return child
