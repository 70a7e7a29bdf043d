"""checkov on every synthesized template: no failed check, and every suppression on its resource, with a reason.

checkov lives in a virtual environment of its own (its pins fight constraints.txt): ``make checkov-env``.
``make test`` names it in ``OUTBOX_CHECKOV``, and then a missing checkov fails the run; a bare ``pytest``
skips the checkov runs when the environment was never made. Suppressions are never global: each one is
``Metadata.checkov.skip`` on a resource, written by ``outbox_cdk.checkov.skip`` beside the resource's code.

checkov runs offline: ``--skip-download`` keeps it from fetching the platform's check mappings and
guidelines (the one connection it attempts without an API key), and no API key is passed. Its proxy
variables point at a closed local port, so an attempt that a new version might add fails at once, logs,
and fails the test, which expects nothing on stderr. Its ``CKV_*``/``BC_*``/``PRISMA_*`` variables and
config files (``.checkov.yaml`` in the working and the home directory) are kept out, so no setting from
outside this file can add or drop a check.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import App, CfnResource, Stack
from aws_cdk import aws_sqs as sqs

from outbox_cdk import checkov
from tests.conftest import PROJECT_ROOT, Synthesized

CHECKOV_ENV = "OUTBOX_CHECKOV"
DEFAULT_CHECKOV = PROJECT_ROOT / ".venv-checkov" / "bin" / "checkov"
PINNED_VERSION = re.search(r"^checkov==(\S+)$", (PROJECT_ROOT / "requirements-checkov.txt").read_text(), re.MULTILINE)
# Everything checkov is told. No --check, --skip-check, --skip-framework, --soft-fail or baseline: the
# test below holds this list to that.
ARGUMENTS = ("--framework", "cloudformation", "--skip-download", "--compact", "--output", "json")
GLOBAL_SELECTION_OPTIONS = (
    "-c",
    "--check",
    "--skip-check",
    "--skip-framework",
    "--soft-fail",
    "-s",
    "--soft-fail-on",
    "--baseline",
    "--config-file",
    "--external-checks-dir",
    "--policy-metadata-filter",
)
ENVIRONMENT_PREFIXES = ("CKV_", "BC_", "PRISMA_", "CHECKOV_")
# Port 9 (discard) on the loopback: nothing listens, so a connection through this proxy is refused at once.
CLOSED_PROXY = "http://127.0.0.1:9"
PROXY_VARIABLES = ("https_proxy", "HTTPS_PROXY", "http_proxy", "HTTP_PROXY")
NO_PROXY_VARIABLES = ("no_proxy", "NO_PROXY")
CHECKOV_TIMEOUT_SECONDS = 300
SUPPRESSIONS_DOC = "docs/security-checks.md"


def find_checkov() -> Path:
    """The checkov to run: the one ``OUTBOX_CHECKOV`` names (fail if it is missing), else ``.venv-checkov``'s
    (skip if it is missing)."""
    named = os.environ.get(CHECKOV_ENV)
    binary = PROJECT_ROOT / named if named else DEFAULT_CHECKOV
    if not binary.exists():
        if named:
            pytest.fail(f"{CHECKOV_ENV}={named} does not exist: make checkov-env creates it")
        pytest.skip(f"checkov is not installed at {DEFAULT_CHECKOV.relative_to(PROJECT_ROOT)}: run make checkov-env")
    return binary


@pytest.fixture(scope="module")
def checkov_binary() -> Path:
    return find_checkov()


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("checkov")


def run_checkov(binary: Path, templates: list[Path], workdir: Path) -> dict[str, Any]:
    """One checkov run over these templates, in an empty directory with an empty home: its JSON report."""
    files = [argument for template in templates for argument in ("--file", str(template))]
    environment = {
        k: v for k, v in os.environ.items() if not k.startswith(ENVIRONMENT_PREFIXES) and k not in NO_PROXY_VARIABLES
    }
    environment.update(dict.fromkeys(PROXY_VARIABLES, CLOSED_PROXY), HOME=str(workdir))
    completed = subprocess.run(
        [str(binary), *files, *ARGUMENTS],
        cwd=workdir,
        env=environment,
        capture_output=True,
        text=True,
        timeout=CHECKOV_TIMEOUT_SECONDS,
        check=False,
    )
    # 0: nothing failed, 1: something failed; anything else is checkov itself failing.
    assert completed.returncode in (0, 1), f"checkov exited {completed.returncode}: {completed.stderr[-2000:]}"
    # A network attempt (refused by the closed proxy) or any other trouble is logged here.
    assert completed.stderr == "", f"checkov wrote to stderr: {completed.stderr[-2000:]}"
    report = json.loads(completed.stdout)
    assert isinstance(report, dict), "one framework gives one report"
    assert report["check_type"] == "cloudformation"
    assert report["summary"]["parsing_errors"] == 0, report["results"]["parsing_errors"]
    return report


@pytest.fixture(scope="module")
def report(checkov_binary: Path, workdir: Path, synthesized: Synthesized) -> dict[str, Any]:
    templates = sorted(synthesized.outdir.glob("*.template.json"))
    assert templates, "the synth wrote no templates"
    return run_checkov(checkov_binary, templates, workdir)


def template_skips(synthesized: Synthesized) -> Iterator[tuple[str, str, str, dict[str, Any]]]:
    """(stack, resource type, logical id, skip entry) of every checkov skip in the templates."""
    for stack_name, template in sorted(synthesized.templates.items()):
        for logical_id, resource in template["Resources"].items():
            metadata = resource.get("Metadata", {}).get(checkov.METADATA_KEY, {})
            for entry in metadata.get("skip", []):
                yield stack_name, resource["Type"], logical_id, entry


def failed_checks(report: dict[str, Any]) -> list[str]:
    return [
        f"{check['check_id']} on {check['resource']}: {check['check_name']}"
        for check in report["results"]["failed_checks"]
    ]


def applied_skips(report: dict[str, Any]) -> set[tuple[str, str, str, str]]:
    """(template file, resource, check id, comment) of every skip checkov applied."""
    return {
        (
            Path(check["file_abs_path"]).name,
            check["resource"],
            check["check_id"],
            check["check_result"]["suppress_comment"],
        )
        for check in report["results"]["skipped_checks"]
    }


def asked_skips(synthesized: Synthesized) -> set[tuple[str, str, str, str]]:
    """The same for every skip the templates' metadata asks for."""
    return {
        (f"{stack_name}.template.json", f"{resource_type}.{logical_id}", entry["id"], entry["comment"])
        for stack_name, resource_type, logical_id, entry in template_skips(synthesized)
    }


