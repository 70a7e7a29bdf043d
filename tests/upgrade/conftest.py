"""The previous release, built from this repository's history: its engine's wheel, installed into a folder of its
own (once per test session), to run in a subprocess with that folder first on PYTHONPATH and this virtual
environment's site-packages (the same pinned dependencies) behind it."""

from __future__ import annotations

import io
import shutil
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import PROJECT_ROOT

# Release 0.5.0: the commit before a54ead0 added the envelope's trace_context (CHANGELOG.md).
RELEASE_0_5_0 = "2373484"


@dataclass(frozen=True)
class Release:
    version: str
    commit: str
    engine: Path  # the folder its engine's wheel was installed into: put it first on PYTHONPATH


@pytest.fixture(scope="session")
def release_0_5_0(tmp_path_factory: pytest.TempPathFactory) -> Release:
    return build_release("0.5.0", RELEASE_0_5_0, tmp_path_factory.mktemp("release-0.5.0"))


def build_release(version: str, commit: str, root: Path) -> Release:
    """``git archive <commit> engine``, ``pip wheel --no-deps`` of it, ``pip install --no-deps --target``. Fails,
    never skips, when git or the commit is missing: the upgrade is tested against the release itself."""
    git = shutil.which("git")
    if git is None:
        pytest.fail(f"the upgrade test builds release {version} from the repository's history, and git is not on PATH")
    found = subprocess.run(
        [git, "-C", str(PROJECT_ROOT), "cat-file", "-e", f"{commit}^{{commit}}"], capture_output=True, text=True
    )
    if found.returncode != 0:
        pytest.fail(
            f"the upgrade test builds release {version} from commit {commit}, which this clone lacks "
            f"({found.stderr.strip() or 'not a git repository?'}): clone with the full history (CI: "
            "actions/checkout with fetch-depth: 0, or git fetch --unshallow)"
        )
    archive = subprocess.run(
        [git, "-C", str(PROJECT_ROOT), "archive", commit, "engine"], capture_output=True, check=True
    )
    source = root / "source"
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(source, filter="data")
    wheels, engine = root / "wheels", root / "engine"
    pip = [sys.executable, "-m", "pip", "--quiet", "--disable-pip-version-check"]
    _run(
        [*pip, "wheel", "--no-deps", "--wheel-dir", str(wheels), str(source / "engine")], f"building {version}'s wheel"
    )
    [wheel] = wheels.glob("chained_outbox-*.whl")
    if not wheel.name.startswith(f"chained_outbox-{version}-"):
        pytest.fail(f"commit {commit} built {wheel.name}, not chained-outbox {version}")
    _run([*pip, "install", "--no-deps", "--target", str(engine), str(wheel)], f"installing {wheel.name}")
    return Release(version=version, commit=commit, engine=engine)


def _run(command: list[str], what: str) -> None:
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        pytest.fail(f"{what} failed (exit {done.returncode}):\n{done.stdout}\n{done.stderr}")
