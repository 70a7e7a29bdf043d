"""`make demo` end to end, small: it must report nothing lost and every chain intact."""

from __future__ import annotations

import json
from pathlib import Path

from tools import demo


def test_the_demo_loses_nothing_and_reports_it(tmp_path: Path) -> None:
    assert demo.main(["--orders", "24", "--out", str(tmp_path)]) == 0

    report = json.loads((tmp_path / "demo-report.json").read_text())
    assert report["lost"] == 0
    assert all(report["chain_intact"].values())
    assert report["workload"]["injected_faults"]["worker crashes before completion"] == 3
    assert report["dead_letters"] == {"terminal": 2}
    assert report["poison_pills"] == 1
    assert set(report["queues"].values()) == {0}, "drained"
    assert report["completed_effects"]["sales.project_order"] == report["workload"]["orders_placed"]
