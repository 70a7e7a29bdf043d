"""A small evaluator of IAM policy statements, to ask a synthesized template "would AWS refuse this request?".

It is limited on purpose, and refuses what it does not model (``NotModelledError``) instead of guessing, so that a
test cannot pass because a statement's unfamiliar part was ignored. What it models:

- ``Effect`` Allow or Deny; ``Principal`` ``"*"`` or ``{"AWS": ...}`` with ``"*"`` or role ARNs, or
  ``{"Service": ...}`` with service principal names (no ``NotPrincipal``, no federated principals; ``"*"``
  matches every request, a service's included, as AWS's own deny-unless-service statements assume: R10.7);
  ``Action`` and ``Resource`` as one value or a list, with ``*`` and ``?`` wildcards (actions
  case-insensitively); no ``NotAction``, no ``NotResource``.
- The condition operators ``StringEquals``, ``StringNotEquals``, ``StringLike``, ``StringNotLike``,
  ``ArnEquals``, ``ArnNotEquals``, ``ArnLike``, ``ArnNotLike`` (each with the ``ForAnyValue:`` and
  ``ForAllValues:`` qualifiers), ``Bool`` and ``Null``, and each of them but ``Null`` with ``IfExists`` (no
  qualifier then); no numeric, date or address operators. A key the request lacks makes a positive operator
  false and a negated one true, and an ``...IfExists`` operator true; several values in the policy match when
  any matches (positive) or none does (negated); ``ForAnyValue`` over an absent key is false and
  ``ForAllValues`` true (docs/aws-behaviour.md R10.2, R10.7).
- The decision within one account: an explicit Deny in any policy that applies wins, else an Allow in the
  principal's own (identity) policies or in the resource's policy, else an implicit deny (R10.3). No
  organisation SCPs, permission boundaries, session policies or cross-account rules.

Requests carry the request context a test names: the principal's ARN (for a role session, AWS puts its
role's ARN in ``aws:PrincipalArn``: R10.1), or the service principal acting as itself, TLS or not, and any
other key (``dynamodb:LeadingKeys``, ``aws:SourceArn``). A signed request carries ``aws:PrincipalIsAWSService``
(``"true"`` for a service principal, else ``"false"``), an anonymous one does not (R10.7); whether a service
principal's request carries an ``aws:PrincipalArn`` the documentation does not say, so a test may ask both ways.
Templates' references (``Ref``, ``Fn::GetAtt``, and ``Fn::Join`` of them) are resolved through a mapping of logical
id to ARN.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Final

from tests.infrastructure.template_queries import role_statements

ACCOUNT = "123456789012"
REGION = "us-east-1"
ARN_PARTS = 6


class NotModelledError(ValueError):
    """A part of a statement this evaluator does not model: extend it (carefully), do not skip it."""


class Decision(StrEnum):
    ALLOWED = "allowed"
    EXPLICIT_DENY = "explicit deny"
    IMPLICIT_DENY = "implicit deny"


@dataclass(frozen=True)
class Request:
    action: str
    resource: str
    principal_arn: str | None  # None: anonymous, or a service acting as itself without an aws:PrincipalArn
    context: Mapping[str, str | Sequence[str]] = field(default_factory=dict)
    secure_transport: bool = True
    service: str | None = None  # a service principal acting as itself (events.amazonaws.com), not a role of it

    @property
    def signed(self) -> bool:
        return self.principal_arn is not None or self.service is not None

    def keys(self) -> dict[str, list[str]]:
        keys: dict[str, list[str]] = {"aws:SecureTransport": ["true" if self.secure_transport else "false"]}
        if self.principal_arn is not None:
            keys["aws:PrincipalArn"] = [self.principal_arn]
        if self.signed:
            keys["aws:PrincipalIsAWSService"] = ["true" if self.service is not None else "false"]
        if self.service is not None:
            keys["aws:PrincipalServiceName"] = [self.service]
        for name, value in self.context.items():
            keys[name] = [value] if isinstance(value, str) else list(value)
        return keys


# An administrator's policy (AdministratorAccess), and CloudFormation's deployment role's, and a CI role's.
EVERYTHING: Final = ({"Effect": "Allow", "Action": "*", "Resource": "*"},)


def role_arn(name: str) -> str:
    return f"arn:aws:iam::{ACCOUNT}:role/{name}"


def account_principals(template: Mapping[str, Any]) -> dict[str, tuple[str | None, list[dict[str, Any]]]]:
    """Who of the account might call: every role of the template with its own policy (resolved), an
    administrator, the account's root user, and an anonymous caller: name -> (principal ARN, statements)."""
    arns = template_arns(template)
    principals: dict[str, tuple[str | None, list[dict[str, Any]]]] = {
        logical_id: (arns[logical_id], resolve(role_statements(dict(template), logical_id), arns))
        for logical_id, resource in template["Resources"].items()
        if resource["Type"] == "AWS::IAM::Role"
    }
    principals["an administrator"] = (role_arn("Administrator"), list(EVERYTHING))
    principals["the root user"] = (f"arn:aws:iam::{ACCOUNT}:root", list(EVERYTHING))
    principals["anonymous"] = (None, [])
    return principals