def test_checkov_finds_no_failed_check(report: dict[str, Any]) -> None:
    failed = failed_checks(report)
    assert failed == [], "checkov failed checks (fix them, or checkov.skip on the resource, with the reason):\n" + (
        "\n".join(failed)
    )
    assert report["summary"]["passed"] > 0, "checkov ran no check at all"


def test_checkov_is_the_pinned_version(report: dict[str, Any]) -> None:
    assert PINNED_VERSION is not None, "requirements-checkov.txt pins checkov==<version>"
    assert report["summary"]["checkov_version"] == PINNED_VERSION.group(1), "stale .venv-checkov: make checkov-env"


def test_checkov_skips_exactly_what_the_resources_say(report: dict[str, Any], synthesized: Synthesized) -> None:
    """Every skip in the metadata is one checkov applied, with its comment: no mistyped id, no skip of a check
    that does not concern the resource, and nothing skipped that no resource asked for."""
    assert applied_skips(report) == asked_skips(synthesized)


def test_every_skip_in_the_templates_has_a_reason(synthesized: Synthesized) -> None:
    skips = list(template_skips(synthesized))
    assert skips, "the templates carry no checkov skip: is the metadata still written?"
    seen: set[tuple[str, str, str]] = set()
    for stack_name, _, logical_id, entry in skips:
        where = f"{stack_name}/{logical_id}"
        assert set(entry) == {"id", "comment"}, f"{where}: {entry}"
        assert checkov.CHECK_ID.fullmatch(entry["id"]), f"{where}: {entry['id']!r} is not a checkov id"
        assert len(entry["comment"].strip()) >= checkov.MIN_REASON_LENGTH, f"{where} {entry['id']}: give a reason"
        key = (stack_name, logical_id, entry["id"])
        assert key not in seen, f"{where}: {entry['id']} skipped twice"
        seen.add(key)


