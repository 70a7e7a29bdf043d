"""A runtime's state out and in: what ``save_state`` writes, and how ``LocalRuntime(saved=...)``
starts from it (``outbox.local.state`` is the file and its checks).

Captured, paused: moto's DynamoDB, SQS and Pipes backends of the runtime's account and region (a stream's records
are its table's; its shard iterators are not kept), what the AWS fixes keep beside them, each pipe's positions,
the clock, and the durable executions. Restored: the backends put back where moto looks for them, the tables and
queues found there (not created), the pipes resumed from their checkpoints, each event source mapping waiting for
the messages in flight on its queue, as Lambda's poller would after a restart, and each durable execution carried
on from its checkpoints.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from moto.dynamodb.models import dynamodb_backends
from moto.pipes.models import pipes_backends
from moto.sqs.models import sqs_backends

from outbox.local import aws_fixes
from outbox.local.clients import REGION
from outbox.local.esm import InFlight
from outbox.local.resources import ACCOUNT, find_queues, find_tables
from outbox.local.state import SavedState, Stamp, write_state


class LocalRuntime(Protocol):
    """What of ``outbox.local.runtime.LocalRuntime`` a state is taken from and put back into (that module
    imports this one)."""

    clock: Any
    stack: Any
    resources: Any
    pipes: dict[str, Any]
    mappings: dict[str, Any]
    server: Any
    workflows: Any

    def client(self, service: str) -> Any: ...


# moto's backends a saved state holds.
SAVED_BACKENDS: dict[str, Any] = {"dynamodb": dynamodb_backends, "sqs": sqs_backends, "pipes": pipes_backends}


@contextmanager
def paused(server: Any) -> Iterator[None]:
    """No request under way or let in (the served endpoint's ``RequestGate``, when ``server`` is one), nor any
    DynamoDB or SQS call of this process: moto's state stands still. From the thread that steps the runtime."""
    with ExitStack() as held:
        if server is not None:
            held.enter_context(server.gate.closed())
        held.enter_context(aws_fixes.DYNAMODB_LOCK)
        held.enter_context(aws_fixes.SQS_LOCK)
        yield


def outside_changes(runtime: LocalRuntime) -> int:
    """How many changes the runtime's own steps did not make: requests to the served endpoint from outside it (none
    in process), and writes of the durable executions, which run on threads of their own."""
    requests = runtime.server.gate.changes if runtime.server is not None else 0
    return requests + (runtime.workflows.service.changes if runtime.workflows is not None else 0)


def save_state(runtime: LocalRuntime, path: Path) -> int:
    """Write ``runtime``'s state to ``path`` (``outbox.local.state``), atomically, paused; its size in bytes.
    From the thread that steps the runtime, between steps."""
    with paused(runtime.server):
        return write_state(path, Stamp.of(runtime.stack), capture(runtime))


def capture(runtime: LocalRuntime) -> SavedState:
    """The runtime's state, live objects: pickle it (``write_state``) before the pause ends."""
    return SavedState(
        clock=runtime.clock(),
        backends={service: backends[ACCOUNT][REGION] for service, backends in SAVED_BACKENDS.items()},
        fixes=aws_fixes.kept_state(),
        pipes={name: pipe.positions() for name, pipe in runtime.pipes.items()},
        workflows=runtime.workflows.service.snapshot() if runtime.workflows is not None else None,
    )


def restore(runtime: LocalRuntime, saved: SavedState) -> None:
    """moto's backends and the fixes' state as saved; the tables and queues found there, not created."""
    for service, backends in SAVED_BACKENDS.items():
        backends[ACCOUNT][REGION] = saved.backends[service]
    aws_fixes.restore_kept_state(saved.fixes)
    find_tables(runtime.client("dynamodb"), runtime.stack, runtime.resources)
    find_queues(runtime.client("sqs"), runtime.stack, runtime.resources)


def resume(runtime: LocalRuntime, saved: SavedState) -> None:
    """Pipes from their checkpoints; each mapping waits for the messages in flight on its queue (received before
    the stop, by its function or anyone), which come back when the clock passes their visibility; the durable
    executions carry on."""
    for name, pipe in runtime.pipes.items():
        pipe.resume(saved.pipes.get(name, {}))
    queues = sqs_backends[ACCOUNT][REGION].queues
    now = runtime.clock()
    for mapping in runtime.mappings.values():
        queue = queues[mapping.queue_url.rsplit("/", 1)[1]]
        mapping.in_flight = [
            InFlight(message.receipt_handle, message.id, datetime.fromtimestamp(message.visible_at / 1000, UTC))
            for message in queue._messages
            if message.receipt_handle is not None and message.visible_at / 1000 > now.timestamp()
        ]
    if saved.workflows is not None and runtime.workflows is not None:
        runtime.workflows.service.restore(saved.workflows)
