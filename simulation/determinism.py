"""What makes a seed replay exactly: every source of randomness the run touches is seeded from it.

The engine draws event ids (ULIDs, ``outbox.keys.new_event_id``), owner tokens (uuid4) and emit backoff
jitter (an unseeded ``random.Random``) on its own; moto draws message ids and receipt handles; botocore
draws retry jitter from the global ``random``. Event ids and backoff change what happens (the order of a
query, how far the virtual clock moves), the rest only what the trace prints. All of them are seeded here,
by patching the names the engine looks up at call time: the engine itself is not changed.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from types import SimpleNamespace
from unittest import mock

import outbox.inbox.table
import outbox.keys
import outbox.ops.context
import outbox.store
from simulation.world import World


@contextmanager
def seeded(world: World) -> Iterator[None]:
    from moto.moto_api._internal import mock_random

    seed = world.seed
    random.seed(f"{seed}:global")
    mock_random.seed(seed)
    with ExitStack() as stack:
        stack.enter_context(mock.patch.object(outbox.keys, "new_event_id", _event_ids(world)))
        stack.enter_context(mock.patch.object(outbox.store, "random", _random_module(f"{seed}:backoff")))
        stack.enter_context(mock.patch.object(outbox.inbox.table, "uuid", _uuid_module(f"{seed}:owners")))
        stack.enter_context(mock.patch.object(outbox.ops.context, "uuid", _uuid_module(f"{seed}:operator")))
        yield


def _event_ids(world: World) -> Callable[[], str]:
    """``outbox.keys.new_event_id``: the world's seeded ULIDs."""

    def new_event_id() -> str:
        return str(world.ids.ulid())

    return new_event_id


def _uuid_module(seed: str) -> SimpleNamespace:
    stream = random.Random(seed)
    return SimpleNamespace(uuid4=lambda: uuid.UUID(int=stream.getrandbits(128), version=4))


def _random_module(seed: str) -> SimpleNamespace:
    """``random.Random()`` (unseeded, in EventStore) becomes the next of a seeded series."""
    series = random.Random(seed)
    return SimpleNamespace(Random=lambda: random.Random(series.getrandbits(64)))