def test_the_docs_list_every_skipped_check(synthesized: Synthesized) -> None:
    documented = set(re.findall(r"^\| `(CKV2?_AWS_\d+)`", (PROJECT_ROOT / SUPPRESSIONS_DOC).read_text(), re.MULTILINE))
    assert documented == {entry["id"] for *_, entry in template_skips(synthesized)}, f"update {SUPPRESSIONS_DOC}"


def test_no_check_is_selected_or_skipped_globally() -> None:
    """Only resource metadata may skip a check: not the command line, not a config file in the project."""
    assert not [a for a in ARGUMENTS if a.split("=", 1)[0] in GLOBAL_SELECTION_OPTIONS]
    assert not list(PROJECT_ROOT.glob(".checkov.y*ml")), "a checkov config file selects checks for the project"
    makefile = (PROJECT_ROOT / "Makefile").read_text()
    assert "--skip-check" not in makefile
    assert "CKV_SKIP_CHECK" not in makefile


def test_checkov_reports_failures_and_honours_metadata_through_this_call(checkov_binary: Path, workdir: Path) -> None:
    """Guards the guard: a queue without encryption fails CKV_AWS_27, and the same queue with a skip in its
    metadata is reported as skipped with its comment."""
    reason = "A queue made for this test only, to see that checkov reads resource metadata."
    template = {
        "Resources": {
            "Plain": {"Type": "AWS::SQS::Queue"},
            "Skipped": {
                "Type": "AWS::SQS::Queue",
                "Metadata": {"checkov": {"skip": [{"id": "CKV_AWS_27", "comment": reason}]}},
            },
        }
    }
    path = workdir / "guard.template.json"
    path.write_text(json.dumps(template))
    results = run_checkov(checkov_binary, [path], workdir)["results"]
    assert {(c["check_id"], c["resource"]) for c in results["failed_checks"]} >= {
        ("CKV_AWS_27", "AWS::SQS::Queue.Plain")
    }
    assert {
        (c["check_id"], c["resource"], c["check_result"]["suppress_comment"]) for c in results["skipped_checks"]
    } == {("CKV_AWS_27", "AWS::SQS::Queue.Skipped", reason)}


def test_skip_merges_into_the_resource_metadata() -> None:
    stack = Stack(App(), "Skips")
    queue = sqs.Queue(stack, "Queue")
    resource = queue.node.default_child
    assert isinstance(resource, CfnResource)
    resource.add_metadata("checkov", {"other": "kept"})
    first, second = "The first reason, long enough to say why.", "The second reason, long enough to say why."
    checkov.skip(queue, "CKV_AWS_27", first)
    checkov.skip(resource, "CKV2_AWS_73", second)
    assert resource.get_metadata("checkov") == {
        "other": "kept",
        "skip": [{"id": "CKV_AWS_27", "comment": first}, {"id": "CKV2_AWS_73", "comment": second}],
    }
    with pytest.raises(ValueError, match="already skipped"):
        checkov.skip(queue, "CKV_AWS_27", first)
    with pytest.raises(ValueError, match="real reason"):
        checkov.skip(queue, "CKV_AWS_28", "because")
    with pytest.raises(ValueError, match="not a checkov"):
        checkov.skip(queue, "AwsSolutions-SQS3", first)
    with pytest.raises(TypeError, match="no CloudFormation resource"):
        checkov.skip(stack, "CKV_AWS_28", first)
