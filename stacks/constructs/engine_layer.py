"""The engine library as a Lambda layer, its dependencies built with pip for the Lambda platform."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, cast

import jsii
from aws_cdk import BundlingOptions, DockerImage, ILocalBundling
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

LAYER_ROOT = Path(__file__).resolve().parents[2] / "layers" / "engine"
RUNTIME = lambda_.Runtime.PYTHON_3_13
ARCHITECTURE = lambda_.Architecture.ARM_64
# pip's platform tag for Lambda's arm64 runtime (Amazon Linux 2023, glibc 2.34).
PIP_PLATFORM = "manylinux2014_aarch64"


PROJECT_ROOT = LAYER_ROOT.parents[1]
# Wheels for the Lambda platform, downloaded once per requirements file: later synths need no network.
WHEELHOUSE = PROJECT_ROOT / ".build" / "wheelhouse"


def _pip(*arguments: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", "--quiet", "--disable-pip-version-check", *arguments], check=True)


def _platform_options() -> list[str]:
    return [
        "--platform",
        PIP_PLATFORM,
        "--implementation",
        "cp",
        "--python-version",
        RUNTIME.name.removeprefix("python"),
        "--only-binary=:all:",
        "--no-deps",  # the requirements file is the complete closure (tests/unit/test_layer_requirements.py)
    ]


def fill_wheelhouse(requirements: Path) -> Path:
    """Download the layer's wheels for the Lambda platform unless this exact requirements file already was."""
    digest = hashlib.sha256(requirements.read_bytes()).hexdigest()[:16]
    house = WHEELHOUSE / f"{PIP_PLATFORM}-{RUNTIME.name}-{digest}"
    if not (house / ".complete").exists():
        _pip("download", "--requirement", str(requirements), "--dest", str(house), *_platform_options())
        (house / ".complete").touch()
    return house


@jsii.implements(ILocalBundling)
class PipForLambdaBundling:
    """Builds the layer without Docker: pip installs wheels for the Lambda platform, not this one, from a
    local wheelhouse (filled from PyPI on the first synth only)."""

    def try_bundle(self, output_dir: str, _options: Any = None) -> bool:
        requirements = LAYER_ROOT / "requirements.txt"
        house = fill_wheelhouse(requirements)
        target = Path(output_dir) / "python"
        _pip(
            "install",
            "--no-compile",  # .pyc files for this machine's Python would be dead weight on 3.13
            "--no-index",
            "--find-links",
            str(house),
            "--requirement",
            str(requirements),
            "--target",
            str(target),
            *_platform_options(),
        )
        shutil.copytree(
            LAYER_ROOT / "python" / "outbox",
            target / "outbox",
            ignore=shutil.ignore_patterns("__pycache__"),
        )
        return True


class EngineLayer(Construct):
    """``self.layer`` holds the ``outbox`` engine and its pinned runtime dependencies."""

    def __init__(self, scope: Construct, construct_id: str) -> None:
        super().__init__(scope, construct_id)
        self.layer = lambda_.LayerVersion(
            self,
            "Layer",
            code=lambda_.Code.from_asset(
                str(LAYER_ROOT),
                bundling=BundlingOptions(
                    # Only used if local bundling declines, which it never does; CDK requires an image.
                    image=DockerImage.from_registry("public.ecr.aws/sam/build-python3.13"),
                    local=cast(ILocalBundling, PipForLambdaBundling()),  # jsii.implements is invisible to mypy
                ),
            ),
            compatible_runtimes=[RUNTIME],
            compatible_architectures=[ARCHITECTURE],
            description="outbox engine: emit(), verify_chain(), the inbox claim, and pinned dependencies",
        )
