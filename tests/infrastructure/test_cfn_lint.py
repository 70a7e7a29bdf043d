"""cfn-lint on every synthesized template: no errors, and no warnings except those listed with a reason."""

from __future__ import annotations

from cfnlint.api import lint

from tests.conftest import Synthesized

# The regions the app is meant for; cfn-lint checks resource and property availability per region.
REGIONS = ["us-east-1", "eu-west-1"]

# Warnings accepted on purpose, rule id -> reason. Empty today; add an entry only with the reason.
ACCEPTED_WARNINGS: dict[str, str] = {}


def test_cfn_lint_finds_no_errors_and_no_unlisted_warnings(synthesized: Synthesized) -> None:
    templates = sorted(synthesized.outdir.glob("*.template.json"))
    assert templates, "the synth wrote no templates"
    for template in templates:
        matches = lint(template.read_text(), regions=REGIONS)
        errors = [f"{m.rule.id}: {m.message}" for m in matches if m.rule.id.startswith("E")]
        warnings = [
            f"{m.rule.id}: {m.message}"
            for m in matches
            if m.rule.id.startswith("W") and m.rule.id not in ACCEPTED_WARNINGS
        ]
        assert errors == [], f"{template.name}: cfn-lint errors"
        assert warnings == [], f"{template.name}: unlisted cfn-lint warnings"


def test_cfn_lint_reports_errors_through_this_api() -> None:
    """Guards the guard: an invalid property must come back as an error from the call used above."""
    broken = '{"Resources": {"Q": {"Type": "AWS::SQS::Queue", "Properties": {"VisibilityTimeout": "soon"}}}}'
    assert any(m.rule.id.startswith("E") for m in lint(broken, regions=REGIONS))
