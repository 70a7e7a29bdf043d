"""``outbox local serve`` and the state in its folder, from the command line: a state it must not load is
refused with what to run and left as it was; ``--fresh`` replaces it; SIGTERM stops serving and keeps the state.
The app's command here copies the session's synthesized example app (no synth of its own)."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

from outbox.local.state import STATE_FILE, SavedState, Stamp, read_state, write_state
from outbox.local.template import load_stack
from stacks.app_factory import STACK_NAME
from tests.conftest import Synthesized
from tests.e2e.test_local_serve import free_port, wait_for

ROOT = Path(__file__).resolve().parents[2]
OUTBOX = Path(sys.executable).parent / "outbox"


def copying(assembly: Path) -> str:
    """An app command that 'synthesizes' by copying ``assembly`` to where serve asks (CDK_OUTDIR)."""
    code = f"import os, shutil; shutil.copytree({str(assembly)!r}, os.environ['CDK_OUTDIR'], dirs_exist_ok=True)"
    return f'{sys.executable} -c "{code}"'


def env() -> dict[str, str]:
    kept = {key: value for key, value in os.environ.items() if not key.startswith(("PYTEST", "PYTHONPATH"))}
    kept["PYTHONPATH"] = os.pathsep.join([str(ROOT / "engine" / "src"), str(ROOT / "cdk" / "src"), str(ROOT)])
    return kept


def test_a_state_it_must_not_load_is_refused_left_as_it_was_and_fresh_replaces_it(
    synthesized: Synthesized, tmp_path: Path
) -> None:
    state = tmp_path / STATE_FILE
    stamp = Stamp.of(load_stack(synthesized.outdir, STACK_NAME))
    saved_at = datetime(2026, 1, 1, tzinfo=UTC)
    write_state(state, dataclasses.replace(stamp, engine="0.0.1"), SavedState(saved_at, {}, {}, {}))
    before = state.read_bytes()
    command = [str(OUTBOX), "local", "serve", "--app", copying(synthesized.outdir), "--port", str(free_port())]

    refused = subprocess.run(
        [str(OUTBOX), "--json", *command[1:]], cwd=tmp_path, env=env(), capture_output=True, text=True, timeout=180
    )

    assert refused.returncode == 2, refused.stdout + refused.stderr
    error = json.loads(refused.stdout)["error"]
    assert error["kind"] == "refused"
    assert "chained-outbox 0.0.1 there" in error["message"]
    assert "outbox local serve --fresh" in error["message"]
    assert state.read_bytes() == before

    # --fresh starts over, and SIGTERM stops it with the state kept
    log = tmp_path / "serve.log"
    with log.open("w") as out:
        server = subprocess.Popen([*command, "--fresh", "--no-watch"], cwd=tmp_path, env=env(), stdout=out, stderr=out)
    try:
        wait_for(lambda: "serving" in log.read_text() or server.poll() is not None, "serve --fresh")
        assert log.read_text().startswith("a fresh state, kept in .local/state"), log.read_text()
    finally:
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=60) == 0, log.read_text()
    assert "stopped; the state is kept in .local/state" in log.read_text()
    assert read_state(state, stamp).clock > saved_at
