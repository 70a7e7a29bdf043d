"""Backends for the end-to-end scenarios. The deployed-stack backend runs only when OUTBOX_E2E_STACK
names a stack and AWS credentials are configured (see docs/local-runtime.md, "Running the end-to-end suite on AWS")."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.conftest import Synthesized
from tests.e2e.backends import AwsBackend, Backend, LocalBackend, local_backend


@pytest.fixture
def local(synthesized: Synthesized) -> Iterator[LocalBackend]:
    with local_backend(synthesized.outdir, function_log_level="CRITICAL") as backend:
        yield backend


@pytest.fixture(params=["local", "aws"])
def backend(request: pytest.FixtureRequest, synthesized: Synthesized) -> Iterator[Backend]:
    if request.param == "local":
        with local_backend(synthesized.outdir, function_log_level="CRITICAL") as backend:
            yield backend
        return
    stack_name = os.environ.get("OUTBOX_E2E_STACK")
    if not stack_name:
        pytest.skip("set OUTBOX_E2E_STACK (and AWS credentials) to run the scenarios against a deployed stack")
    yield AwsBackend(stack_name)
