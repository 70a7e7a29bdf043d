"""A runtime's state saved and started from again (``outbox.local.state``, what ``outbox local serve`` keeps):
the tables, every message of every queue (in flight and dead-lettered included, with its receive count and
its visibility), the pipes' checkpoints and the virtual clock come back as they were; a message in flight at
the stop comes back when its visibility passes, as on AWS; a state of another setup is refused before anything
is read; and a process killed while writing leaves the previous state whole."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from modules.services import FAKE, SERVICES_VARIABLE
from outbox.local import saving
from outbox.local.clock import VirtualClock
from outbox.local.serve import Served
from outbox.local.state import SavedState, Stamp, StateRefusedError, read_state, write_state
from outbox.testing.pipeline import LocalPipeline
from stacks.app_factory import STACK_NAME
from tests.conftest import Synthesized
from tests.e2e.test_local_pipeline import PAYMENT
from tests.e2e.test_pipeline import unique


def tables(pipeline: LocalPipeline) -> dict[str, list[Any]]:
    dynamodb = pipeline.runtime.client("dynamodb")
    return {
        name: sorted((dynamodb.scan(TableName=name)["Items"]), key=repr)
        for name in pipeline.runtime.resources.table_names.values()
    }


def queues(pipeline: LocalPipeline) -> dict[str, tuple[str, str]]:
    sqs = pipeline.runtime.client("sqs")
    names = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
    counted = {}
    for logical_id, url in pipeline.runtime.resources.queue_urls.items():
        attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=names)["Attributes"]
        counted[logical_id] = (attributes[names[0]], attributes[names[1]])
    return counted


def boot(synthesized: Synthesized, **options: Any) -> Any:
    return LocalPipeline.boot(
        synthesized.outdir, STACK_NAME, environment={SERVICES_VARIABLE: FAKE}, function_log_level="CRITICAL", **options
    )


def test_a_saved_state_comes_back_whole_and_a_message_in_flight_at_the_stop_comes_back_as_on_aws(
    synthesized: Synthesized, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    tenant = unique("tenant")
    with boot(synthesized) as before:
        runtime = before.runtime
        relayed = before.emit("payment.completed", PAYMENT, tenant=tenant)
        before.drain()
        # In flight at the stop: its first delivery failed, its visibility has not passed yet
        with before.fail_handler("shipping.book_shipment", times=1):
            in_flight = before.emit("payment.completed", {**PAYMENT, "order_id": "o-2"}, tenant=tenant)
            while runtime.step():
                pass
        # Emitted, never read by the pipe before the stop
        unread = before.emit("payment.completed", {**PAYMENT, "order_id": "o-3"}, tenant=tenant)
        # And a dead letter in the DLQ
        sqs = runtime.client("sqs")
        dlq = runtime.output("DurableDeadLetterQueueUrl")
        # One taken out of it first: its deduplication id stays spent for five minutes, deleted or not (R5.1)
        sqs.send_message(QueueUrl=dlq, MessageBody="{}", MessageGroupId="other", MessageDeduplicationId="dlq-2")
        [taken] = sqs.receive_message(QueueUrl=dlq)["Messages"]
        sqs.delete_message(QueueUrl=dlq, ReceiptHandle=taken["ReceiptHandle"])
        sqs.send_message(QueueUrl=dlq, MessageBody="{}", MessageGroupId=tenant, MessageDeduplicationId="dlq-1")
        waiting = [entry for mapping in runtime.mappings.values() for entry in mapping.in_flight]
        assert len(waiting) == 1
        runtime.clock.advance(timedelta(seconds=1))
        seen = (tables(before), queues(before), runtime.clock())
        relayed_before = runtime.pipe("RelayPipeName").counters.delivered
        assert saving.save_state(runtime, state) > 0

    with boot(synthesized, saved=read_state(state, Stamp.of(runtime.stack)), clock=VirtualClock(seen[2])) as after:
        assert (tables(after), queues(after), after.runtime.clock()) == seen
        # The mapping waits for the message in flight until its visibility passes, as Lambda's poller does
        [entry] = [entry for mapping in after.runtime.mappings.values() for entry in mapping.in_flight]
        assert entry.message_id == waiting[0].message_id
        assert entry.visible_at == waiting[0].visible_at > after.runtime.clock()

        # The spent deduplication id is still spent (within its five minutes)
        after.runtime.client("sqs").send_message(
            QueueUrl=after.runtime.output("DurableDeadLetterQueueUrl"),
            MessageBody="{}",
            MessageGroupId="other",
            MessageDeduplicationId="dlq-2",
        )
        assert queues(after) == seen[1]

        after.drain()

        # It came back once its visibility passed, its receive count kept: the second attempt completed it
        claim = after.claim(in_flight, "shipping.book_shipment")
        assert claim is not None
        assert (claim.status, claim.attempts) == ("COMPLETED", 2)
        assert after.runtime.clock() >= waiting[0].visible_at
        # What the relay had relayed before the stop is not relayed again; what it had not read, is, once
        relay = after.runtime.pipe("RelayPipeName")
        events = list(after.store.events(tenant))
        assert relayed_before + relay.counters.delivered == len(events) > relayed_before
        for event in (relayed, unread):
            claim = after.claim(event, "shipping.book_shipment")
            assert claim is not None
            assert (claim.status, claim.attempts) == ("COMPLETED", 1)
        # The dead letter is still there
        attributes = after.runtime.client("sqs").get_queue_attributes(
            QueueUrl=after.runtime.output("DurableDeadLetterQueueUrl"), AttributeNames=["ApproximateNumberOfMessages"]
        )["Attributes"]
        assert attributes["ApproximateNumberOfMessages"] == "1"


STAMP = Stamp(format=1, engine="0.6.0", moto="5.2.5", python="3.11", stack="Shop", resources="abc")


SAID = {
    "format": "state format 2 there, 1 here",
    "engine": "chained-outbox other there, 0.6.0 here",
    "moto": "moto other there, 5.2.5 here",
    "python": "Python other there, 3.11 here",
    "stack": "stack other there, Shop here",
    "resources": "the template's resources (tables, queues, pipes, event source mappings, durable functions) changed",
}


def test_every_field_of_the_stamp_is_said_when_it_differs() -> None:
    assert set(SAID) == {f.name for f in dataclasses.fields(Stamp)}


@pytest.mark.parametrize(("field", "said"), SAID.items())
def test_a_state_of_another_setup_is_refused_before_anything_is_unpickled(
    tmp_path: Path, field: str, said: str
) -> None:
    state = tmp_path / "state"
    # A payload that fails the test if it is ever unpickled
    other = dataclasses.replace(STAMP, **{field: 2 if field == "format" else "other"})
    write_state(state, other, _Tripwire())  # type: ignore[arg-type]
    before = state.read_bytes()

    with pytest.raises(StateRefusedError) as refused:
        read_state(state, STAMP)

    message = str(refused.value)
    assert said in message
    assert "it is not loaded, and not touched. Run `outbox local serve --fresh`" in message
    assert state.read_bytes() == before


class _Tripwire:
    def __reduce__(self) -> Any:
        return (_explode, ())


def _explode() -> None:
    raise AssertionError("a refused state was unpickled")


@pytest.mark.parametrize("content", [b"", b"not json\n", b'{"format": 1}\n', b"\x80\x04garbage"])
def test_a_file_that_is_no_state_is_refused_with_what_to_run(tmp_path: Path, content: bytes) -> None:
    state = tmp_path / "state"
    state.write_bytes(content)
    with pytest.raises(StateRefusedError, match="outbox local serve --fresh"):
        read_state(state, STAMP)


def test_a_save_that_fails_midway_leaves_the_previous_state_whole_and_no_temporary_file(tmp_path: Path) -> None:
    state = tmp_path / "state"
    kept = SavedState(datetime(2026, 1, 1, tzinfo=UTC), {"dynamodb": "kept"}, {}, {})
    write_state(state, STAMP, kept)

    with pytest.raises(RuntimeError, match="midway"):
        write_state(state, STAMP, SavedState(kept.clock, {"dynamodb": _FailsMidway()}, {}, {}))

    assert read_state(state, STAMP).backends == {"dynamodb": "kept"}
    assert [path.name for path in tmp_path.iterdir()] == ["state"]


class _FailsMidway:
    def __reduce__(self) -> Any:
        raise RuntimeError("the process died midway")


WRITER = """
import sys
from datetime import UTC, datetime
from pathlib import Path
from outbox.local.state import SavedState, Stamp, write_state
stamp = Stamp(format=1, engine="0.6.0", moto="5.2.5", python="3.11", stack="Shop", resources="abc")
n = 0
while True:
    n += 1
    blob = bytes([n % 256]) * 4_000_000  # big enough that a kill lands inside a write
    write_state(Path(sys.argv[1]), stamp, SavedState(datetime.now(UTC), {"n": n, "blob": blob}, {}, {}))
    print(n, flush=True)
