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


def test_the_lock_satisfies_every_dependency_the_engine_declares() -> None:
    # The layer is built from the engine's files and this lock: a dependency the package declares (for
    # pip users) and the lock lacks, or pins outside the declared range, would make the two drift.
    pins = pinned()
    problems = []
    for spec in metadata.requires("chained-outbox") or []:
        requirement = Requirement(spec)
        if requirement.marker and not requirement.marker.evaluate({"extra": ""}):
            continue  # an extra ([cli], [local]): never in Lambda
        name = canonical(requirement.name)
        if name in RUNTIME_PROVIDED:
            continue
        if name not in pins:
            problems.append(f"{requirement} is not in the lock")
        elif not requirement.specifier.contains(pins[name]):
            problems.append(f"the lock pins {name}=={pins[name]}, outside {requirement}")
    assert problems == []


def test_the_construct_library_builds_the_layer_from_this_lock() -> None:
    from outbox_cdk import engine_layer

    assert engine_layer.LAYER_REQUIREMENTS.read_bytes() == LAYER_REQUIREMENTS.read_bytes()
