"""The README's "Use it in your own CDK app", done the way a user would: the two packages built as wheels
and installed into an empty virtual environment, the README's files written into an empty folder outside
the repository, the app synthesized (cdk-nag on) and its test run on the local runtime, where the
subscription's effect must happen exactly once although the worker dies before completing."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
FILE_BLOCK = re.compile(r"<!-- file: (?P<path>[^ ]+) -->\n```python\n(?P<body>.*?)```", re.DOTALL)
# What the user's app needs besides the two wheels, at the versions this repository pins.
USER_REQUIREMENTS = ("aws-cdk-lib", "constructs", "cdk-nag", "pytest")

pytestmark = pytest.mark.slow


def readme_files() -> dict[str, str]:
    files = {match["path"]: match["body"] for match in FILE_BLOCK.finditer(README.read_text())}
    assert {"app.py", "src/shop/catalog.py", "tests/conftest.py", "tests/test_shop.py"} <= set(files)
    return files


def run(command: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    assert result.returncode == 0, f"{' '.join(command)} failed:\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
    return result


def user_env(**extra: str) -> dict[str, str]:
    """This process's environment without its Python and pytest settings, as a user's shell would be."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PYTHON", "VIRTUAL_ENV", "PYTEST"))}
    env.update(AWS_ACCOUNT_ID_ENDPOINT_MODE="disabled", JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION="20", **extra)
    return env


@pytest.fixture(scope="module")
def user_environment(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An empty venv with the two locally built wheels and the user's own requirements installed."""
    work = tmp_path_factory.mktemp("adoption")
    wheels = work / "wheels"
    run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(wheels), "./engine", "./cdk"], ROOT)
    built = sorted(p.name for p in wheels.glob("*.whl"))
    assert [name.split("-")[0] for name in built] == ["chained_outbox", "chained_outbox_cdk"], built
    environment = work / "venv"
    venv.create(environment, with_pip=True)
    python = environment / "bin" / "python"
    run(
        [
            str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
            "--find-links", str(wheels),
            "-c", str(ROOT / "constraints.txt"),
            "chained-outbox[cli,local]", "chained-outbox-cdk", *USER_REQUIREMENTS,
        ],
        work,
    )  # fmt: skip
    return environment


def test_the_wheels_give_the_engine_the_construct_the_command_and_the_fixture(
    user_environment: Path, tmp_path: Path
) -> None:
    python = str(user_environment / "bin" / "python")
    probe = (
        "from outbox import EventStore; from outbox_cdk import OutboxPipeline; "
        "import outbox.testing.plugin, outbox.local.runtime, outbox_cdk.engine_layer as l; "
        "print(l.ENGINE_PACKAGE)"
    )
    printed = run([python, "-c", probe], tmp_path, user_env()).stdout
    assert str(user_environment) in printed, "the engine must be imported from the venv, not the repository"
    help_text = run([str(user_environment / "bin" / "outbox"), "--help"], tmp_path, user_env()).stdout
    assert "--catalog" in help_text
    fixtures = run([python, "-m", "pytest", "--fixtures", "-q", "-p", "no:cacheprovider"], tmp_path, user_env())
    assert "outbox_pipeline" in fixtures.stdout


def test_a_fresh_app_synthesizes_and_its_effect_happens_once_under_a_crash(
    user_environment: Path, tmp_path: Path
) -> None:
    app = tmp_path / "shop"
    for relative, body in readme_files().items():
        path = app / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(body)
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PYTHON", "VIRTUAL_ENV", "PYTEST"))}
    env.update(PYTHONPATH=f"{app}{os.pathsep}{app / 'src'}", AWS_ACCOUNT_ID_ENDPOINT_MODE="disabled")
    python = str(user_environment / "bin" / "python")
    result = run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"], app, env)
    assert "1 passed" in result.stdout, result.stdout
