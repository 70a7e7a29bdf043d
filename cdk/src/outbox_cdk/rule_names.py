"""EventBridge rule names fixed at synth, for the rules a policy must name by ARN without referencing the rule (a
reference there would be a dependency cycle: a key or a topic, the rule, the rule's target that uses the key)."""

from __future__ import annotations

import hashlib
from typing import Final

from aws_cdk import Stack, Token
from constructs import Construct

# EventBridge's longest rule name.
RULE_NAME_LIMIT: Final = 64


def rule_name(scope: Construct, construct_id: str) -> str:
    """``<stack name>-<construct id>-<digest of the stack name and scope's path>``, the stack name cut to fit
    EventBridge's 64 characters (the digest keeps two pipelines, or two long stack names, apart)."""
    stack_name = Stack.of(scope).stack_name
    assert not Token.is_unresolved(stack_name), "a rule named at synth needs the stack's name at synth"
    digest = hashlib.sha256(f"{stack_name}/{scope.node.path}".encode()).hexdigest()[:8].upper()
    suffix = f"-{construct_id}-{digest}"
    return stack_name[: RULE_NAME_LIMIT - len(suffix)] + suffix


def rule_arn(scope: Construct, name: str) -> str:
    """The ARN of the rule ``name`` on this stack's default bus, written without referencing the rule."""
    stack = Stack.of(scope)
    return f"arn:{stack.partition}:events:{stack.region}:{stack.account}:rule/{name}"
