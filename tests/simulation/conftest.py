"""The simulated stack, loaded once per session from the session's synthesized assembly."""

from __future__ import annotations

import pytest

from outbox.local.template import StackSpec, load_stack
from tests.conftest import Synthesized


@pytest.fixture(scope="session")
def stack(synthesized: Synthesized) -> StackSpec:
    return load_stack(synthesized.outdir, "OutboxEngine")
