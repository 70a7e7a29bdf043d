"""Small lookups over a synthesized template dict, shared by the infrastructure tests."""

from __future__ import annotations

from typing import Any

from tests.infrastructure.conftest import resources_of_type


def only_resource(stack_template: dict[str, Any], resource_type: str, prefix: str = "") -> tuple[str, dict[str, Any]]:
    """The one resource of this type whose logical id starts with ``prefix``: (logical id, resource)."""
    matches = {
        logical_id: resource
        for logical_id, resource in resources_of_type(stack_template, resource_type).items()
        if logical_id.startswith(prefix)
    }
    assert len(matches) == 1, f"expected one {resource_type} {prefix}*, found {sorted(matches)}"
    return next(iter(matches.items()))
