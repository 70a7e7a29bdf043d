"""Helpers for reading the synthesized templates."""

from __future__ import annotations

import re
from typing import Any

import pytest
from aws_cdk import Stack
from aws_cdk import aws_lambda as lambda_
from aws_cdk.assertions import Template

from stacks.app_factory import STACK_NAME
from tests.conftest import Synthesized

ASSET_HASH = re.compile(r"[0-9a-f]{64}")


@pytest.fixture(scope="session")
def stack_template(synthesized: Synthesized) -> dict[str, Any]:
    return synthesized.template(STACK_NAME)


@pytest.fixture(scope="session")
def template(stack_template: dict[str, Any]) -> Template:
    return Template.from_json(stack_template)


def resources_of_type(stack_template: dict[str, Any], resource_type: str) -> dict[str, dict[str, Any]]:
    return {
        logical_id: resource
        for logical_id, resource in stack_template["Resources"].items()
        if resource["Type"] == resource_type
    }


def normalise_asset_hashes(value: Any) -> Any:
    """Asset hashes change with every source edit; the snapshot should not."""
    if isinstance(value, dict):
        return {key: normalise_asset_hashes(item) for key, item in value.items()}
    if isinstance(value, list):
        return [normalise_asset_hashes(item) for item in value]
    if isinstance(value, str):
        return ASSET_HASH.sub("<asset-hash>", value)
    return value


def imported_engine_layer(stack: Stack) -> lambda_.ILayerVersion:
    """A stand-in for the engine layer in throwaway stacks: the real one would run pip at synth."""
    return lambda_.LayerVersion.from_layer_version_arn(
        stack, "Layer", "arn:aws:lambda:us-east-1:123456789012:layer:engine:1"
    )
