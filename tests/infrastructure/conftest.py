"""Helpers for reading the synthesized templates."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import Stack
from aws_cdk import aws_lambda as lambda_
from aws_cdk.assertions import Template

from outbox_cdk.lambda_defaults import ApplicationCode
from stacks.app_factory import STACK_NAME
from tests.conftest import Synthesized

ASSET_HASH = re.compile(r"[0-9a-f]{64}")
# A published version's logical id (a WORKFLOW function's ``currentVersion``) ends in a hash of its function's
# properties, its code's asset hash among them: it changes with every edit of the engine or the app's modules.
VERSION_ID_HASH = re.compile(r"(CurrentVersion[0-9A-F]{8})[0-9a-f]{32}")


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
    """Asset hashes change with every source edit; the snapshot should not (nor should a version's logical id,
    where one is, in a key or a reference)."""
    if isinstance(value, dict):
        return {normalise_asset_hashes(key): normalise_asset_hashes(item) for key, item in value.items()}
    if isinstance(value, list):
        return [normalise_asset_hashes(item) for item in value]
    if isinstance(value, str):
        return VERSION_ID_HASH.sub(r"\1<code-hash>", ASSET_HASH.sub("<asset-hash>", value))
    return value


def imported_engine_layer(stack: Stack) -> lambda_.ILayerVersion:
    """A stand-in for the engine layer in throwaway stacks: the real one would run pip at synth."""
    return lambda_.LayerVersion.from_layer_version_arn(
        stack, "Layer", "arn:aws:lambda:us-east-1:123456789012:layer:engine:1"
    )


def example_application(stack: Stack) -> ApplicationCode:
    """The example app's code and catalog on a stand-in layer, for throwaway stacks."""
    from stacks import outbox_stack

    return ApplicationCode(
        code=lambda_.Code.from_asset(str(outbox_stack.PROJECT_ROOT), exclude=outbox_stack.CODE_EXCLUDE),
        catalog=outbox_stack.CATALOG,
        layer=imported_engine_layer(stack),
    )


def assert_handler_in_layer(handler: str) -> None:
    """``handler`` ("package.module.function") is defined by a file the engine layer is built from."""
    from outbox_cdk import engine_layer

    module, _, attribute = handler.rpartition(".")
    assert module.split(".")[0] == "outbox", f"{handler} is not one of the engine's handlers"
    relative = Path(*module.split(".")[1:]).with_suffix(".py")
    files = {path.relative_to(engine_layer.ENGINE_PACKAGE): path for path in engine_layer.engine_files()}
    assert relative in files, f"{module} is not among the layer's files"
    assert f"def {attribute}(" in files[relative].read_text()
