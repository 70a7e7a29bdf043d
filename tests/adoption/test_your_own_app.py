"""The README's "Use it in your own CDK app", done exactly as written: its shell blocks run verbatim, its files
are written as shown, into an empty folder outside the repository, beside a clone of it (``outbox/``).

The first block builds the wheels and installs them into a fresh virtual environment; the files make the app;
the second block synthesizes it with the CDK CLI (cdk-nag on, the layer built with pip) and runs its test on
the local runtime, where the subscription's effect must happen once although the worker dies before
completing. Between blocks the test keeps what a shell would: the folder the block ended in, and the active
virtual environment. A README that drifts from what works fails here.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
SECTION = "## Use it in your own CDK app"
FILE_BLOCK = re.compile(r"<!-- file: (?P<path>\S+) -->\n```[a-z]*\n(?P<body>.*?)```", re.DOTALL)
GUIDE = ROOT / "docs" / "testing.md"
GUIDE_BLOCK = re.compile(r"<!-- testing-guide -->\n```python\n(?P<body>.*?)```", re.DOTALL)
SHELL_BLOCK = re.compile(r"<!-- shell: adoption -->\n```bash\n(?P<body>.*?)```", re.DOTALL)
# Of this process's environment, what a user's own shell would not have: our Python, pytest and make settings.
# And jsii's banner switches, which the README's own line sets.
NOT_THE_USERS = ("PYTHON", "VIRTUAL_ENV", "PYTEST", "MAKE", "MFLAGS", "JSII_SILENCE_WARNING")


def section() -> str:
    text = README.read_text()
    start = text.index(SECTION)
    return text[start : text.index("\n## ", start + len(SECTION))]


def readme_files() -> dict[str, str]:
    return {match["path"]: match["body"] for match in FILE_BLOCK.finditer(section())}


def readme_commands() -> list[str]:
    return [match["body"] for match in SHELL_BLOCK.finditer(section())]


def test_the_section_shows_every_file_and_command_the_app_needs() -> None:
    assert set(readme_files()) == {
        "app.py",
        "cdk.json",
        "pyproject.toml",
        "src/shop/__init__.py",
        "src/shop/catalog.py",
        "src/shop/checkout.py",
        "tests/conftest.py",
        "tests/test_shop.py",
    }
    install, build_and_test = readme_commands()
    assert "pip install" in install
    assert "--find-links" in install
    assert "synth" in build_and_test
    assert "python -m pytest" in build_and_test


def test_the_readmes_cdk_json_has_the_feature_flags_cdk_init_gives_a_new_app() -> None:
    templates = ROOT / "node_modules" / "aws-cdk" / "lib" / "init-templates"
    recommended = json.loads((templates / ".recommended-feature-flags.json").read_text())
    shown = json.loads(readme_files()["cdk.json"])

    assert shown["context"] == recommended, "regenerate the README's cdk.json from the pinned CDK CLI's flags"
    pinned = json.loads((ROOT / "package.json").read_text())["devDependencies"]["aws-cdk"]
    assert all(f"aws-cdk@{pinned} " in block for block in readme_commands() if "aws-cdk@" in block)


@dataclass(frozen=True)
class Shell:
    """What the user's shell holds after a block: where it is, and the virtual environment it activated."""

    work: Path

    @property
    def app(self) -> Path:
        return self.work / "shop"

    @property
    def venv(self) -> Path:
        return self.app / ".venv"

    def env(self, *, activated: bool) -> dict[str, str]:
        env = {key: value for key, value in os.environ.items() if not key.startswith(NOT_THE_USERS)}
        env.update(AWS_ACCOUNT_ID_ENDPOINT_MODE="disabled")
        if activated:  # what `. .venv/bin/activate` leaves in the shell
            env.update(VIRTUAL_ENV=str(self.venv), PATH=f"{self.venv / 'bin'}{os.pathsep}{env['PATH']}")
        return env

    def run(self, block: str, cwd: Path, *, activated: bool) -> str:
        result = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", block],
            cwd=cwd,
            env=self.env(activated=activated),
            capture_output=True,
            text=True,
            check=False,
        )
        assert result.returncode == 0, f"{block}failed:\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
        return result.stdout + result.stderr


@dataclass(frozen=True)
class Adopted:
    shell: Shell
    built_and_tested: str


@pytest.fixture(scope="module")
def adopted(tmp_path_factory: pytest.TempPathFactory) -> Adopted:
    """The README's section, done in an empty folder beside a clone of the repository."""
    shell = Shell(tmp_path_factory.mktemp("adoption"))
    (shell.work / "outbox").symlink_to(ROOT, target_is_directory=True)
    install, build_and_test = readme_commands()
    shell.run(install, shell.work, activated=False)
    for relative, body in readme_files().items():
        path = shell.app / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(body)
    return Adopted(shell, shell.run(build_and_test, shell.app, activated=True))


