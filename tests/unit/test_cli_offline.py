"""The ``outbox`` command without AWS: it finds the application's catalog (``--catalog``, ``OUTBOX_CATALOG`` or
``[tool.outbox]`` in the project's pyproject.toml); ``catalog``, ``--version`` and every ``--help`` need no stack
or credentials; bad input is a usage error (exit 2), never a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from outbox.cli import app
from outbox.exceptions import OutboxValidationError
from outbox.outputs import StackOutput, application_environment


def flat(output: str) -> str:
    """The output without rich's box and line wrapping."""
    return " ".join(output.replace("│", " ").split())


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty project folder as the working directory, with no catalog configured anywhere."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("OUTBOX_CATALOG", raising=False)
    monkeypatch.setenv("DATA_TABLE_NAME", "data")  # what the example's catalog builder reads
    monkeypatch.setenv("COMMERCE_SERVICES", "fake")
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


def test_without_a_catalog_the_command_says_how_to_name_one(project: Path) -> None:
    result = CliRunner().invoke(app, ["catalog"])
    assert result.exit_code == 2
    assert "--catalog package.module:function" in flat(result.output)
    assert "Traceback" not in result.output


def test_the_catalog_option_works_without_aws(project: Path) -> None:
    result = CliRunner().invoke(app, ["--catalog", "modules:build_catalog", "--json", "catalog"])
    assert result.exit_code == 0, result.output
    assert "order.created" in {entry["type"] for entry in json.loads(result.output)["event_types"]}


def test_the_project_configures_its_catalog_in_pyproject(project: Path) -> None:
    (project / "pyproject.toml").write_text('[tool.outbox]\ncatalog = "modules:build_catalog"\n')
    result = CliRunner().invoke(app, ["--json", "catalog"])
    assert result.exit_code == 0, result.output


def test_a_catalog_that_cannot_be_built_is_named_with_the_reason(project: Path) -> None:
    result = CliRunner().invoke(app, ["--catalog", "modules:no_such_builder", "catalog"])
    assert result.exit_code == 2
    assert "the catalog modules:no_such_builder could not be built" in flat(result.output)


SHOP_CATALOG = """
import os

from pydantic import BaseModel

from outbox import Lane, Subscription
from outbox.catalog import Catalog, EventTypeSpec, Module


class Placed(BaseModel):
    order_id: str


def build():
    table = os.environ["ORDERS_TABLE"]  # what the functions' environment holds
    handler = lambda delivery: None  # noqa: E731
    return Catalog(
        [
            Module(
                name="shop",
                code=(),
                event_types=(EventTypeSpec("shop.order_placed", Placed, emitted_by="the checkout API"),),
                subscriptions=(Subscription("shop.record_sale", GLOB, Lane.DURABLE, handler),),
            )
        ]
    )
"""


def shop_catalog(project: Path, module: str, glob: str = "shop.order_placed") -> str:
    """The catalog written as ``module`` (a name of its own per test: Python keeps what it imported)."""
    (project / f"{module}.py").write_text(SHOP_CATALOG.replace("GLOB", repr(glob)))
    return f"{module}:build"


def test_a_catalog_that_reads_its_environment_is_listed_offline_with_placeholders(project: Path) -> None:
    reference = shop_catalog(project, "shop_offline")
    os.environ.pop("ORDERS_TABLE", None)
    try:
        result = CliRunner().invoke(app, ["--catalog", reference, "--json", "catalog"])
    finally:
        os.environ.pop("ORDERS_TABLE", None)  # the placeholder the command set in this process

    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert [entry["name"] for entry in document["subscriptions"]] == ["shop.record_sale"]
    assert document["problems"] == []
    assert "placeholders for ORDERS_TABLE" in result.stderr


def test_the_catalog_command_checks_the_contract_and_exits_1_on_a_problem(project: Path) -> None:
    reference = shop_catalog(project, "shop_mistyped", glob="shop.order_plcaed")
    os.environ["ORDERS_TABLE"] = "orders"
    try:
        result = CliRunner().invoke(app, ["--catalog", reference, "catalog"])
    finally:
        os.environ.pop("ORDERS_TABLE", None)

    assert result.exit_code == 1
    assert "problem: subscription 'shop.record_sale'" in flat(result.output)
    assert "matches no event type" in flat(result.output)


