"""The development loop on ``outbox local serve``, with the README's app, as a user runs it from its folder:
a handler fails and dead-letters; serve stops and starts again with the fixed code, its state kept, and
``replay --group`` repairs it to an effect that happened once. The code reloads without a restart, a change
that needs a new template says what to run, and the user's own code emits with the call docs/local-runtime.md
shows. A second serve on the same port or folder exits 2 and says which one holds it."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from outbox.local.clients import local_client
from tests.adoption.test_your_own_app import readme_files
from tests.e2e.test_local_serve import free_port, wait_for

ROOT = Path(__file__).resolve().parents[2]
OUTBOX = Path(sys.executable).parent / "outbox"
DOCS = ROOT / "docs" / "local-runtime.md"
SERVED_EMIT = re.compile(r"<!-- local-runtime: served-emit -->\n```python\n(?P<body>.*?)```", re.DOTALL)
RECORD_SALE = "    def record_sale(delivery: Delivery) -> HandlerResult:\n"

pytestmark = pytest.mark.slow


def user_env() -> dict[str, str]:
    """A user's shell: none of pytest's variables, the engine and the construct as installed (this tree's)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PYTEST", "PYTHONPATH"))}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "engine" / "src"), str(ROOT / "cdk" / "src")])
    env.update(AWS_ACCOUNT_ID_ENDPOINT_MODE="disabled", JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION="20")
    return env


def shop(folder: Path) -> Path:
    for relative, body in readme_files().items():
        path = folder / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(body)
    return folder


def catalog_file(folder: Path) -> Path:
    return folder / "src" / "shop" / "catalog.py"


def with_handler_line(folder: Path, line: str) -> None:
    """The README's catalog with ``line`` first in record_sale."""
    text = readme_files()["src/shop/catalog.py"]
    catalog_file(folder).write_text(text.replace(RECORD_SALE, RECORD_SALE + f"        {line}\n"))


@dataclass
class Serve:
    folder: Path
    port: int
    args: tuple[str, ...] = ()
    process: subprocess.Popen[str] = field(init=False)
    log: Path = field(init=False)

    def __post_init__(self) -> None:
        self.log = self.folder.parent / f"serve-{self.folder.name}-{self.port}.log"
        command = [str(OUTBOX), "local", "serve", "--app", f"{sys.executable} app.py", "--port", str(self.port)]
        with self.log.open("a") as log:
            self.process = subprocess.Popen(
                [*command, *self.args], cwd=self.folder, env=user_env(), stdout=log, stderr=log, text=True
            )
        self.mark = self.log.stat().st_size

    @property
    def output(self) -> str:
        return self.log.read_text()[self.mark :]

    def wait_for(self, text: str, seconds: float = 240, *, after: int = 0) -> str:
        """The output once ``text`` is in it, past its first ``after`` characters."""
        said = lambda: text in self.output[after:]  # noqa: E731
        what = f"{text!r} from serve"
        try:
            wait_for(lambda: said() or self.process.poll() is not None, what, seconds)
        except AssertionError as exc:  # what serve said meanwhile is what tells why
            raise AssertionError(f"{exc}; serve said:\n{self.output[after:][-3000:]}") from None
        assert said(), self.output
        return self.output[after:]

    def stop(self) -> str:
        self.process.send_signal(signal.SIGINT)
        self.process.wait(timeout=60)
        return self.output


def outbox(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(OUTBOX), *args], cwd=folder, env=user_env(), capture_output=True, text=True)


def sold(folder: Path, tenant: str) -> int | None:
    topology = json.loads((folder / ".local" / "topology.json").read_text())
    table = json.loads(topology["outputs"]["ApplicationEnvironment"])["ORDERS_TABLE"]
    dynamodb = local_client("dynamodb", topology["endpoint_url"])
    item = dynamodb.get_item(TableName=table, Key={"pk": {"S": f"SALES#{tenant}"}, "sk": {"S": "TOTAL"}}).get("Item")
    return None if item is None else int(item["sold"]["N"])


def emit(folder: Path, tenant: str, order_id: str, amount: int) -> dict[str, Any]:
    payload = json.dumps({"order_id": order_id, "amount": amount})
    emitted = outbox(
        folder, "--local", "--json", "emit", "shop.order_placed", "--tenant", tenant, "--payload", payload, "--yes"
    )
    assert emitted.returncode == 0, emitted.stdout + emitted.stderr
    document: dict[str, Any] = json.loads(emitted.stdout)
    return document