@pytest.mark.slow
def test_the_wheels_give_the_engine_the_construct_the_command_and_the_fixture(adopted: Adopted) -> None:
    shell = adopted.shell
    python = str(shell.venv / "bin" / "python")
    probe = (
        "from outbox import EventStore; from outbox_cdk import OutboxPipeline; import cdk_nag; "
        "import outbox.testing.plugin, outbox.local.runtime, outbox_cdk.engine_layer as l; "
        "print(l.ENGINE_PACKAGE)"
    )
    printed = shell.run(f"{python} -c '{probe}'\n", shell.app, activated=True)
    assert str(shell.venv) in printed, "the engine must be imported from the app's venv, not the repository"
    assert "--catalog" in shell.run("outbox --help\n", shell.app, activated=True)


@pytest.mark.slow
def test_the_app_synthesizes_and_its_effect_happens_once_under_a_crash(adopted: Adopted) -> None:
    template = json.loads((adopted.shell.app / "cdk.out" / "Shop.template.json").read_text())
    assert any(r["Type"] == "AWS::Pipes::Pipe" for r in template["Resources"].values())
    # pytest ran after the synth, with cdk.out/ (and the layer's own packages) beside the tests.
    assert re.search(r"\b2 passed\b", adopted.built_and_tested), adopted.built_and_tested[-3000:]
    # outbox catalog listed it offline, ORDERS_TABLE standing in as a placeholder, with no problem (exit 0).
    assert "shop.record_sale" in adopted.built_and_tested
    assert "placeholders for ORDERS_TABLE" in adopted.built_and_tested
    # ... with its producer, which the catalog names with emitted_by=.
    assert "the checkout API (emitted_by)" in adopted.built_and_tested


def size_mb(folder: Path) -> float:
    """What the files under ``folder`` take on disk (symbolic links not followed), in MB."""
    return sum(path.lstat().st_size for path in folder.rglob("*") if path.is_file() and not path.is_symlink()) / 1e6


# What the README's install may take at most. It is what the app needs, not what the local runtime's moto could
# use: aws-cdk-lib with its jsii bundle and cdk-nag (the CDK app), botocore's service models (boto3, and moto,
# which serves DynamoDB and SQS), pydantic's core, Powertools, typer and rich, pytest, flask (moto's server for
# `outbox local serve`): MEASURED_MB (files' sizes, 10^6 bytes), of which aws-cdk-lib alone is some 450; the
# bound leaves 6% for patch releases. moto[server] brought cfn-lint with sympy and networkx, docker, and the
# OpenAPI and GraphQL validators, none of which the local runtime imports: 782 MB on disk with them.
MEASURED_MB = 602
MAX_MB = 640


@pytest.mark.slow
def test_the_apps_environment_holds_what_the_app_needs_and_no_more(adopted: Adopted) -> None:
    measured = size_mb(adopted.shell.venv)
    print(f"the app's virtual environment: {measured:.0f} MB (set at {MEASURED_MB} MB; at most {MAX_MB} MB)")
    assert measured <= MAX_MB, f"{measured:.0f} MB: what did [testing] or [local] start to pull in?"
    installed = adopted.shell.run("pip list --format=freeze\n", adopted.shell.app, activated=True).lower()
    assert not {"cfn-lint", "sympy", "docker"} & {line.split("==")[0] for line in installed.split()}


def test_jsiis_banner_is_silenced_by_the_readmes_line(adopted: Adopted) -> None:
    assert "end-of-life" not in adopted.built_and_tested


@pytest.mark.slow
def test_the_readmes_commands_print_no_terminal_escape_code_into_a_pipe(adopted: Adopted) -> None:
    """The CDK CLI runs the app with FORCE_COLOR=3 whatever its output is: what the app runs (the engine layer's
    pip) must still not colour a pipe, or the synth's WARNING line begins with an escape code."""
    assert "\x1b[" not in adopted.built_and_tested, repr(adopted.built_and_tested[-2000:])


@pytest.mark.slow
def test_every_example_of_the_testing_guide_passes_in_the_readmes_app(adopted: Adopted) -> None:
    # Last of the module: it adds a test file to the app the tests above share.
    examples = "\n\n".join(match["body"] for match in GUIDE_BLOCK.finditer(GUIDE.read_text()))
    (adopted.shell.app / "tests" / "test_testing_guide.py").write_text(examples)
    ran = adopted.shell.run("python -m pytest -q tests/test_testing_guide.py\n", adopted.shell.app, activated=True)
    assert re.search(rf"\b{examples.count(chr(10) + 'def test_')} passed\b", ran), ran[-4000:]
