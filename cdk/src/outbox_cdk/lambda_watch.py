"""What the control-plane watch matches on Lambda (``outbox_cdk.control_plane``, docs/aws-behaviour.md R12.8): the
functions whose role may emit or anchor, by ``functionName`` in each form Lambda takes, and the roles given to a
function, by ``role``; and ``GrowingRules``, which spreads them over as many rules as EventBridge's limit on a
pattern needs, measured with each name as long as it could be at deploy."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, Final

from aws_cdk import Aws, Token
from aws_cdk import aws_events as eventbridge
from aws_cdk import aws_iam as iam

# EventBridge's limit on an event pattern, in characters (R12.3): the Lambda rules take as many functions or roles
# as fit with the longest names each could have at deploy, and another rule the rest.
PATTERN_LIMIT: Final = 2048
# The longest a name or ARN can be at deploy, for what is known at synth only as a reference: a function's name (64,
# Lambda's limit), a role's ARN in the longest partition (``aws-iso-b``) with a name of 64 and the role's path
# (``/`` unless it was given one), or with IAM's longest path (512) when the path is unknown.
LONGEST_FUNCTION_NAME: Final = 64
ROLE_ARN_BEFORE_PATH: Final = len("arn:aws-iso-b:iam::123456789012:role")
LONGEST_ROLE_NAME: Final = 64
LONGEST_ROLE_PATH: Final = 512


def functions_match(names: Sequence[str], place: tuple[str, str, str] | None = None) -> dict[str, Any]:
    # Lambda takes a function as its name, its ARN or a partial ARN (<account>:function:<name>), each with a
    # qualifier (:<version or alias>) where the call allows one (R12.8): the name exactly or qualified, anything
    # ending in :function:<name> (the ARN and the partial ARN), and the ARN or the partial ARN qualified. Names hold
    # no colon. ``place`` is (partition, region, account), this stack's unless given (the longest, to measure).
    partition, region, account = place or (Aws.PARTITION, Aws.REGION, Aws.ACCOUNT_ID)
    matchers: list[Any] = []
    for name in names:
        matchers += [
            name,
            {"prefix": f"{name}:"},
            {"suffix": f":function:{name}"},
            {"prefix": f"arn:{partition}:lambda:{region}:{account}:function:{name}:"},
            {"prefix": f"{account}:function:{name}:"},
        ]
    return {"requestParameters": {"functionName": matchers}}


# The longest partition, region and account a function's ARN can hold, to measure a pattern at synth.
LONGEST_PLACE: Final = ("aws-iso-b", "x" * 16, "1" * 12)


def roles_match(role_arns: Sequence[str]) -> dict[str, Any]:
    # CreateFunction and UpdateFunctionConfiguration take the role as its ARN (``Role``), recorded as ``role``.
    return {"requestParameters": {"role": list(role_arns)}}


def longest(value: str, longest: int) -> str:
    """A stand-in for ``value`` as long as it can be at deploy: itself if known at synth, else ``longest`` x's."""
    return value if not Token.is_unresolved(value) else "x" * longest


def longest_role_arn(role: iam.IRole) -> int:
    resource = role.node.default_child if isinstance(role, iam.Role) else None
    if isinstance(resource, iam.CfnRole):
        path = resource.path if isinstance(resource.path, str) and not Token.is_unresolved(resource.path) else "/"
        return ROLE_ARN_BEFORE_PATH + len(path) + LONGEST_ROLE_NAME
    return ROLE_ARN_BEFORE_PATH + LONGEST_ROLE_PATH + LONGEST_ROLE_NAME


class GrowingRules:
    """Rules of one kind, made by ``make_rule(construct id, values)`` with the pattern ``pattern(values)``: each takes
    as many values as fit ``PATTERN_LIMIT`` with each value as long as it can be at deploy (``measure`` builds the
    pattern of those stand-ins, where ``pattern`` holds references of its own); the next value that would not fit
    starts another rule."""

    def __init__(
        self,
        construct_id: str,
        *,
        make_rule: Callable[[str, Sequence[str]], eventbridge.CfnRule],
        pattern: Callable[[Sequence[str]], dict[str, Any]],
        measure: Callable[[Sequence[str]], dict[str, Any]] | None = None,
    ) -> None:
        self._construct_id = construct_id
        self._make_rule = make_rule
        self._pattern = pattern
        self._measure = measure or pattern
        self._chunks: list[tuple[eventbridge.CfnRule, list[str], list[str]]] = []  # rule, values, longest stand-ins

    def add(self, value: str, longest: str) -> None:
        """Name ``value`` (``longest``: the longest it can be at deploy) in a rule; once only."""
        if any(value in values for _, values, _ in self._chunks):
            return
        if not self._chunks or not self._fits([*self._chunks[-1][2], longest]):
            if not self._fits([longest]):
                raise ValueError(
                    f"the control-plane watch cannot name {value} in an event pattern of {PATTERN_LIMIT} characters "
                    "(its ARN may be as long as IAM allows): give the role a path of a few characters"
                )
            number = len(self._chunks) + 1
            construct_id = self._construct_id if number == 1 else f"{self._construct_id}{number}"
            self._chunks.append((self._make_rule(construct_id, [value]), [], []))
        rule, values, stand_ins = self._chunks[-1]
        values.append(value)
        stand_ins.append(longest)
        rule.event_pattern = self._pattern(values)

    def _fits(self, stand_ins: Sequence[str]) -> bool:
        return len(json.dumps(self._measure(stand_ins))) <= PATTERN_LIMIT