def test_fail_stop_fix_restart_and_replay_the_group_to_an_effect_that_happened_once(tmp_path: Path) -> None:
    folder = shop(tmp_path / "shop")
    with_handler_line(folder, 'raise RuntimeError("the sale is not recorded yet")')
    port = free_port()
    first = Serve(folder, port, ("--no-watch",))
    try:
        started = first.wait_for("serving Shop")
        assert started.splitlines()[0].startswith("a fresh state, kept in .local/state (--fresh starts over)")
        emit(folder, "t-1", "o-1", 42)
        groups = lambda: outbox(folder, "--local", "--json", "dead-letters", "groups")  # noqa: E731
        wait_for(lambda: groups().returncode == 1, "the failing handler's dead letter")

        # A second serve on the same port, or of the same folder, exits 2 saying which one holds it
        again = outbox(folder, "--json", "local", "serve", "--app", "unused", "--port", str(port))
        assert again.returncode == 2
        assert (
            f"127.0.0.1:{port} is in use by another `outbox local serve`, of {folder.resolve()}"
            in json.loads(again.stdout)["error"]["message"]
        )
        assert "--port" in again.stderr
        twice = outbox(folder, "local", "serve", "--app", "unused", "--port", str(free_port()))
        assert twice.returncode == 2
        assert "another `outbox local serve` (pid" in twice.stderr
    finally:
        stopped = first.stop()
    assert "stopped; the state is kept in .local/state" in stopped

    # The fix, and serve again: the state is there, the dead letter with it
    catalog_file(folder).write_text(readme_files()["src/shop/catalog.py"])
    second = Serve(folder, free_port())
    try:
        started = second.wait_for("serving Shop")
        assert started.splitlines()[0].startswith("resumed the state kept in .local/state")
        listed = groups()
        assert listed.returncode == 1, listed.stderr
        [group] = json.loads(listed.stdout)
        assert (group["subscription"], group["count"], group["tenants"]) == ("shop.record_sale", 1, ["t-1"])
        assert "times are the served runtime's virtual clock" in listed.stderr  # it skipped the retries' waits

        replayed = outbox(folder, "--local", "--json", "replay", "--group", group["id"], "--yes")
        assert replayed.returncode == 0, replayed.stdout + replayed.stderr
        wait_for(lambda: sold(folder, "t-1") == 42, "the replayed sale")
        status = outbox(folder, "--local", "--json", "status")
        assert status.returncode == 0, status.stdout + status.stderr
        [row] = json.loads(status.stdout)["tenants"]
        assert (row["tenant"], row["dead_letters"], row["chain_intact"]) == ("t-1", 0, True)
    finally:
        second.stop()


@pytest.fixture(scope="module")
def served_shop(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Serve]]:
    folder = shop(tmp_path_factory.mktemp("served") / "shop")
    server = Serve(folder, free_port())
    try:
        server.wait_for("serving Shop")
        yield folder, server
    finally:
        server.stop()


def test_your_own_code_emits_with_the_documented_call(served_shop: tuple[Path, Serve]) -> None:
    folder, _ = served_shop
    [snippet] = [match["body"] for match in SERVED_EMIT.finditer(DOCS.read_text())]
    # Run in the app's folder as a script of the user's would be (not written there: it would reload the code)
    ran = subprocess.run([sys.executable, "-c", snippet], cwd=folder, env=user_env(), capture_output=True, text=True)
    assert ran.returncode == 0, ran.stderr
    wait_for(lambda: sold(folder, "t-9") == 7, "the sale the user's code emitted")


def test_code_reloads_without_a_restart_and_a_new_template_says_what_to_run(served_shop: tuple[Path, Serve]) -> None:
    folder, server = served_shop
    emit(folder, "t-2", "o-1", 42)
    wait_for(lambda: sold(folder, "t-2") == 42, "the first sale")

    # The handler now records twice the amount: reloaded, the state kept
    mark = len(server.output)
    with_handler_line(folder, 'delivery.envelope.payload["amount"] *= 2')
    server.wait_for("code changed: reloaded", after=mark)
    emit(folder, "t-2", "o-2", 10)
    wait_for(lambda: sold(folder, "t-2") == 62, "the second sale, by the new code")

    # A new table needs a new template: said, with what to run; the code before it keeps running
    app, mark = folder / "app.py", len(server.output)
    anchor = "        outbox = OutboxPipeline(\n"  # the README app's pipeline: a table goes in before it
    source = app.read_text()
    assert anchor in source, "the README's app.py no longer has the line this test adds a table before"
    app.write_text(
        source.replace(
            anchor,
            '        dynamodb.Table(self, "Extra", partition_key=dynamodb.Attribute(name="pk", '
            "type=dynamodb.AttributeType.STRING), removal_policy=RemovalPolicy.DESTROY)\n" + anchor,
            1,
        )
    )
    said = server.wait_for("outbox local serve --fresh", after=mark)
    assert "tables, queues, pipes, event source mappings or durable functions" in said
    emit(folder, "t-2", "o-3", 1)
    wait_for(lambda: sold(folder, "t-2") == 64, "a third sale, by the code served")
