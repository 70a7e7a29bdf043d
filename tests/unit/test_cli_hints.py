"""What the CLI suggests works when pasted in the user's own app: every command a message names is said with the
root options of the command that printed it (``outbox --local replay ...``), and no message of the installed
package points at this repository's ``make demo``. ``outbox --local catalog`` reads the served app's topology
(no placeholders), and shows the producer a type declares with ``emitted_by``."""

from __future__ import annotations

import ast
import json
import os
from pathlib import Path
from typing import cast

import pytest
import typer
from typer.testing import CliRunner

from outbox.cli import app
from outbox.cli.app import _invocation
from outbox.cli.context import SUGGESTED, CliContext
from outbox.ops.status import Status
from outbox.outputs import StackOutput
from tests.unit.test_cli_offline import flat, project, shop_catalog  # noqa: F401  (project: a fixture)

ENGINE = Path(__file__).resolve().parents[2] / "engine" / "src" / "outbox"
COMMANDS = sorted(typer.main.get_command(app).commands)  # type: ignore[attr-defined]
ROOT_OPTIONS = {"stack": "Shop", "region": "eu-west-1", "profile": "on call", "catalog": "shop.catalog:build"}


def test_the_suggested_commands_are_the_clis_own() -> None:
    named = set(SUGGESTED.pattern.split("(")[2].split(")")[0].split("|"))
    assert named == set(COMMANDS) - {"local"}


@pytest.mark.parametrize("command", sorted(set(COMMANDS) - {"local"}))
@pytest.mark.parametrize("invocation", ["outbox --local", "outbox --stack Shop --region eu-west-1"])
def test_every_suggested_command_carries_the_invocations_options(command: str, invocation: str) -> None:
    context = CliContext(invocation=invocation)
    message = f"look closer: outbox {command} --json; (outbox {command}) and outbox.local, chained-outbox {command}"

    said = context.hint(message)

    assert said.count(f"{invocation} {command}") == 2
    assert "outbox.local, chained-outbox" in said, "only the command is rewritten, never a package's name"
    assert CliContext().hint(message) == message, "outbox alone: said as it was"


def parsed(arguments: list[str]) -> str:
    command = typer.main.get_command(app)
    ctx = command.make_context("outbox", [*arguments, "status"])
    return _invocation(
        cast(typer.Context, ctx),
        **{name: ctx.params[name] for name in ("stack", "local", "region", "profile", "catalog")},
    )


@pytest.mark.parametrize("mask", range(2 ** len(ROOT_OPTIONS)))
def test_the_invocation_is_the_root_options_given_on_the_command_line(mask: int) -> None:
    given = {name: value for bit, (name, value) in enumerate(ROOT_OPTIONS.items()) if mask >> bit & 1}
    arguments = [word for name, value in given.items() for word in (f"--{name}", value)]

    invocation = parsed(arguments)

    expected = [
        "outbox",
        *(f"--{name} {value!r}" if " " in value else f"--{name} {value}" for name, value in given.items()),
    ]
    assert invocation == " ".join(expected)
    assert parsed(["--local"]) == "outbox --local"


def test_a_catalog_from_the_environment_is_not_repeated(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OUTBOX_CATALOG", "shop.catalog:build")
    assert parsed(["--local"]) == "outbox --local"


def string_literals(path: Path) -> list[str]:
    """The strings a module says at run time: its constants, without its docstrings."""
    tree = ast.parse(path.read_text())
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    ]


def test_no_message_of_the_installed_package_points_at_this_repositorys_make_demo() -> None:
    said = {path.relative_to(ENGINE): text for path in ENGINE.rglob("*.py") for text in string_literals(path)}
    assert not {path for path, text in said.items() if "make demo" in text}
    helped = CliRunner().invoke(app, ["--help"], terminal_width=200)
    assert "make demo" not in helped.output
    assert "outbox local serve" in helped.output


def test_local_without_a_served_app_says_to_serve_it_here(project: Path) -> None:  # noqa: F811
    result = CliRunner().invoke(app, ["--local", "status"])
    assert result.exit_code == 2
    assert "serve your app with `outbox local serve` in this folder" in flat(result.output)


def test_local_catalog_reads_the_served_topology_and_shows_the_declared_producer(project: Path) -> None:  # noqa: F811
    reference = shop_catalog(project, "shop_served")
    outputs = {StackOutput.APPLICATION_ENVIRONMENT: json.dumps({"ORDERS_TABLE": "Shop-Orders-local"})}
    (project / ".local").mkdir()
    topology = {"outputs": outputs, "endpoint_url": "http://127.0.0.1:9", "catalog": reference}
    (project / ".local" / "topology.json").write_text(json.dumps(topology))
    os.environ.pop("ORDERS_TABLE", None)
    try:
        result = CliRunner().invoke(app, ["--local", "catalog"], terminal_width=200)
        assert result.exit_code == 0, result.output
        assert os.environ["ORDERS_TABLE"] == "Shop-Orders-local", "the served app's table, not a placeholder"
        document = json.loads(CliRunner().invoke(app, ["--local", "--json", "catalog"]).stdout)
    finally:
        os.environ.pop("ORDERS_TABLE", None)

    assert "placeholder" not in result.output
    assert "the checkout API (emitted_by)" in flat(result.stdout)
    [placed] = document["event_types"]
    assert placed["producers"] == ["the checkout API (emitted_by)"]


def printed_status(report: Status, invocation: str = "outbox --local") -> str:
    from rich.console import Console

    from outbox.cli.reading import _print_status

    console = Console(width=200, record=True, file=open(os.devnull, "w"))  # noqa: SIM115
    _print_status(CliContext(console=console, invocation=invocation), report)
    return console.export_text()


def test_a_healthy_status_says_so_and_one_that_needs_an_operator_does_not() -> None:
    from outbox.cli.reading import HEALTHY
    from outbox.ops.status import QueueDepth, Status

    healthy = Status({"durable-dlq": QueueDepth(0, 0, None)}, {"relay": "RUNNING"}, [], 0)
    troubled = Status({"durable-dlq": QueueDepth(2, 0, None)}, {"relay": "RUNNING"}, [], 1)

    assert HEALTHY in printed_status(healthy)
    said = printed_status(troubled)
    assert HEALTHY not in said
    needs = [line for line in said.splitlines() if line.startswith("needs attention:")]
    assert len(needs) == 2
    assert all("outbox --local " in line for line in needs), "each next command as this one was invoked"
    assert not any(" outbox dead-letters" in line or " outbox redrive" in line for line in needs)