"""


def test_a_process_killed_while_it_writes_leaves_a_whole_state(tmp_path: Path) -> None:
    state = tmp_path / "state"
    for delay in (0.05, 0.13, 0.29, 0.41):
        writer = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(state)], stdout=subprocess.PIPE, text=True, env=os.environ.copy()
        )
        assert writer.stdout is not None
        writer.stdout.readline()  # one state written whole
        time.sleep(delay)
        writer.send_signal(signal.SIGKILL)
        writer.wait()

        saved = read_state(state, STAMP)
        n, blob = saved.backends["n"], saved.backends["blob"]
        assert blob == bytes([n % 256]) * 4_000_000
    leftovers = [path.name for path in tmp_path.iterdir() if path.name != "state"]
    assert all(name.startswith(".state.") and name.endswith(".tmp") for name in leftovers)


def test_serving_writes_the_state_only_when_it_changed_at_most_every_few_seconds_and_always_at_the_stop(
    synthesized: Synthesized, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    with boot(synthesized) as pipeline:
        served = Served(pipeline.runtime, state)
        assert served.save() is not None  # the start
        assert state.stat().st_mode & 0o777 == 0o600
        written = state.stat().st_mtime_ns

        assert served.save(changed=False, every=5) is None  # nothing changed
        pipeline.emit("payment.completed", PAYMENT, tenant=unique("tenant"))
        assert served.save(changed=True, every=5) is None  # changed, but the last save is too recent
        assert state.stat().st_mtime_ns == written
        assert served.save(changed=False) is not None  # the stop: what changed since is written
        assert served.save(changed=False) is None  # and nothing more is
