"""What makes a seed replay exactly: every source of randomness the run touches is seeded from it.

The engine draws event ids (ULIDs), owner tokens, repair tokens and emit backoff jitter through its published
sources (``outbox.entropy``); moto draws message ids and receipt handles; botocore draws retry jitter from the
global ``random``. Event ids and backoff change what happens (the order of a query, how far the virtual clock
moves), the rest only what the trace prints. All of them are seeded here: the engine's by sources of the run's own
(``outbox.entropy.using``), never by reaching into the modules that draw.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from outbox import entropy
from simulation.world import World


@contextmanager
def seeded(world: World) -> Iterator[None]:
    from moto.moto_api._internal import mock_random

    seed = world.seed
    random.seed(f"{seed}:global")
    mock_random.seed(seed)
    owners, operator = _uuid_hex(f"{seed}:owners"), _uuid_hex(f"{seed}:operator")
    sources = entropy.Sources(
        event_id=lambda: str(world.ids.ulid()),
        owner_token=owners,
        repair_token=lambda: operator()[:12],
        backoff_rng=_backoff_rngs(f"{seed}:backoff"),
    )
    with entropy.using(sources):
        yield


def _uuid_hex(seed: str) -> Callable[[], str]:
    """uuid4's hex, drawn from a series of its own."""
    stream = random.Random(seed)
    return lambda: uuid.UUID(int=stream.getrandbits(128), version=4).hex


def _backoff_rngs(seed: str) -> Callable[[], random.Random]:
    """Each store's backoff jitter (an unseeded ``random.Random`` in production) the next of a seeded series."""
    series = random.Random(seed)
    return lambda: random.Random(series.getrandbits(64))
