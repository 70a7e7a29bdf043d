"""``outbox local serve``: your CDK app on the local runtime, served, with its consumers running.

It synthesizes the app (the command of your ``cdk.json``, run with ``CDK_OUTDIR`` and the engine layer's pip
build skipped), boots the stack on moto served at ``127.0.0.1:PORT``, checks it as the test fixture does (the
catalog's contract, the durable consumer's start), writes ``.local/topology.json`` (the endpoint, the stack's
outputs, the catalog and where its code is) for ``outbox --local``, and then keeps the pipeline moving: every
``interval`` its pipes and consumers run until nothing moves, so what the CLI's replay, reconcile and redrive
send is processed, and ``outbox --local status`` afterwards tells the truth.
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import subprocess
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from outbox.local import setup
from outbox.local.clock import VirtualClock
from outbox.local.runtime import LocalRuntime
from outbox.local.template import load_manifest_stacks
from outbox.outputs import LOCAL_TOPOLOGY

__all__ = ["LOCAL_TOPOLOGY", "Served", "serve", "synthesize_app"]

logger = logging.getLogger(__name__)


class ServeError(Exception):
    """The app could not be synthesized or booted: the message says what to fix."""


def synthesize_app(app: str, outdir: Path, context: Mapping[str, str]) -> Path:
    """Run the app's command (``python app.py``) as the CDK CLI would: the assembly goes to ``outdir``."""
    env = {
        **os.environ,
        "CDK_OUTDIR": str(outdir),
        # The engine layer's pip build is for Lambda's platform: the local runtime imports this process's engine.
        "CDK_CONTEXT_JSON": json.dumps({**context, "aws:cdk:bundling-stacks": []}),
    }
    result = subprocess.run(shlex.split(app), env=env, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise ServeError(f"{app} failed (exit {result.returncode}):\n{result.stderr[-4000:]}")
    return outdir


@dataclass
class Served:
    """A booted runtime and what keeps it moving: ``settle()`` runs the pipeline until nothing moves (from the
    serving loop only: one thread steps the runtime; the CLI's requests reach moto's server, not the runtime)."""

    runtime: LocalRuntime

    def settle(self) -> int:
        return self.runtime.run_until_idle()


def serve(
    app: str,
    port: int,
    *,
    stack: str | None = None,
    context: Mapping[str, str] | None = None,
    interval: float = 1.0,
    workdir: Path | None = None,
    ready: Callable[[Served], None] | None = None,
    stop: threading.Event | None = None,
) -> None:
    """Synthesize, boot and serve until ``stop`` is set (Ctrl-C, from the command line)."""
    # No access log of every request on the terminal, nor botocore's notes on each client it makes.
    for noisy in ("werkzeug", "botocore", "boto3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    workdir = workdir or Path.cwd()
    assembly = synthesize_app(app, workdir / ".local" / "cdk.out", context or {})
    name = stack or _only_stack(assembly)
    runtime = LocalRuntime.from_assembly(
        assembly,
        name,
        port=port,
        clock=VirtualClock(datetime.now(UTC).replace(microsecond=0)),
        function_log_level="ERROR",
    )
    stop = stop or threading.Event()
    with runtime:
        setup.check_setup(runtime)
        _write_topology(workdir / LOCAL_TOPOLOGY, runtime, setup.durable_consumer(runtime))
        served = Served(runtime)
        if ready is not None:
            ready(served)
        while not stop.wait(interval):
            try:
                served.settle()
            except Exception:  # a failing invocation is the pipeline's business (its DLQ); keep serving
                logger.exception("the served pipeline could not settle")


def _write_topology(path: Path, runtime: LocalRuntime, consumer: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    topology = {
        "endpoint_url": runtime.endpoint_url,
        "outputs": runtime.outputs(),
        "catalog": consumer.env.get("SUBSCRIPTIONS"),
        "code": str(consumer.code_root),
    }
    path.write_text(json.dumps(topology, indent=2) + "\n")


def _only_stack(assembly: Path) -> str:
    stacks = load_manifest_stacks(assembly)
    if len(stacks) != 1:
        raise ServeError(f"the app has {len(stacks)} stacks ({', '.join(stacks) or 'none'}): name one with --stack")
    return stacks[0]
