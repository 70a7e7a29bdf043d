"""Seeds run in worker processes that fail loudly.

A worker the kernel kills (out of memory, say) takes the seeds it was running with it. ``multiprocessing.Pool``
would wait for their results for ever, and a soak would hang with no word; here the seeds it was running go back
to a fresh pool, and a seed whose worker dies twice is reported as a failure of its own (``died``), so the
survey ends and says which seeds never finished.
"""

from __future__ import annotations

import multiprocessing
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import TypeVar

Result = TypeVar("Result")

DEATHS_PER_SEED = 2  # a worker may die under a seed by chance (the other worker's memory); twice is the seed's


def in_workers(
    run: Callable[[int], Result], seeds: Iterable[int], jobs: int, died: Callable[[int], Result]
) -> Iterator[Result]:
    """``run(seed)`` for each seed in ``jobs`` forked workers, the results as they come (in no particular order).
    At most ``jobs`` seeds are in flight, so a dead worker's pool names exactly the seeds it may have killed."""
    pending = deque(seeds)
    deaths: Counter[int] = Counter()
    while pending:
        running: dict[Future[Result], int] = {}
        with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("fork")) as pool:
            try:
                while pending or running:
                    while pending and len(running) < jobs:
                        seed = pending.popleft()
                        running[pool.submit(run, seed)] = seed
                    done, _ = wait(running, return_when=FIRST_COMPLETED)
                    finished = [future for future in done if not isinstance(future.exception(), BrokenProcessPool)]
                    for future in finished:
                        del running[future]
                        yield future.result()  # a seed's own exception is the caller's
                    if len(finished) < len(done):
                        raise BrokenProcessPool("a worker died")
            except BrokenProcessPool:
                for seed in running.values():
                    deaths[seed] += 1
                    if deaths[seed] < DEATHS_PER_SEED:
                        pending.appendleft(seed)
                    else:
                        yield died(seed)
