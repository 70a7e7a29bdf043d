"""pytest fixtures for applications on the outbox, registered by the package's ``pytest11`` entry point.

``outbox_pipeline`` boots the application's synthesized stack on the local runtime, fresh for each test.
Where the assembly is: override the ``outbox_assembly`` fixture (a path, e.g. a session fixture that runs
the synth), or pass ``--outbox-assembly=cdk.out`` (or set ``OUTBOX_ASSEMBLY``); the stack is the only
one in it unless ``--outbox-stack`` (``OUTBOX_STACK``) names it.

Nothing is imported from the local runtime until a fixture is used, so installing the engine without
its ``[local]`` extra leaves every other test suite untouched.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from outbox.testing.pipeline import LocalPipeline


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("outbox", "the outbox's local pipeline (outbox.testing)")
    group.addoption("--outbox-assembly", default=None, help="the cloud assembly to boot (a cdk synth output folder)")
    group.addoption("--outbox-stack", default=None, help="the stack of the assembly to boot (default: the only one)")


@pytest.fixture(scope="session")
def outbox_assembly(request: pytest.FixtureRequest) -> Path:
    """The cloud assembly ``outbox_pipeline`` boots. Override this fixture to synthesize in the session."""
    value = request.config.getoption("--outbox-assembly") or os.environ.get("OUTBOX_ASSEMBLY")
    if not value:
        raise pytest.UsageError(
            "outbox_pipeline needs your synthesized app: define an `outbox_assembly` fixture that returns the "
            "cdk.out folder, or run pytest --outbox-assembly=cdk.out (or set OUTBOX_ASSEMBLY)"
        )
    return Path(value)


@pytest.fixture(scope="session")
def outbox_stack(request: pytest.FixtureRequest) -> str | None:
    """The stack to boot; None: the only stack of the assembly."""
    value: str | None = request.config.getoption("--outbox-stack") or os.environ.get("OUTBOX_STACK")
    return value


@pytest.fixture
def outbox_pipeline(outbox_assembly: Path, outbox_stack: str | None) -> Iterator[LocalPipeline]:
    """The application's stack on the local runtime (in-process moto, virtual clock), fresh for this test."""
    from outbox.testing.pipeline import LocalPipeline

    with LocalPipeline.boot(outbox_assembly, outbox_stack, function_log_level="ERROR") as pipeline:
        yield pipeline
