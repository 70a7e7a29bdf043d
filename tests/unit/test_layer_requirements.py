"""The layer is installed with --no-deps, so its requirements must be the complete runtime closure."""

from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

LAYER_REQUIREMENTS = Path(__file__).resolve().parents[2] / "layers" / "engine" / "requirements.txt"
# What the Lambda Python runtime already ships.
RUNTIME_PROVIDED = {"boto3", "botocore", "s3transfer", "urllib3", "python-dateutil", "six", "jmespath"}


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pinned() -> dict[str, str]:
    pins = {}
    for line in LAYER_REQUIREMENTS.read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            requirement = Requirement(line)
            pins[canonical(requirement.name)] = str(requirement.specifier).removeprefix("==")
    return pins


def test_every_dependency_of_the_layer_is_pinned_in_it_or_provided_by_the_runtime() -> None:
    pins = pinned()
    missing = []
    for name in pins:
        for spec in metadata.requires(name) or []:
            requirement = Requirement(spec)
            if requirement.marker and not requirement.marker.evaluate({"extra": ""}):
                continue
            dependency = canonical(requirement.name)
            if dependency not in pins and dependency not in RUNTIME_PROVIDED:
                missing.append(f"{name} needs {requirement}")
    assert missing == []


def test_the_layer_pins_match_what_the_tests_run_against() -> None:
    for name, version in pinned().items():
        assert metadata.version(name) == version, f"{name}: layer pins {version}, tests run {metadata.version(name)}"