@dataclass(frozen=True)
class Account:
    """A synthesized template's account, to ask what AWS would decide: a made-up ARN for each resource
    (``template_arns``), and each principal's ARN and own statements (``account_principals``)."""

    arns: dict[str, str]
    principals: dict[str, tuple[str | None, list[dict[str, Any]]]]

    @classmethod
    def of(cls, template: Mapping[str, Any]) -> Account:
        return cls(template_arns(template), account_principals(template))

    def decide(
        self,
        principal: str,
        action: str,
        resource: str,
        policy: Iterable[Mapping[str, Any]],
        *,
        granted: Iterable[Mapping[str, Any]] = (),
        identity: Iterable[Mapping[str, Any]] | None = None,
        context: Mapping[str, str | Sequence[str]] | None = None,
        secure_transport: bool = True,
    ) -> Decision:
        """AWS's decision on ``principal`` (a name of ``account_principals``) calling ``action`` on the resource
        of logical id ``resource``, whose policy's statements are ``policy`` (as synthesized: resolved here). The
        principal has its own statements (``identity`` instead, when given) and ``granted`` besides."""
        arn, own = self.principals[principal]
        statements = [*(own if identity is None else identity), *granted]
        request = Request(action, self.arns[resource], arn, dict(context or {}), secure_transport=secure_transport)
        return decide(request, statements, resolve(list(policy), self.arns))


def template_arns(template: Mapping[str, Any]) -> dict[str, str]:
    """A made-up ARN for every resource of a template (a role's as IAM writes it, a table's stream apart),
    keyed as ``resolve`` looks them up: the logical id, or ``id.Attribute`` for another ARN attribute."""
    # The stack's own id (the runbook role's DescribeStacks is scoped to it).
    arns: dict[str, str] = {"AWS::StackId": f"arn:aws:cloudformation:{REGION}:{ACCOUNT}:stack/OutboxEngine/1"}
    for logical_id, resource in template["Resources"].items():
        kind = resource["Type"]
        if kind == "AWS::IAM::Role":
            arns[logical_id] = role_arn(logical_id)
        elif kind == "AWS::DynamoDB::Table":
            arns[logical_id] = f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/{logical_id}"
            arns[f"{logical_id}.StreamArn"] = f"{arns[logical_id]}/stream/2026-01-01T00:00:00.000"
        else:
            service = kind.split("::")[1].lower()
            arns[logical_id] = f"arn:aws:{service}:{REGION}:{ACCOUNT}:{logical_id}"
    return arns


def resolve(value: Any, arns: Mapping[str, str]) -> Any:
    """``value`` with every ``Ref`` and ``Fn::GetAtt`` replaced by its ARN in ``arns`` (``template_arns``)."""
    if isinstance(value, list):
        return [resolve(item, arns) for item in value]
    if isinstance(value, dict):
        if set(value) == {"Ref"}:
            return _known(arns, value["Ref"])
        if set(value) == {"Fn::GetAtt"}:
            logical_id, attribute = value["Fn::GetAtt"]
            return _known(arns, logical_id if attribute == "Arn" else f"{logical_id}.{attribute}")
        if set(value) == {"Fn::Join"}:  # a reference and a suffix, say (a durable function's executions: ARN + ":*")
            separator, parts = value["Fn::Join"]
            joined = [resolve(part, arns) for part in parts]
            if not all(isinstance(part, str) for part in joined):
                raise NotModelledError(f"Fn::Join of {parts!r}")
            return separator.join(joined)
        if any(key.startswith("Fn::") for key in value):
            raise NotModelledError(f"intrinsic {sorted(value)}")
        return {key: resolve(item, arns) for key, item in value.items()}
    return value


def decide(
    request: Request, identity: Iterable[Mapping[str, Any]], resource: Iterable[Mapping[str, Any]] = ()
) -> Decision:
    """What AWS decides for ``request`` given the principal's identity statements and the resource's
    policy statements (both resolved), within one account."""
    identity, resource = list(identity), list(resource)
    for statement in identity:
        _refuse_principal_in_identity(statement)
    applicable = [(s, False) for s in identity] + [(s, True) for s in resource]
    if any(s["Effect"] == "Deny" and applies(s, request, in_resource=r) for s, r in applicable):
        return Decision.EXPLICIT_DENY
    if any(s["Effect"] == "Allow" and applies(s, request, in_resource=r) for s, r in applicable):
        return Decision.ALLOWED
    return Decision.IMPLICIT_DENY


