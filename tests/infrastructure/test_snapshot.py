"""One snapshot per stack. After an intended change: `make snapshots`, then review the diff."""

from __future__ import annotations

from typing import Any

from syrupy.assertion import SnapshotAssertion
from syrupy.extensions.json import JSONSnapshotExtension

from tests.conftest import Synthesized
from tests.infrastructure.conftest import normalise_asset_hashes


def test_every_stack_matches_its_snapshot(synthesized: Synthesized, snapshot: SnapshotAssertion) -> None:
    for stack_name, stack_template in sorted(synthesized.templates.items()):
        normalised: dict[str, Any] = normalise_asset_hashes(stack_template)
        assert normalised == snapshot(name=stack_name, extension_class=JSONSnapshotExtension)
