"""What a watcher of the event source mapping is told: each invocation's start and end and each poll's result,
in the order the watchers were added, whatever the function does; and nothing once its block is left."""

from __future__ import annotations

from typing import Any

import pytest

from outbox.local.clock import VirtualClock
from outbox.local.esm import BatchResult, PollWatcher, SqsEventSourceMapping
from tests.local_runtime.test_esm_timeout import mapping


def watcher(name: str, told: list[str]) -> PollWatcher:
    return PollWatcher(
        invoking=lambda event, _context: told.append(f"{name} invoking {len(event['Records'])}"),
        invoked=lambda event, _context: told.append(f"{name} invoked"),
        polled=lambda result: told.append(f"{name} polled failed={len(result.failed)} crashed={result.crashed}"),
    )


@pytest.mark.parametrize("fails", [False, True])
def test_watchers_are_told_around_the_invocation_and_after_the_poll_even_when_the_function_raises(
    queue: tuple[Any, str, VirtualClock], fails: bool
) -> None:
    sqs, url, clock = queue
    sqs.send_message(QueueUrl=url, MessageBody="a")
    told: list[str] = []

    def handler(_event: dict[str, Any], _context: Any) -> dict[str, Any]:
        told.append("handler")
        if fails:
            raise RuntimeError("the function failed")
        return {"batchItemFailures": []}

    esm: SqsEventSourceMapping = mapping(sqs, url, clock, handler)
    with esm.watched(watcher("first", told)), esm.watched(watcher("second", told)):
        esm.poll()
    crashed = "the function failed" if fails else "None"
    polled = f"polled failed={int(fails)} crashed={crashed}"
    assert told == [
        "first invoking 1", "second invoking 1", "handler", "second invoked", "first invoked",
        f"first {polled}", f"second {polled}",
    ]  # fmt: skip
    assert esm.watchers == []
    told.clear()
    sqs.send_message(QueueUrl=url, MessageBody="b")
    clock.advance(61)
    esm.poll()
    assert told == ["handler"], "a watcher whose block ended hears nothing"


def test_a_watcher_raising_as_the_batch_goes_in_fails_the_invocation_as_the_function_would(
    queue: tuple[Any, str, VirtualClock],
) -> None:
    sqs, url, clock = queue
    sqs.send_message(QueueUrl=url, MessageBody="a")
    results: list[BatchResult] = []

    def refuse(_event: dict[str, Any], _context: Any) -> None:
        raise RuntimeError("a broken deploy")

    esm = mapping(sqs, url, clock, lambda _e, _c: pytest.fail("the function must not run"))
    with esm.watched(PollWatcher(invoking=refuse, polled=results.append)):
        result = esm.poll()
    assert result is not None
    assert result.failed == result.received
    assert results == [result]
    assert [entry.message_id for entry in esm.in_flight] == result.received, "it comes back, as after a crash"
