"""The engine as a Lambda layer, built at synth from the installed ``outbox`` package and the layer's lock.

The layer holds exactly what ``pip install chained-outbox`` installs: the package's own files, copied from
where Python imports them (an editable checkout or site-packages), and its dependencies as wheels for
Lambda's platform, installed with pip from ``layer/requirements.lock`` (``layer/requirements.txt``'s complete,
pinned closure without boto3 and botocore, which the Lambda runtime provides, each pin with its wheel's sha256).
No Docker: pip downloads the platform's wheels once into a wheelhouse, and later synths work offline. Both the
download and the install run with ``--require-hashes``: a wheel the index serves, or the wheelhouse holds, that is
not the one locked is refused, and the synth fails saying which.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any, Final, TextIO, cast

import jsii
from aws_cdk import Annotations, AssetHashType, BundlingOptions, DockerImage, ILocalBundling
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

import outbox

RUNTIME: Final = lambda_.Runtime.PYTHON_3_13
ARCHITECTURE: Final = lambda_.Architecture.ARM_64
# pip's platform tag for Lambda's arm64 runtime (Amazon Linux 2023, glibc 2.34).
PIP_PLATFORM: Final = "manylinux2014_aarch64"
# The layer's source: the lock of its dependencies, shipped inside this package.
LAYER_SOURCE: Final = Path(str(resources.files("outbox_cdk") / "layer"))
LAYER_REQUIREMENTS: Final = LAYER_SOURCE / "requirements.txt"
# The same pins, each with the sha256 of its wheel for Lambda's platform (``make layer-lock``).
LAYER_LOCK: Final = LAYER_SOURCE / "requirements.lock"
ENGINE_PACKAGE: Final = Path(outbox.__file__).resolve().parent
# What Lambda never imports: the operator command line and the local runtime (moto is not in the layer).
ENGINE_EXCLUDE: Final = ("__pycache__", "*.pyc", "cli", "local")
# Wheels for the Lambda platform, downloaded once per lock: later synths need no network. The cache lives
# in the directory synth runs from (the app's), or where OUTBOX_WHEELHOUSE points.
WHEELHOUSE_ENV: Final = "OUTBOX_WHEELHOUSE"
# The interpreter that compiles the layer's byte code; by default ``python3.13`` from PATH, when there is one.
LAYER_PYTHON_ENV: Final = "OUTBOX_LAYER_PYTHON"
RUNTIME_VERSION: Final = RUNTIME.name.removeprefix("python")


def wheelhouse_root() -> Path:
    return Path(os.environ.get(WHEELHOUSE_ENV) or Path.cwd() / ".build" / "wheelhouse")


def _pip(*arguments: str) -> None:
    quiet = ["--quiet", "--disable-pip-version-check", *pip_colour_options()]
    subprocess.run([sys.executable, "-m", "pip", *quiet, *arguments], check=True)


def pip_colour_options(stream: TextIO | None = None, environ: Mapping[str, str] | None = None) -> list[str]:
    """``--no-color`` unless pip writes to a terminal and ``NO_COLOR`` is unset. The CDK CLI runs the app with
    ``FORCE_COLOR=3`` whatever its output is, so pip would otherwise colour its warnings into a log or a pipe
    (the CLI's own, which passes them on): raw escape codes, the last of which began the synth's next line."""
    stream = sys.stderr if stream is None else stream
    environ = os.environ if environ is None else environ
    terminal = bool(getattr(stream, "isatty", lambda: False)())
    return [] if terminal and not environ.get("NO_COLOR") else ["--no-color"]


def _platform_options() -> list[str]:
    return [
        "--platform",
        PIP_PLATFORM,
        "--implementation",
        "cp",
        "--python-version",
        RUNTIME_VERSION,
        "--only-binary=:all:",
        "--no-deps",  # the lock is the complete closure (tests/unit/test_layer_requirements.py)
    ]


def download_wheels(requirements: Path, dest: Path, *, hashed: bool = True) -> None:
    """The wheels ``requirements`` pins, for the Lambda platform, into ``dest``: checked against its hashes
    (``hashed``, the lock), or not (``tools/layer_lock.py``, which writes them)."""
    checked = ["--require-hashes"] if hashed else []
    _pip("download", *checked, "--requirement", str(requirements), "--dest", str(dest), *_platform_options())


def install_wheels(house: Path, target: Path, lock: Path = LAYER_LOCK) -> None:
    """Install ``lock``'s wheels from ``house`` (no index: offline) into ``target``, each checked against its
    hash in the lock: a wheel in the wheelhouse that is not the locked one is refused."""
    _pip(
        "install",
        "--no-compile",  # .pyc files for this machine's Python would be dead weight on 3.13
        "--no-index",
        "--find-links",
        str(house),
        "--require-hashes",
        "--requirement",
        str(lock),
        "--target",
        str(target),
        *_platform_options(),
    )


def fill_wheelhouse(requirements: Path = LAYER_REQUIREMENTS, lock: Path = LAYER_LOCK) -> Path:
    """Download the layer's wheels for the Lambda platform, checked against ``lock``, unless these pins already
    were (the wheelhouse is named by the pins, so one filled before the lock had hashes is used, and checked at
    install, offline)."""
    digest = hashlib.sha256(requirements.read_bytes()).hexdigest()[:16]
    house = wheelhouse_root() / f"{PIP_PLATFORM}-{RUNTIME.name}-{digest}"
    if not (house / ".complete").exists():
        download_wheels(lock, house)
        (house / ".complete").touch()
    return house


def engine_files() -> list[Path]:
    """The engine's files that go into the layer, in a stable order."""
    ignored = shutil.ignore_patterns(*ENGINE_EXCLUDE)
    found: list[Path] = []

    def walk(directory: Path) -> None:
        names = sorted(p.name for p in directory.iterdir())
        skipped = ignored(str(directory), names)
        for name in names:
            if name in skipped:
                continue
            path = directory / name
            if path.is_dir():
                walk(path)
            else:
                found.append(path)

    walk(ENGINE_PACKAGE)
    return found


class ByteCodeCompilerError(ValueError):
    """The interpreter named to compile the layer's byte code cannot: it is missing or of another version."""


def _python_version(python: str) -> str | None:
    try:
        result = subprocess.run(
            [python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
    except OSError:
        return None
    return result.stdout.strip() if result.returncode == 0 else None


def byte_code_compiler(environ: dict[str, str] | None = None) -> str | None:
    """An interpreter of Lambda's Python version to compile the layer with, or None when there is none.

    ``OUTBOX_LAYER_PYTHON`` names one explicitly (an error if it is not of the runtime's version); otherwise
    ``python3.13`` on PATH is used when it runs. Byte code is specific to a Python minor version: this
    machine's interpreter would write files Lambda ignores.
    """
    environ = dict(os.environ) if environ is None else environ
    named = environ.get(LAYER_PYTHON_ENV)
    if named:
        version = _python_version(named)
        if version != RUNTIME_VERSION:
            found = f"Python {version}" if version else "nothing that runs"
            raise ByteCodeCompilerError(
                f"{LAYER_PYTHON_ENV}={named} is {found}; the layer's byte code must be compiled by Python "
                f"{RUNTIME_VERSION} (Lambda's runtime): point it at a python{RUNTIME_VERSION}, or unset it to "
                "ship the layer without byte code"
            )
        return named
    candidate = shutil.which(f"python{RUNTIME_VERSION}", path=environ.get("PATH"))
    if candidate and _python_version(candidate) == RUNTIME_VERSION:
        return candidate
    return None


def compile_byte_code(root: Path, python: str) -> None:
    """Compile every module under ``root`` ahead, as hash-checked-never ("unchecked-hash") .pyc files.

    Lambda cannot write byte code into /opt, so a layer without it compiles the engine and its
    dependencies from source at every cold start. The layer never changes under its .pyc files, so they
    are used without reading the sources' timestamps (which zipping the asset does not keep anyway).
    """
    subprocess.run(
        [python, "-m", "compileall", "-q", "-j", "0", "--invalidation-mode", "unchecked-hash", str(root)],
        check=True,
        capture_output=True,
    )


def layer_digest(compiler: str | None = None) -> str:
    """The layer's content as a hash of its inputs: the lock, the engine's files with their paths, and whether
    byte code is compiled in."""
    digest = hashlib.sha256(LAYER_REQUIREMENTS.read_bytes())
    digest.update(LAYER_LOCK.read_bytes())
    digest.update(f"byte code: {RUNTIME_VERSION if compiler else 'none'}".encode())
    for path in engine_files():
        digest.update(str(path.relative_to(ENGINE_PACKAGE)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def copy_engine(target: Path) -> None:
    shutil.copytree(ENGINE_PACKAGE, target / "outbox", ignore=shutil.ignore_patterns(*ENGINE_EXCLUDE))


@jsii.implements(ILocalBundling)
class PipForLambdaBundling:
    """Builds the layer without Docker: pip installs wheels for the Lambda platform, not this one, from a
    local wheelhouse (filled from PyPI on the first synth only), then the engine is copied beside them, and
    everything is compiled to byte code for the runtime's Python when ``compiler`` is one."""

    def __init__(self, compiler: str | None = None) -> None:
        self.compiler = compiler

    def try_bundle(self, output_dir: str, _options: Any = None) -> bool:
        house = fill_wheelhouse()
        target = Path(output_dir) / "python"
        install_wheels(house, target)
        copy_engine(target)
        if self.compiler:
            compile_byte_code(target, self.compiler)
        return True


class EngineLayer(Construct):
    """``self.layer`` holds the ``outbox`` engine and its pinned runtime dependencies."""

    def __init__(self, scope: Construct, construct_id: str) -> None:
        super().__init__(scope, construct_id)
        compiler = byte_code_compiler()
        if compiler is None:
            Annotations.of(self).add_warning_v2(
                "@outbox/engine-layer:noByteCode",
                f"the engine layer ships without byte code: no python{RUNTIME_VERSION} was found to compile it, so "
                "every cold start compiles the engine and its dependencies from source. Install Python "
                f"{RUNTIME_VERSION} on the machine that synthesizes, or set {LAYER_PYTHON_ENV} to one.",
            )
        self.layer = lambda_.LayerVersion(
            self,
            "Layer",
            code=lambda_.Code.from_asset(
                str(LAYER_SOURCE),
                # The source folder holds only the lock; the engine's files are an input too.
                asset_hash_type=AssetHashType.CUSTOM,
                asset_hash=layer_digest(compiler),
                bundling=BundlingOptions(
                    # Only used if local bundling declines, which it never does; CDK requires an image.
                    image=DockerImage.from_registry("public.ecr.aws/sam/build-python3.13"),
                    local=cast(ILocalBundling, PipForLambdaBundling(compiler)),  # jsii.implements is invisible to mypy
                ),
            ),
            compatible_runtimes=[RUNTIME],
            compatible_architectures=[ARCHITECTURE],
            description="outbox engine: emit(), verify_chain(), the inbox claim, and pinned dependencies",
        )
