"""The layer is installed with --no-deps, so its requirements must be the complete runtime closure; and from a
hashed lock with --require-hashes, so only the locked wheels go into it."""

from __future__ import annotations

import hashlib
import re
import subprocess
import zipfile
from importlib import metadata
from pathlib import Path

import pytest
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


def test_the_layer_carries_the_durable_execution_sdk_a_workflow_s_handler_imports() -> None:
    """A WORKFLOW subscription's function runs its durable handler on this layer (outbox_cdk.WorkflowFunction): the
    ``workflow`` extra's requirements are locked in it, within the ranges the package declares, as the ones it
    always needs are."""
    pins = pinned()
    extra = [
        Requirement(spec)
        for spec in metadata.requires("chained-outbox") or []
        if Requirement(spec).marker is not None and Requirement(spec).marker.evaluate({"extra": "workflow"})
    ]
    assert [canonical(r.name) for r in extra] == ["aws-durable-execution-sdk-python"]
    for requirement in extra:
        name = canonical(requirement.name)
        assert name in pins, f"{requirement} is not in the layer's lock"
        assert requirement.specifier.contains(pins[name]), f"the lock pins {name}=={pins[name]}, outside {requirement}"
    locked = LAYER_REQUIREMENTS.with_name("requirements.lock").read_text()
    assert re.search(r"^aws-durable-execution-sdk-python==\S+ --hash=sha256:[0-9a-f]{64}$", locked, re.MULTILINE)


def test_the_construct_library_builds_the_layer_from_this_lock() -> None:
    from outbox_cdk import engine_layer

    assert engine_layer.LAYER_REQUIREMENTS.read_bytes() == LAYER_REQUIREMENTS.read_bytes()


# --- the hashed lock ---------------------------------------------------------------------------------------------

LAYER_LOCK = LAYER_REQUIREMENTS.with_name("requirements.lock")
HASH = re.compile(r"--hash=sha256:[0-9a-f]{64}")


def test_the_lock_pins_exactly_the_requirements_each_with_its_wheels_sha256() -> None:
    """The layer is installed from the lock with --require-hashes: every pin of requirements.txt is in it, in
    order, at the same version, with one sha256 (the one wheel for Lambda's platform), and nothing else is."""
    locked = [line for line in LAYER_LOCK.read_text().splitlines() if line and not line.startswith("#")]
    pins = [line.split("#")[0].strip() for line in LAYER_REQUIREMENTS.read_text().splitlines()]
    assert [line.split(" --hash=")[0] for line in locked] == [pin for pin in pins if pin]
    assert [len(HASH.findall(line)) for line in locked] == [1] * len(locked)
    assert all(HASH.sub("", line.split(" ", 1)[1]).strip() == "" for line in locked)


def test_the_construct_library_builds_the_layer_from_this_hashed_lock() -> None:
    from outbox_cdk import engine_layer

    assert engine_layer.LAYER_LOCK.read_bytes() == LAYER_LOCK.read_bytes()


def tiny_wheel(house: Path, content: str = "VALUE = 1\n") -> Path:
    """A pure wheel ``tiny==1.0`` in ``house``, installable on any platform."""
    house.mkdir(parents=True, exist_ok=True)
    wheel = house / "tiny-1.0-py3-none-any.whl"
    files = {
        "tiny/__init__.py": content,
        "tiny-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: tiny\nVersion: 1.0\n",
        "tiny-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
        archive.writestr("tiny-1.0.dist-info/RECORD", "".join(f"{name},,\n" for name in [*files, "RECORD"]))
    return wheel


def test_the_layer_installs_only_the_locked_wheels_from_the_wheelhouse(tmp_path: Path) -> None:
    """Offline (no index), as every synth after the first: the locked wheel installs; the same name and version
    with other bytes (a wheelhouse tampered with, or a wheel the index replaced) is refused, and so is a lock
    line without a hash."""
    from outbox_cdk.engine_layer import install_wheels

    wheel = tiny_wheel(tmp_path / "house")
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    lock = tmp_path / "requirements.lock"
    lock.write_text(f"tiny==1.0 --hash=sha256:{digest}\n")
    install_wheels(tmp_path / "house", tmp_path / "good", lock)
    assert (tmp_path / "good" / "tiny" / "__init__.py").read_text() == "VALUE = 1\n"

    tiny_wheel(tmp_path / "house", "VALUE = 2  # not what was locked\n")
    with pytest.raises(subprocess.CalledProcessError):
        install_wheels(tmp_path / "house", tmp_path / "tampered", lock)
    assert not (tmp_path / "tampered" / "tiny").exists()

    lock.write_text("tiny==1.0\n")
    with pytest.raises(subprocess.CalledProcessError):
        install_wheels(tmp_path / "house", tmp_path / "unhashed", lock)


def test_the_lock_writer_writes_each_pin_with_its_wheels_hash(tmp_path: Path) -> None:
    from tools.layer_lock import lock_text

    wheel = tiny_wheel(tmp_path / "wheels")
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("# a comment\ntiny==1.0\n")
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    assert lock_text(requirements, tmp_path / "wheels").splitlines()[-1] == f"tiny==1.0 --hash=sha256:{digest}"
    requirements.write_text("tiny==1.0\nmissing==2.0\n")
    with pytest.raises(SystemExit, match=r"no wheel of missing==2\.0"):
        lock_text(requirements, tmp_path / "wheels")
