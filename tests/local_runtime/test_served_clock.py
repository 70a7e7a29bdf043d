"""``outbox --local`` reads the served runtime's clock, not the machine's: over a serve whose virtual clock has
skipped hours (every visibility timeout and backoff it waited out), what the CLI stamps and measures from now is
the served now, and it says on stderr how far that is from the machine's."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from outbox.local import setup
from outbox.local.runtime import LocalRuntime
from outbox.local.serve import write_topology
from outbox.local.served import ServedClock
from outbox.outputs import LOCAL_TOPOLOGY
from tests.conftest import Synthesized
from tests.e2e.test_local_pipeline import PAYMENT
from tests.e2e.test_local_serve import free_port
from tests.e2e.test_pipeline import unique

ROOT = Path(__file__).resolve().parents[2]
OUTBOX = Path(sys.executable).parent / "outbox"
SKIPPED = timedelta(hours=5)


@pytest.fixture(scope="module")
def served(synthesized: Synthesized, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, LocalRuntime]]:
    folder = tmp_path_factory.mktemp("served-clock")
    with LocalRuntime.from_assembly(synthesized.outdir, port=free_port(), function_log_level="CRITICAL") as runtime:
        setup.check_setup(runtime)
        write_topology(folder / LOCAL_TOPOLOGY, runtime, setup.durable_consumer(runtime))
        runtime.clock.advance(datetime.now(UTC) - runtime.clock() + SKIPPED)  # the serve skipped five hours
        yield folder, runtime
        # moto's backends are the process's: leave none of this stack to the next server of the session
        urllib.request.urlopen(urllib.request.Request(f"{runtime.endpoint_url}/moto-api/reset", method="POST")).close()


def outbox(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PYTEST", "PYTHONPATH"))}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "engine" / "src"), str(ROOT / "cdk" / "src")])
    return subprocess.run([str(OUTBOX), "--local", *args], cwd=folder, env=env, capture_output=True, text=True)


def test_the_served_endpoint_says_its_virtual_clock(served: tuple[Path, LocalRuntime]) -> None:
    _, runtime = served
    assert ServedClock(str(runtime.endpoint_url))() == runtime.clock()


def emit(folder: Path) -> subprocess.CompletedProcess[str]:
    payload = json.dumps(PAYMENT)
    return outbox(folder, "--json", "emit", "payment.completed", "--tenant", unique("t"), "--payload", payload, "--yes")


def test_what_the_cli_stamps_is_on_the_served_clock_and_it_says_so(served: tuple[Path, LocalRuntime]) -> None:
    folder, runtime = served
    emitted = emit(folder)
    assert emitted.returncode == 0, emitted.stdout + emitted.stderr

    occurred = datetime.fromisoformat(json.loads(emitted.stdout)["occurred_at"])
    assert abs(occurred - runtime.clock()) < timedelta(seconds=5)
    assert occurred - datetime.now(UTC) > SKIPPED - timedelta(minutes=1)
    said = " ".join(emitted.stderr.split())
    assert "times are the served runtime's virtual clock" in said
    assert re.search(r"\d h \d+ min ahead of this machine's", said), said


def test_a_window_back_from_now_is_measured_from_the_served_now(served: tuple[Path, LocalRuntime]) -> None:
    folder, runtime = served
    emitted = emit(folder)
    assert emitted.returncode == 0, emitted.stdout + emitted.stderr
    tenant = json.loads(emitted.stdout)["tenant"]
    runtime.clock.advance(timedelta(hours=3))  # the serve skips three more hours

    # An hour back from the served now is two hours after the event: it is out of the window (an hour back from
    # the machine's now, five hours behind, would hold it)
    planned = outbox(folder, "--json", "reconcile", "--since", "1h", "--tenant", tenant, "--dry-run")
    assert planned.returncode == 0, planned.stdout + planned.stderr
    assert json.loads(planned.stdout)["scanned"] == 0

    planned = outbox(folder, "--json", "reconcile", "--since", "4h", "--tenant", tenant, "--dry-run")
    assert planned.returncode == 0, planned.stdout + planned.stderr
    assert json.loads(planned.stdout)["scanned"] == 1


def test_the_served_clock_is_read_once_a_refresh_moves_on_between_and_never_goes_back(
    served: tuple[Path, LocalRuntime],
) -> None:
    _, runtime = served
    cached = ServedClock(str(runtime.endpoint_url), refresh=3600)
    first = cached()
    runtime.clock.advance(timedelta(hours=1))
    assert first <= cached() < first + timedelta(minutes=1), "within the refresh, the machine's elapsed time"

    often = ServedClock(str(runtime.endpoint_url), refresh=0.3)
    read = often()
    time.sleep(0.1)
    between = often()  # moved on by this machine's elapsed time
    assert between > read == runtime.clock()
    time.sleep(0.3)
    assert often() == between, "read again, the virtual clock stood still: it does not go back"
    runtime.clock.advance(timedelta(hours=2))
    time.sleep(0.3)
    assert often() - read >= timedelta(hours=2)
