"""The engine library as a Lambda layer, its dependencies built with pip for the Lambda platform."""

from __future__ import annotations

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


@jsii.implements(ILocalBundling)
class PipForLambdaBundling:
    """Builds the layer without Docker: pip downloads wheels for the Lambda platform, not this one."""

    def try_bundle(self, output_dir: str, _options: Any = None) -> bool:
        target = Path(output_dir) / "python"
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "--requirement",
                str(LAYER_ROOT / "requirements.txt"),
                "--target",
                str(target),
                "--platform",
                PIP_PLATFORM,
                "--implementation",
                "cp",
                "--python-version",
                RUNTIME.name.removeprefix("python"),
                "--only-binary=:all:",
                "--no-deps",
            ],
            check=True,
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
