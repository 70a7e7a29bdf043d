"""cfn-lint on every synthesized template: no errors, and no warnings except those listed with a reason."""

from __future__ import annotations

import json
import re

from cfnlint.api import lint

from tests.conftest import Synthesized

# The regions the app is meant for; cfn-lint checks resource and property availability per region.
REGIONS = ["us-east-1", "eu-west-1"]

# Warnings accepted on purpose, (rule id, pattern of the message) -> reason. Add an entry only with the
# reason, and keep the pattern as narrow as the case it accepts.
ACCEPTED_WARNINGS: dict[tuple[str, str], str] = {
    (
        "W3005",
        r"'\w+' dependency already enforced by a 'GetAtt' at 'Resources/\w+/Properties/Role'",
    ): "CDK makes a Lambda function depend on its whole role construct, so that the role's policy exists "
    "before the function (and the event source mapping that references it) is created; the role half of "
    "that DependsOn repeats the Role GetAtt and changes nothing.",
}


def _accepted(rule_id: str, message: str) -> bool:
    return any(rule_id == rule and re.fullmatch(pattern, message) for rule, pattern in ACCEPTED_WARNINGS)


def test_cfn_lint_finds_no_errors_and_no_unlisted_warnings(synthesized: Synthesized) -> None:
    templates = sorted(synthesized.outdir.glob("*.template.json"))
    assert templates, "the synth wrote no templates"
    for template in templates:
        matches = lint(template.read_text(), regions=REGIONS)
        errors = [f"{m.rule.id}: {m.message}" for m in matches if m.rule.id.startswith("E")]
        warnings = [
            f"{m.rule.id}: {m.message}"
            for m in matches
            if m.rule.id.startswith("W") and not _accepted(m.rule.id, m.message)
        ]
        assert errors == [], f"{template.name}: cfn-lint errors"
        assert warnings == [], f"{template.name}: unlisted cfn-lint warnings"


def test_cfn_lint_reports_errors_through_this_api() -> None:
    """Guards the guard: an invalid property must come back as an error from the call used above."""
    broken = '{"Resources": {"Q": {"Type": "AWS::SQS::Queue", "Properties": {"VisibilityTimeout": "soon"}}}}'
    assert any(m.rule.id.startswith("E") for m in lint(broken, regions=REGIONS))


def test_the_accepted_w3005_is_only_a_redundant_role_dependency() -> None:
    """Guards the acceptance: a redundant DependsOn on anything but a function's role is still reported."""
    template = {
        "Resources": {
            "Dlq": {"Type": "AWS::SQS::Queue"},
            "Work": {
                "Type": "AWS::SQS::Queue",
                "DependsOn": ["Dlq"],
                "Properties": {
                    "RedrivePolicy": {"deadLetterTargetArn": {"Fn::GetAtt": ["Dlq", "Arn"]}, "maxReceiveCount": 5}
                },
            },
        }
    }
    matches = [m for m in lint(json.dumps(template), regions=REGIONS) if m.rule.id == "W3005"]
    assert matches, "cfn-lint should report the redundant DependsOn"
    assert not any(_accepted(m.rule.id, m.message) for m in matches)