def every_command(group: Any, prefix: tuple[str, ...] = ()) -> Iterator[list[str]]:
    """Each group and command of the CLI, as the words that name it."""
    yield list(prefix)
    for name, command in group.commands.items():
        if hasattr(command, "commands"):
            yield from every_command(command, (*prefix, name))
        else:
            yield [*prefix, name]


def test_every_help_works_offline(project: Path) -> None:
    commands = list(every_command(typer.main.get_command(app)))
    assert ["dead-letters", "poison"] in commands
    for command in commands:
        result = CliRunner().invoke(app, [*command, "--help"])
        assert result.exit_code == 0, (command, result.output)
        assert "Usage:" in result.output


def test_every_command_s_help_shows_an_example_of_itself_and_flags_without_values(project: Path) -> None:
    root = typer.main.get_command(app)
    commands = [
        command for command in every_command(root) if command and not hasattr(lookup(root, command), "commands")
    ]
    for command in commands:
        text = CliRunner().invoke(app, [*command, "--help"]).output
        example = " ".join(text.split("Example:", 1)[1].split()) if "Example:" in text else ""
        assert example.startswith("outbox "), (command, text)
        assert f" {' '.join(command)} " in f"{example} ", (command, example)
        # A flag takes no value, and no option is shown by its Python type (typer shows an argument's: EVENT_ID <str>)
        options = text.split("Options:", 1)[1]
        for shown_wrongly in ("<bool>", "<str>", "<int>", "[default: no-"):
            assert shown_wrongly not in options, (command, text)


def lookup(group: Any, words: list[str]) -> Any:
    for word in words:
        group = group.commands[word]
    return group


def test_the_application_environment_output_is_read_as_the_functions_environment() -> None:
    outputs = {StackOutput.APPLICATION_ENVIRONMENT.value: '{"DATA_TABLE_NAME": "t-1", "MODE": "live"}'}
    assert application_environment(outputs) == {"DATA_TABLE_NAME": "t-1", "MODE": "live"}
    assert application_environment({}) == {}
    for broken in ("[1]", "not json"):
        with pytest.raises(OutboxValidationError, match="not a JSON object"):
            application_environment({StackOutput.APPLICATION_ENVIRONMENT.value: broken})


def test_the_version_is_printed_without_aws(project: Path) -> None:
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.output.startswith("outbox 0.")


def test_a_day_that_is_not_a_date_is_a_usage_error_not_a_traceback(project: Path) -> None:
    result = CliRunner().invoke(
        app, ["--catalog", "modules:build_catalog", "dead-letters", "poison", "--day", "yesterday"]
    )
    assert result.exit_code == 2
    assert "'yesterday' is not a day: give it as YYYY-MM-DD" in flat(result.output)
    assert "Traceback" not in result.output


OUTBOX = Path(sys.executable).parent / "outbox"