def applies(statement: Mapping[str, Any], request: Request, *, in_resource: bool) -> bool:
    """Whether ``statement`` matches ``request``: principal (resource policies only), action, resource and
    every condition."""
    unknown = set(statement) - {"Sid", "Effect", "Principal", "Action", "Resource", "Condition"}
    if unknown:
        raise NotModelledError(f"statement elements {sorted(unknown)}")
    if statement["Effect"] not in ("Allow", "Deny"):
        raise NotModelledError(f"Effect {statement['Effect']!r}")
    if in_resource and not _principal_matches(statement.get("Principal"), request):
        return False
    actions = _listed(statement["Action"])
    if not any(fnmatch.fnmatchcase(request.action.lower(), pattern.lower()) for pattern in actions):
        return False
    if not any(_arn_like(request.resource, pattern) for pattern in _listed(statement["Resource"])):
        return False
    return all(
        condition_holds(operator, key, values, request.keys())
        for operator, block in statement.get("Condition", {}).items()
        for key, values in block.items()
    )


def condition_holds(operator: str, key: str, expected: Any, keys: Mapping[str, list[str]]) -> bool:
    """One operator on one key, against the request's keys."""
    wanted = [str(value).lower() if isinstance(value, bool) else str(value) for value in _listed(expected)]
    present = keys.get(key)
    qualifier, _, base = operator.rpartition(":")
    if base.endswith("IfExists"):
        if qualifier or base == "NullIfExists":
            raise NotModelledError(f"condition operator {operator}")
        # Absent: true, whatever the operator. Present: the operator without IfExists decides (R10.7).
        return present is None or condition_holds(base.removesuffix("IfExists"), key, expected, keys)
    if operator == "Null":
        return (present is None) == (wanted == ["true"])
    if operator == "Bool":
        return present is not None and any(value.lower() in wanted for value in present)
    if base not in _MATCHERS:
        raise NotModelledError(f"condition operator {operator}")
    negated = "Not" in base
    match = _MATCHERS[base]
    if qualifier == "":
        if present is None:
            return negated
        if len(present) != 1:
            raise NotModelledError(f"{operator} on the multivalued key {key} without a set qualifier")
        hit = any(match(present[0], value) for value in wanted)
        return not hit if negated else hit
    if negated:
        raise NotModelledError(f"{operator}: negated set operators")

    def one(value: str) -> bool:
        return any(match(value, pattern) for pattern in wanted)

    if qualifier == "ForAnyValue":
        return present is not None and any(one(value) for value in present)
    if qualifier == "ForAllValues":
        return present is None or all(one(value) for value in present)
    raise NotModelledError(f"condition qualifier {qualifier}")


def _string_like(value: str, pattern: str) -> bool:
    return fnmatch.fnmatchcase(value, pattern.replace("[", "[[]"))


def _arn_like(value: str, pattern: str) -> bool:
    """Each of an ARN's six colon-separated parts matched on its own, wildcards within a part; ``*`` alone
    matches anything."""
    if pattern == "*":
        return True
    value_parts, pattern_parts = value.split(":", ARN_PARTS - 1), pattern.split(":", ARN_PARTS - 1)
    if len(value_parts) != ARN_PARTS or len(pattern_parts) != ARN_PARTS:
        return False
    return all(_string_like(v, p) for v, p in zip(value_parts, pattern_parts, strict=True))


_MATCHERS = {
    "StringEquals": lambda value, pattern: value == pattern,
    "StringNotEquals": lambda value, pattern: value == pattern,
    "StringLike": _string_like,
    "StringNotLike": _string_like,
    "ArnEquals": _arn_like,
    "ArnNotEquals": _arn_like,
    "ArnLike": _arn_like,
    "ArnNotLike": _arn_like,
}


def _principal_matches(principal: Any, request: Request) -> bool:
    if principal == "*":
        return True
    if not isinstance(principal, Mapping) or len(principal) != 1 or set(principal) - {"AWS", "Service"}:
        raise NotModelledError(f"Principal {principal!r}")
    if "Service" in principal:
        return request.service is not None and request.service in _listed(principal["Service"])
    named = _listed(principal["AWS"])
    if "*" in named:
        return True
    return request.service is None and request.principal_arn is not None and request.principal_arn in named


def _refuse_principal_in_identity(statement: Mapping[str, Any]) -> None:
    if "Principal" in statement:
        raise NotModelledError("a Principal in an identity policy statement")


def _listed(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _known(arns: Mapping[str, str], logical_id: str) -> str:
    if logical_id not in arns:
        raise NotModelledError(f"a reference to {logical_id}, which the test gave no ARN")
    return arns[logical_id]
