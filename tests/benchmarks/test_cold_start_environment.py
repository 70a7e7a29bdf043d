"""The cold start benchmark's functions see what Lambda would give them: the layer's packages and the runtime's
boto3, not the rest of this virtualenv (an optional import must be skipped here as it would be in AWS)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

from benchmarks import cold_start


def _run(code: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, cold_start.NOT_SHIPPED_VARIABLE: ",".join(cold_start.not_shipped_modules())}
    return subprocess.run(
        [sys.executable, "-c", cold_start.NOT_SHIPPED + code], env=env, capture_output=True, text=True, check=False
    )


def test_the_layer_s_and_the_runtime_s_packages_are_shipped_the_virtualenv_s_others_are_not() -> None:
    hidden = set(cold_start.not_shipped_modules())
    for shipped in ("pydantic", "pydantic_core", "aws_lambda_powertools", "aws_xray_sdk", "ulid", "rfc8785"):
        assert shipped not in hidden
    for runtime in ("boto3", "botocore", "s3transfer", "urllib3", "dateutil", "jmespath"):
        assert runtime not in hidden
    # In this virtualenv for the tests and the tracing benchmark, in neither the layer nor Lambda's runtime.
    assert {"opentelemetry", "moto", "requests"} <= hidden


def test_a_measured_function_cannot_import_what_is_not_shipped_and_imports_the_rest() -> None:
    refused = _run("import opentelemetry.trace")
    assert refused.returncode != 0
    assert "neither the layer nor Lambda ships it" in refused.stderr
    optional = _run(
        "try:\n    import requests\nexcept ImportError:\n    print('skipped')\nimport pydantic, boto3\nprint('ok')"
    )
    assert optional.returncode == 0, optional.stderr
    assert optional.stdout.split() == ["skipped", "ok"]


def test_every_function_variable_of_the_template_is_given_as_a_string_its_code_can_read(synthesized: Any) -> None:
    """A variable the template builds (``Fn::Join``: the WORKFLOW lane's JSON around its functions' ARNs) is
    joined with a placeholder for each reference, so the durable consumer parses it at cold start as on AWS."""
    from outbox.workflows.starter import QualifiedFunction
    from stacks.app_factory import STACK_NAME

    resources = synthesized.template(STACK_NAME)["Resources"].values()
    variables = [
        (name, raw)
        for resource in resources
        if resource["Type"] == "AWS::Lambda::Function"
        for name, raw in resource["Properties"].get("Environment", {}).get("Variables", {}).items()
    ]
    rendered = {name: cold_start._placeholder(raw) for name, raw in variables}
    assert not [name for name, value in rendered.items() if "Fn::" in value or "'Ref'" in value]
    functions = json.loads(rendered["WORKFLOW_FUNCTIONS"])
    assert functions, "the example app has a WORKFLOW subscription"
    for spec in functions.values():
        assert QualifiedFunction.of(spec).arn.endswith(":live"), "the consumer checks each is a qualified ARN"