def run_outbox(cwd: Path, *arguments: str, extra: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The installed console script, as a person runs it: no AWS configuration of this machine."""
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(cwd),  # no ~/.aws
        "AWS_EC2_METADATA_DISABLED": "true",  # no credential lookup on the network
        "AWS_MAX_ATTEMPTS": "1",
        "OUTBOX_CATALOG": "modules:build_catalog",
        "DATA_TABLE_NAME": "data",
        "COMMERCE_SERVICES": "fake",
        "PYTHONPATH": f"{Path(__file__).resolve().parents[2]}:{cwd}",  # the example's modules, and the folder's
        **(extra or {}),
    }
    return subprocess.run([str(OUTBOX), *arguments], cwd=cwd, env=env, capture_output=True, text=True, check=False)


@pytest.mark.parametrize(
    ("arguments", "says"),
    [
        (["--stack", "Shop", "status"], "no AWS region: pass --region"),
        (["--stack", "Shop", "--region", "us-east-1", "status"], "no AWS credentials: pass --profile"),
        (["--stack", "Shop", "--profile", "nobody", "status"], "check --profile"),
        (["--local", "status"], "no .local/topology.json"),
    ],
)
def test_what_aws_refuses_is_one_line_and_exit_2(tmp_path: Path, arguments: list[str], says: str) -> None:
    result = run_outbox(tmp_path, *arguments)
    assert result.returncode == 2, result.stderr
    assert says in flat(result.stderr)
    assert "Traceback" not in result.stderr + result.stdout


def test_a_stale_local_topology_says_to_start_the_runtime(tmp_path: Path) -> None:
    (tmp_path / ".local").mkdir()
    outputs = {str(output): "x" for output in StackOutput if output != StackOutput.APPLICATION_ENVIRONMENT}
    outputs[StackOutput.INBOX_RETENTION_DAYS] = "30"
    topology = {"outputs": outputs, "endpoint_url": "http://127.0.0.1:9"}  # nothing listens on port 9
    (tmp_path / ".local" / "topology.json").write_text(json.dumps(topology))
    result = run_outbox(tmp_path, "--local", "status")
    assert result.returncode == 2
    assert "cannot reach http://127.0.0.1:9" in flat(result.stderr)
    assert "Traceback" not in result.stderr + result.stdout


def test_a_stack_without_the_pipeline_s_outputs_is_refused_in_one_line(tmp_path: Path) -> None:
    (tmp_path / ".local").mkdir()
    (tmp_path / ".local" / "topology.json").write_text('{"outputs": {}, "endpoint_url": "http://127.0.0.1:9"}')
    result = run_outbox(tmp_path, "--local", "status")
    assert result.returncode == 2
    assert "is it a stack with an OutboxPipeline?" in flat(result.stderr)


@pytest.mark.parametrize(
    ("arguments", "kind"),
    [
        (["dead-letters", "poison", "--day", "yesterday", "--json"], "usage"),
        (["--json", "--stack", "Shop", "status"], "aws"),
        (["--json", "status"], "usage"),
    ],
)
def test_with_json_even_a_failure_is_one_json_document_on_stdout(
    tmp_path: Path, arguments: list[str], kind: str
) -> None:
    result = run_outbox(tmp_path, *arguments)
    assert result.returncode == 2, result.stderr
    document = json.loads(result.stdout)
    assert (document["error"]["kind"], document["exit_code"]) == (kind, 2)
    assert result.stderr.strip(), "the person at the terminal is told too"


def test_both_places_at_once_is_named_as_such(tmp_path: Path) -> None:
    result = run_outbox(tmp_path, "--stack", "Shop", "--local", "status")
    assert result.returncode == 2
    assert "--stack Shop and --local both given: name one" in flat(result.stderr)


def test_a_bad_time_names_the_option_it_was_given_to(project: Path) -> None:
    result = run_outbox(project, "--local", "replay", "--tenant", "t", "--until", "soon")
    assert result.returncode == 2
    assert "Invalid value for --until: 'soon' is neither an ISO 8601 time nor a duration" in flat(result.stderr)


def test_a_catalog_whose_code_crashes_is_one_line_and_with_json_one_document(project: Path) -> None:
    (project / "crashing.py").write_text("def build():\n    raise RuntimeError('the builder fell over')\n")
    result = run_outbox(project, "--json", "--catalog", "crashing:build", "catalog")
    assert result.returncode == 2, result.stderr
    document = json.loads(result.stdout)
    assert (document["error"]["kind"], document["exit_code"]) == ("crash", 2)
    assert "RuntimeError: the builder fell over" in document["error"]["message"]
    assert "Traceback" not in result.stderr
    # Asked for, the traceback is there for a bug report
    debug = run_outbox(project, "--json", "--catalog", "crashing:build", "catalog", extra={"OUTBOX_DEBUG": "1"})
    assert "Traceback" in debug.stderr
    assert json.loads(debug.stdout)["error"]["kind"] == "crash"
